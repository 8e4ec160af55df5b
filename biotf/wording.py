"""How run summaries word counts: `1 record`, `2 records`, `0 windows` (never `1 records`)."""

from __future__ import annotations


def counted(count: int, noun: str) -> str:
    """`count` and `noun` (a regular English noun), plural unless the count is exactly one."""
    return f"{count} {noun if count == 1 else noun + 's'}"
