"""Report pieces: table cells over seeds, markdown tables, and plots that show the spread."""

from __future__ import annotations

import numpy as np
import pytest

from biotf_recipes.experiments.report import markdown_table, plot_panels, seed_note, summarize


@pytest.mark.parametrize("values, cell", [
    ([2.5], "2.5000"),
    ([2.0, 3.0], "2.5000 (2.0000–3.0000)"),
    ([2.0, float("nan")], "2.0000, 1 non-finite"),
    ([float("inf")], "non-finite"),
    ([None, None], "n/a"),
])
def test_cells_show_the_mean_and_spread(values, cell):
    assert summarize(values) == cell


def test_markdown_table_and_seed_note():
    assert markdown_table(["a", "b"], [[1, "x"]]) == "| a | b |\n|---|---|\n| 1 | x |"
    assert seed_note([0]).startswith("Seeds: 1 (0); no spread")
    assert "min–max band" in seed_note([0, 1, 2]) and seed_note([0, 1, 2]).startswith("Seeds: 3 (0, 1, 2)")


def pixels(path):
    import matplotlib.image

    return matplotlib.image.imread(path)


def test_several_seeds_draw_a_band_one_seed_does_not(tmp_path):
    """Same means, so only the min–max band can make the two pictures differ."""
    one = plot_panels({"p": {"rope": {1.0: [2.0], 2.0: [1.5]}}}, tmp_path / "one.png", "x", "y")
    two = plot_panels({"p": {"rope": {1.0: [1.0, 3.0], 2.0: [1.0, 2.0]}}}, tmp_path / "two.png", "x", "y")
    assert one.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert not np.array_equal(pixels(one), pixels(two))


def test_diverged_series_are_marked_and_non_finite_points_skipped(tmp_path):
    panels = {"p": {"post": {1.0: [2.0], 2.0: [float("nan")]}, "pre": {1.0: [2.0], 2.0: [1.0]}}}
    plain = plot_panels(panels, tmp_path / "plain.png", "x", "y")
    marked = plot_panels(panels, tmp_path / "marked.png", "x", "y", diverged={("p", "post")})
    assert not np.array_equal(pixels(plain), pixels(marked))
