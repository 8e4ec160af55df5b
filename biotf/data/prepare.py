"""The data layer's one entry point for training: file in, train/validation datasets out.

`prepare_dataset` reads and tokenizes the file once into the shard cache (or reuses it), then
wraps the shards for the objective: per-record `SequenceDataset`s for MLM (with the long-sequence
policy), `PackedBlockDataset`s for CLM (document-masked under `packing`). Everything that changed data is in
`PreparedData`: tokenizer policy counts, long-sequence counts, and the unigram baseline the run summary reports.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from biotf.data.token_cache import ShardCache, TokenShard, tokenize_to_cache
from biotf.data.datasets import LongSequenceStats, PackedBlockDataset, SequenceDataset
from biotf.io.readers import ReaderOptions
from biotf.errors import ConfigError, InputError
from biotf.tokenizers.base import PolicyStats, Tokenizer

OBJECTIVES = ("mlm", "clm")


def unigram_cross_entropy(train_counts: np.ndarray, eval_counts: np.ndarray,
                          exclude: frozenset[int] = frozenset()) -> float:
    """Cross-entropy (nats/token) of predicting `eval_counts`' tokens with the training frequencies.

    The "unigram baseline": a model that learned nothing but token frequencies scores this.
    Add-one smoothing keeps tokens unseen in training finite. `exclude` removes ids that are never
    predicted (e.g. special tokens under MLM) from both distributions.
    """
    keep = np.ones(len(train_counts), bool)
    keep[list(exclude)] = False
    train = train_counts[keep].astype(np.float64) + 1.0
    evaluated = eval_counts[keep].astype(np.float64)
    if evaluated.sum() == 0:
        raise ConfigError("data.validation_fraction", 0, reason="the unigram baseline needs evaluation tokens")
    return float(-(evaluated * np.log(train / train.sum())).sum() / evaluated.sum())


@dataclass
class PreparedData:
    """Train/validation datasets plus every count a run summary needs."""

    train: SequenceDataset | PackedBlockDataset
    validation: SequenceDataset | PackedBlockDataset
    shards: dict[str, TokenShard]
    cache: ShardCache
    objective: str
    long_sequences: dict[str, LongSequenceStats]  # empty for CLM: packing neither crops nor drops
    special_ids: frozenset[int]

    @property
    def policy_stats(self) -> PolicyStats:
        """Reader and tokenizer policy counts from the (cached) tokenization pass."""
        return self.cache.policy_stats

    def unigram_baseline(self, split: str = "validation") -> float:
        """Unigram cross-entropy on `split` using training frequencies; MLM never predicts specials."""
        exclude = self.special_ids if self.objective == "mlm" else frozenset()
        return unigram_cross_entropy(self.shards["train"].counts, self.shards[split].counts, exclude)

    def summary(self) -> str:
        lines = [f"token cache {self.cache.directory} ({self.cache.status})"]
        for name, shard in self.shards.items():
            lines.append(f"{name}: {len(shard)} records, {shard.n_tokens} tokens")
        lines.append(f"policies: {self.policy_stats.summary()}")
        lines += [f"long sequences ({name}): {stats.summary()}" for name, stats in self.long_sequences.items()]
        return "\n".join(lines)


def prepare_dataset(path: str | Path, tokenizer: Tokenizer, cache_dir: str | Path,
                    reader_options: ReaderOptions | None = None, validation_fraction: float = 0.05, seed: int = 0,
                    max_length: int = 1024, long_policy: str = "crop", objective: str = "mlm",
                    packing: bool = False) -> PreparedData:
    """Tokenize `path` (cached) and build the datasets for `objective`.

    MLM: records encoded with special tokens, one item per record, `long_policy` for records over
    `max_length`. CLM: records encoded without special tokens, joined with `<eos>` and cut into
    blocks of `max_length`; with `packing` each record is `<eos> record <eos>` and keeps to itself in its block
    (`PackedBlockDataset`'s `document_masking`). MLM rows are packed later, by the collator, so `packing` changes
    nothing here for MLM.
    """
    if objective not in OBJECTIVES:
        raise ConfigError("objective", objective, allowed=", ".join(OBJECTIVES))
    if objective == "clm" and tokenizer.eos_id is None:
        raise ConfigError("tokenizer", tokenizer.kind, reason="CLM packing separates documents with <eos>, "
                                                              "which this tokenizer does not have")
    if objective == "clm" and tokenizer.pad_id is None:
        raise ConfigError("tokenizer", tokenizer.kind, reason="CLM packing pads the last block with <pad>")
    cache = tokenize_to_cache(path, tokenizer, cache_dir, reader_options, validation_fraction, seed,
                              add_special_tokens=objective == "mlm")
    shards = cache.splits
    if objective == "clm":
        train, validation = (PackedBlockDataset(shards[name], max_length, tokenizer.eos_id, tokenizer.pad_id,
                                                document_masking=packing) for name in ("train", "validation"))
        long_sequences = {}
    else:
        train, validation = (SequenceDataset(shards[name], max_length, long_policy, seed, training=name == "train",
                                             special_ids=tokenizer.special_ids, name=name)
                             for name in ("train", "validation"))
        long_sequences = {"train": train.stats, "validation": validation.stats}
    for name, dataset in (("train", train), ("validation", validation)):
        if len(dataset) == 0:  # training reports validation loss, so both sides need items
            raise InputError(f"{path}: the {name} split is empty ({len(shards['train'])} train and "
                             f"{len(shards['validation'])} validation records with validation_fraction="
                             f"{validation_fraction}); use more records or another validation_fraction")
    return PreparedData(train, validation, shards, cache, objective, long_sequences, tokenizer.special_ids)
