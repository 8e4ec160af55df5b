"""Decoding's fast path, kept out of the model: `optimize_for_decoding(model)` returns a `DecodingModel`.

    decoder = optimize_for_decoding(model)   # converts model in place, returns the decoder over it
    ids = generate_ids(decoder, prompts)

What it changes in `model` (values, Parameters and state-dict keys stay; the model still trains and saves):
- the layout of its matrices: stored transposed where this machine's decoding plan measured it faster
  (`plan.py`, `layout.py`);
- when those matrices outgrow the last-level cache and are transposed, its nn.Linear layers become
  `StreamedLinear` (`linear.py`: split products for decoding, weight-first products for short prefills, each
  where the plan measured it faster).
Call it again after moving the model to another device or dtype. Figures: docs/benchmarks.md.
"""

from __future__ import annotations

from torch import nn

from biotf.inference.fast.decoding import DecodingModel
from biotf.inference.fast.layout import arrange_for_decoding, model_plan
from biotf.inference.fast.linear import StreamedLinear
from biotf.inference.fast.plan import DecodePlan
from biotf.model import Transformer

__all__ = ["DecodePlan", "DecodingModel", "StreamedLinear", "optimize_for_decoding"]


def optimize_for_decoding(model: Transformer | DecodingModel) -> DecodingModel:
    """`model` arranged for decoding (in place, see the module docstring), wrapped as a `DecodingModel`."""
    if isinstance(model, DecodingModel):
        model = model.model
    plan = model_plan(model)
    streamed = arrange_for_decoding(model, plan) and plan.transposed
    if streamed:
        for parent in list(model.modules()):
            for name, child in parent.named_children():
                if type(child) in (nn.Linear, StreamedLinear):  # exactly: adapters (LoRALinear) keep their forward
                    setattr(parent, name, StreamedLinear(child, plan))
    return DecodingModel(model, streamed_head=streamed, plan=plan)
