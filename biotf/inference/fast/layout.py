"""How weight matrices lie in memory: the layout that decodes fastest on the device they are on.

A linear layer computes x @ W.T with W of shape (out, in). Decoding multiplies one row per sequence by
every matrix of the model, a memory-bound product that reads each weight once per token. In PyTorch's
usual row-major layout the CPU's BLAS runs it as a transposed matrix-vector product; stored transposed
(W.T contiguous; shape and values unchanged) it is a plain product that streams at about twice the
bandwidth. Batches of hundreds of rows run about as fast either way (a training step slightly slower
transposed), so models are built and trained row-major and arranged by `optimize_for_decoding`.

Only where the decoding plan measured it faster on this machine (`plan.py`; its fixed choice: float32 on CPU, as
bfloat16 matrices are much slower transposed on CPUs without native bf16, oneDNN's reference path). The matrices
are every linear layer's weight and the token embedding when it is also the LM head (a lookup reads the transposed table fine). Only strides change:
values, parameter identities and state-dict keys do not, and files are written `.contiguous()`.
Figures: docs/benchmarks.md.
"""

from __future__ import annotations

from collections import Counter

import torch
from torch import nn

from biotf.inference.fast.plan import DecodePlan, decode_plan, fixed_plan, last_level_cache_bytes
from biotf.heap import release_free_heap
from biotf.model import Transformer, TransformerConfig


def decode_layout(weight: torch.Tensor, dtype: torch.dtype | None = None,
                  transposed: bool | None = None) -> torch.Tensor:
    """`weight` (out, in) converted to `dtype`, stored transposed or not as the plan says (`transposed`; None: the
    fixed plan's choice on a CPU): itself when it already is, else one copy (a loader converts dtype and layout in
    that single pass: `loaded_in_decode_layout`)."""
    dtype = dtype or weight.dtype
    if transposed is None:
        transposed = weight.device.type == "cpu" and fixed_plan(dtype).transposed
    in_layout = weight.t().is_contiguous() if transposed else weight.is_contiguous()
    if in_layout and weight.dtype == dtype:
        return weight
    if transposed:
        return torch.empty(weight.shape[::-1], dtype=dtype, device=weight.device).t().copy_(weight)
    return torch.empty(weight.shape, dtype=dtype, device=weight.device).copy_(weight)


def loaded_in_decode_layout(model: nn.Module, name: str, source: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """A `Transformer.from_hf(materialise=...)` that reads each decode matrix straight into `decode_layout`: converting
    the dtype (a bf16 checkpoint read as float32) and then the layout would hold two copies of the largest."""
    if name not in decode_matrix_names(model):
        return source.to(dtype)
    # The plan is cached: a loader times it before reading any weight (`plan_before_loading`), else it is timed here.
    return decode_layout(source, dtype, model_plan(model, dtype, source.device).transposed)


def plan_before_loading(config: TransformerConfig, dtype: torch.dtype) -> DecodePlan:
    """Time now, on the CPU, the plan `loaded_in_decode_layout` reads a model of `config` into (`decode_plan` caches
    it). A loader calls it before reading any weight, so that the plan's test matrices are freed before the
    checkpoint's tensors fill memory: timed at the first matrix read they sat on top of every source tensor
    (docs/benchmarks.md, "Generation and loading")."""
    with torch.device("meta"):
        shape = Transformer(config)
    plan = model_plan(shape, dtype, torch.device("cpu"))
    release_free_heap()  # the test matrices' pages, which glibc's heap would otherwise keep under the weights
    return plan


def model_plan(model: nn.Module, dtype: torch.dtype | None = None, device: torch.device | None = None) -> DecodePlan:
    """The decoding plan (`plan.py`) for `model`'s decode matrices in `dtype` on `device` (default: theirs), timed on
    the shape that holds most of their bytes (a decoder's MLP matrices, usually)."""
    parameters = dict(model.named_parameters())
    matrices = [parameters[name] for name in decode_matrix_names(model)]
    dtype, device = dtype or matrices[0].dtype, device or matrices[0].device
    itemsize = torch.finfo(dtype).bits // 8
    bytes_by_shape = Counter()
    for matrix in matrices:
        bytes_by_shape[tuple(matrix.shape)] += matrix.numel() * itemsize
    (out_features, in_features), _ = bytes_by_shape.most_common(1)[0]
    return decode_plan(dtype, device, out_features, in_features, sum(bytes_by_shape.values()))


def decode_matrix_names(model: nn.Module) -> set[str]:
    """Parameter names of the matrices decoding multiplies by: linear weights, and the embedding when the
    transformer has no LM head of its own (a tied head multiplies by the embedding)."""
    names = {f"{name}.weight" for name, module in model.named_modules() if isinstance(module, nn.Linear)}
    if getattr(model, "lm_head", None) is None and hasattr(model, "embed"):
        names.add("embed.weight")
    return names


def arrange_for_decoding(model: nn.Module, plan: DecodePlan | None = None) -> bool:
    """Put `model`'s decode matrices into the layout of `plan` (default: `model_plan(model)`) in place (values
    unchanged; a no-op when they are); returns whether they outgrow the last-level cache, i.e. stream from memory
    on every token."""
    plan = plan or model_plan(model)
    parameters = dict(model.named_parameters())
    matrices = [parameters[name] for name in decode_matrix_names(model)]
    with torch.inference_mode(False), torch.no_grad():  # plain tensors, trainable afterwards
        for parameter in matrices:
            arranged = decode_layout(parameter.data, transposed=plan.transposed and parameter.device.type == "cpu")
            if arranged is not parameter.data:
                parameter.data = arranged
    return sum(p.nbytes for p in matrices) > last_level_cache_bytes()
