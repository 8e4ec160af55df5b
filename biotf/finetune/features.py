"""A frozen trunk's features of every labelled record, computed once and cached on disk.

With `finetune.mode=frozen` the trunk never changes and runs as in inference (eval mode, no dropout), so what it
gives a record is fixed: the pooled vector (classification, regression) or each token's vector (token). Computing
them once (`TaskModel.features`; at a token head's bin resolution each token holds its bin's vector) and training the
head on them gives the same head as running the trunk at every step, at the cost of one
pass over the data instead of one per step and epoch.

They are kept under `<data.cache_dir>/trunk_features/<key>/` (values.npy, float32, one row per record or per token;
offsets.npy; a CRC-32 checked on every load), where the key hashes everything that decides them: the trunk's weights
and config, the tokenizer, every record's token ids, the pooling, the resolution and the format. Another run over the same data and
trunk (a resume, another head, another seed) reads them instead of recomputing.
"""

from __future__ import annotations

import hashlib
import json
import zlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from biotf.io.atomic import atomic_directory, save_array
from biotf.checkpoint.digest import content_crc32
from biotf.data.collators import content_mask, pad_batch
from biotf.errors import InputError
from biotf.model.heads import TaskModel
from biotf.tokenizers.base import Tokenizer

FORMAT = 1
BATCH_TOKENS = 16384  # padded tokens per trunk pass while the features are computed
VALUES_FILE, OFFSETS_FILE, INFO_FILE = "values.npy", "offsets.npy", "info.json"


@dataclass
class TrunkFeatures:
    """Row i's features: `values[offsets[i]:offsets[i + 1]]` (one row for a sequence task, one per token else)."""

    values: np.ndarray
    offsets: np.ndarray
    per_token: bool

    def __getitem__(self, row: int) -> np.ndarray:
        return self.values[self.offsets[row]:self.offsets[row + 1]]


def features_key(model: TaskModel, tokenizer: Tokenizer, token_ids: list[np.ndarray]) -> str:
    """Hash of everything that decides the features: weights, config, tokenizer, token ids, pooling, format."""
    digest = hashlib.blake2b(digest_size=16)
    trunk = model.trunk
    digest.update(json.dumps([FORMAT, trunk.config.to_dict(), tokenizer.fingerprint, model.task == "token",
                              model.pool, model.resolution], sort_keys=True, default=str).encode())
    digest.update(content_crc32(trunk.state_dict()).to_bytes(4, "little"))
    lengths = np.array([len(ids) for ids in token_ids], np.int64)
    digest.update(lengths.tobytes())
    digest.update(np.concatenate(token_ids).astype(np.int64).tobytes() if token_ids else b"")
    return digest.hexdigest()


@torch.no_grad()
def compute_features(model: TaskModel, tokenizer: Tokenizer, token_ids: list[np.ndarray]) -> TrunkFeatures:
    """The trunk's features of every record, in eval mode, in batches of similar length (sorted, so padding is
    small); the trunk's training mode is restored afterwards."""
    trunk, per_token = model.trunk, model.task == "token"
    lengths = np.array([len(ids) for ids in token_ids], np.int64)
    counts = lengths if per_token else np.ones(len(token_ids), np.int64)
    offsets = np.concatenate([[0], np.cumsum(counts)])
    values = np.zeros((int(offsets[-1]), trunk.config.d_model), np.float32)
    was_training = trunk.training
    trunk.eval()
    device = next(trunk.parameters()).device
    order = np.argsort(lengths, kind="stable")
    start = 0
    while start < len(order):
        stop = start + 1
        while stop < len(order) and (stop - start + 1) * lengths[order[stop]] <= BATCH_TOKENS:
            stop += 1
        rows = order[start:stop]
        ids, attention = (torch.from_numpy(a).to(device) for a in pad_batch([token_ids[r] for r in rows],
                                                                            tokenizer.pad_id))
        hidden = model.features(ids, attention, content_mask(ids, attention, tokenizer)).float()
        for i, row in enumerate(rows):
            values[offsets[row]:offsets[row + 1]] = (hidden[i, :lengths[row]] if per_token else hidden[i]).cpu()
        start = stop
    trunk.train(was_training)
    return TrunkFeatures(values, offsets, per_token)


def _crc(values: np.ndarray) -> int:
    return zlib.crc32(np.ascontiguousarray(values).view(np.uint8).reshape(-1))


def _load(directory: Path) -> TrunkFeatures:
    info = json.loads((directory / INFO_FILE).read_text(encoding="utf-8"))
    values = np.load(directory / VALUES_FILE, mmap_mode="r", allow_pickle=False)
    if _crc(values) != info["crc32"]:
        raise InputError(f"trunk feature cache {directory} is damaged (CRC-32 mismatch); delete it to recompute")
    return TrunkFeatures(values, np.load(directory / OFFSETS_FILE, allow_pickle=False), info["per_token"])


def cached_features(model: TaskModel, tokenizer: Tokenizer, token_ids: list[np.ndarray],
                    cache_dir: str | Path) -> tuple[TrunkFeatures, Path, bool]:
    """(features, their cache directory, whether they were read from it): read when `cache_dir` holds them, else
    computed and saved there (all or nothing, so a killed run leaves no half-written entry). Processes that compute
    one entry at once (the ranks of a distributed run, runs sharing data.cache_dir) compute the same values: the first
    to finish saves them, the others keep theirs."""
    directory = Path(cache_dir) / "trunk_features" / features_key(model, tokenizer, token_ids)
    if (directory / INFO_FILE).is_file():
        return _load(directory), directory, True
    features = compute_features(model, tokenizer, token_ids)
    try:
        with atomic_directory(directory) as staging:
            for name, array in ((VALUES_FILE, features.values), (OFFSETS_FILE, features.offsets)):
                with open(staging / name, "wb") as handle:
                    save_array(handle, array)
            info = {"format": FORMAT, "per_token": features.per_token, "crc32": _crc(features.values)}
            (staging / INFO_FILE).write_text(json.dumps(info) + "\n", encoding="utf-8")
    except InputError:  # the directory was filled meanwhile: by another process's entry (whole: it is renamed in)?
        if not (directory / INFO_FILE).is_file():
            raise
    return features, directory, False
