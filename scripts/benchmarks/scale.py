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
gradients and AdamW state (counted from its tensors), its peak resident memory while it trains (read after every
forward, backward and optimizer step, once the whole model each rank built before sharding it is freed) and its
growth over the memory before the model was built, the median step time, and the largest difference between the two
runs' losses.
The same worker, on 2 GPUs, is `scripts/gpu_check.py`'s fsdp check (memory: `torch.cuda.max_memory_allocated`).

Then data of any size: peak RSS and MB/s of building the token cache from a generated FASTA of 0.1, 1 and 10 GB
(quick: 0.1 and 1 GB), each in a fresh process (the data section's `preprocessing_rss`): the growth from the
smallest to the largest should stay under 50 MiB, and the rate above 50 MB/s.
"""

from __future__ import annotations

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

