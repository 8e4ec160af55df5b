"""Data pipeline benchmarks (issue 4): does data keep up with training, and is preprocessing memory flat?

1. Throughput on real proteins (DeepLoc test + val from ../shared/data): reading + tokenizing into
   the shard cache (cold), then collating MLM batches of 8 x 256 through a DataLoader; the batch is
   timed against one training step of the default model (`protein-small`, AdamW) on a batch of
   the same shape. Target: data >= 20x faster than the step.
2. Peak RSS of preprocessing a generated FASTA of 100 MB and 1 GB (quick: 10 MB and 100 MB), each in
   a fresh subprocess (kernel VmHWM, reset after imports): the growth from the small file to the
   large one should be near zero, because records stream in chunks.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[2]
SHARED = REPO.parent / "shared" / "data"
RESIDUES = np.frombuffer(b"ACDEFGHIKLMNPQRSTVWY", np.uint8)
BATCH, LENGTH = 8, 256

# Runs in a child process: preprocess one file, report its peak RSS above what the imports hold.
# Writing "5" to /proc/self/clear_refs resets the kernel's peak (VmHWM) to the current RSS, so the
# peak measured afterwards belongs to preprocessing alone (torch & co. are imported by biotf.data).
CHILD = """
import json, sys, time
from biotf.data.token_cache import tokenize_to_cache
from biotf.tokenizers.amino_acid import AminoAcidTokenizer

def status(field):
    with open("/proc/self/status") as handle:
        return next(int(line.split()[1]) for line in handle if line.startswith(field + ":"))

tokenizer = AminoAcidTokenizer()
with open("/proc/self/clear_refs", "w") as handle:
    handle.write("5")
baseline = status("VmRSS")
start = time.perf_counter()
cache = tokenize_to_cache(sys.argv[1], tokenizer, sys.argv[2])
seconds = time.perf_counter() - start
tokens = sum(s.n_tokens for s in cache.splits.values())
print(json.dumps({"baseline_kib": baseline, "peak_kib": status("VmHWM"), "seconds": seconds, "tokens": tokens}))
"""


def generate_fasta(path: Path, megabytes: int, seed: int = 0) -> None:
    """Random protein records of 100-1,000 residues, 60 per line, until the file holds `megabytes` MB."""
    rng = np.random.default_rng(seed)
    target = megabytes * 1_000_000
    written = record = 0
    with open(path, "wb") as handle:
        while written < target:
            lengths = rng.integers(100, 1001, size=2000)
            block = RESIDUES[rng.integers(0, len(RESIDUES), size=int(lengths.sum()))].tobytes()
            parts, start = [], 0
            for length in lengths.tolist():
                sequence = block[start:start + length]
                start += length
                lines = b"\n".join(sequence[i:i + 60] for i in range(0, length, 60))
                parts.append(b">gen%d generated\n%s\n" % (record, lines))
                record += 1
            chunk = b"".join(parts)
            handle.write(chunk)
            written += len(chunk)


def preprocessing_rss(bench, sizes_mb: list[int]) -> None:
    with tempfile.TemporaryDirectory(prefix="biotf-bench-data-") as tmp:
        peaks = {}
        for megabytes in sizes_mb:
            fasta = Path(tmp) / f"gen_{megabytes}mb.fasta"
            generate_fasta(fasta, megabytes)
            os.sync()  # the generator's own writes flushed, so the kernel's writeback of them is not timed as the build
            done = subprocess.run([sys.executable, "-c", CHILD, str(fasta), str(Path(tmp) / f"cache_{megabytes}")],
                                  capture_output=True, text=True, check=True)
            result = json.loads(done.stdout.strip().splitlines()[-1])
            peaks[megabytes] = (result["peak_kib"] - result["baseline_kib"]) / 1024
            bench.record(f"preprocess {megabytes} MB FASTA: peak RSS above imports", peaks[megabytes], "MiB",
                         note=f"(process peak {result['peak_kib'] / 1024:.0f} MiB, "
                              f"{result['baseline_kib'] / 1024:.0f} MiB after imports); "
                              f"{megabytes / result['seconds']:.1f} MB/s, "
                              f"{result['tokens'] / result['seconds'] / 1e6:.2f} M tokens/s")
            fasta.unlink()
        small, large = sizes_mb[0], sizes_mb[-1]
        bench.record(f"peak RSS growth {small} MB -> {large} MB", peaks[large] - peaks[small], "MiB",
                     target="~0 (streams: does not grow with input size)")


def throughput(bench, quick: bool) -> None:
    import torch
    from torch.utils.data import DataLoader

    from biotf.data import LengthGroupedBatchSampler, MLMCollator, prepare_dataset
    from biotf.model import Transformer, TransformerConfig
    from biotf.tokenizers.amino_acid import AminoAcidTokenizer

    torch.set_num_threads(2)
    tokenizer = AminoAcidTokenizer()
    with tempfile.TemporaryDirectory(prefix="biotf-bench-data-") as tmp:
        fasta = Path(tmp) / "deeploc.fasta"
        fasta.write_bytes((SHARED / "proteins/deeploc_test_set.fasta").read_bytes()
                          + (SHARED / "proteins/deeploc_our_val_set.fasta").read_bytes())
        start = time.perf_counter()
        prepared = prepare_dataset(fasta, tokenizer, Path(tmp) / "cache", max_length=LENGTH)
        cold = time.perf_counter() - start
        stored = sum(s.n_tokens for s in prepared.shards.values())
        bench.record("read + tokenize + cache (cold, DeepLoc 2.5 MB)", stored / cold / 1e6, "M tokens/s",
                     note=f"{fasta.stat().st_size / cold / 1e6:.1f} MB/s")

        collator = MLMCollator(tokenizer)
        sampler = LengthGroupedBatchSampler(prepared.train.lengths, BATCH, seed=0)

        def epochs():
            epoch = 0
            while True:
                sampler.set_epoch(epoch)
                prepared.train.set_epoch(epoch)
                yield from DataLoader(prepared.train, batch_sampler=sampler, collate_fn=collator)
                epoch += 1

        batches = epochs()
        epoch_seconds = bench.time(lambda: [b for _, b in zip(range(len(sampler)), batches)], repeats=3)
        real_tokens = int(prepared.train.lengths.sum())
        collate_rate = real_tokens / statistics.median(epoch_seconds)
        bench.record("MLM batches (crop 256, mask, pad, 8 per batch)", collate_rate / 1e6, "M tokens/s",
                     note="real tokens; length-grouped, DataLoader with num_workers=0")
        bench.record("first epoch end to end (read + tokenize + one epoch of batches)",
                     real_tokens / (cold + statistics.median(epoch_seconds)) / 1e6, "M tokens/s")

        config = TransformerConfig.preset("protein-small", vocab_size=tokenizer.vocab_size)
        model = Transformer(config)
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
        full = [b for b in (next(batches) for _ in range(200)) if b["input_ids"].shape == (BATCH, LENGTH)]
        step_batch = full[0]

        def train_step():
            loss = model(**step_batch).loss
            loss.backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)

        bench.compare(f"data batch vs training step (protein-small, {BATCH} x {LENGTH})", lambda: next(batches),
                      train_step, anchor_name="training step", unit="tokens", work=BATCH * LENGTH,
                      repeats=5 if quick else 15, target=20.0)


def run(bench, quick: bool) -> None:
    throughput(bench, quick)
    preprocessing_rss(bench, [10, 100] if quick else [100, 1000])
