"""Scaling out (issue 29): `biotf embed` over 2 processes under torchrun against 1 process, on the shipped DeepLoc
test proteins, each run a fresh command from start (imports, model load, reading) to the merged file.

- "2 processes": `torchrun --nproc-per-node 2 -m biotf embed` (gloo), one thread each (OMP_NUM_THREADS=1), parts of
  `PART_RECORDS` records dealt to the ranks, rank 0 merging them into the .npz;
- anchor "1 process": the plain `biotf embed` with one thread, the same records and options.
The ratio is the speed-up of a second process (target: above 1.5 on 2 free cores). A one-process run with two
threads (torch's default here) is recorded too: what the same 2 cores give without torchrun. The model is the
default run's shape (protein-small: 128 wide, 4 layers, random weights), so that the model's work, not the start of
the processes, sets the figure as it does on a real proteome; the machine's other load is printed
(`os.getloadavg`).

Then sharded training (`trainer.strategy=fsdp`): memory per process of a ~100M-parameter model (gpt2-small's blocks,
14 of them, on the protein vocabulary: 100.0M parameters; quick: 4 blocks) training with AdamW on 2 processes (gloo,
one thread each), DDP against FSDP2 sharded as biotf shards it (`biotf.training.sharding.shard_blocks`, run by
`scripts/gpu_check.py`'s worker), from the same weights on the same batches: what each rank holds of the parameters,
gradients and AdamW state (counted from its tensors), its peak resident memory while it trains (the kernel's
high-water mark VmHWM, reset once the whole model each rank built before sharding it is freed) and its growth over
the memory before the model was built, the median step time, and the largest difference between the two
runs' losses. Then long sequences under FSDP2: the same model at 4,096 tokens per sequence (one sequence per rank,
one step: its time includes FSDP2's first-step set-up; quick: 1,024 tokens), with and without activation
checkpointing (`trainer.gradient_checkpointing`, which keeps each block's input and recomputes the block in
backward): peak resident memory per rank and step time.
The same worker, on 2 GPUs, is `scripts/gpu_check.py`'s fsdp check (memory: `torch.cuda.max_memory_allocated`).

Then the largest model LoRA fine-tunes on this machine: ESM-2's shapes (150M, 650M, and 3B where the machine has the
memory for it: its float32 weights plus `LORA_MARGIN_GIB`, else recorded as that estimate; quick: 150M alone), random
float32 weights, each in a fresh process doing what a `finetune.mode=lora` run does with its model (`TaskModel` with
a classification head on the mean, adapters of rank 8 on qkv and out, AdamW on what trains), 2 steps on 2 x 256
random residues (the second one timed), without and with activation checkpointing (`trainer.gradient_checkpointing`):
the process's peak resident memory (VmHWM, from the start: building the model counts) and its step time.

Then data of any size: peak RSS and MB/s of building the token cache from a generated FASTA of 0.1, 1 and 10 GB
(quick: 0.1 and 1 GB), each in a fresh process (the data section's `preprocessing_rss`): the growth from the
smallest to the largest should stay under 50 MiB, and the rate above 50 MB/s.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import tempfile
from collections.abc import Callable
from itertools import islice
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PART_RECORDS = 128
# ESM-2's checkpoints (facebook/esm2_t30_150M_UR50D, ..._t33_650M_..., ..._t36_3B_...): layers, width, heads, MLP
ESM2_SHAPES = {"150M": (30, 640, 20, 2560), "650M": (33, 1280, 20, 5120), "3B": (36, 2560, 40, 10240)}
LORA_BATCH = (2, 256)  # rows x tokens of each LoRA step
LORA_STEPS = 2
# What a LoRA run needs besides its float32 weights: measured 2.2 GiB for 650M without activation checkpointing
# (imports included); activations grow with width x layers, 2.2 times that for 3B.
LORA_MARGIN_GIB = 5
# One LoRA fine-tuning measurement in a fresh process (argv: layers, width, heads, MLP, rows, tokens, steps,
# recompute 0/1): what `finetune.mode=lora` builds (`build_task_model`), on random weights and batches.
LORA_CHILD = """
import json, statistics, sys, time
from dataclasses import replace
import torch
from biotf.model import Transformer, TransformerConfig
from biotf.model.lora import LoRAConfig
from biotf.model.modes import build_mode
from biotf.model.heads import TaskModel

def status(field):
    with open("/proc/self/status") as handle:
        return next(int(line.split()[1]) for line in handle if line.startswith(field + ":"))

layers, width, heads, mlp, rows, length, steps, recompute = map(int, sys.argv[1:])
baseline = status("VmRSS")
config = replace(TransformerConfig.preset("esm2-8m"), n_layers=layers, d_model=width, n_heads=heads, n_kv_heads=heads,
                 d_ff=mlp, max_seq_len=length)
torch.manual_seed(0)
trunk = Transformer(config)
trunk.train()
trunk.gradient_checkpointing = bool(recompute)
model = TaskModel(trunk, "classification", 2, pool="mean")
build_mode("lora", LoRAConfig()).prepare(trunk)
trainable = [p for p in model.parameters() if p.requires_grad]
optimizer = torch.optim.AdamW(trainable, lr=1e-4)
built = status("VmHWM")
generator = torch.Generator().manual_seed(1)
seconds = []
for _ in range(steps):
    ids = torch.randint(4, 24, (rows, length), generator=generator)
    ids[:, 0], ids[:, -1] = 0, 2
    content = torch.ones(rows, length, dtype=torch.bool)
    content[:, 0] = content[:, -1] = False
    labels = torch.randint(0, 2, (rows,), generator=generator)
    start = time.perf_counter()
    model(ids, torch.ones(rows, length, dtype=torch.long), content, labels).loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    seconds.append(time.perf_counter() - start)
print(json.dumps({"parameters": trunk.num_parameters(), "trainable": sum(p.numel() for p in trainable),
                  "baseline_kib": baseline, "built_kib": built, "peak_kib": status("VmHWM"),
                  "step_seconds": statistics.median(seconds[1:] or seconds)}))
"""


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def run(bench, quick: bool) -> None:
    import torch

    from biotf.checkpoint import save_pretrained
    from biotf.io.readers import read_records
    from biotf.model import Transformer, TransformerConfig
    from biotf.conventions import SAMPLES_DIR
    from biotf.tokenizers import AminoAcidTokenizer

    count = 512 if quick else 2048
    with tempfile.TemporaryDirectory(prefix="biotf-bench-scale-") as tmp:
        tmp = Path(tmp)
        torch.manual_seed(0)
        tokenizer = AminoAcidTokenizer()
        config = TransformerConfig.preset("protein-small").for_tokenizer(tokenizer.vocab_size, tokenizer.mask_id)
        model = save_pretrained(Transformer(config), tokenizer, tmp / "model")
        fasta = tmp / "proteins.fasta"
        records = list(islice(read_records(SAMPLES_DIR / "deeploc_test_set.fasta"), count))
        fasta.write_text("".join(f">{r.id}\n{r.sequence}\n" for r in records))
        residues = sum(len(r.sequence) for r in records)
        args = ["-m", "biotf", "embed", "--no-progress", "--model", str(model), "--input", str(fasta),
                "--overwrite", "--part-records", str(PART_RECORDS)]

        def command(processes: int | None, threads: int) -> Callable[[], None]:
            env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK")}
            env.update(PYTHONPATH=str(REPO), OMP_NUM_THREADS=str(threads))
            launch = [] if processes is None else ["-m", "torch.distributed.run", "--nproc-per-node", str(processes)]

            def go() -> None:
                port = [] if processes is None else ["--master-port", str(_free_port())]
                out = tmp / f"out_{processes}_{threads}.npz"
                subprocess.run([sys.executable, *launch, *port, *args, "--output", str(out)], env=env, check=True,
                               capture_output=True, cwd=tmp)
            return go

        load = os.getloadavg()[0]
        print(f"  load average before: {load:.2f} on {os.cpu_count()} cores; {count} DeepLoc proteins, "
              f"{residues:,} residues")
        bench.compare(f"embed {count} DeepLoc proteins, 2 processes (torchrun, 1 thread each) vs 1 (1 thread)",
                      command(2, 1), command(None, 1), anchor_name="1 process biotf embed", unit="records",
                      work=count, repeats=3, warmup=1, target=1.5)
        seconds = bench.time(command(None, 2), repeats=3, warmup=0)
        bench.record(f"embed {count} DeepLoc proteins, 1 process with 2 threads", count / min(seconds), "records/s",
                     note=f"best of {len(seconds)}; load average after: {os.getloadavg()[0]:.2f}")
    sharded_training(bench, quick)
    lora_finetuning(bench, ["150M"] if quick else list(ESM2_SHAPES))
    # the data section's measurement, at this section's sizes
    bench.section("data").preprocessing_rss(bench, [100, 1000] if quick else [100, 1000, 10000])


def _gpu_check():
    """scripts/gpu_check.py, whose worker (`training_rank`) this section launches: a script of scripts/benchmarks/
    cannot be one, its files (tokenizers.py) would shadow packages of the same name."""
    import importlib.util

    name = "biotf_gpu_check"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, REPO / "scripts" / "gpu_check.py")
        sys.modules[name] = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(sys.modules[name])
    return sys.modules[name]


def sharded_training(bench, quick: bool) -> None:
    import numpy as np

    n_layers, steps = (4, 3) if quick else (14, 4)
    with tempfile.TemporaryDirectory(prefix="biotf-bench-fsdp-") as tmp:
        print(f"  load average before: {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores")
        runs = {mode: _gpu_check().training_run(mode, {"n_layers": n_layers}, steps, "cpu", Path(tmp))
                for mode in ("ddp", "fsdp")}
    parameters = runs["ddp"]["parameters"]
    for mode, report in runs.items():
        figures = zip(report["peak_mib"], report["before_mib"], report["state_mib"])
        for rank, (peak, before, state) in enumerate(figures):
            bench.record(f"{mode} rank {rank}: parameters + gradients + AdamW state it holds", state, "MiB")
            bench.record(f"{mode} rank {rank}: peak resident memory training {parameters / 1e6:.1f}M parameters", peak,
                         "MiB", note=f"{peak - before:.0f} MiB above its memory before the model was built")
        rows, length = _gpu_check().TRAINING_BATCH
        bench.record(f"{mode} training step ({rows}x{length} tokens per rank)",
                     report["step_seconds"], "s", note=f"median of {steps - 1} (the first left out)")
    difference = float(np.max(np.abs(np.subtract(runs["fsdp"]["losses"], runs["ddp"]["losses"]))))
    bench.record("fsdp vs ddp loss, largest difference over the steps", difference, "",
                 note=f"losses ddp {runs['ddp']['losses']}, fsdp {runs['fsdp']['losses']}; "
                      f"load average after: {os.getloadavg()[0]:.2f}")
    long_sequences(bench, n_layers, 1024 if quick else 4096)


def long_sequences(bench, n_layers: int, length: int) -> None:
    """FSDP2 on 2 processes, one sequence of `length` tokens per rank, with and without activation checkpointing."""
    widths = {"n_layers": n_layers, "max_seq_len": length}  # gpt2-small's learned positions, as many as the tokens
    with tempfile.TemporaryDirectory(prefix="biotf-bench-fsdp-long-") as tmp:
        print(f"  load average before: {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores")
        for recompute in (False, True):
            report = _gpu_check().training_run("fsdp", widths, 1, "cpu", Path(tmp), batch=(1, length),
                                               recompute=recompute)
            label = f"fsdp, 1x{length} tokens per rank, activation checkpointing {'on' if recompute else 'off'}"
            for rank, (peak, before) in enumerate(zip(report["peak_mib"], report["before_mib"])):
                bench.record(f"{label}: rank {rank} peak resident memory training "
                             f"{report['parameters'] / 1e6:.1f}M parameters", peak, "MiB",
                             note=f"{peak - before:.0f} MiB above its memory before the model was built")
            bench.record(f"{label}: training step", report["step_seconds"], "s",
                         note=f"one step; load average after: {os.getloadavg()[0]:.2f}")


def available_gib() -> float:
    with open("/proc/meminfo") as meminfo:
        return next(int(line.split()[1]) for line in meminfo if line.startswith("MemAvailable:")) / 2**20


def lora_finetuning(bench, shapes: list[str]) -> None:
    """Peak memory of LoRA fine-tuning ESM-2's `shapes` (names of `ESM2_SHAPES`), each in a fresh process
    (`LORA_CHILD`); a shape whose float32 weights plus `LORA_MARGIN_GIB` exceed the memory available now is recorded
    as that estimate only."""
    from dataclasses import replace

    import torch

    from biotf.model import Transformer, TransformerConfig

    rows, length = LORA_BATCH
    for name in shapes:
        layers, width, heads, mlp = ESM2_SHAPES[name]
        with torch.device("meta"):  # counted without memory
            parameters = Transformer(replace(TransformerConfig.preset("esm2-8m"), n_layers=layers, d_model=width,
                                             n_heads=heads, n_kv_heads=heads, d_ff=mlp)).num_parameters()
        weights_gib = parameters * 4 / 2**30
        bench.record(f"LoRA ESM-2 {name} shape: float32 weights", weights_gib, "GiB",
                     note=f"{parameters / 1e6:,.0f}M parameters")
        needed, available = weights_gib + LORA_MARGIN_GIB, available_gib()
        if needed > available:
            bench.record(f"LoRA ESM-2 {name} shape: not run", needed, "GiB estimated",
                         note=f"{available:.1f} GiB available now")
            continue
        for recompute in (0, 1):
            print(f"  load average before: {os.getloadavg()[0]:.2f}; {available_gib():.1f} GiB available")
            done = subprocess.run([sys.executable, "-c", LORA_CHILD, *map(str, (*ESM2_SHAPES[name], rows, length,
                                                                             LORA_STEPS, recompute))],
                                  env={**os.environ, "PYTHONPATH": str(REPO)}, capture_output=True, text=True,
                                  check=True)
            result = json.loads(done.stdout.strip().splitlines()[-1])
            label = f"LoRA ESM-2 {name} shape, {rows}x{length} tokens, activation checkpointing " \
                    f"{'on' if recompute else 'off'}"
            bench.record(f"{label}: peak resident memory", result["peak_kib"] / 2**20, "GiB",
                         note=f"{result['built_kib'] / 2**20:.2f} GiB once built, {result['baseline_kib'] / 2**20:.2f} "
                              f"after imports; {result['trainable']:,} trainable parameters")
            bench.record(f"{label}: training step", result["step_seconds"], "s",
                         note=f"median of {LORA_STEPS - 1} (the first left out); load average after: "
                              f"{os.getloadavg()[0]:.2f}")

