"""scripts/gpu_check.py, the GPU path's check against the CPU, run with the CPU on both sides at tiny sizes (what can
run without a GPU: every comparison, and its gates, which must refuse a wrong step or output), and
scripts/gpu_check.sh where torch sees no CUDA device: it says the CUDA checks were skipped and never exits 0."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch

from torchrun_helpers import SEVERAL_PROCESSES

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def gpu_check():
    spec = importlib.util.spec_from_file_location("gpu_check", REPO / "scripts" / "gpu_check.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["gpu_check"] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    yield module
    del sys.modules["gpu_check"]


def assert_all_pass(report) -> None:
    assert report.results and report.failed == 0, report.table()
    assert {result.status for result in report.results} == {"PASS"}, report.table()


@pytest.mark.parametrize("check", ["commands", "sdpa"])
def test_a_check_passes_with_the_cpu_on_both_sides(gpu_check, check, tmp_path):
    assert_all_pass(gpu_check.run_checks([check], "cpu", "cpu", "tiny", tmp_path))


def test_training_passes_in_both_precisions_and_prints_mfu(gpu_check, tmp_path):
    report = gpu_check.run_checks(["training"], "cpu", "cpu", "tiny", tmp_path)
    assert_all_pass(report)
    rows = [result.check for result in report.results]
    for model in ("protein-small masked LM", "gpt2-small causal LM"):
        assert [row.split(") ", 1)[1] for row in rows if model in row] == [
            "float32 vs cpu float32", "bf16-mixed vs cpu float32", "MFU on cpu"], rows
    assert all("MFU" in result.detail for result in report.results if "MFU" in result.check)


@SEVERAL_PROCESSES
@pytest.mark.slow
def test_ddp_of_two_gloo_processes_equals_one_process(gpu_check, tmp_path):
    assert_all_pass(gpu_check.run_checks(["ddp"], "cpu", "cpu", "tiny", tmp_path))


@SEVERAL_PROCESSES
@pytest.mark.slow
def test_fsdp_of_two_gloo_processes_equals_ddp_and_reports_memory(gpu_check, tmp_path):
    report = gpu_check.run_checks(["fsdp"], "cpu", "cpu", "tiny", tmp_path)
    assert_all_pass(report)
    row, finetune = report.results
    assert "losses differ by at most" in row.detail and "peak per process (resident memory)" in row.detail, row.detail
    assert finetune.detail.startswith("4 of 4 steps") and "export written" in finetune.detail, finetune.detail


@pytest.mark.parametrize("fails", [False, True])
def test_a_rank_frees_its_ddp_wrapper_before_its_process_group_is_destroyed(gpu_check, fails, monkeypatch):
    """What hung a DDP rank at exit: a DDP wrapper outliving its gloo group frees the group from its C++ Reducer with
    the GIL held, joining gloo threads that wait for the GIL. The wrapper must go while the group is initialized, after
    the work returned as after it raised."""
    import socket
    import weakref

    import torch.distributed as distributed
    from torch.nn.parallel import DistributedDataParallel

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    for key, value in dict(RANK="0", WORLD_SIZE="1", LOCAL_RANK="0", MASTER_ADDR="127.0.0.1",
                           MASTER_PORT=str(port)).items():
        monkeypatch.setenv(key, value)
    group_alive_when_freed = []

    def work(device):
        wrapped = DistributedDataParallel(torch.nn.Linear(4, 4).to(device))
        weakref.finalize(wrapped, lambda: group_alive_when_freed.append(distributed.is_initialized()))
        wrapped(torch.ones(2, 4)).sum().backward()
        distributed.all_gather([torch.zeros(4)], torch.ones(4))  # a collective's tensors, held by a gloo thread
        if fails:
            raise RuntimeError("a step failed")

    if fails:
        with pytest.raises(RuntimeError, match="a step failed"):
            gpu_check.in_process_group("cpu", work)
    else:
        assert gpu_check.in_process_group("cpu", work) == 0
    assert group_alive_when_freed == [True]
    assert not distributed.is_initialized()


def alive(pid: int) -> bool:
    """Whether `pid` runs (a zombie, killed but not yet reaped, does not)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, ProcessLookupError):
        return False


def test_a_child_past_its_timeout_is_killed_with_the_processes_it_started(gpu_check, tmp_path):
    """As torchrun does, the child starts a process in a session of its own; both hang: both are killed, and the
    error names the child, its timeout and its last output. (The rank writes nowhere: one that held the child's
    output pipes open would keep a kill of the child alone from returning at all.)"""
    grandchild = ("import subprocess, sys, time; rank = subprocess.Popen([sys.executable, '-c', 'import time; "
                  "time.sleep(600)'], start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL); "
                  "print('rank', rank.pid, flush=True); print('waiting for the rank', file=sys.stderr, flush=True); "
                  "time.sleep(600)")
    start = time.monotonic()
    with pytest.raises(gpu_check.ChildTimedOut) as raised:
        gpu_check.run_child("a hanging launcher", [sys.executable, "-c", grandchild], timeout=3)
    assert time.monotonic() - start < 30
    message = str(raised.value)
    assert message.startswith("a hanging launcher timed out after 3 s (killed with every process it started)")
    assert "last stderr: waiting for the rank; last stdout: rank " in message, message
    rank = int(message.rsplit("rank ", 1)[1])
    deadline = time.monotonic() + 10
    while alive(rank) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not alive(rank), f"the launcher's child {rank} still runs"


@pytest.mark.parametrize("check", ["ddp", "fsdp"])
def test_a_torchrun_launch_past_its_timeout_is_a_fail_row_naming_it(gpu_check, check, tmp_path, monkeypatch):
    monkeypatch.setitem(gpu_check.SIZES, "tiny", replace(gpu_check.SIZES["tiny"], child_timeout=1))
    report = gpu_check.run_checks([check], "cpu", "cpu", "tiny", tmp_path)
    [row] = report.results
    launch = {"ddp": "torchrun ddp-rank", "fsdp": "torchrun training-rank ddp"}[check]
    assert row.status == "FAIL" and row.detail.startswith(
        f"{launch} timed out after 1 s (killed with every process it started); last stderr: "), row.detail
    leftover = [pid for pid in gpu_check.process_tree(os.getpid())[1:] if alive(pid)
                and str(tmp_path) in Path(f"/proc/{pid}/cmdline").read_text().replace("\0", " ")]
    assert leftover == [], "ranks of the killed launch still run"


def test_a_train_py_run_past_its_timeout_is_a_fail_row_naming_it(gpu_check, tmp_path):
    row = gpu_check.run_train_py("train.py trainer.strategy=ddp", ["trainer.max_steps=1"], tmp_path, timeout=1)
    assert row.check == "train.py trainer.strategy=ddp" and row.status == "FAIL"
    assert row.detail.startswith("python train.py (train.py trainer.strategy=ddp) timed out after 1 s"), row.detail


def test_the_step_gate_refuses_a_wrong_gradient_loss_or_parameter_set(gpu_check):
    tolerance = gpu_check.STEP_TOLERANCES["bf16-mixed"]
    generator = torch.Generator().manual_seed(0)
    reference = {name: torch.randn(64, generator=generator) for name in ("a", "b", "c")}
    assert gpu_check.compare_step(3.0, reference, 3.0, reference, tolerance)[0]
    noisy = {name: value + 0.01 * torch.randn(64, generator=generator) for name, value in reference.items()}
    assert gpu_check.compare_step(3.001, noisy, 3.0, reference, tolerance)[0]  # bf16-sized differences pass
    flipped = {**reference, "b": -reference["b"]}
    assert not gpu_check.compare_step(3.0, flipped, 3.0, reference, tolerance)[0]
    doubled = {name: 2 * value for name, value in reference.items()}  # aligned, twice as long
    assert not gpu_check.compare_step(3.0, doubled, 3.0, reference, tolerance)[0]
    assert not gpu_check.compare_step(3.5, reference, 3.0, reference, tolerance)[0]
    assert not gpu_check.compare_step(3.0, {"a": reference["a"], "b": reference["b"]}, 3.0, reference, tolerance)[0]
    assert not gpu_check.compare_step(float("nan"), reference, 3.0, reference, tolerance)[0]
    # float32's gate is tighter: the bf16-sized noise above fails it
    assert not gpu_check.compare_step(3.0, noisy, 3.0, reference, gpu_check.STEP_TOLERANCES["float32"])[0]


def test_the_output_gates_refuse_outputs_beyond_their_tolerance(gpu_check, tmp_path):
    vectors = np.random.default_rng(0).normal(size=(4, 8)).astype(np.float32)
    for name, values in (("same", vectors), ("near", vectors + 1e-6), ("far", vectors + 1e-2)):
        np.savez(tmp_path / f"{name}.npz", embeddings=values)
    assert gpu_check.compare_embeddings(tmp_path / "near.npz", tmp_path / "same.npz")[0]
    assert not gpu_check.compare_embeddings(tmp_path / "far.npz", tmp_path / "same.npz")[0]
    for name, shift in (("same", 0.0), ("near", 1e-4), ("far", 0.01)):
        (tmp_path / f"{name}.csv").write_text("id,log_likelihood\n" + "".join(f"p{i},{-50.0 - i + shift}\n"
                                                                               for i in range(3)))
    assert gpu_check.compare_scores(tmp_path / "near.csv", tmp_path / "same.csv")[0]
    assert not gpu_check.compare_scores(tmp_path / "far.csv", tmp_path / "same.csv")[0]
    maps = {"contacts/p0": np.full((5, 5), 0.5, np.float32)}
    np.savez(tmp_path / "maps.npz", **maps)
    np.savez(tmp_path / "moved.npz", **{key: value + 1e-3 for key, value in maps.items()})
    assert gpu_check.compare_contacts(tmp_path / "maps.npz", tmp_path / "maps.npz")[0]
    assert not gpu_check.compare_contacts(tmp_path / "moved.npz", tmp_path / "maps.npz")[0]


def test_a_generation_that_parts_away_from_a_near_tie_fails(gpu_check, tmp_path):
    """Completions that differ where both devices' greedy tokens agree (no near-tie explains it) fail the row."""
    size = gpu_check.SIZES["tiny"]
    _, decoder = gpu_check.save_models(size, tmp_path)
    expected = "".join(json.dumps({"prompt": prompt, "completion": "MKV"}) + "\n" for prompt in size.prompts)
    other = expected.replace('"MKV"', '"MKW"', 1)
    assert gpu_check.compare_generations(expected, expected, decoder, size, "cpu", "cpu")[0]
    passed, detail = gpu_check.compare_generations(other, expected, decoder, size, "cpu", "cpu")
    assert not passed and "1 of 2 completions differ" in detail


def test_the_profiler_tells_the_math_kernel_from_flash(gpu_check):
    from torch.nn.attention import SDPBackend, sdpa_kernel

    q = torch.randn(1, 2, 8, 4)
    attend = lambda: torch.nn.functional.scaled_dot_product_attention(q, q, q)  # noqa: E731
    assert gpu_check.sdpa_kernels(attend) == ["flash"]  # the CPU's fused kernel
    with sdpa_kernel([SDPBackend.MATH]):
        assert gpu_check.sdpa_kernels(attend) == ["math"]


@pytest.mark.slow
def test_the_shell_driver_says_cuda_was_skipped_and_does_not_exit_0(tmp_path):
    environment = {**os.environ, "CUDA_VISIBLE_DEVICES": "", "PYTHON": sys.executable, "OMP_NUM_THREADS": "1",
                   "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run(["bash", str(REPO / "scripts" / "gpu_check.sh"), "commands", "--json",
                           str(tmp_path / "report.json")], capture_output=True, text=True, env=environment,
                          timeout=600)
    assert done.returncode == 3, done.stdout + done.stderr
    assert done.stdout.count("every CUDA check was SKIPPED") == 2, done.stdout
    assert "0 failed" in done.stdout and "--device cpu against --reference cpu, tiny sizes" in done.stdout
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["device"] == "cpu" and report["failed"] == 0 and report["machine"]["gpus"] == []


def test_cuda_asked_for_without_cuda_is_refused_in_one_line(gpu_check, capsys):
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    with pytest.raises(SystemExit) as raised:
        gpu_check.main(["sdpa", "--device", "cuda"])
    assert raised.value.code == 2
    assert "--device cuda: torch sees no CUDA device here" in capsys.readouterr().err
