"""Data layer: readers -> token-shard cache (split by record) -> datasets -> collators.

`prepare_dataset` is the entry point training uses; `read_records` streams any supported file. `splits` makes the
leakage-aware train / validation / test splits of labelled sets (fine-tuning).
"""

from biotf.data.cache import ShardCache, TokenShard, tokenize_to_cache
from biotf.data.collators import MLMCollator, pad_batch
from biotf.data.datasets import (IGNORE_INDEX, LONG_POLICIES, LengthGroupedBatchSampler, LongSequenceStats,
                                 PackedBlockDataset, SequenceDataset)
from biotf.data.prepare import OBJECTIVES, PreparedData, prepare_dataset, unigram_cross_entropy
from biotf.data.readers import FORMATS, ReaderOptions, Record, detect_format, read_records
from biotf.data.split import is_validation

__all__ = [
    "FORMATS", "IGNORE_INDEX", "LONG_POLICIES", "OBJECTIVES", "LengthGroupedBatchSampler", "LongSequenceStats",
    "MLMCollator", "PackedBlockDataset", "PreparedData", "ReaderOptions", "Record", "SequenceDataset", "ShardCache",
    "TokenShard", "detect_format", "is_validation", "pad_batch", "prepare_dataset", "read_records",
    "tokenize_to_cache", "unigram_cross_entropy",
]
