"""MLM batching: pad, build the attention mask, choose and corrupt the masked tokens.

Masking follows BERT (Devlin et al. 2019) as HF's DataCollatorForLanguageModeling does: each
non-special token is selected with probability `mask_probability`; of the selected, 80% become
`<mask>`, 10% a random content token (not special, not `<unk>`), 10% stay; labels hold the original id at selected
positions and -100 elsewhere. A sequence with content but no selected token gets one, so every
sequence contributes to the loss.

Overlapping k-mers (DNABERT, stride < k): neighbouring tokens share bases, so masking one k-mer
alone lets its neighbours reveal it. As in DNABERT, a selected token marks its centre base and
every k-mer containing that base is masked — a span of about k/stride tokens — and anchors are
drawn with probability mask_probability / span so that about `mask_probability` of tokens end up
selected.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from biotf.data.datasets import seeded_rng
from biotf.data.packing import next_fit_rows
from biotf.errors import ConfigError
from biotf.conventions import IGNORE_INDEX
from biotf.tokenizers.base import Tokenizer


def pad_batch(sequences: Sequence[np.ndarray], pad_id: int, multiple_of: int = 1) -> tuple[np.ndarray, np.ndarray]:
    """(ids, attention_mask) of shape (batch, longest rounded up to `multiple_of`), right-padded."""
    longest = max(len(s) for s in sequences)
    width = -(-longest // multiple_of) * multiple_of
    ids = np.full((len(sequences), width), pad_id, np.int64)
    mask = np.zeros((len(sequences), width), np.int64)
    for row, sequence in enumerate(sequences):
        ids[row, :len(sequence)] = sequence
        mask[row, :len(sequence)] = 1
    return ids, mask


def kmer_span(k: int, stride: int) -> tuple[int, int]:
    """(tokens before, tokens after) an anchor whose k-mers share the anchor's centre base.

    Token i covers bases [i*stride, i*stride + k); its centre base b = i*stride + k//2 lies in
    tokens j with j*stride <= b < j*stride + k.
    """
    return (k - 1 - k // 2) // stride, (k // 2) // stride


class MLMCollator:
    """Collate `SequenceDataset` items (or plain id arrays) into an MLM batch of torch tensors.

    Items carrying a "seed" make the masking a pure function of the batch's records and epoch
    (reproducible across resumes and worker counts); plain arrays use the collator's own generator.

    `pack_length`: packed rows (`biotf.data.packing`) of at most that many tokens instead of one record per row: the
    items, in row order as `PackedBatchSampler` lists them, are cut into rows by `next_fit_rows`, and the batch has
    `segment_ids` (0 for padding, 1, 2, ... for the records of a row) instead of `attention_mask`. Each record is
    masked alone, by a generator of its own (seed, epoch, record) (unpacked batches draw one for the batch): its
    masking does not depend on which records share its row or batch.
    """

    def __init__(self, tokenizer: Tokenizer, mask_probability: float = 0.15, mask_replace_probability: float = 0.8,
                 random_replace_probability: float = 0.1, pad_to_multiple_of: int = 1, seed: int = 0,
                 pack_length: int | None = None):
        if not 0.0 < mask_probability < 1.0:
            raise ConfigError("data.mask_probability", mask_probability, allowed="0 < p < 1")
        if mask_replace_probability < 0 or random_replace_probability < 0 \
                or mask_replace_probability + random_replace_probability > 1.0:
            raise ConfigError("data.mask_replace_probability", (mask_replace_probability, random_replace_probability),
                              allowed="two non-negative probabilities summing to at most 1")
        if tokenizer.mask_id is None or tokenizer.pad_id is None:
            raise ConfigError("tokenizer", tokenizer.kind, reason="masked-LM needs a tokenizer with <mask> and <pad>")
        self.mask_id, self.pad_id = tokenizer.mask_id, tokenizer.pad_id
        self.mask_probability = mask_probability
        self.mask_replace_probability = mask_replace_probability
        self.random_replace_probability = random_replace_probability
        self.pad_to_multiple_of = pad_to_multiple_of
        self.special = np.array(sorted(tokenizer.special_ids), np.int64)
        # Random replacements are plausible content: no special token and no <unk>.
        never_drawn = [*self.special, *([tokenizer.unk_id] if tokenizer.unk_id is not None else [])]
        self.random_pool = np.setdiff1d(np.arange(tokenizer.vocab_size), never_drawn)
        k, stride = getattr(tokenizer, "k", 1), getattr(tokenizer, "stride", 1)
        self.span = kmer_span(k, stride) if stride < k else (0, 0)
        self.generator = np.random.default_rng(seed)
        self.pack_length = pack_length

    def __call__(self, items: Sequence[dict | np.ndarray]) -> dict[str, torch.Tensor]:
        if self.pack_length is not None:
            return self.packed(items)
        if isinstance(items[0], dict):
            sequences = [item["input_ids"] for item in items]
            rng = seeded_rng(*(part for item in items for part in item["seed"]), 2)
        else:
            sequences, rng = list(items), self.generator
        ids, attention_mask = pad_batch(sequences, self.pad_id, self.pad_to_multiple_of)
        input_ids, labels = self.mask(ids, attention_mask, rng)
        return {"input_ids": torch.from_numpy(input_ids), "attention_mask": torch.from_numpy(attention_mask),
                "labels": torch.from_numpy(labels)}

    def packed(self, items: Sequence[dict]) -> dict[str, torch.Tensor]:
        """A batch of packed rows (see the class docstring): input_ids, segment_ids and labels, as wide as the
        longest row (rounded up to `pad_to_multiple_of`)."""
        sequences = [item["input_ids"] for item in items]
        rows = next_fit_rows([len(sequence) for sequence in sequences], self.pack_length)
        used = max(sum(len(sequences[i]) for i in row) for row in rows)
        width = -(-used // self.pad_to_multiple_of) * self.pad_to_multiple_of
        ids = np.full((len(rows), width), self.pad_id, np.int64)
        segments = np.zeros((len(rows), width), np.int64)
        labels = np.full((len(rows), width), IGNORE_INDEX, np.int64)
        for row, members in enumerate(rows):
            start = 0
            for number, index in enumerate(members, 1):
                sequence = sequences[index][None]
                stop = start + sequence.shape[1]
                rng = seeded_rng(*items[index]["seed"], 2)
                ids[row, start:stop], labels[row, start:stop] = (
                    part[0] for part in self.mask(sequence, np.ones_like(sequence), rng))
                segments[row, start:stop] = number
                start = stop
        return {"input_ids": torch.from_numpy(ids), "segment_ids": torch.from_numpy(segments),
                "labels": torch.from_numpy(labels)}

    def mask(self, ids: np.ndarray, attention_mask: np.ndarray,
             rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        """(corrupted ids, labels) for a padded batch; `ids` is not modified."""
        candidates = (attention_mask == 1) & ~np.isin(ids, self.special)
        before, after = self.span
        anchor_probability = self.mask_probability / (before + after + 1)
        selected = candidates & (rng.random(ids.shape) < anchor_probability)
        # Rows with content but nothing selected get one random candidate.
        empty = candidates.any(axis=1) & ~selected.any(axis=1)
        for row in np.flatnonzero(empty):
            selected[row, rng.choice(np.flatnonzero(candidates[row]))] = True
        if before or after:
            spread = selected.copy()
            for shift in range(-before, after + 1):  # token j is masked by an anchor i with j - i == shift
                if shift > 0:
                    spread[:, shift:] |= selected[:, :-shift]
                elif shift < 0:
                    spread[:, :shift] |= selected[:, -shift:]
            selected = spread & candidates
        labels = np.where(selected, ids, IGNORE_INDEX)
        draw = rng.random(ids.shape)
        to_mask = selected & (draw < self.mask_replace_probability)
        to_random = selected & ~to_mask & (draw < self.mask_replace_probability + self.random_replace_probability)
        corrupted = ids.copy()
        corrupted[to_mask] = self.mask_id
        corrupted[to_random] = rng.choice(self.random_pool, size=int(to_random.sum()))
        return corrupted, labels


def content_mask(ids: torch.Tensor, attention_mask: torch.Tensor, tokenizer: Tokenizer) -> torch.Tensor:
    """Real tokens that are not special tokens: what sequence heads pool and token heads are scored on."""
    special = torch.tensor(sorted(tokenizer.special_ids), dtype=ids.dtype, device=ids.device)
    return attention_mask.bool() & ~torch.isin(ids, special)
