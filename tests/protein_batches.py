"""The padded protein batch the Hugging Face parity tests feed both sides (ESM's vocabulary, as biotf's protein
tokenizer): <cls> residues <eos> <pad>..., with <mask> tokens in two rows."""

from __future__ import annotations

import torch

PAD, MASK = 1, 32  # ESM-2's <pad> and <mask> ids (as in `build_random_esm`, tests/conftest.py)


def masked_protein_batch(left: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """Three rows of 14, 10 and 6 tokens, right-padded as biotf and HF tokenizers pad (left-padded with `left`);
    returns ids and attention mask."""
    generator = torch.Generator().manual_seed(1)
    ids = torch.randint(4, 29, (3, 14), generator=generator)
    ids[:, 0] = 0
    for row, length in enumerate((14, 10, 6)):
        ids[row, length - 1] = 2
        ids[row, length:] = PAD
        if left:
            ids[row] = ids[row].roll(14 - length)
    ids[0, 3] = ids[0, 7] = ids[1, 2] = MASK
    return ids, (ids != PAD).long()
