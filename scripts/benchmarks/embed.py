"""Embedding export benchmarks (issue 5): throughput against a plain HF loop, and flat memory.

1. records/s of `Embedder` (tokenize, length-sorted batches of <= 16384 tokens, inference_mode, mean pool over
   content tokens) against the loop a user writes with `transformers`: `EsmModel` of the same size (ESM-2 8M
   shape: 320 wide, 6 layers, rotary), batches of 32 records in file order padded to their longest,
   masked mean of `last_hidden_state`, under `torch.no_grad`. Both use random weights (speed does not
   depend on them) and the same records; the HF side is even handed pre-tokenized ids. Target >= 1.0.
2. records/s and peak RSS of the whole `embed_file` (FASTA -> .h5ad, every layer exported) for 10k, 30k and
   100k generated records (quick: 10k and 20k), each in a fresh subprocess with the kernel's peak (VmHWM)
   reset after imports (the .h5ad writer's anndata/h5py included), then the growth per 1k records between
   the smallest and largest run: only ids (the writer's, and the reader's id hashes for its duplicate
   count: ~130 bytes a record) should stay in memory, since vectors, sequences and metadata stream to disk.
   Every run has at least 10k records, so the first read block (2^19 tokens, ~7,500 of these records) is
   full: below that the peak grows with the block, not with the file. The peak is one batch's activations
   above a floor that moves from batch to batch (runs of the same file peaked up to 11 MiB apart on a loaded
   machine), and it rises by about 25 MiB over the first 30k records before it flattens (native memory: no
   Python object stays). So quick's 10k -> 20k reads anywhere from 0.1 to 1.4 MiB per 1k; the full run's
   10k -> 100k is the figure (docs/benchmarks.md).
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import torch

RESIDUES = np.array(list("ACDEFGHIKLMNPQRSTVWY"))
HF_BATCH = 32

# Runs in a child process: embed one FASTA with a tiny model, report peak RSS above what imports hold.
CHILD = """
import json, sys, time, torch
import anndata.io, h5py  # the .h5ad writer's imports, loaded before the baseline like biotf's own
from biotf.export import EmbedOptions, embed_file
from biotf.checkpoint import save_pretrained
from biotf.model import Transformer, TransformerConfig
from biotf.tokenizers import AminoAcidTokenizer

def status(field):
    with open("/proc/self/status") as handle:
        return next(int(line.split()[1]) for line in handle if line.startswith(field + ":"))

torch.manual_seed(0)
config = TransformerConfig(vocab_size=33, d_model=64, n_layers=2, n_heads=4, n_kv_heads=4, d_ff=128, max_seq_len=128,
                           causal=False, pos="rope", norm="layernorm", mlp="gelu")
model_dir = save_pretrained(Transformer(config), AminoAcidTokenizer(), sys.argv[2] + "/model")
with open("/proc/self/clear_refs", "w") as handle:
    handle.write("5")
baseline = status("VmRSS")
start = time.perf_counter()
stats = embed_file(model_dir, sys.argv[1], sys.argv[2] + "/out.h5ad", EmbedOptions(layer="all"))
seconds = time.perf_counter() - start
print(json.dumps({"baseline_kib": baseline, "peak_kib": status("VmHWM"), "seconds": seconds, "records": stats.records}))
"""


def random_proteins(n: int, low: int, high: int, seed: int = 0) -> list[str]:
    rng = np.random.default_rng(seed)
    return ["".join(rng.choice(RESIDUES, length)) for length in rng.integers(low, high + 1, n)]


def esm_pair():
    """biotf's esm2-8m preset and an `EsmModel` of the same shape (random weights, eval mode)."""
    from transformers import EsmConfig, EsmModel

    from biotf.model import Transformer, TransformerConfig

    torch.manual_seed(0)
    ours = Transformer(TransformerConfig.preset("esm2-8m")).eval()
    config = EsmConfig(vocab_size=33, hidden_size=320, num_hidden_layers=6, num_attention_heads=20,
                       intermediate_size=1280, max_position_embeddings=1026, position_embedding_type="rotary",
                       pad_token_id=1, mask_token_id=32, token_dropout=True, attn_implementation="sdpa")
    theirs = EsmModel(config, add_pooling_layer=False).eval()
    return ours, theirs


def hf_loop(model, encoded: list[np.ndarray], pad_id: int) -> np.ndarray:
    """The everyday feature-extraction loop: fixed-size batches in file order, masked mean of the last layer."""
    pooled = []
    with torch.no_grad():
        for start in range(0, len(encoded), HF_BATCH):
            batch = encoded[start:start + HF_BATCH]
            longest = max(len(ids) for ids in batch)
            ids = torch.full((len(batch), longest), pad_id, dtype=torch.long)
            mask = torch.zeros((len(batch), longest), dtype=torch.long)
            for row, sequence in enumerate(batch):
                ids[row, :len(sequence)] = torch.from_numpy(sequence)
                mask[row, :len(sequence)] = 1
            hidden = model(input_ids=ids, attention_mask=mask).last_hidden_state
            content = mask.clone()
            content[:, 0] = 0  # <cls>
            content[torch.arange(len(batch)), mask.sum(1) - 1] = 0  # <eos>
            pooled.append(((hidden * content[..., None]).sum(1) / content.sum(1, keepdim=True)).numpy())
    return np.concatenate(pooled)


def throughput_vs_hf(bench, quick: bool) -> None:
    from biotf.io.readers import Record
    from biotf.export import Embedder, EmbedOptions
    from biotf.tokenizers import AminoAcidTokenizer

    tokenizer = AminoAcidTokenizer()
    sequences = random_proteins(32 if quick else 256, 50, 1000)
    records = [Record(f"p{i}", s, {}, i) for i, s in enumerate(sequences)]
    encoded = tokenizer.encode_batch(sequences)
    ours, theirs = esm_pair()
    embedder = Embedder(ours, tokenizer, EmbedOptions(pool="mean"))
    bench.compare(f"embed {len(records)} proteins (50-1000 aa), ESM-2 8M shape, mean pool",
                  lambda: list(embedder.embed(records)), lambda: hf_loop(theirs, encoded, tokenizer.pad_id),
                  anchor_name="HF EsmModel loop (batches of 32)", unit="records", work=len(records),
                  repeats=3, warmup=1, target=1.0)


def memory_flatness(bench, sizes: list[int]) -> None:
    """Peak RSS of `embed_file` per record count, and its growth per 1k records from the first to the last."""
    with tempfile.TemporaryDirectory(prefix="biotf-bench-embed-") as tmp:
        peaks = {}
        for n in sizes:
            fasta = Path(tmp) / f"gen_{n}.fasta"
            with open(fasta, "w") as handle:
                for i, sequence in enumerate(random_proteins(n, 20, 120, seed=n)):
                    handle.write(f">gen{i} generated\n{sequence}\n")
            work = Path(tmp) / f"run_{n}"
            work.mkdir()
            done = subprocess.run([sys.executable, "-c", CHILD, str(fasta), str(work)], capture_output=True, text=True,
                                  check=True)
            result = json.loads(done.stdout.strip().splitlines()[-1])
            peaks[n] = (result["peak_kib"] - result["baseline_kib"]) / 1024
            bench.record(f"embed_file {n:,} records (20-120 aa) -> .h5ad, every layer: throughput",
                         result["records"] / result["seconds"], "records/s")
            bench.record(f"embed_file {n:,} records: peak RSS above imports", peaks[n], "MiB")
        small, large = sizes[0], sizes[-1]
        bench.record(f"peak RSS growth per 1k records ({small:,} -> {large:,})",
                     (peaks[large] - peaks[small]) / ((large - small) / 1000), "MiB",
                     target="< 0.5 (ids and id hashes stay, ~0.13; vectors, sequences, metadata stream to disk)")


def run(bench, quick: bool) -> None:
    torch.manual_seed(0)
    throughput_vs_hf(bench, quick)
    memory_flatness(bench, [10_000, 20_000] if quick else [10_000, 30_000, 100_000])
