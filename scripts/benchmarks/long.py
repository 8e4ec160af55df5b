"""Long inputs (issue 28): one forward, and one forward + backward, over 4k, 16k, 64k and 154k DNA tokens (one token
per base; 154,478 is the A. thaliana chloroplast genome), time and peak memory, biotf against `transformers`.

The model: the default DNA model's shape, `conf/model/protein-small.yaml` (4 layers x 4 heads x 128, d_ff 512,
bidirectional) with the vocabulary of the `dna_char` tokenizer, random weights, float32, batch of one unpadded
sequence of random bases. biotf with RoPE (no mask: SDPA's fused kernel takes attention whole) and with ALiBi (a bias
per head: built whole under `Transformer.attention_element_budget`, in chunks of queries above it); the anchor is
`transformers.EsmModel` of the same shape (rotary, attn_implementation="sdpa", no pooler). Forward: the trunk's last
hidden state under `torch.inference_mode`, as `biotf embed` runs; forward + backward: the same with gradients and
the mean square of the hidden state as the loss (the same cheap head on both sides, so the trunks are compared).

Each case is a fresh child process with a timeout (peak memory of one case never hides in another's): it builds the
model, warms up on 1,024 tokens (biotf's ALiBi side in chunks too: the first checkpointed chunk imports much of
torch), resets the kernel's peak RSS (VmHWM, "5" to /proc/self/clear_refs) and times one call, reporting its wall
and CPU time and the peak RSS above the RSS before it (model, inputs and imports excluded). glibc's mmap threshold is
fixed in the children (MALLOC_MMAP_THRESHOLD_) so that freed blocks leave RSS: its default raises the threshold as
large blocks are freed and keeps later ones on the heap, and RSS then counts free memory. A case whose memory,
extrapolated from the side's last two lengths (or quadratically from one), would exceed the machine's available
memory is skipped, as is every longer one after an out-of-memory or a timeout. One thread when the machine is
loaded (load average >= cores), every core otherwise; `--quick` stops at 16k. Target: 4x the length costs <= 4.5x
the memory (`peak growth` lines).

First, the training step over 2k-64k tokens (`--quick`: 2k-8k) with ALiBi, its time, FLOP rate and peak RSS side by
side: attention without its mask (`biotf.model.alibi_blocks`, what runs) against attention with it ("masked":
`Attention.alibi_blocks = False`, the whole mask up to 4k tokens, chunks of queries with their mask above),
alternating which runs first at each length. FLOPs counted for the trunk's
forward + backward, 3x the forward's (backward: twice the forward's matrix products): per layer 4 L^2 d_model for
attention (q k^T and probabilities x v, 2 FLOPs per multiply-add) and 2 L (4 d_model^2 + 2 d_model d_ff) for the
q, k, v, output and feed-forward projections; the masked chunks' recomputed forward is not counted (it is their
overhead).
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys

LENGTHS = (4_096, 16_384, 65_536, 154_478)
QUICK_LENGTHS = LENGTHS[:2]
SIDES = ("biotf rope", "biotf alibi", "transformers esm")
STEP_LENGTHS = (2_048, 4_096, 8_192, 16_384, 32_768, 65_536)
QUICK_STEP_LENGTHS = STEP_LENGTHS[:3]
STEP_SIDES = ("biotf alibi", "biotf alibi, masked")
MODES = ("forward", "forward+backward")
TIMEOUT_S = {True: 20 * 60, False: 6 * 60 * 60}  # per case: quick, full
GROWTH_TARGET = 4.5

CHILD = """
import json, os, sys, time
import torch

side, mode, length, threads = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
torch.set_num_threads(threads)
torch.manual_seed(0)

def status(field):
    with open("/proc/self/status") as handle:
        return next(int(line.split()[1]) for line in handle if line.startswith(field + ":"))

from biotf.model import Transformer, TransformerConfig
from biotf.tokenizers.build import build_tokenizer
from biotf.conventions import CONF_DIR
import yaml

tokenizer = build_tokenizer(yaml.safe_load((CONF_DIR / "tokenizer" / "dna_char.yaml").read_text()))
config = TransformerConfig.preset("protein-small").for_tokenizer(tokenizer.vocab_size, tokenizer.mask_id)
bases = torch.tensor([tokenizer.encode(base, add_special_tokens=False)[0] for base in "ACGT"])
if side == "transformers esm":
    import transformers

    hf_config = transformers.EsmConfig(
        vocab_size=config.vocab_size, hidden_size=config.d_model, num_hidden_layers=config.n_layers,
        num_attention_heads=config.n_heads, intermediate_size=config.d_ff, position_embedding_type="rotary",
        max_position_embeddings=length + 2, layer_norm_eps=config.norm_eps, pad_token_id=tokenizer.pad_id,
        mask_token_id=tokenizer.mask_id, token_dropout=False, emb_layer_norm_before=False,
        attn_implementation="sdpa")
    model = transformers.EsmModel(hf_config, add_pooling_layer=False)
    trunk = lambda ids: model(input_ids=ids).last_hidden_state
else:
    from biotf.model.attention import Attention

    Attention.alibi_blocks = not side.endswith("masked")
    model = Transformer(config.replace(pos=side.split()[1].rstrip(","), max_seq_len=None))
    trunk = lambda ids: model.encode(ids).last_hidden_state

def call(ids):
    if mode == "forward":
        with torch.inference_mode():
            return trunk(ids).shape
    model.zero_grad(set_to_none=True)
    trunk(ids).square().mean().backward()
    return None

ids = bases[torch.randint(0, 4, (1, length))]
if side.startswith("biotf alibi"):  # warm up the chunks as well: the first checkpointed chunk imports much of torch
    budget, model.attention_element_budget = model.attention_element_budget, 2 ** 16
    call(ids[:, :1024])
    model.attention_element_budget = budget
call(ids[:, :1024])
with open("/proc/self/clear_refs", "w") as handle:
    handle.write("5")
baseline = status("VmRSS")
start, cpu_start = time.perf_counter(), time.process_time()
call(ids)
seconds, cpu_seconds = time.perf_counter() - start, time.process_time() - cpu_start
chunked = side.startswith("biotf alibi") and config.n_heads * length * length > model.attention_element_budget
print(json.dumps({"seconds": seconds, "cpu_seconds": cpu_seconds, "peak_kib": status("VmHWM") - baseline,
                  "chunked": chunked}))
"""


def available_kib() -> int:
    with open("/proc/meminfo") as handle:
        return next(int(line.split()[1]) for line in handle if line.startswith("MemAvailable:"))


def predicted_kib(previous: list[tuple[int, int]], length: int) -> float | None:
    """Peak memory at `length` extrapolated from the side's (length, peak KiB) so far: with the growth exponent of
    the last two, or quadratically from one (attention that builds L x L)."""
    if not previous:
        return None
    (last_length, last_peak) = previous[-1]
    exponent = 2.0
    if len(previous) >= 2:
        (before_length, before_peak) = previous[-2]
        exponent = max(1.0, math.log(max(last_peak, 1) / max(before_peak, 1)) / math.log(last_length / before_length))
    return last_peak * (length / last_length) ** exponent


def measure(side: str, mode: str, length: int, threads: int, timeout: int) -> dict:
    """One case in a child process: its figures, or {"failed": why}."""
    env = {**os.environ, "MALLOC_MMAP_THRESHOLD_": str(128 * 1024), "OMP_NUM_THREADS": str(threads)}
    try:
        done = subprocess.run([sys.executable, "-c", CHILD, side, mode, str(length), str(threads)],
                              capture_output=True, text=True, timeout=timeout, env=env)
    except subprocess.TimeoutExpired:
        return {"failed": f"timeout after {timeout} s"}
    if done.returncode != 0:
        memory = done.returncode in (-9, 137) or any(sign in done.stderr for sign in ("can't allocate memory",
                                                                                    "out of memory"))
        return {"failed": "out of memory" if memory else f"exit {done.returncode}: {done.stderr.strip()[-300:]}"}
    return json.loads(done.stdout.strip().splitlines()[-1])


def step_flops(length: int) -> float:
    """FLOPs of one forward + backward of the protein-small trunk over `length` tokens (module docstring)."""
    from biotf.model import TransformerConfig

    config = TransformerConfig.preset("protein-small")
    d, layers = config.d_model, config.n_layers
    return 3 * layers * (4 * length ** 2 * d + 2 * length * (4 * d ** 2 + 2 * d * config.d_ff))


def run_steps(bench, quick: bool, threads: int) -> None:
    """The ALiBi training step per length, both attention paths alternating (module docstring)."""
    stopped: set[str] = set()
    peaks: dict[str, list[tuple[int, int]]] = {side: [] for side in STEP_SIDES}
    for index, length in enumerate(QUICK_STEP_LENGTHS if quick else STEP_LENGTHS):
        print(f"load average {os.getloadavg()[0]:.1f}", flush=True)
        for side in STEP_SIDES if index % 2 == 0 else reversed(STEP_SIDES):
            if side in stopped:
                continue
            found = measure(side, "forward+backward", length, threads, TIMEOUT_S[quick])
            if "failed" in found:
                print(f"training step, {side}, {length:,} tokens: {found['failed']}", flush=True)
                stopped.add(side)
                continue
            peaks[side].append((length, found["peak_kib"]))
            rate = step_flops(length) / found["seconds"] / 1e9
            bench.record(f"long training step (forward + backward), {length:,} tokens, protein-small ALiBi, {side}",
                         found["seconds"], "s", note=f"{rate:,.1f} GFLOP/s of {step_flops(length):.3g} FLOPs; peak "
                         f"RSS {found['peak_kib'] / 1024:,.0f} MiB above the model; CPU {found['cpu_seconds']:.1f} s; "
                         f"{threads} thread(s)")
    for side, measured in peaks.items():
        for (short, short_peak), (long, long_peak) in zip(measured, measured[1:]):
            bench.record(f"long training step, {side}: peak growth {short:,} -> {long:,} tokens, per 2x the length",
                         (long_peak / short_peak) ** (math.log(2) / math.log(long / short)), "x",
                         note=f"{short_peak / 1024:,.0f} -> {long_peak / 1024:,.0f} MiB")


def run(bench, quick: bool) -> None:
    cores = os.cpu_count() or 1
    threads = 1 if os.getloadavg()[0] >= cores else cores
    print(f"torch threads per child: {threads} of {cores} cores (load average {os.getloadavg()[0]:.1f}); "
          f"available memory {available_kib() / 2**20:.1f} GiB", flush=True)
    run_steps(bench, quick, threads)
    results: dict[tuple[str, str], dict[int, dict]] = {(side, mode): {} for side in SIDES for mode in MODES}
    stopped: set[tuple[str, str]] = set()
    for length in QUICK_LENGTHS if quick else LENGTHS:
        for mode in MODES:
            for side in SIDES:
                key = (side, mode)
                if key in stopped:
                    continue
                expected = predicted_kib([(n, r["peak_kib"]) for n, r in results[key].items() if "peak_kib" in r],
                                         length)
                if expected is not None and expected > 0.9 * available_kib():
                    print(f"{side}, {mode}, {length:,} tokens: skipped, predicted {expected / 2**20:.1f} GiB > "
                          f"available {available_kib() / 2**20:.1f} GiB", flush=True)
                    stopped.add(key)
                    continue
                found = measure(side, mode, length, threads, TIMEOUT_S[quick])
                results[key][length] = found
                if "failed" in found:
                    print(f"{side}, {mode}, {length:,} tokens: {found['failed']}", flush=True)
                    stopped.add(key)
                    continue
                chunks = ", attention in chunks" if found["chunked"] else ""
                bench.record(f"long {mode} {length:,} tokens, {side}: time", found["seconds"], "s",
                             note=f"CPU {found['cpu_seconds']:.1f} s{chunks}")
                bench.record(f"long {mode} {length:,} tokens, {side}: peak RSS above the model",
                             found["peak_kib"] / 1024, "MiB")
            ours = results[("biotf rope", mode)].get(length, {})
            theirs = results[("transformers esm", mode)].get(length, {})
            if "seconds" in ours and "seconds" in theirs:
                bench.add(f"long {mode}, {length:,} DNA tokens, protein-small shape (4 x 4 x 128), RoPE, {threads} "
                          f"thread(s)", "tokens", length, [ours["seconds"]], [theirs["seconds"]],
                          anchor_name="transformers EsmModel (sdpa)")
                bench.record(f"long {mode} {length:,} tokens: peak RSS biotf rope / transformers esm",
                             ours["peak_kib"] / theirs["peak_kib"], "x")
    for (side, mode), by_length in results.items():
        measured = sorted((n, r["peak_kib"]) for n, r in by_length.items() if "peak_kib" in r)
        for (short, short_peak), (long, long_peak) in zip(measured, measured[1:]):
            growth = long_peak / short_peak
            per_fourfold = growth ** (math.log(4) / math.log(long / short))
            bench.record(f"long {mode}, {side}: peak growth {short:,} -> {long:,} tokens, per 4x the length",
                         per_fourfold, "x", target=f"<= {GROWTH_TARGET}",
                         note=f"{short_peak / 1024:,.0f} -> {long_peak / 1024:,.0f} MiB")
