"""Data layer: records (`biotf.io.readers`) -> token-shard cache (split by record) -> datasets -> collators.

`prepare_dataset` is the entry point training uses; `tokenize_file` lists a file's tokens (`biotf tokenize`). `splits` makes the leakage-aware train / validation / test splits of
labelled sets (fine-tuning).
"""

from biotf.lazy import lazy_exports

# name -> submodule; each is imported when first used (see biotf/lazy.py).
_EXPORTS = {
    "ShardCache": "token_cache", "TokenShard": "token_cache", "tokenize_to_cache": "token_cache", "MLMCollator": "collators",
    "pad_batch": "collators", "TRAINING_LONG_POLICIES": "long_policy", "LongPolicy": "long_policy",
    "LengthGroupedBatchSampler": "datasets", "LongSequenceStats": "datasets", "PackedBlockDataset": "datasets",
    "SequenceDataset": "datasets", "OBJECTIVES": "prepare", "PreparedData": "prepare",
    "prepare_dataset": "prepare", "unigram_cross_entropy": "prepare",
    "is_validation": "splits", "TokenizedFile": "tokenize", "tokenize_file": "tokenize",
}
__getattr__ = lazy_exports(__name__, _EXPORTS)
__all__ = sorted(_EXPORTS)
