"""Decoding's fast path, kept out of the model: `optimize_for_decoding(model)` returns a `DecodingModel`.

    decoder = optimize_for_decoding(model)   # converts model in place, returns the decoder over it
    ids = generate_ids(decoder, prompts)

What it changes in `model` (values, Parameters and state-dict keys stay; the model still trains and saves):
- the layout of its matrices: float32 on CPU stored transposed (`layout.py`);
- when those matrices outgrow the last-level cache, its nn.Linear layers become `StreamedLinear`
  (`linear.py`: split products for decoding, weight-first products for short prefills).
Call it again after moving the model to another device or dtype. Figures: docs/benchmarks.md.
"""

from __future__ import annotations

from torch import nn

from biotf.inference.fast.decoding import DecodingModel
from biotf.inference.fast.layout import arrange_for_decoding
from biotf.inference.fast.linear import StreamedLinear
from biotf.model import Transformer

__all__ = ["DecodingModel", "StreamedLinear", "optimize_for_decoding"]


def optimize_for_decoding(model: Transformer | DecodingModel) -> DecodingModel:
    """`model` arranged for decoding (in place, see the module docstring), wrapped as a `DecodingModel`."""
    if isinstance(model, DecodingModel):
        model = model.model
    streamed = arrange_for_decoding(model)
    if streamed:
        for parent in list(model.modules()):
            for name, child in parent.named_children():
                if type(child) is nn.Linear:  # exactly: adapters (LoRALinear) keep their own forward
                    setattr(parent, name, StreamedLinear(child))
    return DecodingModel(model, streamed_head=streamed)
