"""The README and the site's home page say the same things: the Hugging Face families biotf loads and checks, and the
one way in from Python (`biotf.Model.load`), which the tutorials use too; and every test file a page names exists."""

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


def test_every_test_file_a_page_names_exists():
    """The guarantees table and the how-tos point at the tests that hold them: a renamed or moved test file must take
    its mentions along (a path as `tests/...py`, or a bare `test_*.py` name that some test folder holds)."""
    pages = [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]
    test_names = {path.name for path in (REPO / "tests").rglob("test_*.py")}
    missing = []
    for page in pages:
        text = page.read_text()
        missing += [f"{page.name}: {path}" for path in sorted(set(re.findall(r"tests/[\w/]+\.py", text)))
                    if not (REPO / path).is_file()]
        missing += [f"{page.name}: {name}" for name in sorted(set(re.findall(r"(?<![\w/])test_\w+\.py", text)))
                    if name not in test_names]
    assert missing == []
