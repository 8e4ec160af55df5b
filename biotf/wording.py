"""How run summaries word counts: `1 record`, `2 records`, `0 windows` (never `1 records`)."""

from __future__ import annotations


def counted(count: int, noun: str) -> str:
    """`count` and `noun` (a regular English noun), plural unless the count is exactly one."""
    return f"{count} {noun if count == 1 else noun + 's'}"


def listed(ids: list[str], at_most: int = 20) -> str:
    """`ids` joined by commas, the first `at_most` of them and how many more: a summary line stays one line."""
    shown = ", ".join(ids[:at_most])
    return shown + (f" and {len(ids) - at_most} more" if len(ids) > at_most else "")
