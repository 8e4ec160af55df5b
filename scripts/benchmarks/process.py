"""Whole-process benchmark: `biotf embed` as a user runs it, start-up included, against a plain `transformers` script.

A user embeds a handful of sequences far more often than a proteome, and then imports, reading the weights, building
the model and the precision gate weigh as much as the compute. Both sides are whole processes started the same way
(`sys.executable`, the same environment, wall time from start to exit), on the same FASTA, model and machine:

1. `biotf embed --model <dir> --input <fasta> --output <npz>` (mean pool of the last layer, fp32, and with
   `--precision auto`), against `TRANSFORMERS_SCRIPT`: `AutoTokenizer` + `EsmModel` in fp32 (SDPA), records sorted by
   length in batches of <= 16384 tokens, masked mean, `np.save` — what a user writes to do the same. The model is
   the random ESM-2 8M shape of `score.py`, saved as a hub download is. 24 and 2,000 DeepLoc proteins (quick: 24 and
   300), cut to 1022 residues. Rounds rotate the sides (`inference.rotate`).
2. Where a small job's time goes (`PHASES`, one process, 24 proteins): imports, `Model.load` in fp32 (reading
   the weights, checking them, building the model), the gate and conversion of `--precision auto` (a second load's
   extra time), the same with the gate's figures kept by that load (`biotf.checkpoint.gate_cache`, in a fresh
   directory: the timed `biotf embed --precision auto` rounds read them too, as a user's jobs after the first), the
   first `embed` call, and a second call of the same records (the steady cost).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

TRANSFORMERS_SCRIPT = """
import sys
import numpy as np, torch
from transformers import AutoTokenizer, EsmModel

directory, fasta, output = sys.argv[1:4]
names, sequences = [], []
for line in open(fasta):
    if line.startswith(">"):
        names.append(line[1:].strip()); sequences.append("")
    else:
        sequences[-1] += line.strip()
tokenizer = AutoTokenizer.from_pretrained(directory)
model = EsmModel.from_pretrained(directory, add_pooling_layer=False, attn_implementation="sdpa").eval()
order = sorted(range(len(sequences)), key=lambda i: -len(sequences[i]))
vectors = [None] * len(sequences)
with torch.inference_mode():
    start = 0
    while start < len(order):
        rows = max(1, 16384 // (len(sequences[order[start]]) + 2))
        batch = order[start:start + rows]
        encoded = tokenizer([sequences[i] for i in batch], return_tensors="pt", padding=True)
        hidden = model(**encoded).last_hidden_state
        mask = encoded["attention_mask"].clone()
        mask[:, 0] = 0  # <cls>
        mask[torch.arange(len(batch)), encoded["attention_mask"].sum(1) - 1] = 0  # <eos>
        pooled = (hidden * mask[..., None]).sum(1) / mask.sum(1, keepdim=True)
        for row, i in enumerate(batch):
            vectors[i] = pooled[row].numpy()
        start += rows
np.save(output, np.stack(vectors))
"""

PHASES = """
import json, sys, time
start = time.perf_counter()
import torch, biotf
from biotf.io.readers import read_records
imported = time.perf_counter()
directory, fasta = sys.argv[1:3]
sequences = [record.sequence for record in read_records(fasta)]
model = biotf.Model.load(directory)
loaded = time.perf_counter()
auto = biotf.Model.load(directory, precision="auto")
gated = time.perf_counter()
auto = biotf.Model.load(directory, precision="auto")  # the gate's figures kept by the load before
kept = time.perf_counter()
auto.embed(sequences)
first = time.perf_counter()
auto.embed(sequences)
second = time.perf_counter()
print(json.dumps({"imports": imported - start, "load fp32 (read, check, build)": loaded - imported,
                  "load auto (the same, plus gate and conversion)": gated - loaded,
                  "load auto with the gate's figures kept by an earlier run": kept - gated,
                  "first embed of the records": first - kept, "second embed of the same records": second - first,
                  "auto": str(auto.precision)}))
"""


def biotf_command() -> list[str]:
    """The `biotf` console script as a user starts it (this interpreter's, so the same environment)."""
    return [sys.executable, "-c", "import sys; from biotf.cli import main; sys.exit(main())"]


def process(argv: list[str]) -> None:
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=os.environ.copy())


def run(bench, quick: bool) -> None:
    packing, score, inference = bench.section("packing"), bench.section("score"), bench.section("inference")
    torch.manual_seed(0)
    sizes = (24, 300) if quick else (24, 2000)
    with tempfile.TemporaryDirectory(prefix="biotf-bench-process-") as work:
        # The gate's figures in a fresh directory: the warm-up round measures them, the timed rounds read them, as a
        # user's jobs after the first (`biotf.checkpoint.gate_cache`); PHASES times both.
        os.environ["BIOTF_GATE_CACHE"] = str(Path(work) / "gates")
        directory = Path(work) / "esm2-8m-shape"
        score.esm_checkpoint(str(directory))
        script = Path(work) / "transformers_embed.py"
        script.write_text(TRANSFORMERS_SCRIPT)
        sequences = [s[:inference.EMBED_RESIDUES] for s in packing.deeploc_sequences(max(sizes))]
        print(f"ESM-2 8M shape, whole processes on {inference.cpu_name()}", flush=True)
        for size in sizes:
            fasta = Path(work) / f"proteins{size}.fasta"
            fasta.write_text("".join(f">p{i}\n{s}\n" for i, s in enumerate(sequences[:size])))
            output = Path(work) / "out"
            sides = {f"biotf embed {precision}": (lambda precision=precision: process(
                         [*biotf_command(), "embed", "--model", str(directory), "--input", str(fasta), "--output",
                          f"{output}.npz", "--no-progress", "--overwrite", "--precision", precision]))
                     for precision in ("fp32", "auto")}
            sides["transformers script fp32"] = lambda: process([sys.executable, str(script), str(directory),
                                                                 str(fasta), f"{output}.npy"])
            inference.rotate(bench, f"whole process: embed {size} DeepLoc proteins", sides, "proteins", size,
                             2 if quick else 3)
        result = subprocess.run([sys.executable, "-c", PHASES, str(directory), str(Path(work) / "proteins24.fasta")],
                                check=True, capture_output=True, text=True)
        phases = json.loads(result.stdout.strip().splitlines()[-1])
        auto = phases.pop("auto")
        for phase, seconds in phases.items():
            bench.record(f"start-up of a 24-protein job: {phase}", seconds, "s", note=auto if "auto" in phase else "")
        started = time.perf_counter()
        process([sys.executable, "-c", "pass"])
        bench.record("start-up: a bare Python process", time.perf_counter() - started, "s")
