"""The language-model head: an optional masked-LM transform, the output projection and an optional logit bias.

    hidden -> [dense -> act -> norm]    (lm_head_transform: BERT, RoBERTa, ESM's `EsmLMHead`; act: lm_head_activation;
                                         with d_embed, ALBERT's, the dense maps d_model to d_embed)
           -> x @ W.T                   (W = the token embedding when tie_embeddings, else `lm_head.weight`)
           -> + bias                    (lm_head_bias: ESM's `lm_head.bias`, a vector of its own even when W is tied)

The transformer owns the projection matrix (tied or not) and the bias, so that their parameter names stay
`embed.weight` / `lm_head.weight` / `lm_head_bias`; this module is the transform alone.
"""

from __future__ import annotations

import torch
from torch import nn

from biotf.model.config import TransformerConfig
from biotf.model.mlp import ACTIVATIONS
from biotf.model.norms import build_norm


class HeadTransform(nn.Module):
    """dense (d_model -> d_model) -> activation -> norm, before the projection. The activation is GELU's exact erf
    form in ESM's and RoBERTa's heads whatever their MLP uses, and BERT's hidden_act in BERT's
    (`BertPredictionHeadTransform`)."""

    def __init__(self, config: TransformerConfig):
        super().__init__()
        self.dense = nn.Linear(config.d_model, config.embed_width, bias=config.head_transform_has_bias)
        self.norm = build_norm(config, config.embed_width, bias=config.head_transform_has_bias)
        self.activation = ACTIVATIONS[config.lm_head_activation]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.norm(self.activation(self.dense(x)))
