"""Fixtures for training tests."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def cache_dir(tmp_path_factory) -> Path:
    """One token cache for the whole session: each shipped file is tokenized once."""
    return tmp_path_factory.mktemp("token-cache")
