"""The decoding plan: which layout and which products decode fastest on this machine, measured, not assumed.

The fast path has three choices (`layout.py`, `linear.py`): store matrices transposed; split few-row products
over the threads; multiply short prefills weight-first. Each was measured faster on one CPU (an AMD EPYC with
AVX-512 and no AMX) and may lose on another: on an Intel Xeon with AMX the same choices gave 0.86x
`transformers`' prefill. So `decode_plan` times every candidate once per process, on matrices of the model's own
shape, as many as it takes to stream from memory as the model's do, and keeps a choice only where it wins by
`MARGIN` over what it replaces (`choose`): for float32 the tuned choices stay unless measured slower by that margin,
for other dtypes the plain product (`F.linear` on row-major matrices, as `transformers`) stays unless beaten by it.
Each timing is the best of `REPEATS` passes taken in turn with the other candidates' (another process on the
machine can only slow a pass, never speed it up).

`BIOTF_DECODE_PLAN=fixed` skips the measurement and takes the choices the fast path was tuned with (float32:
all three; other dtypes: none), for runs that must not depend on the machine's timing.
"""

from __future__ import annotations

import functools
import math
import os
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch
import torch.nn.functional as F

from biotf.errors import ConfigError
from biotf.inference.fast.products import split_product, weight_first_product

# A choice must be this much faster than the plain product to be kept: timing noise must not flip a plan.
MARGIN = 0.9
REPEATS = 7
# Rows of the prefill the weight-first product is timed on ("prefill"): a short prompt.
PREFILL_ROWS = 64
# Matrices timed together stream from memory when they exceed the last-level cache: each layout's set is this many
# times the cache (and at least MEASURED_BYTES_FLOOR), no more, and one matrix at most half of it (a larger one,
# such as a tied embedding, is timed on its first rows: the products' speed is per row of the input dimension).
# Nor more than half the model's decode matrices: the two sets (row-major and transposed) together never hold more
# than the model itself, so timing a plan never needs more memory than loading the model does.
CACHE_MULTIPLE = 1.5
MEASURED_BYTES_FLOOR = 16 * 2**20
PLAN_MODES = ("measure", "fixed")
ISA_FLAGS = ("avx2", "avx512f", "avx512_bf16", "amx_tile", "amx_bf16", "asimd", "sve")


@dataclass(frozen=True)
class DecodePlan:
    """`transposed`: matrices stored transposed; `split`: products of up to `SPLIT_MAX_ROWS` rows split over the
    threads; `weight_first`: products of up to `WEIGHT_FIRST_MAX_ROWS` rows computed as (W @ x.T).T. `timings`: the
    best time in microseconds of each candidate measured (empty for a fixed plan)."""

    dtype: torch.dtype
    transposed: bool
    split: bool
    weight_first: bool
    how: str
    timings: dict[str, float] = field(default_factory=dict)

    def describe(self) -> str:
        """One line for `biotf generate --verbose`: the machine, the choices and the times they rest on."""
        dtype = str(self.dtype).removeprefix("torch.")
        choices = [f"matrices {'transposed' if self.transposed else 'row-major'}"]
        if self.transposed:
            choices.append(f"few-row products {'split over threads' if self.split else 'on one thread'}")
            choices.append(f"short prefills {'weight-first' if self.weight_first else 'as F.linear'}")
        measured = ", ".join(f"{name} {us:.0f} us" for name, us in self.timings.items())
        return (f"decoding plan ({dtype}, {torch.get_num_threads()} threads, {cpu_description()}; {self.how}): "
                + "; ".join(choices) + (f" [{measured}]" if measured else ""))


def fixed_plan(dtype: torch.dtype) -> DecodePlan:
    """The choices the fast path was tuned with on a 2-core AMD EPYC (docs/benchmarks.md): all of them for float32,
    none for other dtypes (bfloat16 transposed ran on oneDNN's slow reference path there)."""
    tuned = dtype == torch.float32
    return DecodePlan(dtype, tuned, tuned, tuned, "fixed")


def decode_plan(dtype: torch.dtype, device: torch.device, out_features: int, in_features: int,
                model_bytes: int) -> DecodePlan:
    """The plan for decoding a model whose largest matrices are (out_features, in_features) and whose decode matrices
    total `model_bytes`. Measured once per process and shape (module docstring); no choice off the CPU."""
    if device.type != "cpu":
        return DecodePlan(dtype, False, False, False, f"{device.type}: the plain products")
    mode = os.environ.get("BIOTF_DECODE_PLAN", "measure")
    if mode not in PLAN_MODES:
        raise ConfigError("BIOTF_DECODE_PLAN", mode, " | ".join(PLAN_MODES))
    if mode == "fixed":
        return fixed_plan(dtype)
    measured = min(max(int(CACHE_MULTIPLE * last_level_cache_bytes()), MEASURED_BYTES_FLOOR), model_bytes // 2)
    row_bytes = in_features * torch.finfo(dtype).bits // 8
    out_features = max(1, min(out_features, measured // 2 // row_bytes))
    return measured_plan(dtype, out_features, in_features, measured, torch.get_num_threads())


@functools.cache
def measured_plan(dtype: torch.dtype, out_features: int, in_features: int, measured_bytes: int,
                  threads: int) -> DecodePlan:
    """Times the candidates on as many (out_features, in_features) matrices of `dtype` as fit in `measured_bytes`, at
    least one (module docstring). `threads` is part of the cache key: the split product's worth depends on it."""
    matrix_bytes = out_features * in_features * torch.finfo(dtype).bits // 8
    count = max(1, measured_bytes // matrix_bytes)
    row_major = [torch.empty(out_features, in_features, dtype=dtype).uniform_(-0.05, 0.05) for _ in range(count)]
    transposed = [torch.empty(in_features, out_features, dtype=dtype).copy_(w.t()).t() for w in row_major]
    one, prefill = (torch.empty(rows, in_features, dtype=dtype).uniform_(-1, 1) for rows in (1, PREFILL_ROWS))

    candidates = {"1 row row-major": (F.linear, row_major, one), "1 row transposed": (F.linear, transposed, one)}
    if threads >= 2 and in_features % threads == 0:
        candidates["1 row split"] = (split_product, transposed, one)
    # A prefill is bound by arithmetic, not by memory: one matrix tells its speed.
    candidates["prefill row-major"] = (F.linear, row_major[:1], prefill)
    candidates["prefill transposed"] = (F.linear, transposed[:1], prefill)
    candidates["prefill weight-first"] = (weight_first_product, transposed[:1], prefill)
    timings = dict.fromkeys(candidates, math.inf)
    with torch.inference_mode():
        for _ in range(REPEATS):  # round-robin, so that a burst of other work slows every candidate alike
            for name, (product, matrices, x) in candidates.items():
                start = time.perf_counter()
                for weight in matrices:
                    product(x, weight)
                timings[name] = min(timings[name], (time.perf_counter() - start) * 1e6)
    return choose(dtype, timings, f"measured on {count} matrices of {out_features}x{in_features}")


def choose(dtype: torch.dtype, timings: dict[str, float], how: str) -> DecodePlan:
    """The plan `timings` call for. Each choice starts as the fixed plan has it and flips only when the other side
    is faster by `MARGIN`, so that timing noise cannot flip a plan on the machine it was tuned on. The layout is
    decided by the 1-row products (decoding's many steps, not a prompt's one prefill); the split and the
    weight-first products are weighed against the plain product on the transposed matrices they would replace."""
    prior = fixed_plan(dtype)
    split_time = timings.get("1 row split", math.inf)
    transposed = kept(prior.transposed, min(timings["1 row transposed"], split_time), timings["1 row row-major"])
    split = transposed and kept(prior.split, split_time, timings["1 row transposed"])
    weight_first = transposed and kept(prior.weight_first, timings["prefill weight-first"],
                                       timings["prefill transposed"])
    return DecodePlan(dtype, transposed, split, weight_first, how, timings)


def kept(prior: bool, with_choice: float, without: float) -> bool:
    """Whether a choice is taken: a prior choice stays unless going without is faster by `MARGIN`; a new one is
    taken only when it is faster by `MARGIN`."""
    if prior:
        return not without < MARGIN * with_choice
    return with_choice < MARGIN * without


@functools.cache
def last_level_cache_bytes() -> int:
    """Size of CPU 0's largest cache (Linux sysfs, read once per process); 32 MiB where it cannot be read."""
    units = {"K": 2**10, "M": 2**20, "G": 2**30}
    sizes = []
    for index in Path("/sys/devices/system/cpu/cpu0/cache").glob("index*"):
        try:
            text = (index / "size").read_text().strip()
        except OSError:
            continue
        sizes.append(int(text[:-1]) * units[text[-1]] if text[-1] in units else int(text))
    return max(sizes, default=32 * 2**20)


@functools.cache
def cpu_description() -> str:
    """The CPU's model name and the instruction sets that decide matrix speed (Linux /proc/cpuinfo)."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return "CPU not described"
    name, flags = "unknown CPU", set()
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key.strip() == "model name" and name == "unknown CPU":
            name = value.strip()
        elif key.strip() in ("flags", "Features") and not flags:
            flags = set(value.split())
    present = [flag for flag in ISA_FLAGS if flag in flags]
    return f"{name}, {' '.join(present) or 'no AVX2/AVX-512/AMX'}"
