"""plan_windows: every content token is owned by exactly one window that contains it; windows fit the width."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from biotf.errors import ConfigError
from biotf.data.windows import Window, plan_windows


@given(n=st.integers(1, 400), width=st.integers(1, 64), data=st.data())
def test_windows_tile_the_record(n, width, data):
    overlap = data.draw(st.integers(0, width - 1))
    windows = plan_windows(n, width, overlap)
    owned = [i for w in windows for i in range(w.own_start, w.own_end)]
    assert owned == list(range(n))  # each token once, in order
    for window in windows:
        assert 0 <= window.start <= window.own_start <= window.own_end <= window.end <= n
        assert window.end - window.start == min(width, n)  # no short windows
    for left, right in zip(windows, windows[1:]):
        assert left.end - right.start >= overlap  # neighbours share at least `overlap` tokens
        assert right.start > left.start


def test_short_record_is_one_window_and_handover_is_mid_overlap():
    assert plan_windows(5, 8, 2) == [Window(0, 5, 0, 5)]
    # width 8, overlap 4: starts 0, 4, 8 (last aligned to the end 16); hand over in the middle of each overlap
    assert plan_windows(16, 8, 4) == [Window(0, 8, 0, 6), Window(4, 12, 6, 10), Window(8, 16, 10, 16)]


@pytest.mark.parametrize("width, overlap", [(0, 0), (8, 8), (8, -1)])
def test_bad_width_or_overlap(width, overlap):
    with pytest.raises(ConfigError):
        plan_windows(20, width, overlap)
