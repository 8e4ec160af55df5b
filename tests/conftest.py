"""Shared fixtures: paths to the real data in ../shared and the shipped samples in data/."""

from __future__ import annotations

from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared"


@pytest.fixture(scope="session")
def repo_root() -> Path:
    return REPO


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """../shared/data: real public proteins, DNA, SMILES and text (see its SOURCES.md)."""
    path = SHARED / "data"
    if not path.is_dir():
        pytest.skip(f"{path} is not present (CI and developer machines have it beside the checkout)")
    return path


@pytest.fixture(scope="session")
def qwen_tokenizer_dir(tmp_path_factory) -> Path:
    """A decompressed copy of ../shared/qwen2.5-tokenizer, loadable by transformers and biotf."""
    import gzip
    import shutil

    source = SHARED / "qwen2.5-tokenizer"
    if not source.is_dir():
        pytest.skip(f"{source} is not present")
    target = tmp_path_factory.mktemp("qwen2.5-tokenizer")
    for item in source.iterdir():
        if item.name == "tokenizer.json.gz":
            with gzip.open(item, "rb") as src, open(target / "tokenizer.json", "wb") as dst:
                shutil.copyfileobj(src, dst)
        else:
            shutil.copy(item, target / item.name)
    return target
