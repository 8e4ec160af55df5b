#!/usr/bin/env python
"""biotf's GPU path checked against the same computation on the CPU, with stated tolerances (`STEP_TOLERANCES`,
`TOLERANCES`).

    python scripts/gpu_check.py --device cuda                  # every check, full sizes (what gpu_check.sh runs)
    python scripts/gpu_check.py training sdpa --device cuda    # some checks
    python scripts/gpu_check.py --device cpu --size tiny       # the same comparisons on the CPU (the tests run it)

Every check runs on --device and compares with --reference (default cpu), in float32 there:
- training: one training step (forward, the fused loss as training computes it, backward) of protein-small (masked
  LM, a padded batch of random proteins) and of gpt2-small (a 124M-parameter causal LM; dropout 0 so both sides
  compute the same thing), in float32 and in bf16-mixed (autocast, what `trainer.precision=bf16-mixed` runs): the
  loss and the gradient against the reference's float32 step from the same weights and batch. Then the bf16-mixed
  step with fused AdamW is timed, and its MFU printed against the bf16 matmul peak measured on --device
  (scripts/benchmarks/model.py's FLOP count and peak).
- ddp: 2 processes under torchrun (nccl on 2 GPUs, gloo on the CPU), each with half of the batch of a causal
  protein-small: the all-reduced gradient against the reference's one-process gradient of the whole batch; then
  `python train.py` with DDP on 2 devices in bf16-mixed (the default run, 100 steps) ends with every step done
  and a finite validation loss. Skipped where --device has fewer than 2 devices.
- fsdp: FSDP2 as `trainer.strategy=fsdp` shards a model (`biotf.training.sharding.shard_blocks`: each block, then
  the root) on 2 processes against DDP on the same 2, from the same weights on the same batches (gpt2-small's blocks
  on the protein vocabulary, 14 of them at full size: 100.0M parameters; `training_rank`, which
  `scripts/bench.py scale` runs on the CPU): every
  step's loss equal within `FSDP_LOSS_TOLERANCE`, and the peak memory per device of each printed. Then LoRA
  fine-tuning of a random protein-small under `trainer.strategy=fsdp` on the 2 devices (bf16-mixed on GPUs) ends with
  every step done, a finite validation loss and its export (merged, the adapter beside it). Skipped, saying it was
  not run, where --device has fewer than 2 devices.
- commands: `biotf embed` (plain and --packing), `score` (plain and --packing), `contacts` and `generate` (greedy)
  with --device, each against the same command with the reference's --device, on random protein-small models saved
  here (one with a contact head, one causal).
- sdpa: which scaled-dot-product-attention kernel biotf's attention runs (bf16-mixed) for rows of one length,
  padded rows, causal rows and packed rows, read from the profiler, and the same step run again with the math
  kernel forbidden (`torch.nn.attention.sdpa_kernel`): a fall-back to the math kernel fails the row.
- bench: `scripts/bench.py packing --quick --device <device>` runs to the end; its packed vs padded ratios are
  printed.
The table at the end gives PASS, FAIL or SKIP a row; the exit status is 1 if any row failed, else 0.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import csv
import importlib.util
import io
import json
import os
import platform
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import torch

SCRIPTS = Path(__file__).resolve().parent
CHECKS = ("training", "ddp", "fsdp", "commands", "sdpa", "bench")
# float32 losses of FSDP2 and DDP over a few AdamW steps: the same sums in another order (reduce-scatter of shards
# against all-reduce of whole gradients)
FSDP_LOSS_TOLERANCE = 1e-4
DDP_WORKER = "ddp-rank"  # the first argument of the processes the ddp check launches
TRAINING_WORKER = "training-rank"  # ... and of those `training_run` launches (the fsdp check, bench.py scale)
TRAINING_BATCH = (2, 128)  # each rank's batch of `training_rank`: rows x tokens of random residues
RESIDUES = np.array(list("ACDEFGHIKLMNPQRSTVWY"))


# --- what is compared, and how close it must be -------------------------------------------------------------------
@dataclass(frozen=True)
class StepTolerance:
    """How close a training step's loss and gradient must be to the reference's float32 step."""

    loss: float  # |loss - reference| / |reference| at most
    cosine: float  # cosine between the whole gradients (every parameter's, concatenated) at least
    error: float  # |gradient - reference| / |reference| (Euclidean norms of the whole gradient) at most


# float32: the same arithmetic in another order (GPU kernels, a 2-process all-reduce); torch leaves TF32 off for
# matmuls by default, and biotf does not turn it on. bf16-mixed: bf16 keeps 8 significant bits (a relative rounding
# of 2^-9), so a step moves away from float32; on the CPU (autocast, Intel Xeon with AMX, 2 cores; `training --device
# cpu` at full size) protein-small's step was off by 6e-5 (loss), cosine 0.99999, error 4e-3, and gpt2-small's by
# 4e-7, 0.99996, 9e-3: the bounds leave 5-30 times that (docs/howto/gpu_check.md).
STEP_TOLERANCES = {
    "float32": StepTolerance(loss=1e-5, cosine=0.99999, error=1e-3),
    "bf16-mixed": StepTolerance(loss=2e-3, cosine=0.999, error=0.05),
}


@dataclass(frozen=True)
class OutputTolerances:
    """How close each command's output on --device must be to the reference's (float32 on both)."""

    embedding: float = 1e-4  # max |vector - reference| over every component (LayerNorm'd states: values of order 1)
    log_likelihood: float = 1e-3  # nats per sequence
    contact: float = 1e-4  # max |probability - reference|
    tie: float = 1e-3  # greedy tokens may differ only where the reference's two logits are this close


TOLERANCES = OutputTolerances()


@dataclass(frozen=True)
class Size:
    """The models and inputs of one run: `full` on a GPU, `tiny` (the same shapes, narrow) in the test suite."""

    widths: dict  # overrides of the protein-small and gpt2-small presets (none at full size)
    clm_vocab: int | None  # gpt2-small's vocabulary (50,257 at full size)
    records: int  # proteins in a training batch and in the commands' input
    lengths: tuple[int, int]  # residues of a protein, least and most
    clm_batch: tuple[int, int]  # rows x tokens of the causal LM's batch
    prompts: tuple[str, ...]  # `biotf generate`'s prompts
    new_tokens: int
    timed_steps: int
    train_steps: int  # of `python train.py` (the default run: protein-small on the DeepLoc sample) under DDP
    train_overrides: tuple[str, ...]  # its other overrides, besides `widths` (as model.<field>=<value>)
    # seconds a child process (a torchrun launch, a `python train.py` run) may take before it is killed with every
    # process it started and its row fails: several times the longest such run at this size
    child_timeout: int


SIZES = {
    "full": Size(widths={}, clm_vocab=None, records=32, lengths=(50, 510), clm_batch=(8, 512),
                 prompts=("M", "MKT", "MSLEQ", "MAHHHHHH"), new_tokens=32, timed_steps=10, train_steps=100,
                 train_overrides=("trainer.val_check_interval=50",), child_timeout=1200),
    "tiny": Size(widths=dict(d_model=32, n_layers=2, n_heads=2, n_kv_heads=2, d_ff=64, max_seq_len=64), clm_vocab=256,
                 records=6, lengths=(5, 40), clm_batch=(2, 32), prompts=("M", "MKT"), new_tokens=6, timed_steps=2,
                 train_steps=4, train_overrides=("data.max_length=64", "data.batch_size=8",
                                                 "trainer.val_check_interval=2", "trainer.limit_val_batches=2"),
                 child_timeout=300),
}


@dataclass
class Result:
    check: str
    status: str  # PASS | FAIL | SKIP
    detail: str


def verdict(passed: bool) -> str:
    return "PASS" if passed else "FAIL"


def verdict_of(comparison: tuple[bool, str]) -> tuple[str, str]:
    """A comparison's (passed, detail) as a row's (status, detail)."""
    passed, detail = comparison
    return verdict(passed), detail


# --- models and batches -----------------------------------------------------------------------------------------
def protein_tokenizer():
    from biotf.tokenizers import build_tokenizer

    return build_tokenizer({"kind": "protein"})


def protein_config(size: Size, **fields):
    """protein-small (at `size`'s widths) for the amino-acid tokenizer."""
    from biotf.model import TransformerConfig

    tokenizer = protein_tokenizer()
    return TransformerConfig.preset("protein-small", **size.widths, **fields).for_tokenizer(tokenizer.vocab_size,
                                                                                             tokenizer.mask_id)


def clm_config(size: Size):
    """gpt2-small (at `size`'s widths), dropout 0: a step is then a function of weights and batch alone."""
    from biotf.model import TransformerConfig

    vocabulary = {} if size.clm_vocab is None else {"vocab_size": size.clm_vocab}
    return TransformerConfig.preset("gpt2-small", **size.widths, **vocabulary, dropout=0.0)


def seeded_model(config, seed: int = 0):
    from biotf.model import Transformer

    torch.manual_seed(seed)
    return Transformer(config)


def random_proteins(count: int, lengths: tuple[int, int], seed: int) -> list[str]:
    rng = np.random.default_rng(seed)
    return ["".join(rng.choice(RESIDUES, rng.integers(lengths[0], lengths[1] + 1))) for _ in range(count)]


def protein_batch(size: Size, seed: int = 0, pack_length: int | None = None) -> dict[str, torch.Tensor]:
    """A masked-LM batch of random proteins as training collates them: padded rows with an attention mask, or with
    `pack_length` packed rows with segment ids."""
    from biotf.data.collators import MLMCollator

    tokenizer = protein_tokenizer()
    encoded = tokenizer.encode_batch(random_proteins(size.records, size.lengths, seed))
    items = [{"input_ids": np.asarray(ids, np.int64), "seed": (seed, 0, i)} for i, ids in enumerate(encoded)]
    return MLMCollator(tokenizer, pack_length=pack_length)(items)


def token_batch(vocab_size: int, rows: int, length: int, seed: int = 0) -> dict[str, torch.Tensor]:
    """A causal-LM batch of random tokens, every row full (labels are the inputs: the loss shifts them)."""
    ids = torch.randint(0, vocab_size, (rows, length), generator=torch.Generator().manual_seed(seed))
    return {"input_ids": ids, "labels": ids.clone()}


def step_loss(model, batch: dict[str, torch.Tensor], precision: str) -> torch.Tensor:
    """The training loss as `LanguageModelTask` computes it (fused head and loss), under bf16 autocast for
    bf16-mixed as Lightning runs the forward."""
    from biotf.model.loss import language_model_loss

    on = {key: value.to(model.device) for key, value in batch.items()}
    with torch.autocast(model.device.type, dtype=torch.bfloat16, enabled=precision == "bf16-mixed"):
        return language_model_loss(model, on["input_ids"], on["labels"], on.get("attention_mask"), fused=True,
                                   segment_ids=on.get("segment_ids")).loss


def gradient_step(model, batch: dict[str, torch.Tensor], precision: str) -> tuple[float, dict[str, torch.Tensor]]:
    """One forward and backward in train mode: the loss and each parameter's gradient (float32, on the CPU)."""
    model.train()
    model.zero_grad(set_to_none=True)
    loss = step_loss(model, batch, precision)
    loss.backward()
    gradients = {name: parameter.grad.detach().float().cpu() for name, parameter in model.named_parameters()
                 if parameter.grad is not None}
    model.zero_grad(set_to_none=True)
    return float(loss.detach()), gradients


def compare_step(loss: float, gradients: dict[str, torch.Tensor], reference_loss: float,
                 reference: dict[str, torch.Tensor], tolerance: StepTolerance) -> tuple[bool, str]:
    """Whether a step's loss and gradients are within `tolerance` of the reference's, and the figures."""
    if gradients.keys() != reference.keys():
        return False, f"gradients of {sorted(gradients.keys() ^ reference.keys())[:3]} on one side only"
    flat = torch.cat([gradients[name].reshape(-1) for name in reference])
    expected = torch.cat([value.reshape(-1) for value in reference.values()])
    if not (np.isfinite(loss) and bool(torch.isfinite(flat).all())):
        return False, f"loss {loss} or a gradient is not finite"
    loss_error = abs(loss - reference_loss) / abs(reference_loss)
    cosine = float(torch.nn.functional.cosine_similarity(flat.double(), expected.double(), dim=0))
    error = float((flat - expected).double().norm() / expected.double().norm())
    worst, worst_cosine = min(((name, float(torch.nn.functional.cosine_similarity(
        gradients[name].reshape(-1).double(), value.reshape(-1).double(), dim=0))) for name, value in reference.items()
        if value.abs().sum() > 0), key=lambda pair: pair[1])
    passed = loss_error <= tolerance.loss and cosine >= tolerance.cosine and error <= tolerance.error
    return passed, (f"loss {loss:.5f} vs {reference_loss:.5f} (rel {loss_error:.1e} <= {tolerance.loss:g}); "
                    f"gradient cosine {cosine:.6f} >= {tolerance.cosine:g}, rel error {error:.1e} <= "
                    f"{tolerance.error:g}; least-aligned tensor {worst} ({worst_cosine:.4f})")


# --- training ---------------------------------------------------------------------------------------------------
def load_script(path: Path, name: str):
    """A script of scripts/ as a module (registered first: its dataclasses look their module up)."""
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, path)
        sys.modules[name] = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(sys.modules[name])
    return sys.modules[name]


def rate(flops_per_second: float) -> str:
    return (f"{flops_per_second / 1e12:,.1f} TFLOP/s" if flops_per_second >= 1e12
            else f"{flops_per_second / 1e9:,.2f} GFLOP/s")


def mfu(model, batch: dict[str, torch.Tensor], device: str, steps: int) -> str:
    """The bf16-mixed step with fused AdamW, timed on `device`: its median time, tokens/s and MFU against the bf16
    matmul peak measured there."""
    bench = load_script(SCRIPTS / "bench.py", "biotf_bench")
    section = bench.load_section("model")
    timer = bench.Bench(device=device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)

    def step():
        step_loss(model, batch, "bf16-mixed").backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    model.train()
    seconds = statistics.median(timer.time(step, repeats=steps, warmup=2))
    rows, length = batch["input_ids"].shape
    flops = section.training_flops(model, rows * length, length)
    peak = section.matmul_peak_flops(timer, torch.bfloat16)
    return (f"bf16-mixed step + fused AdamW {seconds * 1e3:.1f} ms (median of {steps}), "
            f"{rows * length / seconds:,.0f} tokens/s, {rate(flops / seconds)} = MFU {100 * flops / seconds / peak:.1f}% "
            f"of the measured bf16 matmul peak {rate(peak)}")


def training_checks(device: str, reference: str, size: Size, workdir: Path) -> list[Result]:
    results = []
    protein = protein_config(size)
    clm = clm_config(size)
    rows, length = size.clm_batch
    for label, config, batch in (("protein-small masked LM", protein, protein_batch(size)),
                                 ("gpt2-small causal LM", clm, token_batch(clm.vocab_size, rows, length))):
        model = seeded_model(config)
        label = f"{label} ({model.num_parameters():,} parameters)"
        reference_loss, reference_gradients = gradient_step(copy.deepcopy(model).to(reference), batch, "float32")
        model.to(device)
        for precision, tolerance in STEP_TOLERANCES.items():
            loss, gradients = gradient_step(model, batch, precision)
            results.append(Result(f"training {label} {precision} vs {reference} float32",
                                  *verdict_of(compare_step(loss, gradients, reference_loss, reference_gradients,
                                                           tolerance))))
        results.append(Result(f"training {label} MFU on {device}", "PASS", mfu(model, batch, device,
                                                                                  size.timed_steps)))
        del model
    return results


# --- child processes --------------------------------------------------------------------------------------------
class ChildTimedOut(RuntimeError):
    """A child process that ran past its timeout, killed with every process it started."""


def process_tree(pid: int) -> list[int]:
    """`pid` and every process descended from it, parents first (read from /proc: a process's parent is the 4th field
    of its stat, after the name in parentheses)."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, IndexError, ValueError):  # a process gone meanwhile
            children.setdefault(int(stat.read_text().rsplit(")", 1)[1].split()[1]), []).append(int(stat.parent.name))
    tree = [pid]
    for parent in tree:  # breadth first: the list grows as it is read
        tree.extend(children.get(parent, []))
    return tree


def last_lines(text: str | None, count: int = 3) -> str:
    return " | ".join(line.strip() for line in (text or "").strip().splitlines()[-count:])


def run_child(name: str, command: list, timeout: float, capture: bool = True,
              **options) -> subprocess.CompletedProcess:
    """`command` run as `subprocess.run` runs it (its text output captured unless `capture` is false) but never past
    `timeout` seconds: then the child and every process it started are killed, and ChildTimedOut names `name`, the
    timeout and the child's last output lines (the whole output goes to stderr). Killing the child alone would leave
    a hung rank running: torchrun starts its ranks in sessions of their own."""
    pipe = subprocess.PIPE if capture else None
    with subprocess.Popen([str(part) for part in command], stdout=pipe, stderr=pipe, text=True, **options) as child:
        try:
            stdout, stderr = child.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            for pid in process_tree(child.pid):  # every pid first: a killed parent's children are no longer its
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            stdout, stderr = child.communicate()
            sys.stderr.write((stdout or "") + (stderr or ""))
            output = (f"last stderr: {last_lines(stderr) or '(none)'}; last stdout: {last_lines(stdout) or '(none)'}"
                      if capture else "its output above")
            raise ChildTimedOut(f"{name} timed out after {timeout:g} s (killed with every process it started); "
                                f"{output}") from None
    return subprocess.CompletedProcess(child.args, child.returncode, stdout, stderr)


# --- ddp --------------------------------------------------------------------------------------------------------
def ddp_check(device: str, reference: str, size: Size, workdir: Path) -> list[Result]:
    """The 2-process all-reduced gradient of a causal protein-small (every row full, so the mean of the two halves'
    mean losses is the whole batch's) against one process on the reference."""
    from safetensors.torch import load_file, save_file

    from biotf.checkpoint import save_pretrained

    kind = torch.device(device).type  # the ranks take devices 0 and 1 of that kind
    name = f"ddp 2 processes ({'nccl' if kind == 'cuda' else 'gloo'}) vs 1 process on {reference}"
    if kind == "cuda" and torch.cuda.device_count() < 2:
        return [Result(name, "SKIP", f"needs 2 CUDA devices; torch sees {torch.cuda.device_count()}")]
    model = seeded_model(protein_config(size, causal=True))
    directory = save_pretrained(model, protein_tokenizer(), workdir / "ddp-model")
    rows, length = size.clm_batch
    batch = token_batch(model.config.vocab_size, 2 * rows, min(length, model.config.max_seq_len))
    save_file(batch, directory / "batch.safetensors")
    reference_loss, reference_gradients = gradient_step(model.to(reference), batch, "float32")
    environment = {**os.environ, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")}
    try:
        launch = run_child(f"torchrun {DDP_WORKER}", [sys.executable, "-m", "torch.distributed.run", "--standalone",
                                                      "--nproc-per-node", "2", Path(__file__).resolve(), DDP_WORKER,
                                                      directory, kind], size.child_timeout, env=environment)
    except ChildTimedOut as error:
        return [Result(name, "FAIL", str(error))]
    if launch.returncode != 0:
        sys.stderr.write(launch.stdout + launch.stderr)
        last = (launch.stderr.strip().splitlines() or ["no output"])[-1]
        return [Result(name, "FAIL", f"torchrun exit status {launch.returncode}: {last}")]
    gradients = load_file(directory / "gradients.safetensors")
    loss = json.loads((directory / "loss.json").read_text())["loss"]
    comparison = compare_step(loss, gradients, reference_loss, reference_gradients, STEP_TOLERANCES["float32"])
    return [Result(name, *verdict_of(comparison)), ddp_training_run(kind, size, workdir)]


def run_train_py(name: str, overrides: list[str], workdir: Path, timeout: float) -> Result | None:
    """`python train.py OVERRIDES` in `workdir` (one OpenMP thread a process unless OMP_NUM_THREADS says otherwise);
    the FAIL result, with the end of its stderr printed, where it exits non-zero or runs past `timeout` seconds, else
    None."""
    environment = {**os.environ, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")}
    try:
        done = run_child(f"python train.py ({name})", [sys.executable, SCRIPTS.parent / "train.py", *overrides],
                         timeout, cwd=workdir, env=environment)
    except ChildTimedOut as error:
        return Result(name, "FAIL", str(error))
    if done.returncode == 0:
        return None
    sys.stderr.write(done.stderr[-5000:])
    return Result(name, "FAIL", f"exit status {done.returncode}: {(done.stderr.strip().splitlines() or [''])[-1]}")


def ddp_training_run(kind: str, size: Size, workdir: Path) -> Result:
    """`python train.py` on 2 devices of `kind` (cuda | cpu) with DDP in bf16-mixed: every step done, a finite
    validation loss."""
    where = (["trainer=gpu", "trainer.devices=2"] if kind == "cuda"
             else ["trainer.accelerator=cpu", "trainer.devices=2", "trainer.precision=bf16-mixed"])
    run = workdir / "run"
    widths = [f"model.{key}={value}" for key, value in size.widths.items()]
    overrides = [*where, "trainer.strategy=ddp", *widths, f"trainer.max_steps={size.train_steps}",
                 *size.train_overrides, "trainer.enable_progress_bar=false",
                 f"data.cache_dir={workdir / 'cache'}", f"hydra.run.dir={run}"]
    name = f"train.py {' '.join(where)} trainer.strategy=ddp"
    failed = run_train_py(name, overrides, workdir, size.child_timeout)
    if failed is not None:
        return failed
    summary = json.loads((run / "summary.json").read_text())
    steps = size.train_steps
    passed = summary["steps"] == steps and np.isfinite(summary["final_val_loss"])
    return Result(name, verdict(passed), (
        f"{summary['steps']} of {steps} steps, {summary['tokens_seen'] / summary['train_seconds']:,.0f} tokens/s; "
        f"validation loss {summary['final_val_loss']:.3f} (unigram baseline {summary['unigram_baseline']:.3f})"))


# --- fsdp -------------------------------------------------------------------------------------------------------
def fsdp_check(device: str, reference: str, size: Size, workdir: Path) -> list[Result]:
    """FSDP2 against DDP, both on 2 processes of --device (see the module docstring); --reference is not used: the two
    strategies are each other's reference."""
    kind = torch.device(device).type
    name = f"fsdp2 2 processes ({'nccl' if kind == 'cuda' else 'gloo'}) vs ddp on the same 2"
    if kind == "cuda" and torch.cuda.device_count() < 2:
        return [Result(name, "SKIP", f"not run: needs 2 CUDA devices; torch sees {torch.cuda.device_count()}")]
    widths = {"n_layers": 14} if size.widths == {} else {"n_layers": 2, "d_model": 48, "n_heads": 4, "n_kv_heads": 4,
                                                         "d_ff": 96}
    try:
        runs = {mode: training_run(mode, widths, size.timed_steps + 1, kind, workdir, timeout=size.child_timeout)
                for mode in ("ddp", "fsdp")}
    except subprocess.CalledProcessError as error:
        sys.stderr.write((error.stdout or "") + (error.stderr or ""))
        return [Result(name, "FAIL", f"torchrun exit status {error.returncode}")]
    except ChildTimedOut as error:
        return [Result(name, "FAIL", str(error))]
    difference = float(np.max(np.abs(np.subtract(runs["fsdp"]["losses"], runs["ddp"]["losses"]))))
    unit = "GPU (max_memory_allocated)" if kind == "cuda" else "process (resident memory)"
    memory = ", ".join(f"{mode} {max(run['peak_mib']):,.0f} MiB (of which parameters, gradients and AdamW state "
                       f"{max(run['state_mib']):,.0f})" for mode, run in runs.items())
    return [Result(name, verdict(difference <= FSDP_LOSS_TOLERANCE),
                   f"{runs['ddp']['parameters'] / 1e6:.1f}M parameters, {len(runs['ddp']['losses'])} AdamW steps: "
                   f"losses differ by at most {difference:.1e} (tolerance {FSDP_LOSS_TOLERANCE:g}); peak per {unit}: "
                   f"{memory}"), fsdp_finetune_run(kind, size, workdir)]


def fsdp_finetune_run(kind: str, size: Size, workdir: Path) -> Result:
    """`python train.py experiment=finetune finetune.mode=lora trainer.strategy=fsdp` on 2 devices of `kind` (cuda:
    bf16-mixed) from a random protein-small saved here, on random proteins labelled by whether they hold a W: every
    step done, a finite validation loss, the export and its adapter written."""
    from biotf.checkpoint import save_pretrained

    base = save_pretrained(seeded_model(protein_config(size)), protein_tokenizer(), workdir / "finetune-base")
    labelled = workdir / "labelled.csv"
    with open(labelled, "w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["id", "sequence", "label"])
        for index, sequence in enumerate(random_proteins(160, size.lengths, seed=7)):
            writer.writerow([f"p{index}", sequence, "yes" if "W" in sequence else "no"])
    where = (["trainer=gpu", "trainer.devices=2"] if kind == "cuda"
             else ["trainer.accelerator=cpu", "trainer.devices=2"])
    run = workdir / "finetune-run"
    steps = size.train_steps
    overrides = ["experiment=finetune", f"init_from={base}", f"data.path={labelled}", "data.id_column=id",
                 "data.label_column=label", "finetune.mode=lora", *where, "trainer.strategy=fsdp",
                 f"trainer.max_steps={steps}", f"trainer.val_check_interval={steps // 2}", "optim.warmup_steps=1",
                 "trainer.enable_progress_bar=false", f"data.cache_dir={workdir / 'cache'}", f"hydra.run.dir={run}"]
    name = f"train.py experiment=finetune finetune.mode=lora {' '.join(where)} trainer.strategy=fsdp"
    failed = run_train_py(name, overrides, workdir, size.child_timeout)
    if failed is not None:
        return failed
    summary = json.loads((run / "finetune.json").read_text())
    exported = all((run / "model" / file).is_file() for file in ("model.safetensors", "adapter.safetensors"))
    passed = summary["steps"] == steps and np.isfinite(summary["validation"]["loss"]) and exported
    return Result(name, verdict(passed), (
        f"{summary['steps']} of {steps} steps, {summary['trainable_parameters']:,} of {summary['parameters']:,} "
        f"parameters trained; validation loss {summary['validation']['loss']:.3f}, test accuracy "
        f"{summary['test']['accuracy']:.3f}; export {'written' if exported else 'MISSING'}"))


def training_run(mode: str, widths: dict, steps: int, device: str, directory: Path,
                 batch: tuple[int, int] = TRAINING_BATCH, recompute: bool = False, timeout: float = 1800) -> dict:
    """`training_rank` on 2 processes under torchrun (one thread each): rank 0's report (every rank's figures).
    `widths`: the gpt2-small preset's fields to change (n_layers, d_model, ...); `batch`: each rank's rows x tokens;
    `recompute`: activation checkpointing (`trainer.gradient_checkpointing`). CalledProcessError where torchrun
    fails, ChildTimedOut where it runs past `timeout` seconds (the default bounds `bench.py scale`'s CPU runs)."""
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK")}
    env.update(PYTHONPATH=str(SCRIPTS.parent), OMP_NUM_THREADS="1")
    output = directory / f"{mode}.json"
    done = run_child(f"torchrun {TRAINING_WORKER} {mode}", [
        sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "--standalone",
        Path(__file__).resolve(), TRAINING_WORKER, mode, output, json.dumps(widths), steps, device,
        json.dumps([*batch, recompute])], timeout, env=env, cwd=directory)
    done.check_returncode()
    return json.loads(output.read_text())


def in_process_group(device_type: str, work: Callable[[torch.device], None]) -> int:
    """`work(device)` in a process torchrun launched (device: this rank's GPU of `device_type` cuda, else the CPU),
    inside the default process group (nccl on GPUs, gloo on the CPU); the ranks leave together (a barrier) and the
    group is destroyed only after everything `work` made is freed, on success as on an exception.

    That order keeps a rank from hanging at exit. A DistributedDataParallel wrapper still alive when the group is
    destroyed holds the group's last reference in its C++ Reducer, whose Python binding frees it without releasing
    the GIL; ProcessGroupGloo's destructor then joins gloo's worker threads while holding the GIL, and a worker that
    still holds its last collective's tensors waits for the GIL to free them: a deadlock, one rank in a futex after
    its peer exited (pytorch/pytorch#56297; the ProcessGroup's own binding releases the GIL, the Reducer's does not).
    Freed while the group lives, the Reducer drops a reference that is not the last one, and destroying the group
    frees it through the ProcessGroup's binding."""
    import gc

    import torch.distributed as distributed

    device = torch.device(device_type, int(os.environ["LOCAL_RANK"])) if device_type == "cuda" else torch.device("cpu")
    if device.type == "cuda":
        torch.cuda.set_device(device)
    distributed.init_process_group("nccl" if device.type == "cuda" else "gloo")
    try:
        work(device)
        gc.collect()  # a DDP wrapper in a reference cycle goes now, not at a later collection after the group
        distributed.barrier()  # a gloo rank torn down while its peer still works can abort it
    except BaseException as error:
        traceback.clear_frames(error.__traceback__)  # the failed frames' locals (a DDP wrapper) go before the group
        gc.collect()
        raise
    finally:
        distributed.destroy_process_group()
    return 0


def training_rank(mode: str, output: Path, widths: dict, steps: int, device: torch.device,
                  batch: tuple[int, int] = TRAINING_BATCH, recompute: bool = False) -> None:
    """One process of `training_run` (launched by torchrun, run by `in_process_group`): a ~100M-parameter model
    wrapped by DDP or sharded by `shard_blocks`, `steps` AdamW steps on this rank's random batches; rank 0 writes every
    rank's peak memory while it trains and its memory before the model was built (CUDA: allocated, the peak as CUDA
    counts it; CPU: the resident set, its peak the kernel's high-water mark VmHWM, reset once the whole model each
    rank built is freed), what it holds of the parameters, gradients and AdamW state after the last step (counted from
    the tensors: its shards under FSDP), its step time, and each step's mean loss, to `output`."""
    import ctypes
    from dataclasses import replace

    import torch.distributed as distributed
    from torch.nn.parallel import DistributedDataParallel

    from biotf.model import Transformer, TransformerConfig
    from biotf.tokenizers import AminoAcidTokenizer
    from biotf.training.sharding import shard_blocks

    rank, world = distributed.get_rank(), distributed.get_world_size()

    def memory_mib() -> float:
        """Memory in use now: allocated tensors on CUDA, the resident set on the CPU."""
        if device.type == "cuda":
            return torch.cuda.memory_allocated(device) / 2**20
        with open("/proc/self/statm") as statm:
            return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20

    def peak_mib() -> float:
        """The most memory in use since `reset_peak`: CUDA's peak allocation, the kernel's peak resident set."""
        if device.type == "cuda":
            return torch.cuda.max_memory_allocated(device) / 2**20
        with open("/proc/self/status") as status:
            return next(int(line.split()[1]) for line in status if line.startswith("VmHWM:")) / 2**10

    def reset_peak() -> None:
        if device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(device)
        else:  # glibc keeps freed memory until trimmed; writing 5 to clear_refs resets VmHWM to the resident set
            ctypes.CDLL("libc.so.6").malloc_trim(0)
            with open("/proc/self/clear_refs", "w") as clear_refs:
                clear_refs.write("5")

    def local_mib(tensor: torch.Tensor) -> float:
        """What this rank holds of a tensor: its shard of a sharded one."""
        local = tensor.to_local() if hasattr(tensor, "to_local") else tensor
        return local.numel() * local.element_size() / 2**20

    before = memory_mib()
    tokenizer = AminoAcidTokenizer()
    config = replace(TransformerConfig.preset("gpt2-small"), **widths, dropout=0.0)
    torch.manual_seed(0)  # built whole on every rank (the same weights for both modes), then sharded or wrapped
    model = Transformer(config.for_tokenizer(tokenizer.vocab_size, tokenizer.mask_id)).to(device)
    model.gradient_checkpointing = recompute
    parameters = model.num_parameters()
    if mode == "fsdp":
        shard_blocks(model, list(model.blocks))
        step_model = model
    else:
        step_model = DistributedDataParallel(model, device_ids=[device.index] if device.type == "cuda" else None)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    reset_peak()  # training's own peak, after what the whole model held before sharding is returned
    batches = torch.Generator().manual_seed(1000 + rank)
    losses, seconds = [], []
    for _ in range(steps):
        ids = torch.randint(4, 24, batch, generator=batches).to(device)
        start = time.perf_counter()
        loss = step_model(ids, labels=ids).loss
        loss.backward()
        optimizer.step()
        state = sum(local_mib(tensor) for parameter in model.parameters()
                    for tensor in (parameter, parameter.grad, *optimizer.state[parameter].values())
                    if isinstance(tensor, torch.Tensor))
        optimizer.zero_grad(set_to_none=True)
        mean = loss.detach().clone()
        distributed.all_reduce(mean)
        seconds.append(time.perf_counter() - start)
        losses.append(float(mean) / world)
    figures = torch.tensor([peak_mib(), before, state], dtype=torch.float64, device=device)
    gathered = [torch.zeros_like(figures) for _ in range(world)]
    distributed.all_gather(gathered, figures)
    if rank == 0:
        output.write_text(json.dumps({
            "mode": mode, "parameters": parameters, "peak_mib": [float(g[0]) for g in gathered],
            "before_mib": [float(g[1]) for g in gathered],
            "state_mib": [float(g[2]) for g in gathered],
            "step_seconds": statistics.median(seconds[1:] or seconds),  # the first step left out, if not alone
            "losses": losses}))


class LossOf(torch.nn.Module):
    """A model whose forward is the training loss: what DistributedDataParallel wraps (as Lightning wraps the
    LightningModule), so that its gradient hooks are armed by the forward."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        return step_loss(self.model, batch, "float32")


def ddp_rank(directory: Path, device: torch.device) -> None:
    """One process of the ddp check (launched by torchrun, run by `in_process_group`): its half of the batch, DDP's
    all-reduce, and on rank 0 the averaged gradient and the mean loss into `directory`."""
    import torch.distributed as distributed
    from safetensors.torch import load_file, save_file
    from torch.nn.parallel import DistributedDataParallel

    import biotf

    rank, world = distributed.get_rank(), distributed.get_world_size()
    model = biotf.Model.load(directory, device=device).network
    model.train()
    batch = {key: value.chunk(world)[rank] for key, value in load_file(directory / "batch.safetensors").items()}
    wrapped = DistributedDataParallel(LossOf(model), device_ids=[device.index] if device.type == "cuda" else None)
    loss = wrapped(batch)
    loss.backward()
    mean = loss.detach().clone()
    distributed.all_reduce(mean)
    if rank == 0:
        save_file({name: parameter.grad.detach().cpu().contiguous() for name, parameter in model.named_parameters()
                   if parameter.grad is not None}, directory / "gradients.safetensors")
        (directory / "loss.json").write_text(json.dumps({"loss": float(mean) / world}))


# --- commands ---------------------------------------------------------------------------------------------------
def run_biotf(arguments: list) -> tuple[int, str, str]:
    """`biotf *arguments` in this process: its exit status, stdout and stderr."""
    from biotf.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        status = main([str(argument) for argument in arguments])
    return status, out.getvalue(), err.getvalue()


def save_models(size: Size, workdir: Path) -> tuple[Path, Path]:
    """A random protein-small with a random contact head (embed, score, contacts) and a causal one (generate)."""
    from biotf.checkpoint import save_pretrained

    encoder = seeded_model(protein_config(size, contact_head=True))
    with torch.no_grad():  # built at std init_std (0.02), every probability would sit near sigmoid(0) = 0.5
        encoder.contact_head.regression.weight.normal_(0.0, 1.0)
    decoder = seeded_model(protein_config(size, causal=True), seed=1)
    return (save_pretrained(encoder, protein_tokenizer(), workdir / "encoder"),
            save_pretrained(decoder, protein_tokenizer(), workdir / "decoder"))


def compare_embeddings(output: Path, expected: Path) -> tuple[bool, str]:
    with np.load(output, allow_pickle=False) as ours, np.load(expected, allow_pickle=False) as theirs:
        vectors, reference = ours["embeddings"], theirs["embeddings"]
    if vectors.shape != reference.shape:
        return False, f"shape {vectors.shape} vs {reference.shape}"
    largest = float(np.abs(vectors - reference).max())
    cosine = float(np.min((vectors * reference).sum(1) / np.linalg.norm(vectors, axis=1)
                          / np.linalg.norm(reference, axis=1)))
    return largest <= TOLERANCES.embedding, (f"{len(vectors)} vectors: max |diff| {largest:.1e} <= "
                                             f"{TOLERANCES.embedding:g}, least cosine {cosine:.7f}")


def log_likelihoods(path: Path) -> list[float]:
    with path.open(newline="") as handle:
        return [float(row["log_likelihood"]) for row in csv.DictReader(handle)]


def compare_scores(output: Path, expected: Path) -> tuple[bool, str]:
    ours, theirs = np.array(log_likelihoods(output)), np.array(log_likelihoods(expected))
    if ours.shape != theirs.shape:
        return False, f"{len(ours)} scores vs {len(theirs)}"
    largest = float(np.abs(ours - theirs).max())
    return largest <= TOLERANCES.log_likelihood, (f"{len(ours)} pseudo-log-likelihoods (mean {theirs.mean():.1f} "
                                                  f"nats): max |diff| {largest:.1e} <= {TOLERANCES.log_likelihood:g}")


def compare_contacts(output: Path, expected: Path) -> tuple[bool, str]:
    with np.load(output, allow_pickle=False) as ours, np.load(expected, allow_pickle=False) as theirs:
        keys = sorted(key for key in theirs.files if key.startswith("contacts/"))
        if sorted(key for key in ours.files if key.startswith("contacts/")) != keys:
            return False, "other proteins"
        largest = max(float(np.abs(ours[key] - theirs[key]).max()) for key in keys)
    return largest <= TOLERANCES.contact, f"{len(keys)} maps: max |diff| {largest:.1e} <= {TOLERANCES.contact:g}"


def completions(stdout: str) -> list[str]:
    return [json.loads(line)["completion"] for line in stdout.splitlines() if line.strip()]


def greedy_tokens(model_dir: Path, prompts: tuple[str, ...], new_tokens: int, device: str):
    """The prompts' token ids as the model sees them and their greedy continuations on `device`, as
    `biotf generate` makes them."""
    import biotf
    from biotf.inference.pretrained import complete

    model = biotf.Model.load(model_dir, device=device, for_generation=True)
    decoder, defaults = model.decoding()
    return complete(decoder, model.tokenizer, defaults, list(prompts), max_new_tokens=new_tokens)


def tie_gaps(model_dir: Path, prompts: tuple[str, ...], new_tokens: int, device: str, reference: str) -> list[float]:
    """Where the greedy tokens of `device` and `reference` part, the reference's logit gap between its token and the
    device's (a near-tie may go either way in another summation order); one gap per prompt that differs."""
    import biotf

    ours = greedy_tokens(model_dir, prompts, new_tokens, device).new
    ids, theirs = greedy_tokens(model_dir, prompts, new_tokens, reference)
    model = biotf.Model.load(model_dir, device=reference)  # a plain forward, apart from the decoding layout
    gaps = []
    for prompt_ids, mine, expected in zip(ids, ours, theirs):
        where = next((t for t, (a, b) in enumerate(zip(mine, expected)) if a != b), None)
        if where is None:
            if len(mine) != len(expected):  # one side stopped (eos) where the other went on: not a tie of tokens
                gaps.append(float("inf"))
            continue
        with torch.no_grad():
            context = torch.tensor([list(prompt_ids) + list(expected[:where])], device=model.device)
            logits = model.network(context).logits[0, -1].float()
        gaps.append(float(logits[expected[where]] - logits[mine[where]]))
    return gaps


def compare_generations(stdout: str, expected: str, model_dir: Path, size: Size, device: str,
                        reference: str) -> tuple[bool, str]:
    """`biotf generate`'s JSON lines on both sides: the same completions, or parting only at near-ties."""
    ours, theirs = completions(stdout), completions(expected)
    tokens = sum(map(len, theirs))
    if ours == theirs:
        return True, f"{len(theirs)} greedy completions ({tokens} residues) identical"
    gaps = tie_gaps(model_dir, size.prompts, size.new_tokens, device, reference)
    passed = bool(gaps) and max(gaps) <= TOLERANCES.tie
    return passed, (f"{sum(a != b for a, b in zip(ours, theirs))} of {len(theirs)} completions differ; the "
                    f"reference's logit gaps where they part: {', '.join(f'{gap:.1e}' for gap in gaps)} "
                    f"(near-ties <= {TOLERANCES.tie:g} allowed)")


def command_checks(device: str, reference: str, size: Size, workdir: Path) -> list[Result]:
    encoder, decoder = save_models(size, workdir)
    proteins = workdir / "proteins.fasta"
    proteins.write_text("".join(f">p{i}\n{sequence}\n" for i, sequence in
                                enumerate(random_proteins(size.records, size.lengths, seed=2))))
    prompts = workdir / "prompts.txt"
    prompts.write_text("".join(f"{prompt}\n" for prompt in size.prompts))
    read = ["--input", proteins, "--no-progress"]
    # label: the command's arguments, its output's suffix (None: stdout), how two outputs are compared
    runs: dict[str, tuple[list, str | None, Callable[[object, object], tuple[bool, str]]]] = {
        "embed": (["embed", "--model", encoder, *read], ".npz", compare_embeddings),
        "embed --packing": (["embed", "--model", encoder, *read, "--packing"], ".npz", compare_embeddings),
        "score": (["score", "--model", encoder, *read], ".csv", compare_scores),
        "score --packing": (["score", "--model", encoder, *read, "--packing"], ".csv", compare_scores),
        "contacts": (["contacts", "--model", encoder, *read], ".npz", compare_contacts),
        "generate": (["generate", "--model", decoder, "--prompt-file", prompts, "--temperature", "0",
                      "--max-new-tokens", size.new_tokens], None,
                     lambda ours, theirs: compare_generations(ours, theirs, decoder, size, device, reference)),
    }
    results = []
    for label, (arguments, suffix, compare) in runs.items():
        name = f"biotf {label} --device {device} vs {reference}"
        written = {}
        for side, where in (("device", device), ("reference", reference)):
            output = workdir / f"{label.replace(' --', '-')}-{side}{suffix or ''}"
            status, stdout, stderr = run_biotf([*arguments, "--device", where,
                                                *(["--output", output] if suffix else [])])
            if status != 0:
                written = None
                results.append(Result(name, "FAIL", f"--device {where}: exit status {status}: "
                                                    f"{(stderr.strip().splitlines() or [''])[-1]}"))
                break
            written[side] = output if suffix else stdout
        if written is not None:
            results.append(Result(name, *verdict_of(compare(written["device"], written["reference"]))))
    return results


# --- sdpa -------------------------------------------------------------------------------------------------------
# What the profiler's aten op names say about the kernel SDPA dispatched to (forward and backward ops alike).
KERNEL_NAMES = {"flash": "flash", "efficient": "memory-efficient", "cudnn": "cuDNN", "math": "math"}


def fused_backends(device_type: str) -> list:
    """The SDPA backends other than math that `device_type` has (the CPU has a flash kernel only)."""
    from torch.nn.attention import SDPBackend

    if device_type == "cuda":
        return [SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.CUDNN_ATTENTION]
    return [SDPBackend.FLASH_ATTENTION]


def sdpa_kernels(run: Callable[[], object]) -> list[str]:
    """The SDPA kernels `run` dispatched to, by the profiler's op names."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU]) as profiler:
        run()
    names = {event.name for event in profiler.events() if "scaled_dot_product" in event.name}
    return sorted({kernel for part, kernel in KERNEL_NAMES.items() for name in names if part in name})


def sdpa_checks(device: str, reference: str, size: Size, workdir: Path) -> list[Result]:
    from torch.nn.attention import sdpa_kernel

    encoder = seeded_model(protein_config(size)).to(device)
    decoder = seeded_model(protein_config(size, causal=True)).to(device)
    longest = encoder.config.max_seq_len
    rows, length = size.clm_batch
    one_length = token_batch(encoder.config.vocab_size, rows, min(length, longest))
    one_length["attention_mask"] = torch.ones_like(one_length["input_ids"])
    cases = {"rows of one length (mask of ones)": (encoder, one_length),
             "padded rows (attention mask)": (encoder, protein_batch(size)),
             "causal rows (no mask)": (decoder, token_batch(decoder.config.vocab_size, rows, min(length, longest))),
             "packed rows (segment ids)": (encoder, protein_batch(size, pack_length=longest))}
    results = []
    for label, (model, batch) in cases.items():
        def step():
            step_loss(model, batch, "bf16-mixed").backward()
            model.zero_grad(set_to_none=True)

        model.train()
        name = f"sdpa {label} on {device}, bf16-mixed"
        kernels = sdpa_kernels(step)
        try:
            with sdpa_kernel(fused_backends(torch.device(device).type)):
                step()
        except RuntimeError as error:
            results.append(Result(name, "FAIL", f"kernels {kernels}; with math forbidden: "
                                                f"{str(error).strip().splitlines()[0]}"))
            continue
        names = ", ".join(KERNEL_NAMES[kernel] for kernel in kernels) or "none"
        passed = bool(kernels) and "math" not in kernels
        results.append(Result(name, verdict(passed), f"forward and backward ran {names}; also with math forbidden"))
    return results


# --- bench ------------------------------------------------------------------------------------------------------
def bench_check(device: str, reference: str, size: Size, workdir: Path) -> list[Result]:
    """`scripts/bench.py packing --quick --device <device>` (its output shown as it runs)."""
    output = workdir / "bench-packing.json"
    kind = torch.device(device).type  # bench.py takes cpu | cuda
    name = f"bench.py packing --quick --device {kind}"
    sys.stdout.flush()
    try:
        status = run_child(name, [sys.executable, SCRIPTS / "bench.py", "packing", "--quick", "--device", kind,
                                  "--json", output], timeout=1800, capture=False).returncode
    except ChildTimedOut as error:
        return [Result(name, "FAIL", str(error))]
    if status != 0:
        return [Result(name, "FAIL", f"exit status {status} (its output above)")]
    ratios = [f"{entry['name'].split(':')[0]} {entry['ratio']:.2f}x" for entry in
              json.loads(output.read_text())["results"] if entry.get("anchor") == "biotf padded"]
    return [Result(name, "PASS", "packed vs padded biotf: " + "; ".join(ratios))]


# --- the run ----------------------------------------------------------------------------------------------------
RUNS = {"training": training_checks, "ddp": ddp_check, "fsdp": fsdp_check, "commands": command_checks,
        "sdpa": sdpa_checks, "bench": bench_check}


@dataclass
class Report:
    device: str
    reference: str
    size: str
    machine: dict = field(default_factory=dict)
    results: list[Result] = field(default_factory=list)

    @property
    def failed(self) -> int:
        return sum(result.status == "FAIL" for result in self.results)

    def table(self) -> str:
        width = max([len(result.check) for result in self.results] + [5])
        lines = [f"{'check':{width}}  result  detail", f"{'-' * width}  ------  ------"]
        lines += [f"{result.check:{width}}  {result.status:6}  {result.detail}" for result in self.results]
        counts = {status: sum(result.status == status for result in self.results) for status in ("PASS", "FAIL",
                                                                                                 "SKIP")}
        lines.append(f"{counts['PASS']} passed, {counts['FAIL']} failed, {counts['SKIP']} skipped: --device "
                     f"{self.device} against --reference {self.reference}, {self.size} sizes")
        return "\n".join(lines)


def machine() -> dict:
    """What the figures were measured on: the CPU model and cores, the GPU, torch's version."""
    cpu = platform.processor() or platform.machine()
    with contextlib.suppress(OSError):
        cpu = next(line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                   if line.startswith("model name"))
    gpus = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())] if torch.cuda.is_available() \
        else []
    return {"cpu": cpu, "cores": os.cpu_count(), "gpus": gpus, "torch": torch.__version__,
            "cuda": torch.version.cuda}


def run_checks(checks: list[str], device: str, reference: str, size: str, workdir: Path) -> Report:
    """Every check of `checks`, each in a folder of its own under `workdir`; an exception fails its check's row
    (the traceback goes to stderr) and the others still run."""
    report = Report(device, reference, size, machine())
    for check in checks:
        print(f"== {check} ==", flush=True)
        start = time.perf_counter()
        folder = workdir / check
        folder.mkdir(parents=True, exist_ok=True)
        try:
            results = RUNS[check](device, reference, SIZES[size], folder)
        except Exception as error:  # one check's crash is its row, not the end of the run
            traceback.print_exc()
            results = [Result(check, "FAIL", f"{type(error).__name__}: {str(error).strip().splitlines()[0]}")]
        for result in results:
            print(f"{result.status} {result.check}: {result.detail}", flush=True)
        print(f"({time.perf_counter() - start:.1f} s)", flush=True)
        report.results += results
    return report


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == [DDP_WORKER]:
        return in_process_group(argv[2], lambda device: ddp_rank(Path(argv[1]), device))
    if argv[:1] == [TRAINING_WORKER]:
        rows, length, recompute = json.loads(argv[6])
        return in_process_group(argv[5], lambda device: training_rank(
            argv[1], Path(argv[2]), json.loads(argv[3]), int(argv[4]), device, (rows, length), recompute))
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("checks", nargs="*", metavar="CHECK", help=f"checks to run (default all: {', '.join(CHECKS)})")
    parser.add_argument("--device", default="cuda", help="where the checked computation runs (default cuda)")
    parser.add_argument("--reference", default="cpu", help="where the float32 reference runs (default cpu)")
    parser.add_argument("--size", choices=sorted(SIZES), default="full",
                        help="full: protein-small and gpt2-small (default); tiny: the same shapes, narrow (tests)")
    parser.add_argument("--json", type=Path, metavar="FILE", help="also write the results and the machine here")
    args = parser.parse_args(argv)
    unknown = sorted(set(args.checks) - set(CHECKS))
    if unknown:
        parser.error(f"unknown check(s) {unknown}; available: {', '.join(CHECKS)}")
    for flag, device in (("--device", args.device), ("--reference", args.reference)):
        try:
            torch.device(device)
        except RuntimeError:
            parser.error(f"{flag} {device}: not a torch device (cpu, cuda, cuda:1, ...)")
        if torch.device(device).type == "cuda" and not torch.cuda.is_available():
            parser.error(f"{flag} {device}: torch sees no CUDA device here (scripts/gpu_check.sh then runs the "
                         "checks on the CPU and says the CUDA ones were skipped)")
    info = machine()
    print(f"gpu_check: --device {args.device} against --reference {args.reference}, {args.size} sizes; CPU "
          f"{info['cpu']} ({info['cores']} cores); GPUs {info['gpus'] or 'none'}; torch {info['torch']}", flush=True)
    with tempfile.TemporaryDirectory(prefix="biotf-gpu-check-") as workdir:
        report = run_checks(list(args.checks or CHECKS), args.device, args.reference, args.size, Path(workdir))
    print("\n" + report.table(), flush=True)
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({**asdict(report), "failed": report.failed}, indent=2))
    return 1 if report.failed else 0


if __name__ == "__main__":
    sys.exit(main())
