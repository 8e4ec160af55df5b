"""`biotf compare`: a table of final metrics and a PNG of curves for any set of training runs.

Runs are found under the given paths (single run directories, a Hydra multirun folder, an
experiment's output); settings are the config keys that differ between them, and runs that differ
only by seed are one row with their spread.
"""

from __future__ import annotations

from pathlib import Path

from biotf.errors import InputError
from biotf.naming import parameter
from biotf_recipes.experiments.report import markdown_table, plot_panels, seed_note, summarize, write_markdown
from biotf_recipes.experiments.runs import (EXPLODED_FACTOR, curve_series, find_runs, group_by_setting, group_status,
                                   metric_column, read_run)


def shown(path: Path) -> Path:
    """A run directory as the user would type it: relative to the working directory when inside it."""
    return path.relative_to(Path.cwd()) if path.is_relative_to(Path.cwd()) else path


def compare(paths: list[str | Path], metric: str, out: str | Path) -> tuple[Path, Path]:
    """Write the markdown report `out` and its plot (`out` with .png); returns both paths."""
    out = Path(out)
    if out.suffix != ".md":
        raise InputError(f"{parameter('out')} {out}: the report is markdown, so its name must end in .md")
    runs = [read_run(directory) for directory in find_runs(paths)]
    column = metric_column(metric, sorted({name for run in runs for name in run.curves}))
    groups = group_by_setting(runs)
    title = f"{column} ({len(runs)} runs)"
    rows, diverged = [], set()
    for label, members in groups.items():
        status = group_status(members)
        if status != "ok":
            diverged.add((title, label))
        steps = sorted({run.last_step for run in members if run.last_step is not None})
        rows.append([label, len(members), ", ".join(map(str, steps)) or "n/a",
                     summarize([run.final(column) for run in members]),
                     summarize([run.best(column) for run in members]), status])
    seeds = sorted({run.seed for run in runs if run.seed is not None}, key=str)
    picture = plot_panels({title: {label: curve_series(members, column) for label, members in groups.items()}},
                          out.with_suffix(".png"), "step", column, diverged)
    write_markdown(out, [
        f"# Comparison of {len(runs)} runs: {column}",
        "Runs: " + ", ".join(f"`{shown(run.directory)}`" for run in runs),
        markdown_table(["setting", "runs", "last step", f"final {column}", f"best {column}", "status"], rows),
        seed_note(seeds) if seeds else "Seeds: not recorded (runs without config.yaml).",
        f"Diverged: a training error, a non-finite loss, or a final val/loss above {EXPLODED_FACTOR:g}x its "
        "own minimum.",
        f"![{column} curves]({picture.name})",
    ])
    return out, picture
