"""int8 linears that keep a trained model: per-channel weights, activations smoothed per channel, biases corrected.

`set_precision(..., "int8")` (`biotf.model.precision`) replaces every plain nn.Linear of the transformer blocks with
a `SmoothedInt8Linear`, fitted on the model's own inputs (`input_statistics`: a forward of seeded in-vocabulary
sequences, the calibration batch's fitting rows, recording each linear's per-channel input maximum and mean and its
inputs' Gram matrix):

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
- **GPTQ rounding** (Frantar et al. 2023; `Int8Scheme.gptq`, `error_fed`): at the same per-row scales, the
  weights' columns are rounded in turn and each one's rounding error is spread over the columns not yet rounded, through
  the inverse of the fitting inputs' Gram matrix (in x in, one linear's at a time), so that the product's error on
  those inputs shrinks rather than the weights'. On the random ESM-2 8M shape of `bench.py inference` it took the
  gate's drift from 0.091 to 0.024 nats (seed 0) and from 0.243, refused, to 0.096 (seed 1).
- **bias correction** (Nagel et al. 2019; `Int8Scheme.bias_correction`): the rounded weights shift every output by
  (Q(W) - W) @ mean(x) on average; the bias takes that shift back, measured on the same inputs.
- **the product** (`Int8Scheme.kernel`): activations quantized per call to 8 bits with one scale and zero point over
  their range (`quantized_activations`: one pass for the range, one to quantize, the codes read in place), then
  oneDNN's int8 matmul (`torch.ops.onednn.qlinear_pointwise`, AMX-INT8 tiles or VNNI, float32 out, the bias added in
  it), where an x86 CPU has int8 dot products; elsewhere torch's dynamic quantized linear (fbgemm), with 7-bit
  activations where the CPU has no int8 dot products (its AVX2 products would saturate at 8). On a Xeon with AMX,
  on an 8,192 x 320 x 1,280 product, the oneDNN product alone ran 3.6x fp32 and fbgemm's whole dynamic linear 2.3x;
  with the activations' quantization the oneDNN linear ran 2.6x (3.0x on 8,192 x 1,280 x 320), against bf16's 4.6x
  (8.2x): quantizing the input costs about what the bf16 product saves (docs/benchmarks.md).

Measured on the random ESM-2 8M shape of `bench.py inference` (the gate's figures against fp32): per-tensor 0.99910
cosine / 0.317 nats; per-channel alone 0.99940 / 0.351 nats with 7-bit activations; per-channel with smoothing and
bias correction 0.99987 / 0.068-0.243 nats over two seeds (the drift of a random model, whose near-uniform
predictions sum over every position, sits near the gate for any 8-bit rounding: weight-only per-channel int8 gave
0.136); with GPTQ rounding 0.99989 / 0.024-0.096.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import torch
from torch import nn

from biotf.errors import check_choice

GPTQ_DAMPING, GPTQ_BLOCK = 0.01, 32  # GPTQ's damping and the columns it rounds between two products
SCALE_FLOOR = 1e-5  # smallest channel maximum the smoothing divides by (a channel never seen non-zero keeps s = 1)


KERNELS = ("onednn", "fbgemm")  # the int8 products `Int8Scheme.kernel` may name (module docstring)


@dataclass(frozen=True)
class Int8Scheme:
    """How the linears are quantized: weight scales per output channel (else one per matrix), the smoothing
    exponent `alpha` (0: no smoothing), bias correction, 8-bit activations (else 7-bit, for CPUs without VNNI), and
    the kernel of the product (`KERNELS`: oneDNN's, where the CPU has int8 dot products, else fbgemm's)."""

    per_channel: bool = True
    alpha: float = 0.5
    bias_correction: bool = True
    activation_bits: int = 8
    kernel: str = "onednn"
    gptq: bool = True

    def __post_init__(self) -> None:
        check_choice("int8 kernel", self.kernel, KERNELS)
        if self.gptq and not self.per_channel:
            raise ValueError("GPTQ rounding keeps the per-channel weight scales: it needs per_channel")

    def describe(self) -> str:
        weights = "per-channel" if self.per_channel else "per-tensor"
        smoothing = f"SmoothQuant alpha {self.alpha:g}" if self.alpha else "no smoothing"
        parts = [f"{weights} int8 weights", *(["GPTQ rounding"] if self.gptq else []), smoothing,
                 *(["bias correction"] if self.bias_correction else []),
                 f"dynamic {self.activation_bits}-bit activations ({self.kernel})"]
        return ", ".join(parts)


PER_TENSOR = Int8Scheme(per_channel=False, alpha=0.0, bias_correction=False, activation_bits=7,
                        kernel="fbgemm", gptq=False)  # torch's default


@dataclass(frozen=True)
class InputStatistics:
    """Per input channel of one linear over the fitting batch: the largest |x|, the mean x, and the Gram matrix
    sum(x x^T) over the rows (in, in; GPTQ's)."""

    absmax: torch.Tensor
    mean: torch.Tensor
    gram: torch.Tensor


def input_statistics(x: torch.Tensor) -> InputStatistics:
    """The statistics of one linear's inputs `x` (..., in) on the fitting rows."""
    x = x.detach().reshape(-1, x.shape[-1]).float().cpu()
    return InputStatistics(x.abs().amax(0), x.double().mean(0).float(), x.T @ x)


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


def error_fed(weight: torch.Tensor, quantized: torch.Tensor, gram: torch.Tensor) -> torch.Tensor:
    """`quantized`'s integers chosen again by GPTQ (Frantar et al. 2023) at its per-row scales: the columns of
    `weight` rounded in turn, each one's rounding error spread over the columns not yet rounded through the inverse
    of `gram` (the inputs' x x^T, damped by `GPTQ_DAMPING` of its mean diagonal), so that the product's error on those
    inputs shrinks rather than the weights'. Blocks of `GPTQ_BLOCK` columns: the per-column updates stay small, the
    rest is one product per block; in float64 (in float32 the second seed of `bench.py inference`'s shape drifted
    0.103 nats, refused, against 0.096; visiting the columns by decreasing input energy drifted more on both seeds).
    On one thread: thousands of small operations, which two threads on a busy machine ran 2.7x slower."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return _error_fed(weight, quantized, gram)
    finally:
        torch.set_num_threads(threads)


def _error_fed(weight: torch.Tensor, quantized: torch.Tensor, gram: torch.Tensor) -> torch.Tensor:
    scales = quantized.q_per_channel_scales()[:, None]  # float64, as the rest
    w = weight.double().clone()
    h = gram.double().clone()
    dead = h.diagonal() == 0  # an input never non-zero: its column multiplies nothing
    h[dead, dead] = 1
    w[:, dead] = 0
    h.diagonal().add_(GPTQ_DAMPING * h.diagonal().mean())
    inverse = torch.linalg.cholesky(torch.cholesky_inverse(torch.linalg.cholesky(h)), upper=True)
    codes = torch.empty_like(w)
    for start in range(0, w.shape[1], GPTQ_BLOCK):
        stop = min(start + GPTQ_BLOCK, w.shape[1])
        block, errors = w[:, start:stop].clone(), torch.empty(w.shape[0], stop - start, dtype=w.dtype)
        for i in range(stop - start):
            code = (block[:, i:i + 1] / scales).round().clamp(-127, 127)
            codes[:, start + i:start + i + 1] = code
            errors[:, i:i + 1] = (block[:, i:i + 1] - code * scales) / inverse[start + i, start + i]
            block[:, i + 1:] -= errors[:, i:i + 1] * inverse[start + i, start + i + 1:stop]
        w[:, stop:] -= errors @ inverse[start:stop, stop:]
    return torch._make_per_channel_quantized_tensor(codes.to(torch.int8), quantized.q_per_channel_scales(),
                                                    quantized.q_per_channel_zero_points(), 0)


class SmoothedInt8Linear(nn.Module):
    """nn.Linear's product for inference: x / s through a dynamic int8 linear with weights W * s quantized (module
    docstring), in oneDNN's or fbgemm's kernels (`Int8Scheme.kernel`). `input_scale` is 1 / s (None without
    smoothing)."""

    def __init__(self, linear: nn.Linear, statistics: InputStatistics, scheme: Int8Scheme):
        super().__init__()
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
        if scheme.gptq:
            quantized = error_fed(smoothed, quantized, statistics.gram / smoothing[:, None] / smoothing[None, :])
        bias = None if linear.bias is None else linear.bias.detach().float().cpu().clone()
        if scheme.bias_correction:
            shift = (quantized.dequantize() - smoothed).double() @ (statistics.mean.double() / smoothing.double())
            bias = (-shift if bias is None else bias - shift).float()
        self.register_buffer("input_scale", (1 / smoothing) if scheme.alpha else None)
        self.register_buffer("bias", bias)
        self.levels = 2 ** scheme.activation_bits - 1  # uint8 codes 0..levels
        self.kernel = scheme.kernel
        with warnings.catch_warnings():  # torch.ao's eager quantization warns of its planned move to torchao
            warnings.simplefilter("ignore")
            if self.kernel == "onednn":
                self.packed = torch.ops.onednn.qlinear_prepack(quantized.int_repr(), None)
                scales = (quantized.q_per_channel_scales() if scheme.per_channel
                          else torch.full((self.out_features,), quantized.q_scale()))
                self.register_buffer("weight_scales", scales.float())
                self.register_buffer("weight_zero_points", torch.zeros(self.out_features, dtype=torch.long))
            else:
                from torch.ao.nn.quantized.dynamic import Linear as DynamicLinear

                self.quantized = DynamicLinear(self.in_features, self.out_features, dtype=torch.qint8)
                self.quantized.set_weight_bias(quantized, bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.input_scale is not None:
            x = x * self.input_scale
        if self.kernel == "fbgemm":
            return torch.ops.quantized.linear_dynamic(x, self.quantized._packed_params._packed_params,
                                                      reduce_range=self.levels < 255)
        codes, scale, zero_point = quantized_activations(x.reshape(-1, self.in_features), self.levels)
        y = torch.ops.onednn.qlinear_pointwise(codes, scale, zero_point, self.packed, self.weight_scales,
                                               self.weight_zero_points, self.bias, 1.0, 0, torch.float32, "none",
                                               [], "")
        return y.view(*x.shape[:-1], self.out_features)

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, kernel={self.kernel}"


def quantized_activations(x: torch.Tensor, levels: int) -> tuple[torch.Tensor, float, int]:
    """`x` as uint8 codes 0..`levels` with one affine scale and zero point over its range (0 included, as torch's
    dynamic quantization chooses them): one pass for the range, one to quantize, the codes read in place."""
    low, high = (float(value) for value in torch.aminmax(x))
    low, high = min(low, 0.0), max(high, 0.0)
    scale = (high - low) / levels or 1.0
    zero_point = min(levels, max(0, round(-low / scale)))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        quantized = torch.quantize_per_tensor(x.contiguous(), scale, zero_point, torch.quint8)
    codes = torch.empty(0, dtype=torch.uint8).set_(quantized.untyped_storage(), quantized.storage_offset(),
                                                   quantized.shape, quantized.stride())
    return codes, scale, zero_point


def quantize_linears(network: nn.Module, ids: torch.Tensor, scheme: Int8Scheme) -> list[tuple[nn.Module, str,
                                                                                               nn.Linear]]:
    """Every plain nn.Linear of `network.blocks` replaced in place by a `SmoothedInt8Linear` fitted on its inputs in a
    forward of `ids`; returns (parent, name, the fp32 linear) for each, to undo. Each is fitted as soon as its inputs
    are seen, so that one Gram matrix at a time is held (a model's every in x in would be gigabytes for ESM-2 650M).
    Adapters (LoRALinear: a subclass) keep their forward, in fp32."""
    found = [(f"{path}.{name}", parent, name, child) for path, parent in network.blocks.named_modules()
             for name, child in parent.named_children() if type(child) is nn.Linear]
    fitted: dict[str, SmoothedInt8Linear] = {}

    def fit(key: str, linear: nn.Linear, inputs: tuple[torch.Tensor, ...]) -> None:
        if key in fitted:  # Transformer.encode runs each block's linears once
            raise RuntimeError(f"{key} ran twice in int8's fitting forward, which fits each linear on one call")
        fitted[key] = SmoothedInt8Linear(linear, input_statistics(inputs[0]), scheme)

    hooks = [child.register_forward_pre_hook(lambda module, inputs, key=key: fit(key, module, inputs))
             for key, _, _, child in found]
    try:
        with torch.no_grad():  # not inference_mode: the fitted buffers outlive it
            network.encode(ids.to(network.device))
    finally:
        for hook in hooks:
            hook.remove()
    for key, parent, name, _ in found:
        setattr(parent, name, fitted[key])
    return [(parent, name, child) for _, parent, name, child in found]
