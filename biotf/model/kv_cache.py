"""`KVCache`: keys and values of earlier positions, so a causal model decodes one token per forward.

Each layer's keys and values live in a preallocated buffer of shape (batch, n_kv_heads, capacity,
head_dim) that doubles when full, so appending a token is a copy of one position rather than a
concatenation of the whole history. The keys are stored after RoPE (as HF does), so they never need
rotating again. The cache is filled in place by `Transformer.forward(..., past_key_values=cache,
use_cache=True)`, which also returns it; pass an `attention_mask` that covers past and new tokens
when the batch is padded.
"""

from __future__ import annotations

import torch


class KVCache:
    def __init__(self, n_layers: int, initial_capacity: int = 256):
        self.initial_capacity = initial_capacity
        self.keys: list[torch.Tensor | None] = [None] * n_layers
        self.values: list[torch.Tensor | None] = [None] * n_layers
        self.lengths = [0] * n_layers

    @property
    def seq_len(self) -> int:
        """Positions stored so far (those of layer 0, which is written first in each forward)."""
        return self.lengths[0]

    def __len__(self) -> int:
        return len(self.lengths)

    def update(self, layer: int, key: torch.Tensor, value: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Append (batch, n_kv_heads, new, head_dim) keys/values; return all of this layer's so far."""
        start, new = self.lengths[layer], key.shape[2]
        end = start + new
        buffer = self.keys[layer]
        if buffer is None or end > buffer.shape[2] or buffer.dtype != key.dtype:
            capacity = max(self.initial_capacity, 2 * end)
            shape = (key.shape[0], key.shape[1], capacity, key.shape[3])
            keys, values = key.new_empty(shape), value.new_empty(shape)
            if buffer is not None and start:
                keys[:, :, :start] = self.keys[layer][:, :, :start]
                values[:, :, :start] = self.values[layer][:, :, :start]
            self.keys[layer], self.values[layer] = keys, values
        self.keys[layer][:, :, start:end] = key
        self.values[layer][:, :, start:end] = value
        self.lengths[layer] = end
        return self.keys[layer][:, :, :end], self.values[layer][:, :, :end]
