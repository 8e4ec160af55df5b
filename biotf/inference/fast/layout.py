"""How weight matrices lie in memory: the layout that decodes fastest on the device they are on.

A linear layer computes x @ W.T with W of shape (out, in). Decoding multiplies one row per sequence by
every matrix of the model, a memory-bound product that reads each weight once per token. In PyTorch's
usual row-major layout the CPU's BLAS runs it as a transposed matrix-vector product; stored transposed
(W.T contiguous; shape and values unchanged) it is a plain product that streams at about twice the
bandwidth. Batches of hundreds of rows run about as fast either way (a training step slightly slower
transposed), so models are built and trained row-major and arranged by `optimize_for_decoding`.

Only where it was measured faster: float32 on CPU (bfloat16 matrices are much slower transposed on CPUs
without native bf16, oneDNN's reference path). The matrices are every linear layer's weight and the token
embedding when it is also the LM head (a lookup reads the transposed table fine). Only strides change:
values, parameter identities and state-dict keys do not, and files are written `.contiguous()`.
Figures: docs/benchmarks.md.
"""

from __future__ import annotations

import functools
from pathlib import Path

import torch
from torch import nn


def transposed_is_faster(device: torch.device, dtype: torch.dtype) -> bool:
    """Whether matrices of `dtype` on `device` decode faster stored transposed (see the module docstring)."""
    return device.type == "cpu" and dtype == torch.float32


def decode_layout(weight: torch.Tensor, dtype: torch.dtype | None = None) -> torch.Tensor:
    """`weight` (out, in) converted to `dtype` in the layout its device decodes fastest: itself when it already
    is, else one copy (a loader converts dtype and layout in that single pass: `loaded_in_decode_layout`)."""
    dtype = dtype or weight.dtype
    transposed = transposed_is_faster(weight.device, dtype)
    in_layout = weight.t().is_contiguous() if transposed else weight.is_contiguous()
    if in_layout and weight.dtype == dtype:
        return weight
    if transposed:
        return torch.empty(weight.shape[::-1], dtype=dtype, device=weight.device).t().copy_(weight)
    return torch.empty(weight.shape, dtype=dtype, device=weight.device).copy_(weight)


def loaded_in_decode_layout(model: nn.Module, name: str, source: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """A `Transformer.from_hf(materialise=...)` that reads each decode matrix straight into `decode_layout`: converting
    the dtype (a bf16 checkpoint read as float32) and then the layout would hold two copies of the largest."""
    return decode_layout(source, dtype) if name in decode_matrix_names(model) else source.to(dtype)


def decode_matrix_names(model: nn.Module) -> set[str]:
    """Parameter names of the matrices decoding multiplies by: linear weights, and the embedding when the
    transformer has no LM head of its own (a tied head multiplies by the embedding)."""
    names = {f"{name}.weight" for name, module in model.named_modules() if isinstance(module, nn.Linear)}
    if getattr(model, "lm_head", None) is None and hasattr(model, "embed"):
        names.add("embed.weight")
    return names


@functools.cache
def last_level_cache_bytes() -> int:
    """Size of CPU 0's largest cache (Linux sysfs, read once per process); 32 MiB where it cannot be read."""
    units = {"K": 2**10, "M": 2**20, "G": 2**30}
    sizes = []
    for index in Path("/sys/devices/system/cpu/cpu0/cache").glob("index*"):
        try:
            text = (index / "size").read_text().strip()
        except OSError:
            continue
        sizes.append(int(text[:-1]) * units[text[-1]] if text[-1] in units else int(text))
    return max(sizes, default=32 * 2**20)


def arrange_for_decoding(model: nn.Module) -> bool:
    """Put `model`'s decode matrices into `decode_layout` in place (values unchanged; a no-op when they are);
    returns whether they outgrow the last-level cache, i.e. stream from memory on every token."""
    parameters = dict(model.named_parameters())
    matrices = [parameters[name] for name in decode_matrix_names(model)]
    with torch.inference_mode(False), torch.no_grad():  # plain tensors, trainable afterwards
        for parameter in matrices:
            arranged = decode_layout(parameter.data)
            if arranged is not parameter.data:
                parameter.data = arranged
    return sum(p.nbytes for p in matrices) > last_level_cache_bytes()
