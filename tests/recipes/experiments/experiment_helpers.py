"""Synthetic run directories shaped like the ones training writes (imported as `experiment_helpers`)."""

from __future__ import annotations

from pathlib import Path

import yaml

HEADER = "epoch,step,train/loss,val/loss,val/acc\n"


def write_run(directory: Path, config: dict, rows: list[tuple[int, float | None, float | None]]) -> Path:
    """A run directory: config.yaml and a metrics.csv with (step, train/loss, val/loss) rows
    (val/acc = 1 / val/loss, so a second metric exists)."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "config.yaml").write_text(yaml.safe_dump(config), encoding="utf-8")
    lines = [HEADER]
    for step, train, val in rows:
        cell = lambda v: "" if v is None else repr(v)  # noqa: E731
        lines.append(f"0,{step},{cell(train)},{cell(val)},{cell(None if val is None else 1 / val)}\n")
    (directory / "metrics.csv").write_text("".join(lines), encoding="utf-8")
    return directory


def config(pos: str, seed: int, lr: float = 1e-3) -> dict:
    return {"seed": seed, "model": {"pos": pos, "d_model": 64}, "optim": {"lr": lr, "betas": [0.9, 0.98]},
            "data": {"cache_dir": f"/tmp/cache{seed}"}}


def healthy(scale: float = 1.0) -> list[tuple[int, float | None, float | None]]:
    return [(10, 3.0 * scale, None), (20, 2.6 * scale, 2.5 * scale), (30, 2.3 * scale, 2.2 * scale)]
