"""Reliability tests: the long fuzz runs are opt-in (`pytest -m fuzz`); everything else is fast."""

from __future__ import annotations

import pytest


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Skip `fuzz` tests unless the marker expression asks for them."""
    if "fuzz" in (config.option.markexpr or ""):
        return
    skip = pytest.mark.skip(reason="long fuzz run: opt in with `pytest -m fuzz`")
    for item in items:
        if item.get_closest_marker("fuzz"):
            item.add_marker(skip)

