"""Fixtures for experiment tests."""

from __future__ import annotations

from pathlib import Path

import pytest

from experiment_helpers import config, healthy, write_run


@pytest.fixture
def sweep(tmp_path) -> Path:
    """A multirun-like folder: rope and alibi with two seeds each, and one exploded sinusoidal run."""
    root = tmp_path / "multirun"
    write_run(root / "0", config("rope", 0), healthy(1.0))
    write_run(root / "1", config("rope", 1), healthy(1.1))
    write_run(root / "2", config("alibi", 0), healthy(0.9))
    write_run(root / "3", config("alibi", 1), healthy(0.95))
    write_run(root / "4", config("sinusoidal", 0), [(10, 3.0, None), (20, 2.5, 2.4), (30, 9.0, 8.0)])
    return root
