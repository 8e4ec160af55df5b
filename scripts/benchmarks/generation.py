"""Generation section: loading and running a Hugging Face Qwen2 checkpoint directory (issue 6).

1. Peak RSS of loading (the decoding plan timed first, then `Transformer.from_hf(materialise=loaded_in_decode_layout)`,
   as `biotf generate` loads) a random checkpoint of Qwen2.5-0.5B's shape (494M parameters, written shard by shard in
   bf16 without ever building a model), in a child process, as bfloat16 and as float32: the peak above the RSS the imports hold, over
   the weights' size in memory; target <= 1.3x (the interpreter + torch share is printed beside it).
2. Prefill and decode tokens/s of `biotf.inference.generation.generate_ids` against `transformers`'
   `generate` on the same checkpoint, dtype and prompt, timed alternately: greedy, one prompt of 128
   random tokens, 32 new tokens, no eos. From each generation's token arrival times: prefill is the time
   to the first token, decode the time from the first to the last (31 tokens). Targets: prefill >= 1.0x,
   decode >= 1.5x.
   Shapes: a small Qwen2 (per-token framework overhead sets the pace) and the 0.5B shape in float32
   and bfloat16 (reading 1-2 GB of weights per token sets it, the same for both sides).
`--quick`: a 4-layer 0.5B-shaped checkpoint, float32 only, 64-token prompt, 8 new tokens. `--device cuda` runs
both sides of 2. on the GPU (loading is measured on the CPU, where checkpoints are read).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

REPO = Path(__file__).resolve().parents[2]

# Qwen2.5-0.5B's config.json (Hugging Face Qwen/Qwen2.5-0.5B), weights random.
QWEN25_05B: dict[str, Any] = {
    "architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "vocab_size": 151936, "hidden_size": 896,
    "intermediate_size": 4864, "num_hidden_layers": 24, "num_attention_heads": 14, "num_key_value_heads": 2,
    "max_position_embeddings": 32768, "rope_theta": 1000000.0, "rms_norm_eps": 1e-6, "tie_word_embeddings": True,
    "hidden_act": "silu", "use_sliding_window": False, "sliding_window": 32768, "max_window_layers": 24,
    "bos_token_id": 151643, "eos_token_id": 151643, "torch_dtype": "bfloat16", "attention_dropout": 0.0,
    "initializer_range": 0.02, "use_cache": True,
}
# A small model of the same family: per-token overheads, not weight reads, dominate its decoding.
SMALL = {**QWEN25_05B, "vocab_size": 8192, "hidden_size": 256, "intermediate_size": 704, "num_hidden_layers": 4,
         "num_attention_heads": 8, "num_key_value_heads": 2, "torch_dtype": "float32"}


def qwen2_tensor_shapes(config: dict[str, Any]) -> dict[str, tuple[int, ...]]:
    """Name -> shape of every tensor a Qwen2ForCausalLM checkpoint with `config` holds."""
    d, ff = config["hidden_size"], config["intermediate_size"]
    head_dim = d // config["num_attention_heads"]
    kv = config["num_key_value_heads"] * head_dim
    shapes = {"model.embed_tokens.weight": (config["vocab_size"], d), "model.norm.weight": (d,)}
    for i in range(config["num_hidden_layers"]):
        p = f"model.layers.{i}."
        shapes |= {p + "input_layernorm.weight": (d,), p + "post_attention_layernorm.weight": (d,),
                   p + "self_attn.q_proj.weight": (d, d), p + "self_attn.q_proj.bias": (d,),
                   p + "self_attn.k_proj.weight": (kv, d), p + "self_attn.k_proj.bias": (kv,),
                   p + "self_attn.v_proj.weight": (kv, d), p + "self_attn.v_proj.bias": (kv,),
                   p + "self_attn.o_proj.weight": (d, d), p + "mlp.gate_proj.weight": (ff, d),
                   p + "mlp.up_proj.weight": (ff, d), p + "mlp.down_proj.weight": (d, ff)}
    if not config["tie_word_embeddings"]:
        shapes["lm_head.weight"] = (config["vocab_size"], d)
    return shapes


def write_random_qwen2(directory: Path, config: dict[str, Any], dtype: torch.dtype = torch.bfloat16,
                       shard_bytes: int = 400_000_000, seed: int = 0) -> int:
    """Write config.json and random sharded safetensors + index, one shard in memory at a time; returns bytes."""
    from safetensors.torch import save_file

    directory.mkdir(parents=True, exist_ok=True)
    generator = torch.Generator().manual_seed(seed)
    shapes = qwen2_tensor_shapes(config)
    element = torch.tensor([], dtype=dtype).element_size()
    groups: list[list[str]] = [[]]
    size = 0
    for name, shape in shapes.items():
        nbytes = element * torch.Size(shape).numel()
        if groups[-1] and size + nbytes > shard_bytes:
            groups.append([])
            size = 0
        groups[-1].append(name)
        size += nbytes
    weight_map, total = {}, 0
    for number, names in enumerate(groups, start=1):
        shard = f"model-{number:05d}-of-{len(groups):05d}.safetensors"
        tensors = {}
        for name in names:
            if name.endswith("norm.weight"):
                tensors[name] = torch.ones(shapes[name], dtype=dtype)
            else:
                tensors[name] = (torch.randn(shapes[name], generator=generator) * 0.02).to(dtype)
            weight_map[name] = shard
            total += tensors[name].nbytes
        save_file(tensors, directory / shard, metadata={"format": "pt"})
        del tensors
    index = {"metadata": {"total_size": total}, "weight_map": weight_map}
    (directory / "model.safetensors.index.json").write_text(json.dumps(index, indent=2))
    (directory / "config.json").write_text(json.dumps({**config, "torch_dtype": str(dtype).removeprefix("torch.")},
                                                      indent=2))
    return total


# Runs in a child process: load a checkpoint directory and touch every weight with one forward, reporting
# the peak RSS above what the imports hold ("5" to /proc/self/clear_refs resets the peak to the current RSS).
LOAD_CHILD = """
import json, sys, time
import torch
from biotf.inference.fast import optimize_for_decoding
from biotf.inference.fast.layout import loaded_in_decode_layout, plan_before_loading
from biotf.model import Transformer
from biotf.model.hf import hf_model_config, read_hf_config
from pathlib import Path

def status(field):
    with open("/proc/self/status") as handle:
        return next(int(line.split()[1]) for line in handle if line.startswith(field + ":"))

with open("/proc/self/clear_refs", "w") as handle:
    handle.write("5")
baseline = status("VmRSS")
start = time.perf_counter()
dtype = getattr(torch, sys.argv[2])
plan_before_loading(hf_model_config(Path(sys.argv[1]), read_hf_config(Path(sys.argv[1]))), dtype)
model = Transformer.from_hf(sys.argv[1], dtype=dtype, materialise=loaded_in_decode_layout)
model = optimize_for_decoding(model).model
seconds = time.perf_counter() - start
with torch.inference_mode():
    model(torch.tensor([[1, 2, 3]]))
weights = sum(p.nbytes for p in model.parameters())
print(json.dumps({"baseline_kib": baseline, "peak_kib": status("VmHWM"), "weights_bytes": weights, "seconds": seconds}))
"""


def loading_rss(bench, directory: Path, dtype: str) -> None:
    result = subprocess.run([sys.executable, "-c", LOAD_CHILD, str(directory), dtype], capture_output=True,
                            text=True, cwd=REPO, check=True)
    figures = json.loads(result.stdout.strip().splitlines()[-1])
    weights = figures["weights_bytes"]
    above = (figures["peak_kib"] - figures["baseline_kib"]) * 1024 / weights
    total = figures["peak_kib"] * 1024 / weights
    bench.record(f"load {dtype}: peak RSS above imports / weights", above, "x", target="<= 1.3",
                 note=f"weights {weights / 2**20:,.0f} MiB, peak {figures['peak_kib'] / 1024:,.0f} MiB incl. "
                      f"{figures['baseline_kib'] / 1024:,.0f} MiB of interpreter + torch ({total:.2f}x with them), "
                      f"loaded in {figures['seconds']:.1f} s")


class TokenClock:
    """Arrival times of generated tokens: biotf's `on_token` callback, and a `transformers` streamer (whose first
    `put` is the prompt). Both sides hand a token over once it is on the host, so the stamps mean the same."""

    def __init__(self):
        self.start, self.stamps, self._prompt_seen = time.perf_counter(), [], False

    def __call__(self, _row: int, _token: int) -> None:
        self.stamps.append(time.perf_counter())

    def put(self, _value) -> None:
        if self._prompt_seen:
            self.stamps.append(time.perf_counter())
        self._prompt_seen = True

    def end(self) -> None:
        pass


def speed(bench, directory: Path, dtype: torch.dtype, label: str, prompt_length: int, new_tokens: int,
          repeats: int) -> None:
    """Prefill and decode of biotf's generate_ids against transformers' generate, same weights and prompt.

    Both figures come from the same generations, timed alternately: prefill is the time to the first token, decode
    the time from the first token to the last over the tokens in between."""
    from transformers import AutoModelForCausalLM

    from biotf.inference.fast import optimize_for_decoding
    from biotf.inference.fast.layout import loaded_in_decode_layout
    from biotf.inference.generation import generate_ids
    from biotf.model import Transformer

    # as biotf generate: loaded into the decoding layout (Model.load(for_generation=True)), then optimize_for_decoding
    ours = Transformer.from_hf(directory, dtype=dtype, materialise=loaded_in_decode_layout).to(bench.device)
    ours = optimize_for_decoding(ours)
    print(f"{label}: {ours.plan.describe()}", flush=True)  # which paths this CPU takes (biotf generate --verbose)
    theirs = AutoModelForCausalLM.from_pretrained(directory, dtype=dtype, attn_implementation="sdpa")
    theirs = theirs.to(bench.device).eval()
    vocab = ours.config.vocab_size
    prompt = torch.randint(0, min(vocab, 151643), (1, prompt_length), generator=torch.Generator().manual_seed(0))
    prompt = prompt.to(bench.device)
    mask = torch.ones_like(prompt)

    def biotf_generate() -> tuple[list[int], TokenClock]:
        clock = TokenClock()
        return generate_ids(ours, prompt.tolist(), max_new_tokens=new_tokens, on_token=clock)[0], clock

    def hf_generate() -> tuple[list[int], TokenClock]:
        clock = TokenClock()
        with torch.inference_mode():
            ids = theirs.generate(prompt, attention_mask=mask, do_sample=False, max_new_tokens=new_tokens,
                                  min_new_tokens=None, eos_token_id=None, pad_token_id=0, streamer=clock)
        return ids[0, prompt_length:].tolist(), clock

    (mine, _), (reference, _) = biotf_generate(), hf_generate()  # also the warm-up
    agree = next((i for i, (a, b) in enumerate(zip(mine, reference)) if a != b), min(len(mine), len(reference)))
    # bfloat16 rounds differently in fused and separate projections; random weights give near-tied logits.
    bench.record(f"{label}: greedy tokens equal to transformers' before the first difference", agree, "tokens",
                 note=f"of {new_tokens}")
    clocks: dict[str, list[TokenClock]] = {"biotf": [], "hf": []}
    for i in range(repeats):
        sides = [("biotf", biotf_generate), ("hf", hf_generate)]
        for side, generate in sides if i % 2 == 0 else reversed(sides):
            clocks[side].append(generate()[1])
    first = {side: [c.stamps[0] - c.start for c in runs] for side, runs in clocks.items()}
    rest = {side: [c.stamps[-1] - c.stamps[0] for c in runs] for side, runs in clocks.items()}
    for name, times, work, target in (("prefill (time to the first token)", first, prompt_length, 1.0),
                                      (f"decode (first to last of {new_tokens} new tokens)", rest, new_tokens - 1,
                                       1.5)):
        bench.add(f"{label}: {name}, {prompt_length}-token prompt", "tokens", work, times["biotf"], times["hf"],
                  anchor_name="transformers generate", target=target)


def run(bench, quick: bool) -> None:
    shape = {**QWEN25_05B, "num_hidden_layers": 4} if quick else QWEN25_05B
    threads = torch.get_num_threads()
    if os.getloadavg()[0] >= os.cpu_count():
        # An oversubscribed machine stalls every parallel region on a descheduled worker (SDPA on 128 keys: ~15 ms
        # with 2 threads, ~15 us with 1), which would time the neighbours, not the code: one thread for both sides.
        torch.set_num_threads(1)
    print(f"torch threads: {torch.get_num_threads()} of {os.cpu_count()} cores (load average "
          f"{os.getloadavg()[0]:.1f})", flush=True)
    with tempfile.TemporaryDirectory(prefix="biotf-bench-generation-") as tmp:
        big, small = Path(tmp) / "qwen2.5-0.5b-shape", Path(tmp) / "small"
        # No eos in config.json: random weights must not stop either side early.
        start = time.perf_counter()
        size = write_random_qwen2(big, {**shape, "eos_token_id": None, "bos_token_id": None}, torch.bfloat16)
        print(f"wrote a random {'4-layer ' if quick else ''}Qwen2.5-0.5B-shaped checkpoint: {size / 2**20:,.0f} MiB "
              f"bf16 in {time.perf_counter() - start:.0f} s", flush=True)
        for dtype in ("bfloat16", "float32"):
            loading_rss(bench, big, dtype)
        write_random_qwen2(small, {**SMALL, "eos_token_id": None, "bos_token_id": None}, torch.float32)
        speed(bench, small, torch.float32, "small Qwen2 fp32", 128, 32, repeats=3 if quick else 7)
        for dtype in (torch.float32,) if quick else (torch.float32, torch.bfloat16):
            name = str(dtype).removeprefix("torch.")
            speed(bench, big, dtype, f"0.5B-shape {name}", 64 if quick else 128, 8 if quick else 32,
                  repeats=2 if quick else 5)
    torch.set_num_threads(threads)
