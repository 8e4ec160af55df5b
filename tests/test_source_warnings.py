"""Every Python source of the repository compiles without a warning: an invalid escape sequence such as the
`\\|` of a Markdown table in a docstring is a DeprecationWarning today and a SyntaxWarning from Python 3.12."""

from __future__ import annotations

import warnings
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SOURCES = sorted({*REPO.glob("*.py"), *(p for d in ("biotf", "scripts", "tests") for p in (REPO / d).rglob("*.py"))})


def test_every_source_compiles_without_warnings():
    assert len(SOURCES) > 100, "the scan found too few sources: it would prove nothing"
    warned = []
    for path in SOURCES:
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            try:
                compile(path.read_text(encoding="utf-8"), str(path), "exec")
            except (SyntaxError, Warning) as warning:
                warned.append(f"{path.relative_to(REPO)}: {warning}")
    assert warned == []
