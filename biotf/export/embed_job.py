"""`embed_file`: one input file in, one embedding file out — what `biotf embed` runs.

Reads records with biotf's readers (FASTA/GenBank, CSV/TSV with metadata columns, .smi, text), embeds
them with `Embedder` and streams them into an `EmbeddingWriter`. The output extension is checked before
the model loads; any error removes every partial file, so the output name holds a complete file or nothing.
`EmbedRun` is the same work for a sharded run (`biotf.data.sharded`): each part is a writer's spools kept as they
are, and the merge appends them in order to one writer, which writes the file as `embed_file` does.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import fields
from pathlib import Path
from typing import Any

from biotf.io.readers import ReaderOptions, Record, read_records
from biotf.errors import disk_errors
from biotf.export.embed import Embedder, EmbedOptions, EmbedStats
from biotf.io.embeddings import EMBEDDING_FORMATS, EmbeddingWriter
from biotf.io.outputs import output_format
from biotf.checkpoint.loading import LoadedModel, as_loaded, model_identity
from biotf.progress import reporting
from biotf.tokenizers.base import PolicyStats


def open_embedder(model: str | Path | LoadedModel, options: EmbedOptions = EmbedOptions(), device: str | None = None,
                  tokenizer_options: Mapping[str, Any] | None = None) -> tuple[Embedder, dict[str, Any]]:
    """The `Embedder` of `model` (a loaded model or its source: `as_loaded`) and the metadata its vectors carry (the
    `info` of an embedding file: the model and tokenizer with their fingerprints, pooling, layers, windows, packing),
    for `embed_file` and for any other command that embeds records (`biotf search` queries) the same way."""
    loaded = as_loaded(model, device, tokenizer_options)
    model, tokenizer = loaded.network, loaded.tokenizer
    embedder = Embedder(model, tokenizer, options)
    info: dict[str, Any] = {
        "biotf_embeddings": 1, "model": loaded.source, **model_identity(model, loaded),
        "tokenizer": tokenizer.kind, "tokenizer_fingerprint": tokenizer.fingerprint,
        "tokenizer_options": loaded.tokenizer_options, "pool": options.pool,
        "layers": embedder.layers, "max_length": embedder.max_length, "long": options.long,
        "overlap": options.overlap, "packing": options.packing, "pool_specials": options.pool_specials,
        "normalize": options.normalize, "dim": model.config.d_model}
    if tokenizer.input_convention:  # how plain sequences were typed for the checkpoint (ProtBert's spaces)
        info["tokenizer_input"] = tokenizer.input_convention
    return embedder, info


class EmbedRun:
    """One model embedding records into embedding files: a whole file (`embed_file`), or the parts of a sharded run
    and their merge (`biotf.data.sharded.PartWork`), which writes the file `embed_file` writes for the same records."""

    def __init__(self, model: str | Path | LoadedModel, input_path: str | Path, output_path: str | Path,
                 options: EmbedOptions = EmbedOptions(), device: str | None = None, progress: bool = False,
                 tokenizer_options: Mapping[str, Any] | None = None):
        output_format(output_path, EMBEDDING_FORMATS)
        self.input_path, self.output_path, self.options, self.progress = input_path, output_path, options, progress
        self.embedder, self.info = open_embedder(model, options, device, tokenizer_options)
        self.info["input"] = str(input_path)

    @contextmanager
    def _writer(self, path: str | Path, spool_dir: Path | None = None) -> Iterator[EmbeddingWriter]:
        """A writer of `path`: an error removes its spools, and a write the system refuses (a full disk, a read-only
        directory) is one line naming `path`."""
        with disk_errors(path), EmbeddingWriter(path, self.embedder.array_names, self.options.pool == "none",
                                                self.info, spool_dir) as writer:
            yield writer

    def embed(self, records: Iterable[Record], writer: EmbeddingWriter, stats: EmbedStats) -> None:
        """Embed `records` into `writer`, counting into `stats` (progress on stderr if asked for: `biotf.progress`)."""
        with reporting(self.progress, f"embedding {Path(self.input_path).name}", "tok", self.embedder.model) as shown:
            for item in self.embedder.embed(records, stats, self.input_path, shown):
                writer.add(item)

    def write(self, records: Iterable[Record], stats: EmbedStats) -> None:
        """The whole output file from `records`."""
        with self._writer(self.output_path) as writer:
            self.embed(records, writer, stats)
            self._finish(writer, stats)

    def _finish(self, writer: EmbeddingWriter, stats: EmbedStats) -> None:
        writer.info.update(chunked=stats.chunked, truncated=stats.truncated, tokens=stats.tokens)
        writer.close()

    # --- biotf.data.sharded.PartWork -----------------------------------------------------------------------
    def identity(self) -> dict[str, Any]:
        keys = ("precision", "model_fingerprint", "tokenizer_fingerprint", "tokenizer_options", "pool", "layers",
                "max_length", "long", "overlap", "packing", "pool_specials", "normalize")
        return {"command": "embed", **{key: self.info[key] for key in keys}}

    def write_part(self, records: Iterator[Record], directory: Path) -> dict[str, Any]:
        stats = EmbedStats()
        with self._writer(self.output_path, directory) as writer:
            self.embed(records, writer, stats)
            writer.keep()
        return {field.name: getattr(stats, field.name) for field in fields(stats)}

    def summary(self, counts: Mapping[str, Any]) -> EmbedStats:
        """The summary of counts summed over a sharded run's parts."""
        return stats_from_counts(counts)

    def merge(self, parts: list[Path], output: Path, counts: dict[str, Any]) -> None:
        stats = stats_from_counts(counts)
        with self._writer(output) as writer:
            for part in parts:
                writer.extend(part)
            self._finish(writer, stats)


def stats_from_counts(counts: Mapping[str, Any]) -> EmbedStats:
    """The `EmbedStats` of counts summed over a sharded run's parts (`write_part` returns each part's)."""
    return EmbedStats(**{**counts, "policies": PolicyStats(counts.get("policies", {}))})


def embed_file(model: str | Path | LoadedModel, input_path: str | Path, output_path: str | Path,
               options: EmbedOptions = EmbedOptions(), reader_options: ReaderOptions = ReaderOptions(),
               device: str | None = None, progress: bool = False,
               tokenizer_options: Mapping[str, Any] | None = None) -> EmbedStats:
    """Embed every record of `input_path` into `output_path` (.npz, .parquet or .h5ad); returns the run's counts.
    `tokenizer_options` change policies of the model's tokenizer (`as_loaded`: same vocabulary)."""
    run = EmbedRun(model, input_path, output_path, options, device, progress, tokenizer_options)
    stats = EmbedStats()
    run.write(read_records(input_path, reader_options, stats.policies), stats)
    return stats
