"""One transformer block: attention and MLP, each a residual branch, with norms placed per `norm_position`.

- pre  (GPT-2, Qwen2, ESM-2): x = x + attn(norm(x)); x = x + mlp(norm(x)). The stream itself is never
  normalised, so the transformer adds a final norm after the last block.
- post (Vaswani et al. 2017): x = norm(x + attn(x)); x = norm(x + mlp(x)). Every block's output is
  normalised per position, so there is no final norm.
Dropout (`config.dropout`) is applied to each branch's output before the residual add, then `residual_scale`
(ESM C's residue scaling) where it is not 1.
"""

from __future__ import annotations

import torch
from torch import nn

from biotf.model.attention import Attention
from biotf.model.bf16_linear import plus
from biotf.model.kv_cache import KVCache
from biotf.model.config import TransformerConfig
from biotf.model.mlp import build_mlp
from biotf.model.norms import build_norm


class Block(nn.Module):
    def __init__(self, config: TransformerConfig):
        super().__init__()
        self.pre_norm = config.norm_position == "pre"
        self.attn_norm = build_norm(config)
        self.attn = Attention(config)
        self.mlp_norm = build_norm(config)
        self.mlp = build_mlp(config)
        self.dropout = nn.Dropout(config.dropout) if config.dropout > 0 else None
        self.residual_scale = config.residual_scale if config.residual_scale != 1.0 else None

    def forward(self, x: torch.Tensor, rotary: tuple[torch.Tensor, ...] | None,
                mask: torch.Tensor | None, is_causal: bool, cache: KVCache | None = None,
                layer: int = 0, attentions: list[torch.Tensor] | None = None,
                rows: torch.Tensor | None = None) -> torch.Tensor:
        return self.feed_forward(self.attend(x, rotary, mask, is_causal, cache, layer, attentions, rows))

    def attend(self, x: torch.Tensor, rotary: tuple[torch.Tensor, ...] | None,
               mask: torch.Tensor | None, is_causal: bool, cache: KVCache | None = None,
               layer: int = 0, attentions: list[torch.Tensor] | None = None,
               rows: torch.Tensor | None = None) -> torch.Tensor:
        """The attention half: the stream after the attention branch (and its norm); `attentions`: see `Attention`.
        With `rows` (flat indices into batch x length), only those positions come out, (len(rows), d_model): the
        heads read every position's keys and values, the output projection and the residual run on those rows."""
        heads = self.attn.heads(self.attn_norm(x) if self.pre_norm else x, rotary, mask, is_causal, cache, layer,
                                attentions)
        if rows is not None:
            x, heads = (stream.flatten(0, 1).index_select(0, rows) for stream in (x, heads))
        return self._add_branch(x, self.attn.out, heads, self.attn_norm)

    def feed_forward(self, x: torch.Tensor) -> torch.Tensor:
        """The MLP half, position by position: it may run on some positions alone (decoding's prefill)."""
        return self._add_branch(x, self.mlp.down, self.mlp.hidden(self.mlp_norm(x) if self.pre_norm else x),
                                self.mlp_norm)

    def _add_branch(self, x: torch.Tensor, projection: nn.Module, features: torch.Tensor, norm: nn.Module
                    ) -> torch.Tensor:
        """x plus a branch's output, `projection(features)`, then `norm` when norms come after: where nothing comes
        between the projection and the add (no dropout at work, no residual scale), the add is `bf16_linear.plus`'s,
        inside the product where it can be."""
        if self.residual_scale is None and (self.dropout is None or not self.training):
            x = plus(x, projection, features)
        else:
            x = x + self._branch(projection(features))
        return x if self.pre_norm else norm(x)

    def _branch(self, y: torch.Tensor) -> torch.Tensor:
        """A residual branch's output, after dropout when there is any (no module call otherwise), times
        `residual_scale` when it is not 1."""
        y = y if self.dropout is None else self.dropout(y)
        return y if self.residual_scale is None else y * self.residual_scale
