"""`embed_file`: one input file in, one embedding file out — what `biotf embed` runs.

Reads records with biotf's readers (FASTA/GenBank, CSV/TSV with metadata columns, .smi, text), embeds
them with `Embedder` and streams them into an `EmbeddingWriter`. The output extension is checked before
the model loads; any error removes every partial file, so the output name holds a complete file or nothing.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from biotf.data.readers import ReaderOptions, read_records
from biotf.checkpoint.digest import model_fingerprint
from biotf.export.embed import Embedder, EmbedOptions, EmbedStats
from biotf.export.writers import EmbeddingWriter, output_format
from biotf.checkpoint.loading import load_pretrained


def open_embedder(model_source: str | Path, options: EmbedOptions = EmbedOptions(), device: str = "cpu",
                  tokenizer_options: Mapping[str, Any] | None = None) -> tuple[Embedder, dict[str, Any]]:
    """The model's `Embedder` and the metadata its vectors carry (the `info` of an embedding file: the model and
    tokenizer with their fingerprints, pooling, layers, windows), for `embed_file` and for any other command
    that embeds records (`biotf search` queries) the same way."""
    model, tokenizer = load_pretrained(model_source, device=device, tokenizer_options=tokenizer_options)
    embedder = Embedder(model, tokenizer, options)
    info: dict[str, Any] = {
        "biotf_embeddings": 1, "model": str(model_source), "model_fingerprint": model_fingerprint(model),
        "tokenizer": tokenizer.kind, "tokenizer_fingerprint": tokenizer.fingerprint,
        "tokenizer_options": dict(tokenizer_options or {}), "pool": options.pool,
        "layers": embedder.layers, "max_length": embedder.max_length, "long": options.long,
        "overlap": options.overlap, "dim": model.config.d_model}
    return embedder, info


def embed_file(model_source: str | Path, input_path: str | Path, output_path: str | Path,
               options: EmbedOptions = EmbedOptions(), reader_options: ReaderOptions = ReaderOptions(),
               device: str = "cpu", progress: bool = False,
               tokenizer_options: Mapping[str, Any] | None = None) -> EmbedStats:
    """Embed every record of `input_path` into `output_path` (.npz, .parquet or .h5ad); returns the run's counts.
    `tokenizer_options` change policies of the model's tokenizer (`load_pretrained`: same vocabulary)."""
    output_format(output_path)
    embedder, info = open_embedder(model_source, options, device, tokenizer_options)
    info["input"] = str(input_path)
    stats = EmbedStats()
    bar = None
    if progress:
        from tqdm.auto import tqdm

        bar = tqdm(unit="tok", unit_scale=True, desc=f"embedding {Path(input_path).name}", leave=False)
    try:
        with EmbeddingWriter(output_path, embedder.array_names, options.pool == "none", info) as writer:
            for item in embedder.embed(read_records(input_path, reader_options, stats.policies), stats, input_path, bar):
                writer.add(item)
            writer.info.update(chunked=stats.chunked, truncated=stats.truncated, tokens=stats.tokens)
            writer.close()
    finally:
        if bar is not None:
            bar.close()
    return stats
