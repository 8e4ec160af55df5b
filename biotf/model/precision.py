"""Inference precision: a loaded network run in fp32, bf16 or int8, and checked against fp32 before it is used.

    choice = set_precision(network, "auto", calibration_batch(...))   # converts in place, or refuses in one line
    print(choice)                                                     # precision bf16 (auto: ...; gate: ...)

- **bf16**: every weight stored in bfloat16 (`network.to(torch.bfloat16)`), so each product runs in oneDNN's bf16
  kernels (AMX or AVX512-BF16 where the CPU has them), except the LM head, computed in float32 from a float32 copy
  of its matrix (`Transformer.float_head`): bf16 logits alone drifted a pseudo-log-likelihood by ~0.2 nats over 300
  residues, the rest of the network by ~0.01. Measured against CPU autocast on an Intel Xeon with AMX (ESM-2 8M
  shape, 8 x 512 tokens): bf16 weights 1.5x fp32, autocast 1.1x (it casts every weight on every call), float32
  activations around bf16 products 0.9x (the casts). On x86 CPUs with native bf16 the blocks' linears run on
  oneDNN with the bias and the MLP's activation computed in the product (`biotf.model.bf16_linear`; the summary says
  so).
- **int8**: every nn.Linear of the transformer blocks becomes a `SmoothedInt8Linear` (`biotf.model.int8`): int8
  weights with one scale per output channel rounded by GPTQ, activations smoothed per channel (SmoothQuant) and
  quantized per call, biases corrected, all fitted on a forward of the calibration batch's fitting rows (seeded
  sequences other than the gate's); oneDNN's int8 matmul (AMX-INT8 or VNNI) where the CPU has int8 dot products,
  else torch's dynamic-quantization product (fbgemm). The embedding, the norms, attention itself, the residual
  stream, the LM head and task or contact heads stay in fp32. What was fitted is in `PrecisionChoice.scheme` (the
  summary line and `identity()`). torchao 0.18's int8 configurations were measured slower than fp32 in eager mode
  on the same CPU (0.5-0.65x on a 320 x 1280 MLP); `torch._int_mm` 1.2x and `torch._weight_int8pack_mm` 0.55x fp32
  on a 8192 x 320 x 1280 product.
- **auto** (`auto_precisions`): the first that passes the gate of bf16 where the device computes it natively (x86
  flags `amx_bf16` or `avx512_bf16`, ARM `bf16`; a CUDA device that supports bf16), then int8 where the CPU has int8
  dot products (`amx_int8`, `avx512_vnni`, `avx_vnni`, ARM `asimddp`), then fp32: bf16 was measured faster than int8
  where both are native; on a CPU with neither (an AVX2-only AMD EPYC), fp32.

**The fidelity gate** (in `set_precision`): before a reduced precision is used, the network runs a small calibration
batch (`calibration_batch`: 4 seeded sequences of up to 64 tokens over the content vocabulary, each also copied
with every 4th content position masked) in fp32 and then converted. It must keep every sequence's mean-pooled last
hidden state within `COSINE_GATE` (cosine) of fp32 and its strided pseudo-log-likelihood (each content token
masked once over the copies; causal models: its log-likelihood) within `LIKELIHOOD_GATE` nats; a network without an
LM head has no likelihoods, so it is gated on its hidden states alone and its figures say so. A precision asked
for by name that fails is refused in one line (`PrecisionError`); `auto` tries its next and says why. The cost
is two forwards of 20 x 64 tokens at load for each precision tried (int8: a third, on the fitting rows, and GPTQ's
rounding: `biotf.model.int8`; the first two not where an earlier process kept the figures for the same weights,
batch, code and device: `GateCache`), and no copy of the network: the fp32 weights are kept until the gate passes (a
bf16 network's peak is fp32 + bf16 weights, an int8 one's fp32 + int8, and one linear's inputs' Gram matrix at a
time).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Collection
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import torch
from torch import nn

from biotf.conventions import PRECISIONS
from biotf.errors import BiotfError, check_choice
from biotf.model import bf16_linear
from biotf.model.int8 import Int8Scheme, quantize_linears
from biotf.model.transformer import Transformer
from biotf.naming import given

REDUCED = ("bf16", "int8")
COSINE_GATE = {"bf16": 0.999, "int8": 0.99}  # per-record embedding cosine against fp32, at least
LIKELIHOOD_GATE = 0.1  # nats per sequence, less than: (pseudo-)log-likelihood drift against fp32
CALIBRATION_SEQUENCES, CALIBRATION_TOKENS, MASK_STRIDE = 4, 64, 4
# CPU flags of native bf16 products (x86: AMX tiles, AVX512-BF16 dot products; ARM: the BF16 extension).
X86_BF16_FLAGS = ("amx_bf16", "avx512_bf16")
NATIVE_BF16_FLAGS = (*X86_BF16_FLAGS, "bf16")
# CPU flags of native int8 dot products (x86: AMX-INT8, AVX512-VNNI, AVX-VNNI; ARM: the dot-product extension).
NATIVE_INT8_FLAGS = ("amx_int8", "avx512_vnni", "avx_vnni", "asimddp")


class PrecisionError(BiotfError):
    """A reduced precision that the fidelity gate or the device refuses for a model."""


@dataclass(frozen=True)
class Fidelity:
    """The gate's figures, each the worst over the calibration sequences, of the converted network against fp32:
    the embedding cosine, and the drift of the (pseudo-)log-likelihood in nats per sequence (None for a network
    without an LM head: it has no likelihoods, so it is gated on its hidden states alone, and says so)."""

    cosine: float
    drift: float | None
    cached: str = ""  # where the figures were read from when an earlier process measured them (`GateCache`)

    def passes(self, precision: str) -> bool:
        return self.cosine >= COSINE_GATE[precision] and (self.drift is None or self.drift < LIKELIHOOD_GATE)

    def __str__(self) -> str:
        cached = f", measured by an earlier run: {self.cached}" if self.cached else ""
        if self.drift is None:
            return f"cosine >= {self.cosine:.5f} (hidden states only: no LM head{cached})"
        return f"cosine >= {self.cosine:.5f}, log-likelihood drift <= {self.drift:.3f} nats{cached}"

    def needs(self, precision: str) -> str:
        """What the gate requires of the figures it measured."""
        cosine = f"cosine >= {COSINE_GATE[precision]}"
        return cosine if self.drift is None else f"{cosine}, log-likelihood drift < {LIKELIHOOD_GATE} nats"


@dataclass(frozen=True)
class PrecisionChoice:
    """What a network runs in (`precision`: fp32 | bf16 | int8), what was asked for, why (auto's reason, a fallback)
    and the gate's figures where one ran."""

    precision: str
    requested: str
    reason: str = ""
    fidelity: Fidelity | None = None
    scheme: str = ""  # how a reduced precision was made or computes (int8's fitting; bf16's fused products)

    def __str__(self) -> str:
        notes = [self.reason] if self.reason else []
        if self.fidelity is not None:
            notes.append(f"gate: {self.fidelity}")
        if self.scheme:
            notes.append(f"{self.precision}: {self.scheme}")
        return f"precision {self.precision}" + (f" ({'; '.join(notes)})" if notes else "")

    def identity(self) -> dict[str, str]:
        """What decides the outputs' numbers, for an output's identity: the precision and, where it says more than
        its name, how it was made and on what it was fitted (int8) or how its products run (bf16 fused on oneDNN)."""
        return {"precision": self.precision, **({"precision_scheme": self.scheme} if self.scheme else {})}


@dataclass(frozen=True)
class Calibration:
    """The gate's batch: `ids` (rows, length) with the first `sequences` rows plain and the rest masked copies;
    `masked` (rows, length) True where a copy's token is replaced by the mask (no masked copies for a causal model
    or a vocabulary without a mask: the plain rows are scored by their logits); `source` the row each came from.
    `fitting`: rows built as `ids` are from other seeded sequences, on which a conversion fits what it needs (int8's
    smoothing), so that the gate checks it on sequences it was not fitted on."""

    ids: torch.Tensor
    masked: torch.Tensor
    originals: torch.Tensor
    source: torch.Tensor
    sequences: int
    causal: bool
    fitting: torch.Tensor

    def describe_fitting(self) -> str:
        rows, length = self.fitting.shape
        return f"fitted on {rows} seeded rows of {length} tokens"


def calibration_batch(vocab_size: int, special_ids: Collection[int], max_seq_len: int | None, causal: bool,
                      mask_id: int | None = None, prefix: tuple[int, ...] = (), suffix: tuple[int, ...] = (),
                      seed: int = 0) -> Calibration:
    """`CALIBRATION_SEQUENCES` seeded sequences of content ids (every id not in `special_ids`) framed by `prefix` /
    `suffix` (e.g. <cls>, <eos>), at most `CALIBRATION_TOKENS` or `max_seq_len` tokens, each also copied
    `MASK_STRIDE` times with every `MASK_STRIDE`-th content token masked (not for a causal model, nor without a
    `mask_id`); `fitting`: the same built from the next `CALIBRATION_SEQUENCES` sequences of the seed."""
    content_ids = torch.tensor([i for i in range(vocab_size) if i not in set(special_ids)])
    length = CALIBRATION_TOKENS if max_seq_len is None else min(CALIBRATION_TOKENS, max_seq_len)
    width = max(1, length - len(prefix) - len(suffix))
    generator = torch.Generator().manual_seed(seed)
    gate, fitting = (content_ids[torch.randint(len(content_ids), (CALIBRATION_SEQUENCES, width), generator=generator)]
                     for _ in range(2))
    ids, masked, originals, source = _calibration_rows(gate, causal, mask_id, prefix, suffix, max_seq_len)
    return Calibration(ids, masked, originals, source, CALIBRATION_SEQUENCES, causal or mask_id is None,
                       _calibration_rows(fitting, causal, mask_id, prefix, suffix, max_seq_len)[0])


def _calibration_rows(content: torch.Tensor, causal: bool, mask_id: int | None, prefix: tuple[int, ...],
                      suffix: tuple[int, ...], max_seq_len: int | None) -> tuple[torch.Tensor, ...]:
    """(ids, masked, originals, source) of `calibration_batch` for the (sequences, width) content ids `content`."""
    width = content.shape[1]
    frame = lambda ids: torch.tensor(ids, dtype=torch.long).expand(CALIBRATION_SEQUENCES, len(ids))  # noqa: E731
    plain = torch.cat([frame(prefix), content, frame(suffix)], dim=1)[:, :max_seq_len]
    content_at = torch.zeros_like(plain, dtype=torch.bool)
    content_at[:, len(prefix):len(prefix) + width] = True
    rows, masked, source = [plain], [torch.zeros_like(content_at)], [torch.arange(CALIBRATION_SEQUENCES)]
    if not causal and mask_id is not None:
        positions = torch.arange(plain.shape[1]) - len(prefix)
        for offset in range(MASK_STRIDE):
            hidden = content_at & (positions % MASK_STRIDE == offset)
            rows.append(plain.masked_fill(hidden, mask_id))
            masked.append(hidden)
            source.append(torch.arange(CALIBRATION_SEQUENCES))
    return torch.cat(rows), torch.cat(masked), plain.repeat(len(rows), 1), torch.cat(source)


def _calibration_outputs(network: nn.Module, calibration: Calibration) -> tuple[torch.Tensor, torch.Tensor | None]:
    """(sequences, d_model) mean-pooled last hidden states and (sequences,) float64 log-likelihoods in nats (None
    for a network without an LM head, which has no likelihoods to drift)."""
    device = network.device
    ids = calibration.ids.to(device)
    with torch.inference_mode():
        trunk = network.encode(ids)
        pooled = trunk.last_hidden_state[:calibration.sequences].double().mean(dim=1).cpu()
        if not network.config.lm_head:
            return pooled, None
        log_probs = torch.log_softmax(network.logits(network.token_states(trunk)).double(), dim=-1).cpu()
    ids = ids.cpu()
    if calibration.causal:  # position t predicts token t + 1
        picked = log_probs[:calibration.sequences, :-1].gather(-1, ids[:calibration.sequences, 1:, None])[..., 0]
        return pooled, picked.sum(dim=1)
    picked = log_probs.gather(-1, calibration.originals[..., None])[..., 0]
    totals = torch.zeros(calibration.sequences, dtype=torch.float64)
    return pooled, totals.index_add_(0, calibration.source, (picked * calibration.masked).sum(dim=1))


def fidelity(reference: tuple[torch.Tensor, torch.Tensor | None],
             converted: tuple[torch.Tensor, torch.Tensor | None]) -> Fidelity:
    """The gate's figures between fp32 `reference` and `converted` outputs of `_calibration_outputs`."""
    cosine = torch.nn.functional.cosine_similarity(reference[0], converted[0], dim=-1)
    drift = None if reference[1] is None else float((reference[1] - converted[1]).abs().max())
    return Fidelity(float(cosine.min()), drift)


@functools.cache
def cpu_flags(path: Path = Path("/proc/cpuinfo")) -> frozenset[str]:
    """The CPU's feature flags (x86 `flags`, ARM `Features`); empty where the file is absent (not Linux)."""
    try:
        lines = path.read_text().splitlines()
    except OSError:
        return frozenset()
    line = next((line for line in lines if line.split(":")[0].strip() in ("flags", "Features")), "")
    return frozenset(line.partition(":")[2].split())


def auto_precisions(device: torch.device | str = "cpu", flags: Collection[str] | None = None) -> list[tuple[str, str]]:
    """The (precision, why) pairs `auto` tries in turn on `device`, the fastest first, ending with fp32: bf16 where the
    device computes it natively, int8 where the CPU has int8 dot products (module docstring). `flags`: the CPU's,
    default `cpu_flags()`."""
    device = torch.device(device)
    if device.type == "cuda":
        name = torch.cuda.get_device_name(device)
        if torch.cuda.is_bf16_supported():
            return [("bf16", f"auto: {name} computes bf16"), ("fp32", f"auto: fp32 on {name}")]
        return [("fp32", f"auto: {name} has no bf16")]
    if device.type != "cpu":
        return [("fp32", f"auto: fp32 on {device.type}")]
    flags = cpu_flags() if flags is None else flags
    candidates = []
    for name, native in (("bf16", NATIVE_BF16_FLAGS), ("int8", NATIVE_INT8_FLAGS)):
        found = [flag for flag in native if flag in flags]
        if found:
            candidates.append((name, f"auto: the CPU has {found[0]}"))
    if candidates:
        return candidates + [("fp32", "auto: fp32")]
    return [("fp32", f"auto: the CPU ({torch.backends.cpu.get_cpu_capability()}) has none of "
                     f"{', '.join(NATIVE_BF16_FLAGS + NATIVE_INT8_FLAGS)}")]


def int8_scheme(flags: Collection[str] | None = None) -> Int8Scheme:
    """The int8 scheme for this CPU (`flags`: default `cpu_flags()`): 8-bit activations where it has int8 dot
    products, through oneDNN's products on x86 (AMX tiles or VNNI) where torch has oneDNN, else through torch's dynamic
    quantized linear (fbgemm; on ARM its quantized engine); 7-bit ones through fbgemm's where it has none (its AVX2
    products saturate at 8)."""
    flags = cpu_flags() if flags is None else flags
    if not any(flag in flags for flag in NATIVE_INT8_FLAGS):
        return Int8Scheme(activation_bits=7, kernel="fbgemm")
    x86 = any(flag in flags for flag in NATIVE_INT8_FLAGS if flag != "asimddp")  # oneDNN's int8 matmul is x86's
    return Int8Scheme(kernel="onednn" if x86 and torch.backends.mkldnn.is_available() else "fbgemm")


Conversion = tuple[Callable[[], None], str]  # its undo, and what it did where a summary should say more than its name


def put_back(changed: list[tuple[nn.Module, str, object]]) -> None:
    """Undo a conversion's swaps: each (module, attribute, what it held) of `bf16_linear.fuse_linears` or
    `int8.quantize_linears` set back, the last first."""
    for module, attribute, held in reversed(changed):
        setattr(module, attribute, held)


def _to_bf16(network: nn.Module, calibration: Calibration) -> Conversion:
    """`network` (or a module holding it, as a task model) in bfloat16 in place, its LM head kept in float32
    (`Transformer.float_head`)."""
    trunks = [module for module in network.modules() if isinstance(module, Transformer)]
    for trunk in trunks:
        if trunk.config.lm_head:
            bias = trunk.lm_head_bias
            trunk.float_head = (trunk.head_weight.detach(), None if bias is None else bias.detach())  # the fp32 ones
    saved = [(tensor, tensor.data) for tensor in [*network.parameters(), *network.buffers()]
             if tensor.is_floating_point()]
    network.to(torch.bfloat16)
    fused = fused_bf16_linears(next(network.parameters()).device)
    changed = [change for trunk in trunks for change in bf16_linear.fuse_linears(trunk.blocks)] if fused else []

    def undo() -> None:
        put_back(changed)
        for tensor, data in saved:
            tensor.data = data
        for trunk in trunks:
            trunk.float_head = None
    return undo, "products on oneDNN with bias, activation and residual add fused" if fused else ""


def fused_bf16_linears(device: torch.device | str, flags: Collection[str] | None = None) -> bool:
    """Whether bf16's linears run fused on oneDNN (`biotf.model.bf16_linear`): on an x86 CPU with native bf16
    products (`flags`: default `cpu_flags()`) and a PyTorch with oneDNN."""
    flags = cpu_flags() if flags is None else flags
    return (torch.device(device).type == "cpu" and any(flag in flags for flag in X86_BF16_FLAGS)
            and bf16_linear.available())


def _to_int8(network: nn.Module, calibration: Calibration, scheme: Int8Scheme | None = None) -> Conversion:
    """Every plain nn.Linear of `network.blocks` replaced by an int8 one (`biotf.model.int8`, `scheme`: default
    `int8_scheme()`) fitted on `calibration.fitting`, in place."""
    scheme = scheme or int8_scheme()
    swapped = quantize_linears(network, calibration.fitting, scheme)
    return functools.partial(put_back, swapped), f"{scheme.describe()}, {calibration.describe_fitting()}"


CONVERSIONS: dict[str, Callable[[nn.Module, Calibration], Conversion]] = {"bf16": _to_bf16, "int8": _to_int8}


def check_device(precision: str, device: torch.device | str) -> None:
    """int8 runs on the CPU alone (torch's dynamic quantization has no GPU kernels)."""
    if precision == "int8" and torch.device(device).type != "cpu":
        raise PrecisionError(f"precision int8 runs on the CPU only (torch dynamic quantization); on "
                             f"{torch.device(device).type} use bf16 or fp32")


class GateCache(Protocol):
    """The gate's figures of one model and calibration batch kept across processes (`biotf.checkpoint.gate_cache`):
    `get` returns those measured for `precision` (None: measure them), `put` keeps them."""

    def get(self, precision: str) -> Fidelity | None: ...

    def put(self, precision: str, figures: Fidelity) -> None: ...


def _gated(network: nn.Module, precision: str, calibration: Calibration, converted: nn.Module | None,
           cache: GateCache | None = None) -> tuple[Fidelity, Conversion]:
    """`network` converted to `precision` in place (`converted`: the module holding it whose other weights follow for
    bf16), with the gate's figures against its fp32 outputs (or, from `cache`, those an earlier process measured for
    the same weights, calibration, code and device) and the conversion's undo and description."""
    figures = cache.get(precision) if cache is not None else None
    reference = _calibration_outputs(network, calibration) if figures is None else None
    conversion = CONVERSIONS[precision](network if precision == "int8" or converted is None else converted,
                                        calibration)
    if figures is None:
        figures = fidelity(reference, _calibration_outputs(network, calibration))
        if cache is not None:
            cache.put(precision, figures)
    return figures, conversion


def set_precision(network: nn.Module, precision: str, calibration: Calibration, model_name: str = "this model",
                  converted: nn.Module | None = None, cache: GateCache | None = None) -> PrecisionChoice:
    """Convert `network` (a float32 `Transformer`, or `converted`, a module holding it such as a task model: its
    other weights follow for bf16) to `precision` in place, once the fidelity gate on `calibration` passed (module
    docstring; `cache`: figures measured by an earlier process, which then says so); returns what runs and why. A gate
    that fails restores fp32 and raises `PrecisionError` naming `model_name`; `auto` tries its next candidate instead
    (`auto_precisions`), down to fp32, and says why."""
    check_choice("precision", precision, PRECISIONS)
    candidates = auto_precisions(network.device) if precision == "auto" else [(precision, "")]
    failed = []
    for candidate, reason in candidates:
        if candidate == "fp32":
            return PrecisionChoice("fp32", precision, "; ".join(failed) or reason)
        check_device(candidate, network.device)
        if network.embed.weight.dtype != torch.float32:
            raise PrecisionError(f"precision {candidate} converts a float32 model; {model_name} was loaded in "
                                 f"{network.embed.weight.dtype} (load it in float32)")
        figures, (undo, scheme) = _gated(network, candidate, calibration, converted, cache)
        if figures.passes(candidate):
            return PrecisionChoice(candidate, precision, "; ".join([*failed, reason]), figures, scheme)
        undo()
        gate = figures.needs(candidate)
        failed.append(f"{reason}, but {candidate} failed the gate ({figures}; needs {gate})")
    raise PrecisionError(f"precision {precision} is refused for {model_name}: against fp32 on the calibration batch "
                         f"{figures}, the gate needs {gate} (use {given('precision', 'fp32')})")
