"""Inference precision benchmark: real tokens/s of embedding and PLL in fp32, bf16 and int8 against transformers fp32.

One random ESM-2 8M-shaped checkpoint (`score.py`'s: 320 wide, 6 layers, rotary, token dropout), saved as a hub
download is; biotf loads that directory with `biotf.Model.load(..., precision=...)`, each precision through its
fidelity gate (`biotf.model.precision`), and `transformers` runs the same object in fp32 with SDPA. Every side runs
once per round, the order rotating (`packing.py`'s `rotate`), in one process on the same records:

1. embedding: 96 DeepLoc test-set proteins (quick: 16; `packing.py`'s sample; cut to 1022 residues, ESM-2's window), mean pool of
   the last layer. biotf: `Model.embed`, length-grouped batches and packed rows (`packing=True`) of <= 16384 tokens,
   in fp32, bf16 and int8. transformers: `EsmModel` (the checkpoint's trunk) over the same records sorted by length,
   as many rows of the longest as fit 16384 tokens, masked mean. Target: the best biotf path at the gates >= 6x.
2. PLL: DeepLoc proteins of at most 120 residues (quick: 1, else 6) (the cost grows with the square of the length), every position
   masked once. biotf: `Model.score(method="pll")`, grouped and packed. transformers: `EsmForMaskedLM` over the masked
   copies of each protein in batches of <= 16384 tokens, log_softmax at the masked position. Target: the best
   biotf path at the gates >= 3x.

Also printed: what `auto` took on this machine and why, each precision's gate figures (a precision the gate refuses
is timed all the same, converted without it, and marked so), and each side's peak RSS growth over one embedding pass
(VmHWM after a reset, above the RSS before it).
"""

from __future__ import annotations

import platform
import tempfile

import numpy as np
import torch

PRECISIONS = ("fp32", "bf16", "int8")
EMBED_TARGET, PLL_TARGET = 6.0, 3.0  # x transformers fp32, the best path at the gates
EMBED_RESIDUES, PLL_RESIDUES, BATCH_TOKENS = 1022, 120, 16384


def cpu_name() -> str:
    try:
        with open("/proc/cpuinfo") as handle:
            name = next(line.split(":", 1)[1].strip() for line in handle if line.startswith("model name"))
    except (OSError, StopIteration):
        name = platform.processor() or platform.machine()
    return f"{name}, {torch.get_num_threads()} threads"


def peak_growth_mib(fn) -> float:
    """Peak RSS above the RSS before `fn`, in MiB (the kernel's high-water mark, reset first)."""
    def status(field: str) -> int:
        with open("/proc/self/status") as handle:
            return next(int(line.split()[1]) for line in handle if line.startswith(field + ":"))

    with open("/proc/self/clear_refs", "w") as handle:
        handle.write("5")
    before = status("VmRSS")
    fn()
    return (status("VmHWM") - before) / 1024


def load_models(bench, directory: str) -> tuple[dict, set[str]]:
    """{precision: biotf.Model} and the precisions the gate refused, converted without it (and said so)."""
    import biotf
    from biotf.api import _calibration
    from biotf.model import precision as precisions

    models, refused = {}, set()
    for name in PRECISIONS:
        try:
            models[name] = biotf.Model.load(directory, precision=name)
            note = str(models[name].precision)
        except precisions.PrecisionError as refused_message:
            models[name] = biotf.Model.load(directory)
            network = models[name].network
            precisions.CONVERSIONS[name](network, _calibration(network, models[name].tokenizer))
            note = f"REFUSED by the gate, timed without it: {refused_message}"
            refused.add(name)
        print(f"  {name}: {note}", flush=True)
    auto = biotf.Model.load(directory, precision="auto").precision
    print(f"  auto on {cpu_name()}: {auto}", flush=True)
    bench.results.append({"name": "auto", "cpu": cpu_name(), "precision": auto.precision, "why": str(auto)})
    return models, refused


def length_sorted_batches(encoded: list[list[int]]) -> list[list[list[int]]]:
    """Longest first, each batch as many rows of its longest as fit BATCH_TOKENS (one at least)."""
    ordered, batches, start = sorted(encoded, key=len, reverse=True), [], 0
    while start < len(ordered):
        rows = max(1, BATCH_TOKENS // len(ordered[start]))
        batches.append(ordered[start:start + rows])
        start += rows
    return batches


def padded(batch: list[list[int]], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    ids = torch.full((len(batch), max(map(len, batch))), pad_id, dtype=torch.long)
    for row, sequence in enumerate(batch):
        ids[row, :len(sequence)] = torch.tensor(sequence)
    return ids, (ids != pad_id).long()


def hf_embed(trunk, encoded: list[list[int]], pad_id: int) -> None:
    with torch.inference_mode():
        for batch in length_sorted_batches(encoded):
            ids, mask = padded(batch, pad_id)
            hidden = trunk(input_ids=ids, attention_mask=mask).last_hidden_state
            (hidden * mask[..., None]).sum(1) / mask.sum(1, keepdim=True)


def hf_pll(model, encoded: list[list[int]], pad_id: int, mask_id: int) -> list[float]:
    totals = []
    with torch.inference_mode():
        for ids in encoded:
            positions = list(range(1, len(ids) - 1))
            rows = max(1, BATCH_TOKENS // len(ids))
            total = 0.0
            for start in range(0, len(positions), rows):
                chunk = positions[start:start + rows]
                batch = torch.tensor([ids] * len(chunk))
                batch[torch.arange(len(chunk)), chunk] = mask_id
                logits = model(input_ids=batch).logits[torch.arange(len(chunk)), chunk]
                total += torch.log_softmax(logits, -1)[torch.arange(len(chunk)), [ids[p] for p in chunk]].sum().item()
            totals.append(total)
    return totals


def run(bench, quick: bool) -> None:
    packing = bench.section("packing")
    score = bench.section("score")
    torch.manual_seed(0)
    with tempfile.TemporaryDirectory(prefix="biotf-bench-inference-") as directory:
        hf_model, hf_tokenizer = score.esm_checkpoint(directory)
        print(f"ESM-2 8M shape on {cpu_name()}", flush=True)
        models, refused = load_models(bench, directory)
        tokenizer = models["fp32"].tokenizer
        repeats = 2 if quick else 5

        sequences = [s[:EMBED_RESIDUES] for s in packing.deeploc_sequences(16 if quick else 96)]
        encoded = [list(ids) for ids in tokenizer.encode_batch(sequences)]
        real = float(sum(map(len, encoded)))
        sides = {f"biotf {name} {'packed' if packs else 'grouped'}":
                 (lambda model=models[name], packs=packs: model.embed(sequences, packing=packs))
                 for name in PRECISIONS for packs in (False, True)}
        sides["transformers fp32"] = lambda: hf_embed(hf_model.esm, encoded, tokenizer.pad_id)
        embedded = rotate(bench, f"embed {len(sequences)} DeepLoc proteins ({int(real):,} tokens)", sides,
                          "real tokens", real, repeats, target=EMBED_TARGET)
        record_best(bench, "embed", embedded, refused, EMBED_TARGET)
        for side, fn in sides.items():
            bench.record(f"embed: peak RSS growth, {side}", peak_growth_mib(fn), "MiB")

        short = [s for s in packing.deeploc_sequences(400) if len(s) <= PLL_RESIDUES][:1 if quick else 6]
        short_encoded = [list(ids) for ids in tokenizer.encode_batch(short)]
        scored = float(sum(len(ids) - 2 for ids in short_encoded))
        check = np.abs(np.array(hf_pll(hf_model, short_encoded, tokenizer.pad_id, tokenizer.mask_id))
                       - models["fp32"].score(short, method="pll")["log_likelihood"].to_numpy()).max()
        assert check < 1e-3, f"biotf fp32 and transformers PLL differ by {check} nats"
        sides = {f"biotf {name} {'packed' if packs else 'grouped'}":
                 (lambda model=models[name], packs=packs: model.score(short, method="pll", packing=packs))
                 for name in PRECISIONS for packs in (False, True)}
        sides["transformers fp32"] = lambda: hf_pll(hf_model, short_encoded, tokenizer.pad_id, tokenizer.mask_id)
        scored_sides = rotate(bench, f"PLL of {len(short)} DeepLoc proteins <= {PLL_RESIDUES} residues "
                              f"({int(scored):,} positions)", sides, "positions", scored, repeats, target=PLL_TARGET)
        record_best(bench, "PLL", scored_sides, refused, PLL_TARGET)


def record_best(bench, job: str, comparisons: dict, refused: set[str], target: float) -> None:
    """The fastest biotf side whose precision passed its gate, against transformers fp32."""
    gated = {side: comparison for side, comparison in comparisons.items() if side.split()[1] not in refused}
    best = max(gated, key=lambda side: gated[side].ratio)
    bench.record(f"{job}: best biotf path at the gates vs transformers fp32", gated[best].ratio, "x",
                 target=f">= {target:g}", note=best)


def rotate(bench, name: str, sides: dict, unit: str, work: float, repeats: int, target: float | None = None) -> dict:
    """Every side once per round, the order rotating; each biotf side reported against the last (the anchor), their
    comparisons returned by side."""
    seconds = bench.rotated(sides, repeats)
    *ours, anchor = list(sides)
    return {side: bench.add(f"{name}: {side}", unit, work, seconds[side], seconds[anchor], anchor_name=anchor,
                            target=target) for side in ours}
