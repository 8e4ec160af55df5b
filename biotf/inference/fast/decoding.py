"""`DecodingModel`: a causal Transformer's next-token logits, computed only where decoding needs them.

Built by `optimize_for_decoding` (or wrapped plainly by `generate_ids`). Each call runs the model over new
tokens with a KV cache and returns the logits of the last position alone: the last block's MLP, the final
norm and the LM head see that position only (attention still caches every position). This is HF's
`logits_to_keep=1`, one block further.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from biotf.errors import ConfigError
from biotf.inference.fast.plan import DecodePlan
from biotf.inference.fast.linear import streamed_linear
from biotf.model import KVCache, Transformer


class DecodingModel(nn.Module):
    """Shares the weights of `model` (no copy). `streamed_head`: the LM head's matrix streams from memory and
    is multiplied by `streamed_linear` under `plan` (both set by `optimize_for_decoding`, which says which paths
    this machine decodes fastest by; None for a plain wrap)."""

    def __init__(self, model: Transformer, streamed_head: bool = False, plan: DecodePlan | None = None):
        super().__init__()
        if not model.config.causal:
            raise ConfigError("causal", False, "true", reason="generation needs a causal (decoder) model")
        self.model, self.streamed_head, self.plan = model, streamed_head, plan

    @property
    def config(self):
        return self.model.config

    @property
    def device(self) -> torch.device:
        return self.model.device

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None,
                past_key_values: KVCache) -> torch.Tensor:
        """Logits (batch, vocab) of the last position of `input_ids`, which extend `past_key_values` (filled in
        place); `attention_mask` covers past and new tokens, or is None when no row is padded."""
        model = self.model
        inputs = model.block_inputs(input_ids, attention_mask, past_key_values)
        x = inputs.hidden
        *leading, last = model.layer_blocks
        for layer, block in enumerate(leading):
            x = block(x, inputs.rotary, inputs.mask, inputs.is_causal, inputs.cache, layer)
        x = last.attend(x, inputs.rotary, inputs.mask, inputs.is_causal, inputs.cache, len(leading))
        x = last.feed_forward(x[:, -1])
        if model.final_norm is not None:
            x = model.final_norm(x)
        if self.streamed_head:
            return streamed_linear(model.head_input(x), model.head_weight, model.lm_head_bias, self.plan)
        return F.linear(model.head_input(x), model.head_weight, model.lm_head_bias)
