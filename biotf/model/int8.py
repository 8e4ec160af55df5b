"""int8 linears that keep a trained model: per-channel weights, activations smoothed per channel, biases corrected.

`set_precision(..., "int8")` (`biotf.model.precision`) replaces every plain nn.Linear of the transformer blocks with
a `SmoothedInt8Linear`, fitted on the model's own inputs (`input_statistics`: a forward of seeded in-vocabulary
sequences, the calibration batch's fitting rows, recording each linear's per-channel input maximum and mean):

- **weights per output channel** (`Int8Scheme.per_channel`): one symmetric scale per row, so a row of small weights
  is not rounded to a few levels because another row is large (one scale per matrix refused a real ESM-2 8M at
  cosine 0.988, and the random ESM-2 8M shape of `bench.py inference` at 0.317 nats of drift).
- **activation smoothing** (SmoothQuant, Xiao et al. 2023; `Int8Scheme.alpha`): the activations are quantized per
  call with one scale per tensor, so an input channel with outliers (as real ESM-2 checkpoints have) coarsens every
  other channel. Each input channel j is divided by s_j = max|X_j|^alpha / max|W_j|^(1 - alpha) and the weights'
  column j multiplied by it: the same product, its range moved from the activations into the per-channel weights.
  alpha is 0.5 for every model. The best value differs between models (on a small model trained here with
  outliers, 0.5 drifted 0.208 nats where 0.75 drifted 0.033; on the random ESM-2 8M shape 0.4 drifted 0.043 and 0.75
  0.164), but choosing it on the fitting rows, by their drift or by their hidden states' squared error, picked
  values that drifted more on the gate's rows than 0.5 did.
- **bias correction** (Nagel et al. 2019; `Int8Scheme.bias_correction`): the rounded weights shift every output by
  (Q(W) - W) @ mean(x) on average; the bias takes that shift back, measured on the same inputs.
- **the product**: torch's dynamic quantized linear (`torch.ops.quantized.linear_dynamic`, fbgemm, VNNI where the
  CPU has it), activations quantized per call to 8 bits (7 without VNNI: fbgemm's AVX2 products would saturate).

Measured on the random ESM-2 8M shape of `bench.py inference` (the gate's figures against fp32): per-tensor 0.99910
cosine / 0.317 nats; per-channel alone 0.99940 / 0.351 nats with 7-bit activations; this scheme 0.99990 /
about 0.1 nats (the drift of a random model, whose near-uniform predictions sum over every position, sits at the gate
for any 8-bit rounding of its weights: weight-only per-channel int8 gave 0.136). On a Xeon with AMX, one product
ran 1.8x fp32 against bf16's 5x, yet the whole embedding ran 3.27x `transformers` fp32 against bf16's 2.60x, in one
run on a loaded machine (docs/benchmarks.md: attention, norms and the stream stay fp32 here).
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from dataclasses import dataclass

import torch
from torch import nn

SCALE_FLOOR = 1e-5  # smallest channel maximum the smoothing divides by (a channel never seen non-zero keeps s = 1)


@dataclass(frozen=True)
class Int8Scheme:
    """How the linears are quantized: weight scales per output channel (else one per matrix), the smoothing
    exponent `alpha` (0: no smoothing), bias correction, and 8-bit activations (else 7-bit, for CPUs without VNNI)."""

    per_channel: bool = True
    alpha: float = 0.5
    bias_correction: bool = True
    activation_bits: int = 8

    def describe(self) -> str:
        weights = "per-channel" if self.per_channel else "per-tensor"
        smoothing = f"SmoothQuant alpha {self.alpha:g}" if self.alpha else "no smoothing"
        parts = [f"{weights} int8 weights", smoothing, *(["bias correction"] if self.bias_correction else []),
                 f"dynamic {self.activation_bits}-bit activations (fbgemm)"]
        return ", ".join(parts)


PER_TENSOR = Int8Scheme(per_channel=False, alpha=0.0, bias_correction=False, activation_bits=7)  # torch's default


@dataclass(frozen=True)
class InputStatistics:
    """Per input channel of one linear over the fitting batch: the largest |x| and the mean x."""

    absmax: torch.Tensor
    mean: torch.Tensor


def input_statistics(network: nn.Module, linears: Mapping[str, nn.Linear], ids: torch.Tensor) -> dict[str,
                                                                                                    InputStatistics]:
    """Each of `linears`' input statistics over a forward of `network` (a `Transformer`) on `ids`."""
    absmax, total, rows, hooks = {}, {}, {}, []

    def record(name: str, inputs: tuple[torch.Tensor, ...]) -> None:
        x = inputs[0].detach().reshape(-1, inputs[0].shape[-1])
        absmax[name] = torch.maximum(absmax.get(name, torch.zeros(x.shape[1])), x.abs().amax(0).float().cpu())
        total[name] = total.get(name, 0) + x.double().sum(0).cpu()
        rows[name] = rows.get(name, 0) + x.shape[0]

    for name, linear in linears.items():
        hooks.append(linear.register_forward_pre_hook(lambda _, inputs, name=name: record(name, inputs)))
    try:
        with torch.inference_mode():
            network.encode(ids.to(network.device))
    finally:
        for hook in hooks:
            hook.remove()
    return {name: InputStatistics(absmax[name], (total[name] / rows[name]).float()) for name in absmax}


def quantized_weight(weight: torch.Tensor, per_channel: bool) -> torch.Tensor:
    """`weight` as a qint8 tensor, symmetric, with one scale per output row or one for the matrix (the form
    fbgemm's packing takes; torch warns that quantized tensors will move to torchao)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if per_channel:
            scales = weight.abs().amax(1).clamp(min=torch.finfo(torch.float32).tiny) / 127
            return torch.quantize_per_channel(weight, scales.double(), torch.zeros(len(scales), dtype=torch.long), 0,
                                              torch.qint8)
        return torch.quantize_per_tensor(weight, max(float(weight.abs().max()) / 127, 1e-12), 0, torch.qint8)


class SmoothedInt8Linear(nn.Module):
    """nn.Linear's product for inference: x / s through torch's dynamic int8 linear with weights W * s quantized
    (module docstring). `input_scale` is 1 / s (None without smoothing)."""

    def __init__(self, linear: nn.Linear, statistics: InputStatistics, scheme: Int8Scheme):
        super().__init__()
        from torch.ao.nn.quantized.dynamic import Linear as DynamicLinear

        self.in_features, self.out_features = linear.in_features, linear.out_features
        weight = linear.weight.detach().float().cpu()
        smoothing = torch.ones(self.in_features)
        if scheme.alpha:
            seen = statistics.absmax > 0
            ratio = (statistics.absmax.clamp(min=SCALE_FLOOR) ** scheme.alpha
                     / weight.abs().amax(0).clamp(min=SCALE_FLOOR) ** (1 - scheme.alpha))
            smoothing = torch.where(seen, ratio.clamp(min=SCALE_FLOOR), smoothing)
        smoothed = weight * smoothing
        quantized = quantized_weight(smoothed, scheme.per_channel)
        bias = None if linear.bias is None else linear.bias.detach().float().cpu().clone()
        if scheme.bias_correction:
            shift = (quantized.dequantize() - smoothed).double() @ (statistics.mean.double() / smoothing.double())
            bias = (-shift if bias is None else bias - shift).float()
        self.register_buffer("input_scale", (1 / smoothing) if scheme.alpha else None)
        self.reduce_range = scheme.activation_bits < 8
        with warnings.catch_warnings():  # torch.ao's eager quantization warns of its planned move to torchao
            warnings.simplefilter("ignore")
            self.quantized = DynamicLinear(self.in_features, self.out_features, dtype=torch.qint8)
            self.quantized.set_weight_bias(quantized, bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.input_scale is not None:
            x = x * self.input_scale
        return torch.ops.quantized.linear_dynamic(x, self.quantized._packed_params._packed_params,
                                                  reduce_range=self.reduce_range)

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}"


def quantize_linears(network: nn.Module, ids: torch.Tensor, scheme: Int8Scheme) -> list[tuple[nn.Module, str,
                                                                                               nn.Linear]]:
    """Every plain nn.Linear of `network.blocks` replaced in place by a `SmoothedInt8Linear` fitted on a forward of
    `ids`; returns (parent, name, the fp32 linear) for each, to undo. Adapters (LoRALinear: a subclass) keep their
    forward, in fp32."""
    found = [(f"{path}.{name}", parent, name, child) for path, parent in network.blocks.named_modules()
             for name, child in parent.named_children() if type(child) is nn.Linear]
    statistics = input_statistics(network, {key: child for key, _, _, child in found}, ids)
    for key, parent, name, child in found:
        setattr(parent, name, SmoothedInt8Linear(child, statistics[key], scheme))
    return [(parent, name, child) for _, parent, name, child in found]
