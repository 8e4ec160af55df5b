"""The precision gate's figures kept across processes: measured once per model, calibration, code and device.

A small job (`biotf embed` of a few sequences with `--precision auto|bf16|int8`) paid the gate at every start: a
float32 forward and a converted one of the calibration batch, as long as the job's own work on a loaded 2-core
machine (docs/benchmarks.md, "Whole processes"). The figures (cosine, drift) depend only on the float32 weights, the
calibration batch, the conversion code and the device's kernels, so they are kept in one JSON file per key under
`gate_cache_directory()`: JSON only (no pickle), read as untrusted (a file that does not parse, or whose key or
figures are not what this run computes, is measured again and rewritten). The key is a digest of

- the float32 model's fingerprint (`model_fingerprint`: config and every weight, a fine-tuned task model's too),
- the calibration batch's content (its seeded ids, masks and fitting rows: the tokenizer's framing included),
- the code that runs and converts the model: the bytes of every source file of `biotf.model` (its forward,
  `precision`, `int8`), and torch's version,
- the device: the CPU's model name and instruction sets (or the GPU's name).

The pass / fail verdict is not kept: it is decided again from the figures with this run's thresholds. A run that
used kept figures says so in its precision line ("measured by an earlier run: <file>"). `BIOTF_GATE_CACHE` names
another directory, or `off` to measure in every process.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
from pathlib import Path
from typing import Any

import torch
from torch import nn

from biotf.checkpoint.digest import content_crc32, model_fingerprint
from biotf.errors import BiotfError
from biotf.io.atomic import atomic_write_text
from biotf.model import precision
from biotf.model.precision import Calibration, Fidelity
from biotf.untrusted import read_json_object

CACHE_VARIABLE = "BIOTF_GATE_CACHE"  # a directory, or "off"
FIGURE_TYPES = {"key": dict, "precision": str, "cosine": float, "drift": (float, type(None))}


def gate_cache_directory() -> Path | None:
    """Where kept figures live: `BIOTF_GATE_CACHE`, else `$XDG_CACHE_HOME/biotf/precision-gates` (default
    ~/.cache); None when the variable is `off`."""
    chosen = os.environ.get(CACHE_VARIABLE, "")
    if chosen == "off":
        return None
    if chosen:
        return Path(chosen)
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "biotf" / "precision-gates"


def _device_description(device: torch.device) -> str:
    if device.type == "cuda":
        return f"cuda {torch.cuda.get_device_name(device)}"
    if device.type != "cpu":
        return device.type
    flags = sorted(precision.cpu_flags())
    name = next((line.partition(":")[2].strip() for line in _cpuinfo_lines() if line.startswith("model name")), "")
    return f"cpu {name} {hashlib.blake2b(' '.join(flags).encode(), digest_size=8).hexdigest()}"


def _cpuinfo_lines() -> list[str]:
    try:
        return Path("/proc/cpuinfo").read_text().splitlines()
    except OSError:
        return []


def _code_version() -> str:
    """A digest of every source file of `biotf.model` (the forward the gate runs, the conversions) and torch's
    version: a change of either measures again (about 1 MB read, milliseconds)."""
    digest = hashlib.blake2b(digest_size=8)
    for path in sorted(Path(precision.__file__).parent.rglob("*.py")):
        digest.update(f"{path.relative_to(Path(precision.__file__).parent)}\n".encode())
        digest.update(path.read_bytes())
    return f"biotf.model {digest.hexdigest()}, torch {torch.__version__}"


class FileGateCache:
    """`biotf.model.precision.GateCache` over one directory (module docstring)."""

    def __init__(self, directory: Path, key: dict[str, str]):
        self.directory, self.key = directory, key

    def _path(self, precision_name: str) -> Path:
        text = json.dumps({**self.key, "precision": precision_name}, sort_keys=True)
        return self.directory / f"{hashlib.blake2b(text.encode(), digest_size=16).hexdigest()}.json"

    def get(self, precision_name: str) -> Fidelity | None:
        path = self._path(precision_name)
        if not path.is_file():
            return None
        try:
            kept = read_json_object(path, "precision gate figures", BiotfError, types=FIGURE_TYPES,
                                    required=FIGURE_TYPES)
        except BiotfError:
            return None  # damaged or foreign: measured again, and rewritten
        drift = kept["drift"]
        if (kept["key"] != self.key or kept["precision"] != precision_name or not -1.0 <= kept["cosine"] <= 1.0
                or (drift is not None and not (math.isfinite(drift) and drift >= 0))):
            return None
        return Fidelity(kept["cosine"], drift, cached=str(path))

    def put(self, precision_name: str, figures: Fidelity) -> None:
        record = {"key": self.key, "precision": precision_name, "cosine": figures.cosine, "drift": figures.drift}
        try:
            atomic_write_text(self._path(precision_name), json.dumps(record, indent=1, sort_keys=True) + "\n")
        except (OSError, BiotfError):
            pass  # a read-only or full cache directory: the gate is measured again next time, nothing else changes


def gate_cache_for(network: nn.Module, calibration: Calibration, converted: nn.Module | None = None
                   ) -> FileGateCache | None:
    """The kept figures of float32 `network` (with `converted`, a task model holding it, whose weights count too) on
    `calibration`; None when `BIOTF_GATE_CACHE` is off."""
    directory = gate_cache_directory()
    if directory is None:
        return None
    batch: dict[str, Any] = {name: getattr(calibration, name) for name in
                             ("ids", "masked", "originals", "source", "fitting", "sequences", "causal")}
    key = {"model": model_fingerprint(converted if converted is not None else network),
           "calibration": f"{content_crc32(batch):08x}", "code": _code_version(),
           "device": _device_description(network.device)}
    return FileGateCache(directory, key)
