"""Report pieces shared by the experiments and `biotf compare`: values over seeds, markdown tables, plots.

A "series" is what one line of a plot shows: x -> the values of every seed at that x. With one seed
the line is that seed; with more, the line is the mean and a shaded band spans min to max, so the
spread over seeds is visible. Non-finite values (a diverged run) are left out of lines and bands and
the line's label says "diverged" instead.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Collection, Sequence
from pathlib import Path

from biotf.analysis.plot import pyplot, save_figure
from biotf.io.atomic import atomic_write_text

Series = dict[float, list[float]]


def summarize(values: Sequence[float | None]) -> str:
    """One table cell: "1.234" for one value, "1.234 (1.200–1.260)" (mean, min–max) for several;
    "n/a" when nothing was measured, "non-finite" when every value is NaN/inf."""
    present = [v for v in values if v is not None]
    if not present:
        return "n/a"
    finite = [v for v in present if math.isfinite(v)]
    if not finite:
        return "non-finite"
    text = f"{statistics.fmean(finite):.4f}"
    if len(finite) > 1:
        text += f" ({min(finite):.4f}–{max(finite):.4f})"
    if len(finite) < len(present):
        text += f", {len(present) - len(finite)} non-finite"
    return text


def mean_or_none(values: Sequence[float | None]) -> float | None:
    finite = [v for v in values if v is not None and math.isfinite(v)]
    return statistics.fmean(finite) if finite else None


def markdown_table(header: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(cell) for cell in row) + " |" for row in rows]
    return "\n".join(lines)


def write_markdown(path: Path, sections: Sequence[str]) -> Path:
    """Write a report: its sections (title, paragraphs, tables, image links) separated by blank lines."""
    return atomic_write_text(path, "\n\n".join(sections) + "\n")


def seed_note(seeds: Sequence[object]) -> str:
    """The sentence every report states: how many seeds stand behind each number."""
    count = len(seeds)
    spread = ("; cells show the mean and (min–max), plots the mean with a min–max band" if count > 1
              else "; no spread can be shown with one seed")
    return f"Seeds: {count} ({', '.join(map(str, seeds))}){spread}."


def plot_panels(panels: dict[str, dict[str, Series]], path: Path, xlabel: str, ylabel: str,
                diverged: Collection[tuple[str, str]] = (), log2_x: bool = False, clip_to_start: bool = False) -> Path:
    """One PNG with a panel per entry of `panels`, a line per series (mean over seeds, min–max band).

    `diverged` holds (panel, label) pairs: those lines get an "x" at their last finite point and
    "(diverged)" in the legend.
    `clip_to_start` cuts the y axis a little above the highest starting value, so that one exploding
    curve does not flatten the others. matplotlib's Agg backend: no display needed.
    """
    figure, axes = pyplot().subplots(1, len(panels), figsize=(5.5 * len(panels), 4.2), squeeze=False)
    for axis, (title, series) in zip(axes[0], panels.items()):
        for label, points in series.items():
            xs = [x for x in sorted(points) if any(math.isfinite(v) for v in points[x])]
            finite = [[v for v in points[x] if math.isfinite(v)] for x in xs]
            means = [statistics.fmean(values) for values in finite]
            marked = (title, label) in diverged
            name = f"{label} (diverged)" if marked else label
            (line,) = axis.plot(xs, means, marker="o" if len(xs) <= 12 else None, markersize=4, label=name)
            if any(len(values) > 1 for values in finite):
                axis.fill_between(xs, [min(v) for v in finite], [max(v) for v in finite],
                                  color=line.get_color(), alpha=0.2, linewidth=0)
            if marked and xs:
                axis.plot(xs[-1], means[-1], marker="x", markersize=12, markeredgewidth=2, color=line.get_color())
        if log2_x:
            axis.set_xscale("log", base=2)
            ticks = sorted({x for points in series.values() for x in points})
            axis.set_xticks(ticks, [f"{x:g}" for x in ticks])
        starts = [v for points in series.values() if points for v in points[min(points)] if math.isfinite(v)]
        lows = [v for points in series.values() for values in points.values() for v in values if math.isfinite(v)]
        if clip_to_start and starts:
            axis.set_ylim(top=max(starts) + 0.1 * (max(starts) - min(lows)))
        axis.set_title(title)
        axis.set_xlabel(xlabel)
        axis.set_ylabel(ylabel)
        axis.grid(alpha=0.3)
        axis.legend(fontsize=8)
    figure.tight_layout()
    return save_figure(figure, path, dpi=110)
