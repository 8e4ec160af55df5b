"""The README and the site's home page say the same things: the Hugging Face families biotf loads and checks, and the
one way in from Python (`biotf.Model.load`), which the tutorials use too."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
FAMILIES = re.compile(r"Hugging\s+Face\s+checkpoints\s+\(([^)]*)\)")


def families(page: str) -> list[str]:
    found = FAMILIES.search((REPO / page).read_text())
    assert found, f"{page} names no 'Hugging Face checkpoints (...)'"
    return [name.strip() for name in re.sub(r"\s+", " ", found.group(1)).split(",")]


def test_readme_and_home_page_name_the_same_checked_families():
    assert families("README.md") == families("docs/index.md")
    assert "ESM-2" in families("README.md")


def test_readme_and_tutorials_load_models_one_way():
    pages = [REPO / "README.md", *sorted((REPO / "docs" / "tutorials").glob("*.md"))]
    for page in pages:
        text = page.read_text()
        assert "load_pretrained" not in text, f"{page.name} teaches biotf.load_pretrained; use biotf.Model.load"
    assert "biotf.Model.load(" in (REPO / "README.md").read_text()
    assert "biotf.Model.load(" in (REPO / "docs" / "tutorials" / "first-model.md").read_text()
