"""The contact head's parameters: the logistic regression over every layer x head attention map
(`attention_contacts.py` has the method and computes with it). A module of its own because the transformer holds one
(`contact_head: true`) while `attention_contacts.py` takes the transformer."""

from __future__ import annotations

from torch import nn

from biotf.model.config import TransformerConfig


class ContactHead(nn.Module):
    """The regression: one weight per (layer, head) map, layer-major as HF and fair-esm order them, and a bias."""

    def __init__(self, config: TransformerConfig):
        super().__init__()
        self.n_layers, self.n_heads = config.n_layers, config.n_heads
        self.regression = nn.Linear(config.n_layers * config.n_heads, 1)
