#!/usr/bin/env python
"""biotf benchmarks: biotf against its anchor, timed alternately in one process.

    python scripts/bench.py                       # every section
    python scripts/bench.py tokenizers model      # some sections
    python scripts/bench.py --quick --json out.json
    python scripts/bench.py model generation --device cuda   # both sides on the GPU
    python scripts/bench.py packing --device cuda            # packed vs padded on the GPU

Each section lives in `scripts/benchmarks/<section>.py` and defines `run(bench, quick)`, calling
`bench.compare(...)` for paired timings, `bench.add(...)` for paired times it took itself and
`bench.record(...)` for single figures (RSS, MFU).
`compare` warms both sides up, then alternates biotf / anchor `repeats` times on the same data so
that drift of the machine hits both equally; it prints medians, min-max and the median of the
per-pair ratios, and everything goes into the JSON file.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import platform
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

SECTIONS_DIR = Path(__file__).resolve().parent / "benchmarks"


@dataclass
class Comparison:
    name: str
    unit: str  # what `work` counts: "MB", "tokens", "steps", ...
    work: float  # units of work per call, for throughput
    biotf_seconds: list[float]
    anchor_seconds: list[float]
    anchor: str
    higher_is_better_ratio: str = "anchor_time / biotf_time (>1 means biotf is faster)"
    target: float | None = None

    @property
    def ratio(self) -> float:
        return statistics.median(a / b for a, b in zip(self.anchor_seconds, self.biotf_seconds))

    def line(self) -> str:
        def fmt(seconds: list[float]) -> str:
            med = statistics.median(seconds)
            return f"{self.work / med:,.1f} {self.unit}/s (median {med * 1e3:.2f} ms, {min(seconds) * 1e3:.2f}-{max(seconds) * 1e3:.2f})"

        verdict = ""
        if self.target is not None:
            verdict = f"  target >= {self.target:g}: {'PASS' if self.ratio >= self.target else 'MISS'}"
        return (f"{self.name}\n  biotf : {fmt(self.biotf_seconds)}\n  {self.anchor[:6]:6s}: {fmt(self.anchor_seconds)}"
                f"\n  ratio (speed-up vs {self.anchor}): {self.ratio:.2f}x{verdict}")


@dataclass
class Bench:
    quick: bool = False
    device: str = "cpu"  # where the sections with models run (`--device`)
    results: list[dict] = field(default_factory=list)

    def seconds(self, fn: Callable[[], object]) -> float:
        """Wall time of one call, waiting for queued GPU work to finish before the clock stops (sections that time
        their own rounds use it too)."""
        start = time.perf_counter()
        fn()
        if self.device.startswith("cuda"):
            import torch

            torch.cuda.synchronize()
        return time.perf_counter() - start

    def rotated(self, sides: dict[str, Callable[[], object]], repeats: int) -> dict[str, list[float]]:
        """Seconds of each of `sides` (name -> call) per round, after one warm-up call each: every side once a
        round, the order rotating each round, so that drift of the machine's load falls on every side alike."""
        names = list(sides)
        for fn in sides.values():
            fn()
        seconds = {side: [] for side in names}
        for round_ in range(repeats):
            for side in names[round_ % len(names):] + names[:round_ % len(names)]:
                seconds[side].append(self.seconds(sides[side]))
        return seconds

    def compare(self, name: str, biotf: Callable[[], object], anchor: Callable[[], object], *, anchor_name: str,
                unit: str, work: float, repeats: int = 7, warmup: int = 2, target: float | None = None) -> Comparison:
        """Time `biotf` and `anchor` alternately; `work` units are processed per call."""
        if self.quick:
            repeats, warmup = max(2, repeats // 3), 1
        for _ in range(warmup):
            biotf(), anchor()
        ours, theirs = [], []
        for i in range(repeats):
            order = [(biotf, ours), (anchor, theirs)]
            for fn, sink in order if i % 2 == 0 else reversed(order):
                sink.append(self.seconds(fn))
        return self.add(name, unit, work, ours, theirs, anchor_name=anchor_name, target=target)

    def add(self, name: str, unit: str, work: float, biotf_seconds: list[float], anchor_seconds: list[float], *,
            anchor_name: str, target: float | None = None) -> Comparison:
        """Print and keep paired times the section took itself (several figures from the same alternating runs,
        e.g. time to first token and decode time of one generation); pairs are (biotf_seconds[i], anchor_seconds[i])."""
        comparison = Comparison(name, unit, work, biotf_seconds, anchor_seconds, anchor_name, target=target)
        print(comparison.line(), flush=True)
        self.results.append({**asdict(comparison), "ratio": comparison.ratio,
                             "biotf_throughput": work / statistics.median(biotf_seconds),
                             "anchor_throughput": work / statistics.median(anchor_seconds)})
        return comparison

    def time(self, fn: Callable[[], object], repeats: int = 5, warmup: int = 1) -> list[float]:
        """Time one side alone (for figures with no anchor); returns seconds per call."""
        if self.quick:
            repeats, warmup = max(2, repeats // 3), 1
        for _ in range(warmup):
            fn()
        return [self.seconds(fn) for _ in range(repeats)]

    @staticmethod
    def section(name: str):
        """Another section's module, for a section that reuses its measurements (`load_section`)."""
        return load_section(name)

    def record(self, name: str, value: float, unit: str, target: str | None = None, note: str = "") -> None:
        """A single measured figure (throughput, peak RSS, MFU) with an optional target."""
        suffix = f"  (target {target})" if target else ""
        print(f"{name}: {value:,.3f} {unit}{suffix}{'  ' + note if note else ''}", flush=True)
        self.results.append({"name": name, "value": value, "unit": unit, "target": target, "note": note})


def available_sections() -> list[str]:
    return sorted(p.stem for p in SECTIONS_DIR.glob("*.py") if not p.stem.startswith("_"))


def load_section(name: str):
    spec = importlib.util.spec_from_file_location(f"biotf_bench_{name}", SECTIONS_DIR / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("sections", nargs="*", help=f"sections to run (default all: {', '.join(available_sections())})")
    parser.add_argument("--quick", action="store_true", help="fewer repetitions and smaller inputs (smoke run)")
    parser.add_argument("--json", type=Path, default=Path("bench-results/bench.json"), help="where to write results")
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"],
                        help="where the model, generation, finetune and packing sections run every side (the others "
                             "are CPU work)")
    args = parser.parse_args(argv)
    sections = args.sections or available_sections()
    unknown = sorted(set(sections) - set(available_sections()))
    if unknown:
        parser.error(f"unknown section(s) {unknown}; available: {available_sections()}")
    if args.device == "cuda":
        import torch

        if not torch.cuda.is_available():
            parser.error("--device cuda: torch sees no CUDA device here")
    bench = Bench(quick=args.quick, device=args.device)
    print(f"biotf bench on {platform.machine()} / {platform.python_version()}, device {args.device}, "
          f"sections: {', '.join(sections)}")
    for name in sections:
        print(f"\n== {name} ==", flush=True)
        load_section(name).run(bench, args.quick)
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps({"sections": sections, "quick": args.quick, "results": bench.results}, indent=2))
    print(f"\nwrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
