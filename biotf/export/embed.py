"""The embedding pipeline: records in, one vector (or one per token) per record out, in input order.

    embedder = Embedder(model, tokenizer, EmbedOptions(pool="mean", layer=-1))
    for item in embedder.embed(read_records(path)):  # RecordEmbedding, same order as the input
        ...

Records are read in blocks of about `block_tokens` tokens. Inside a block, windows are sorted by length
and packed into batches of at most `batch_tokens` (padded) tokens, so padding stays small; the model
runs under `torch.inference_mode`; the block's records then leave in their input order. Memory is
bounded by the block, whatever the file size; since the block's vectors wait for its last batch, a
block also ends at `BLOCK_BATCHES` batches' worth of them (with pool "none", 4 x `batch_tokens`
tokens), so per-token vectors of wide models with every layer hold a few batches, not 2^19 tokens.
After every batch freed heap pages go back to the OS (`release_free_heap`): glibc raises its mmap
threshold once torch frees a large activation, so later activations come from the heap, where the
block's small long-lived arrays fragment it, and RSS would grow with the file (README, "Embeddings and
probes", measures both). A record's vectors do not depend on its batch mates: padding is masked out of
attention and out of pooling (tests check <= 1e-5).

A model with a convolutional stem (`stem: conv`) computes bins; each token (base) carries the vector of its bin
(`TrunkOutput.per_token`), so per-token output (pool "none") is one vector per base, the bases of one bin sharing it,
and mean / max pooling weigh each bin by its content bases. Bins are counted from each window's first token.

Records longer than the model (`max_length`, default the model's `max_seq_len`, special tokens
included) follow `long`: "chunk" (overlapping windows, pooled across, `biotf.data.windows`),
"truncate" (the first tokens only) or "error". `EmbedStats` counts chunked and truncated records.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

import numpy as np
import torch

from biotf.io.embeddings import RecordEmbedding
from biotf.io.readers import Record
from biotf.data.tokenize import content_start, encode_chunks, record_chunks
from biotf.errors import ConfigError, InputError, check_choice, check_int
from biotf.heap import release_free_heap
from biotf.data.packing import check_packable, fill_rows, inference_batches
from biotf.export import EMBED_LONG_POLICIES
from biotf.export.pooling import POOLS, Partial, combine, pool_window
from biotf.data.windows import Window, plan_windows
from biotf.model import Transformer
from biotf.model.positions import reading_length
from biotf.tokenizers.base import PolicyStats, Tokenizer
from biotf.conventions import counted
from biotf.naming import given

ENCODE_RECORDS = 256  # tokenizers are vectorised: a few hundred records per call
BLOCK_BATCHES = 4  # a block's vectors wait for its last batch: at most this many batches' hidden states of them
T = TypeVar("T")


@dataclass(frozen=True)
class EmbedOptions:
    """How to embed. `layer`: an index into the hidden states (0 = embedding output, -1 = last, after the
    final norm) or "all". `overlap`: tokens shared by consecutive windows (default a quarter of a window).
    `packing`: several windows share a row (as long as a block's longest window; `biotf.data.packing`), each seeing
    itself alone (the model's `segment_ids`): the same vectors, fewer pad tokens. `pool_specials`: mean / max pooling
    count the special tokens around a record too (its first window's prefix, its last window's suffix, every token
    between), as sentence-transformers' Pooling counts every token of the attention mask; `normalize`: each pooled
    vector scaled to unit L2 norm (its Normalize module). Both are what a sentence-transformers directory asks for
    (`biotf.export.sentence_transformers`)."""

    pool: str = "mean"
    layer: int | str = -1
    batch_tokens: int = 16384
    max_length: int | None = None
    long: str = "chunk"
    overlap: int | None = None
    block_tokens: int = 1 << 19
    packing: bool = False
    pool_specials: bool = False
    normalize: bool = False

    def __post_init__(self) -> None:
        check_choice("pool", self.pool, POOLS)
        for name in ("pool_specials", "normalize"):
            value = getattr(self, name)
            if not isinstance(value, bool):
                raise ConfigError(name, value, allowed="true | false")
            if value and self.pool == "none":
                raise ConfigError(name, value, allowed="false with pool none",
                                  reason="it shapes pooled vectors; pool none exports every content token")
        check_choice("long", self.long, EMBED_LONG_POLICIES)
        if self.layer != "all" and (isinstance(self.layer, bool) or not isinstance(self.layer, int)):
            raise ConfigError("layer", self.layer, allowed="an integer (-1 = last) or 'all'")
        check_int("batch_tokens", self.batch_tokens)
        check_int("block_tokens", self.block_tokens)
        check_int("max_length", self.max_length, optional=True)
        check_int("overlap", self.overlap, 0, optional=True)
        check_packable(self.packing)


@dataclass
class EmbedStats:
    """What a run did, for its summary line: nothing about long records is dropped silently."""

    records: int = 0
    tokens: int = 0
    windows: int = 0
    chunked: int = 0
    truncated: int = 0
    truncated_tokens: int = 0
    policies: PolicyStats = field(default_factory=PolicyStats)

    def summary(self) -> str:
        return (f"{counted(self.records, 'record')}, {counted(self.tokens, 'token')} in "
                f"{counted(self.windows, 'window')}; {self.chunked} chunked, {self.truncated} truncated "
                f"({counted(self.truncated_tokens, 'token')} cut); "
                f"tokenizer policies: {self.policies.summary()}")


@dataclass
class _Piece:
    """One window of one record, waiting for its batch."""

    slot: int  # the record's place in its block
    order: int  # the window's place in its record
    ids: np.ndarray  # prefix + content[start:end] + suffix
    owned: slice  # positions in `ids` whose vectors the window keeps
    keep: np.ndarray  # content (non-special) tokens within `owned`
    positions: np.ndarray  # content positions of the kept tokens
    tokens: int  # the record's content tokens this window accounts for (its owned ones; a truncated one's cut ones too)


class Embedder:
    """Runs a model over records and pools its hidden states; see the module docstring."""

    def __init__(self, model: Transformer, tokenizer: Tokenizer, options: EmbedOptions = EmbedOptions()):
        self.model, self.tokenizer, self.options = model.eval(), tokenizer, options
        check_packable(options.packing, model.config)
        n_states = model.config.n_layers + 1
        if options.layer == "all":
            self.layers = list(range(n_states))
        elif -n_states <= options.layer < n_states:
            self.layers = [options.layer % n_states]
        else:
            raise ConfigError("layer", options.layer, allowed=f"-{n_states}..{n_states - 1} or 'all' "
                              f"(this model has {model.config.n_layers} layers + the embedding output)")
        self.max_length = reading_length(model.config, options.max_length)
        if options.pool == "cls" and tokenizer.cls_id is None:
            raise ConfigError("pool", "cls", allowed=", ".join(p for p in POOLS if p != "cls"),
                              reason=f"the {tokenizer.scheme} tokenizer has no <cls> token")
        self.special = np.fromiter(tokenizer.special_ids, np.int64)
        self.pad_id = tokenizer.pad_id if tokenizer.pad_id is not None else 0  # padded positions are masked anyway
        self._prefix: np.ndarray | None = None
        self._suffix: np.ndarray | None = None

    @property
    def array_names(self) -> list[str]:
        """Output array per selected layer: "embeddings" for the requested (with "all": the last) layer,
        "layer_<i>" for the others."""
        return [f"layer_{i}" for i in self.layers[:-1]] + ["embeddings"]

    # --- tokens and windows -----------------------------------------------------------------------
    def _learn_specials(self, record: Record, content: np.ndarray) -> None:
        """The tokens the tokenizer puts around content (e.g. <cls> ... <eos>), from one record encoded both ways."""
        full = self.tokenizer.encode_batch([record.sequence], True, records=[record.id])[0]
        at = content_start(full, content)
        if at is not None:
            self._prefix, self._suffix = full[:at], full[at + len(content):]
        else:
            raise InputError(f"record {record.id!r}: the {self.tokenizer.scheme} tokenizer's special tokens do not "
                             "surround its content, so windows cannot be formed")
        if self.options.pool == "cls" and (len(self._prefix) == 0 or self._prefix[0] != self.tokenizer.cls_id):
            raise ConfigError("pool", "cls", reason=f"the {self.tokenizer.scheme} tokenizer does not start records "
                              "with <cls>", allowed="mean, max, none")
        width = self.max_length - len(self._prefix) - len(self._suffix)
        if width < 1:
            raise ConfigError("max_length", self.max_length,
                              allowed=f"at least {len(self._prefix) + len(self._suffix) + 1} (special tokens + 1)")

    def _windows(self, record: Record, n_tokens: int, stats: EmbedStats) -> list[Window]:
        width = self.max_length - len(self._prefix) - len(self._suffix)
        if n_tokens <= width:
            return [Window(0, n_tokens, 0, n_tokens)]
        if self.options.long == "error":
            raise InputError(f"record {record.id!r} (record {record.index + 1}) has {n_tokens} tokens, more than the "
                             f"{width} that fit max_length={self.max_length} with special tokens "
                             f"(allowed: {given('long', 'chunk')} or {given('long', 'truncate')})")
        if self.options.long == "truncate":
            stats.truncated += 1
            stats.truncated_tokens += n_tokens - width
            return [Window(0, width, 0, width)]
        stats.chunked += 1
        overlap = self.options.overlap if self.options.overlap is not None else width // 4
        if overlap >= width:
            raise ConfigError("overlap", overlap, allowed=f"0..{width - 1} (below the window of {width} content tokens)")
        return plan_windows(n_tokens, width, overlap)

    def _pieces(self, slot: int, record: Record, content: np.ndarray, stats: EmbedStats) -> list[_Piece]:
        pieces = []
        windows = self._windows(record, len(content), stats)
        specials = self.options.pool_specials
        accounted = [window.own_end - window.own_start for window in windows]
        accounted[-1] += len(content) - sum(accounted)  # --long truncate: the cut tokens, as the summary counts them
        for order, window in enumerate(windows):
            ids = np.concatenate([self._prefix, content[window.start:window.end], self._suffix])
            offset = len(self._prefix) - window.start
            # With pool_specials the record's prefix and suffix count: the first window owns one, the last the other.
            start = 0 if specials and order == 0 else window.own_start + offset
            end = len(ids) if specials and order == len(windows) - 1 else window.own_end + offset
            keep = np.ones(end - start, bool) if specials else ~np.isin(ids[start:end], self.special)
            pieces.append(_Piece(slot, order, ids, slice(start, end), keep, start - offset + np.flatnonzero(keep),
                                 accounted[order]))
        return pieces

    # --- the model --------------------------------------------------------------------------------
    def _run(self, rows: list[list[_Piece]]) -> np.ndarray:
        """Hidden states of the selected layers, one per token (with a stem: its bin's), (layers, rows, longest row, D)
        float32; a row of several windows (packing) runs with segment ids, each window a segment."""
        filled = fill_rows([[piece.ids for piece in row] for row in rows], self.pad_id, self.options.packing)
        device = self.model.device
        with torch.inference_mode():
            out = self.model.encode(torch.from_numpy(filled.ids).to(device), output_hidden_states=True,
                                    **filled.inputs(device))
            hidden = torch.stack([out.per_token(out.hidden_states[i]) for i in self.layers])
        return hidden.float().cpu().numpy()

    def _batches(self, pieces: list[_Piece]) -> Iterator[list[list[_Piece]]]:
        """Rows of windows, each batch at most `batch_tokens` padded tokens (`inference_batches`): one window a row,
        longest first; or with `packing` rows as long as the longest window, filled by first-fit decreasing."""
        lengths = [len(piece.ids) for piece in pieces]
        for batch in inference_batches(lengths, self.options.batch_tokens, self.options.packing):
            yield [[pieces[i] for i in row] for row in batch]

    # --- the pipeline -----------------------------------------------------------------------------
    def _blocks(self, records: Iterable[Record], stats: EmbedStats, source: str | Path | None
                ) -> Iterator[tuple[list[Record], list[np.ndarray]]]:
        """Records with their content token ids, up to `block_tokens` tokens and `BLOCK_BATCHES` batches'
        worth of output vectors (`held`, in float32 rows of layers x D) at a time (`embed` reads one block ahead, so
        that the last block is known as such and progress has its total)."""
        block: list[Record] = []
        contents: list[np.ndarray] = []
        size = held = 0
        chunks = record_chunks(records, ENCODE_RECORDS)
        for chunk, encoded in encode_chunks(chunks, self.tokenizer, False, stats.policies, source):
            for record, ids in zip(chunk, encoded):
                block.append(record)
                contents.append(ids)
                size += len(ids)
                held += len(ids) if self.options.pool == "none" else 2  # pooled partials are float64
                if size >= self.options.block_tokens or held >= BLOCK_BATCHES * self.options.batch_tokens:
                    yield block, contents
                    block, contents, size, held = [], [], 0, 0
        if block:
            yield block, contents

    def embed(self, records: Iterable[Record], stats: EmbedStats | None = None, source: str | Path | None = None,
              progress=None) -> Iterator[RecordEmbedding]:
        """RecordEmbeddings in input order. `source` names the file in tokenizer errors; `progress` (a
        `biotf.progress.Progress` or None) counts the content tokens of each batch as the summary counts them (each
        window its owned ones: overlaps and special tokens once, a truncated record's cut ones too), and has its total
        once the input has been read to its end (with the last block, one block ahead)."""
        stats = stats if stats is not None else EmbedStats()
        pool = self.options.pool
        for (block, contents), last in _marking_last(self._blocks(records, stats, source)):
            if last and progress is not None:
                progress.set_total(progress.done + sum(len(content) for content in contents))
            if self._prefix is None:
                first = next((i for i, content in enumerate(contents) if len(content)), 0)
                self._learn_specials(block[first], contents[first])
            pieces = [piece for slot, (record, content) in enumerate(zip(block, contents))
                      for piece in self._pieces(slot, record, content, stats)]
            partials: list[list[tuple[_Piece, Partial]]] = [[] for _ in block]
            ran = 0
            for batch in self._batches(pieces):
                hidden = self._run(batch)
                for number, row in enumerate(batch):
                    start = 0
                    for piece in row:
                        window = hidden[:, number, start:start + len(piece.ids)]
                        partials[piece.slot].append((piece, pool_window(window, piece.owned, piece.keep, pool)))
                        start += len(piece.ids)
                if progress is not None:  # a long record's windows are many batches of one block
                    ran += sum(len(row) for row in batch)
                    progress.update(sum(piece.tokens for row in batch for piece in row),
                                    f"windows {ran}/{len(pieces)} of this block")
                del hidden  # it holds the batch's activations: free them before the trim
                release_free_heap()
            stats.windows += len(pieces)
            for record, content, parts in zip(block, contents, partials):
                parts.sort(key=lambda item: item[0].order)
                vectors = combine([partial for _, partial in parts], pool, record.id)
                if self.options.normalize:  # as torch.nn.functional.normalize: eps 1e-12 keeps a zero vector zero
                    vectors = vectors / np.maximum(np.linalg.norm(vectors, axis=-1, keepdims=True), 1e-12)
                stats.records += 1
                stats.tokens += len(content)
                if pool == "none":
                    positions = np.concatenate([piece.positions for piece, _ in parts])
                    yield RecordEmbedding(record, vectors, content[positions].astype(np.int32), positions.astype(np.int32))
                else:
                    yield RecordEmbedding(record, vectors)


def _marking_last(items: Iterable[T]) -> Iterator[tuple[T, bool]]:
    """Each item with whether it is the last, reading one item ahead."""
    iterator = iter(items)
    try:
        current = next(iterator)
    except StopIteration:
        return
    for following in iterator:
        yield current, False
        current = following
    yield current, True
