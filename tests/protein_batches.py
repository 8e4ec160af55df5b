"""What the Hugging Face parity tests feed both sides and compare against: the padded protein batch (ESM's
vocabulary, as biotf's protein tokenizer: <cls> residues <eos> <pad>..., with <mask> tokens in two rows), and
the reference pseudo-log-likelihood, one masked position per forward (also the scoring tests' reference)."""

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


def one_mask_per_forward_pll(model, ids: torch.Tensor, mask_id: int) -> float:
    """Sum over the positions between the first and last token of `ids` (1, L) of log p(true token), each masked in
    its own forward of the masked LM `model` (a `transformers` model or a biotf Transformer: both take `input_ids`
    and return `.logits`): the textbook PLL that biotf's scorer must equal."""
    total = 0.0
    for i in range(1, ids.shape[1] - 1):
        masked = ids.clone()
        masked[0, i] = mask_id
        with torch.no_grad():
            logits = model(input_ids=masked).logits
        total += torch.log_softmax(logits[0, i].double(), -1)[ids[0, i]].item()
    return total
