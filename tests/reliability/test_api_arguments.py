"""Every `biotf.Model` method checks its arguments at its entry (`biotf.api_arguments`): a bad one is one
`ArgumentError` naming the parameter as the caller wrote it, never a TypeError from deep inside nor a silent answer;
and a device this machine does not have is one line naming the devices it has, from every command's `--device` and
from `Model.load(device=...)` alike (`biotf.devices`)."""

from __future__ import annotations

import pytest
import torch

import biotf
from biotf.cli import main
from biotf.errors import ArgumentError, BiotfError
from biotf.io.readers import Record
from biotf.inference.generation import MAX_SEED

FASTA = ">p1\nMKVLAAGIVG\n>p2\nMSTNPKPQRK\n"
# A device string torch cannot parse, and one it parses that this machine lacks.
MISSING_DEVICES = ["tpu9", "cuda:99" if torch.cuda.is_available() else "cuda"]


@pytest.fixture(scope="module")
def model(model_dir):
    return biotf.Model.load(model_dir)


def refused(call, *fragments: str) -> str:
    with pytest.raises(ArgumentError) as caught:  # a BiotfError: the one line a user's script can catch
        call()
    assert isinstance(caught.value, BiotfError)
    message = str(caught.value)
    assert "\n" not in message and message.startswith("invalid argument "), message
    for fragment in fragments:
        assert fragment in message, message
    return message


def test_an_empty_sequence_is_refused_by_the_api_as_by_the_command(capsys, tmp_path, model, model_dir):
    """Before, `score([""])` answered log-likelihood 0.0 and perplexity nan, saying nothing."""
    table = tmp_path / "t.csv"
    table.write_text("id,sequence\na,\nb,MKT\n")
    assert main(["score", "--no-progress", "--model", str(model_dir), "--input", str(table), "--output",
                 str(tmp_path / "s.csv")]) == 2
    assert "empty 'sequence' field" in capsys.readouterr().err
    for job in (model.score, model.embed, model.contacts):
        refused(lambda: job(["MKT", ""]), "sequences[1]=''", "an empty sequence")
    refused(lambda: model.score(""), "sequences=''")
    refused(lambda: model.score([Record("r", "", {}, 0)]), "sequences[0]=", "an empty sequence")


@pytest.mark.parametrize("seed", [-1, 2**70, MAX_SEED + 1, 1.5, True])
def test_a_sampling_seed_out_of_range_is_refused_by_the_api_and_the_command(capsys, model, model_dir, seed):
    """Before, the API sampled with seed 2**70 and, greedy, took -1 too; the command took 2**70."""
    refused(lambda: model.generate("MK", seed=seed, temperature=1.0, max_new_tokens=2), f"seed={seed!r}",
            f"an integer from 0 to {MAX_SEED}")
    refused(lambda: model.generate("MK", seed=seed, max_new_tokens=2), "seed=")  # greedy: still refused
    if isinstance(seed, int) and not isinstance(seed, bool):
        assert main(["generate", "--model", str(model_dir), "--prompt", "MK", "--seed", str(seed),
                     "--temperature", "1", "--max-new-tokens", "2"]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and f"invalid --seed={seed}" in err, err


def test_the_largest_seed_samples(model):
    assert model.generate("MK", seed=MAX_SEED, temperature=1.0, max_new_tokens=2) == \
        model.generate("MK", seed=MAX_SEED, temperature=1.0, max_new_tokens=2)


@pytest.mark.parametrize("call, fragments", [
    (lambda m: biotf.Model.load(None), ("source=None", "a path")),
    (lambda m: biotf.Model.load(5), ("source=5",)),
    (lambda m: biotf.Model.load(b"/tmp/model"), ("source=b'/tmp/model'",)),
    (lambda m: m.embed(None), ("sequences=None", "an iterable of str")),
    (lambda m: m.embed(5), ("sequences=5",)),
    (lambda m: m.embed(b"MKT"), ("sequences=b'MKT'", "bytes, not text")),  # before: "the items are int"
    (lambda m: m.embed([b"MKT"]), ("sequences[0]=b'MKT'",)),
    (lambda m: m.embed({"a": "MKT"}), ("sequences={'a': 'MKT'}",)),
    (lambda m: m.embed("MKT", ids=5), ("ids=5",)),
    (lambda m: m.embed("MKT", batch_tokens=0), ("batch_tokens=0", "an integer >= 1")),
    (lambda m: m.embed("MKT", max_length="64"), ("max_length='64'",)),
    (lambda m: m.embed("MKT", packing="yes"), ("packing='yes'", "True or False")),
    (lambda m: m.score(None), ("sequences=None",)),
    (lambda m: m.score([None]), ("sequences[0]=None",)),
    (lambda m: m.contacts(None), ("sequences=None",)),
    (lambda m: m.generate(None), ("prompts=None",)),
    (lambda m: m.generate([]), ("prompts=[]", "no prompt")),
    (lambda m: m.generate([None]), ("prompts[0]=None",)),
    (lambda m: m.generate(["MK", 7]), ("prompts[1]=7",)),
    (lambda m: m.generate("MK", max_new_tokens=0), ("max_new_tokens=0",)),
    (lambda m: m.generate("MK", system=3), ("system=3",)),
    (lambda m: m.save(None), ("directory=None",)),
])
def test_a_bad_argument_of_any_method_is_one_line_naming_it(model, call, fragments):
    refused(lambda: call(model), *fragments)


def test_sequences_from_a_generator_are_read_once(model):
    expected = model.embed(["MKVLAAGIVG", "MSTNPKPQRK"])
    assert (model.embed(s for s in ["MKVLAAGIVG", "MSTNPKPQRK"]) == expected).all()


@pytest.mark.parametrize("device", MISSING_DEVICES)
def test_a_missing_device_is_refused_by_model_load(model_dir, device):
    refused(lambda: biotf.Model.load(model_dir, device=device), f"device={device!r}", "(allowed: cpu")


def device_commands(tmp_path, model_dir) -> dict[str, list[str]]:
    """Every command with --device, each given what it needs to reach its model (or ChemNet) but for the device."""
    fasta = tmp_path / "in.fasta"
    fasta.write_text(FASTA)
    smiles = tmp_path / "in.smi"
    smiles.write_text("CCO\nc1ccccc1\n")
    model, out = str(model_dir), str(tmp_path / "out")
    return {"embed": ["embed", "--model", model, "--input", str(fasta), "--output", out + ".npz"],
            "score": ["score", "--model", model, "--input", str(fasta), "--output", out + ".csv"],
            "contacts": ["contacts", "--model", model, "--input", str(fasta), "--output", out + ".npz"],
            "generate": ["generate", "--model", model, "--prompt", "MK"],
            "tokens": ["tokens", "--model", model, "--output", out + ".tsv"],
            "search query": ["search", "query", "--index", str(tmp_path), "--input", str(fasta), "--model", model,
                             "--output", out + ".tsv"],
            "contacts fit": ["contacts", "fit", "--model", model, "--structures", str(tmp_path), "--output",
                             out + "_head"],
            "contacts evaluate": ["contacts", "evaluate", "--model", model, "--structures", str(tmp_path)],
            "generate evaluate": ["generate", "evaluate", "--input", str(smiles), "--test", str(smiles)]}


@pytest.mark.parametrize("device", MISSING_DEVICES)
def test_a_missing_device_is_one_line_from_every_command(capsys, tmp_path, model_dir, device):
    for name, argv in device_commands(tmp_path, model_dir).items():
        assert main([*argv, "--device", device]) == 2, name
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and f"invalid --device={device!r}" in err and "(allowed: cpu" in err, (name, err)


def test_the_devices_of_a_machine_with_two_gpus(monkeypatch):
    """What a CUDA machine allows (its GPUs pretended here: the check reads torch's counts, nothing runs on them)."""
    from biotf.devices import available_devices, check_device
    from biotf.errors import ConfigError

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: False)
    assert available_devices() == ["cpu", "cuda", "cuda:0", "cuda:1"]
    for device in ("cuda", "cuda:1", torch.device("cuda", 0), "cpu"):
        assert check_device("--device", device) == device
    with pytest.raises(ConfigError, match=r"invalid --device='cuda:2': this machine has no such device \(allowed: "
                                          r"cpu \| cuda \| cuda:0 \| cuda:1\)"):
        check_device("--device", "cuda:2")
