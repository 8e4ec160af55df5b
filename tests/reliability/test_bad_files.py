"""Malformed files through every CLI command that reads one: exit status 2, one line on stderr naming
the file and the record or line, and nothing left under the output's final name.

Files that only look odd (Windows line endings, gzip) must give the same result as the plain file,
and duplicate record ids are kept and reported, never merged.
"""

from __future__ import annotations

import gzip
import io
import json
from pathlib import Path

import numpy as np
import pytest
import torch

from biotf.cli import main
from biotf.io.embeddings import npz_text

CLEAN_FASTA = b">p1 first\nMKVLAAGIVG\n>p2 second\nMSTNPKPQRK\nTKRNTNRR\n"

# kind -> (file name, bytes, what the one error line must name besides the file)
BAD_SEQUENCE_FILES = {
    "empty": ("in.fasta", b"", "no records"),
    "blank_lines_only": ("in.fasta", b"\n \n\t\n", "no records"),
    "binary_garbage": ("in.fasta", bytes(range(256)) * 8, "line 2"),
    "binary_garbage_gzipped": ("in.fa.gz", gzip.compress(bytes(range(256)) * 8), "line 2"),
    "header_without_sequence": ("in.fasta", CLEAN_FASTA + b">p3 last\n", "record 'p3' (line 6)"),
    # old Mac line endings (CR only): the line is counted as the reader counts it, never a StopIteration
    "header_without_sequence_cr_only": ("in.fasta", (CLEAN_FASTA + b">p3 last\n").replace(b"\n", b"\r"),
                                        "record 'p3' (line 6)"),
    "header_without_sequence_after_bom": ("in.fasta", b"\xef\xbb\xbf>p0\n" + CLEAN_FASTA, "record 'p0' (line 1)"),
    "sequence_before_header": ("in.fasta", b"MKVL\n" + CLEAN_FASTA, "line 1"),
    "non_utf8": ("in.fasta", b">p1\nMKV\n>p2 caf\xe9\nMKV\n", "line 3"),
    "truncated_gzip": ("in.fa.gz", gzip.compress(CLEAN_FASTA * 40)[:-12], "truncated"),
    "csv_without_column": ("in.csv", b"id,name\np1,MKV\n", "columns: id, name"),
    "csv_quoting_error": ("in.csv", b'id,sequence\np1,"MKV\np2,MKL\n', "line 3"),
    "csv_wrong_field_count": ("in.csv", b"id,sequence\np1,MKV\np2,MKL,extra\n", "line 3"),
    "csv_header_only": ("in.csv", b"id,sequence\n", "no records"),
    "bad_residue": ("in.fasta", b">p1\nMKV\n>p2\nMK1V\n", "record 'p2', position 2"),
}


def run_cli(capsys, *argv: str) -> tuple[int, str, str]:
    status = main(list(argv))
    captured = capsys.readouterr()
    return status, captured.out, captured.err


def assert_one_line_error(status: int, err: str, path: Path, fragment: str) -> None:
    lines = [line for line in err.splitlines() if line.strip()]
    assert status == 2, err
    assert len(lines) == 1, err
    assert str(path) in lines[0] or path.name in lines[0], lines[0]
    assert fragment in lines[0], lines[0]


def files_in(directory: Path) -> set[str]:
    return {str(p.relative_to(directory)) for p in directory.rglob("*")}


# --- sequence inputs: tokenize, embed, train ------------------------------------------------------
def tokenize_command(path: Path, out_dir: Path, model_dir: Path) -> list[str]:
    return ["tokenize", "--tokenizer", "protein", "--input", str(path)]


def embed_command(path: Path, out_dir: Path, model_dir: Path) -> list[str]:
    return ["embed", "--no-progress", "--model", str(model_dir), "--input", str(path),
            "--output", str(out_dir / "embeddings.npz")]


def train_command(path: Path, out_dir: Path, model_dir: Path) -> list[str]:
    return ["train", "model=tiny", "model.max_seq_len=64", "data.max_length=64", "trainer.max_steps=1",
            "trainer.enable_progress_bar=false", f"data.path={path}", f"data.cache_dir={out_dir / 'cache'}",
            f"hydra.run.dir={out_dir / 'run'}"]


SEQUENCE_COMMANDS = {"tokenize": tokenize_command, "embed": embed_command, "train": train_command}


@pytest.mark.parametrize("kind", sorted(BAD_SEQUENCE_FILES))
@pytest.mark.parametrize("command", sorted(SEQUENCE_COMMANDS))
def test_bad_sequence_file(capsys, tmp_path, model_dir, command, kind):
    name, data, fragment = BAD_SEQUENCE_FILES[kind]
    path = tmp_path / "input" / name
    path.parent.mkdir()
    path.write_bytes(data)
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    status, _, err = run_cli(capsys, *SEQUENCE_COMMANDS[command](path, out_dir, model_dir))
    assert_one_line_error(status, err, path, fragment)
    leftovers = {f for f in files_in(out_dir) if not f.startswith(("cache", "run/.hydra", "run/train.log"))}
    assert leftovers <= {"run"}, leftovers  # no embeddings file, no checkpoint, no partial cache shard


def crlf(data: bytes) -> bytes:
    return data.replace(b"\n", b"\r\n")


BOM = b"\xef\xbb\xbf"


@pytest.mark.parametrize("variant", ["crlf", "cr_only", "bom", "gzip", "gzip_without_suffix", "crlf_gzip"])
def test_odd_but_valid_files_read_like_the_plain_one(capsys, tmp_path, model_dir, variant):
    """Windows or old Mac line endings, a UTF-8 byte-order mark and gzip (by magic bytes, with or without
    `.gz`) change nothing."""
    plain = tmp_path / "plain.fasta"
    plain.write_bytes(CLEAN_FASTA)
    data = {"crlf": crlf(CLEAN_FASTA), "cr_only": CLEAN_FASTA.replace(b"\n", b"\r"), "bom": BOM + CLEAN_FASTA,
            "gzip": gzip.compress(CLEAN_FASTA), "gzip_without_suffix": gzip.compress(CLEAN_FASTA),
            "crlf_gzip": gzip.compress(crlf(CLEAN_FASTA))}[variant]
    odd = tmp_path / ("odd.fa.gz" if variant in ("gzip", "crlf_gzip") else "odd.fasta")
    odd.write_bytes(data)
    expected = run_cli(capsys, "tokenize", "--tokenizer", "protein", "--input", str(plain), "--ids")
    got = run_cli(capsys, "tokenize", "--tokenizer", "protein", "--input", str(odd), "--ids")
    assert got[0] == expected[0] == 0 and got[1] == expected[1] and "p2\t" in got[1]
    for path in (plain, odd):
        status, _, err = run_cli(capsys, *embed_command(path, tmp_path, model_dir)[:-1],
                                 str(tmp_path / f"{path.stem}.npz"))
        assert status == 0, err
    np.testing.assert_array_equal(np.load(tmp_path / "plain.npz")["embeddings"],
                                  np.load(tmp_path / f"{odd.stem}.npz")["embeddings"])


# --- other commands' own input files -------------------------------------------------------------
EMBEDDING_FILE_KINDS = ["empty", "binary_garbage", "truncated"]


@pytest.mark.parametrize("suffix", [".npz", ".parquet", ".h5ad"])
@pytest.mark.parametrize("kind", EMBEDDING_FILE_KINDS)
@pytest.mark.parametrize("command", ["probe", "plot", "search"])
def test_bad_embeddings_file(capsys, tmp_path, model_dir, command, kind, suffix):
    if kind == "truncated":
        fasta = tmp_path / "clean.fasta"
        fasta.write_bytes(CLEAN_FASTA)
        assert run_cli(capsys, *embed_command(fasta, tmp_path, model_dir)[:-1], str(tmp_path / f"ok{suffix}"))[0] == 0
        data = (tmp_path / f"ok{suffix}").read_bytes()
        data = data[: len(data) // 2]
    else:
        data = {"empty": b"", "binary_garbage": bytes(range(256)) * 8}[kind]
    path = tmp_path / f"bad{suffix}"
    path.write_bytes(data)
    before = files_in(tmp_path)
    argv = {"probe": ["probe", "--embeddings", str(path), "--label", "description"],
            "plot": ["plot", str(path), "--color", "description"],
            "search": ["search", "build", "--embeddings", str(path), "--output", str(tmp_path / "index")]}[command]
    status, _, err = run_cli(capsys, *argv)
    assert_one_line_error(status, err, path, "")
    assert files_in(tmp_path) == before  # no picture, no report


PROMPT_FILES = {
    "empty": (b"", "no records"),
    "blank_lines_only": (b"\n  \n", "no records"),
    "binary_garbage": (bytes(range(256)) * 8, "line 2"),
    "non_utf8": (b"MKV\nMK\xe9V\n", "line 2"),
}


@pytest.mark.parametrize("kind", sorted(PROMPT_FILES))
def test_bad_prompt_file(capsys, tmp_path, model_dir, kind):
    data, fragment = PROMPT_FILES[kind]
    path = tmp_path / "prompts.txt"
    path.write_bytes(data)
    status, out, err = run_cli(capsys, "generate", "--model", str(model_dir), "--prompt-file", str(path),
                               "--max-new-tokens", "2")
    assert_one_line_error(status, err, path, fragment)
    assert out == ""


def test_gzipped_crlf_prompt_file_reads_like_the_plain_one(capsys, tmp_path, model_dir):
    plain, odd = tmp_path / "prompts.txt", tmp_path / "prompts.txt.gz"
    plain.write_bytes(b"MKV\nMSTN\n")
    odd.write_bytes(gzip.compress(b"MKV\r\nMSTN\r\n"))
    outputs = [run_cli(capsys, "generate", "--model", str(model_dir), "--prompt-file", str(p), "--max-new-tokens", "3",
                       "--temperature", "0") for p in (plain, odd)]
    assert outputs[0][0] == 0 and outputs[0][:2] == outputs[1][:2]


CHECKPOINT_KINDS = ["empty", "binary_garbage", "truncated", "not_a_checkpoint_zip"]


def checkpoint_bytes(kind: str) -> bytes:
    if kind == "truncated":
        buffer = io.BytesIO()
        torch.save({"state_dict": {"model.w": torch.zeros(64, 64)}, "biotf": {"format": 1}}, buffer)
        return buffer.getvalue()[: len(buffer.getvalue()) // 2]
    if kind == "not_a_checkpoint_zip":
        buffer = io.BytesIO()
        torch.save({"weights": torch.zeros(2)}, buffer)
        return buffer.getvalue()
    return {"empty": b"", "binary_garbage": bytes(range(256)) * 8}[kind]


@pytest.mark.parametrize("kind", CHECKPOINT_KINDS)
@pytest.mark.parametrize("command", ["export-model", "embed", "generate"])
def test_bad_checkpoint_file(capsys, tmp_path, kind, command):
    path = tmp_path / "model.ckpt"
    path.write_bytes(checkpoint_bytes(kind))
    fasta = tmp_path / "clean.fasta"
    fasta.write_bytes(CLEAN_FASTA)
    argv = {"export-model": ["export-model", str(path), str(tmp_path / "exported")],
            "embed": embed_command(fasta, tmp_path, path),
            "generate": ["generate", "--model", str(path), "--prompt", "MKV", "--max-new-tokens", "2"]}[command]
    status, _, err = run_cli(capsys, *argv)
    assert_one_line_error(status, err, path, "")
    assert not (tmp_path / "exported").exists() and not (tmp_path / "embeddings.npz").exists()


RUN_FILES = {"metrics.csv": b"step,epoch,val/loss\n1,0,2.5\n2,0,2.25\n", "config.yaml": b"model:\n  pos: rope\n",
             "summary.json": b'{"final_val_loss": 2.25}'}
BAD_RUN_FILES = {
    "metrics_non_utf8": ("metrics.csv", b"step,epoch,val/loss\n1,0,2.5\n2,0,\xff\xfe\n"),
    "metrics_not_a_number": ("metrics.csv", b"step,epoch,val/loss\n1,0,2.5\n2,0,two\n"),
    "metrics_binary_garbage": ("metrics.csv", bytes(range(256)) * 4),
    "config_not_yaml": ("config.yaml", b"model: [unclosed\n  pos: {\n"),
    "summary_truncated": ("summary.json", b'{"final_val_l'),
}


@pytest.mark.parametrize("kind", sorted(BAD_RUN_FILES))
def test_bad_run_directory_for_compare(capsys, tmp_path, kind):
    run = tmp_path / "run"
    run.mkdir()
    name, data = BAD_RUN_FILES[kind]
    for file, content in {**RUN_FILES, name: data}.items():
        (run / file).write_bytes(content)
    status, _, err = run_cli(capsys, "compare", str(run), "--out", str(tmp_path / "report.md"))
    assert_one_line_error(status, err, run / name, "")
    assert not (tmp_path / "report.md").exists() and not (tmp_path / "report.png").exists()


# --- duplicate record ids: kept and reported -----------------------------------------------------
DUPLICATES = b">p1 a\nMKV\n>p2\nMKL\n>p1 b\nMKA\n>p3\nMKC\n>p2\nMKD\n"


def test_duplicate_ids_kept_and_reported_by_tokenize_and_embed(capsys, tmp_path, model_dir):
    fasta = tmp_path / "dups.fasta"
    fasta.write_bytes(DUPLICATES)
    status, out, err = run_cli(capsys, "tokenize", "--tokenizer", "protein", "--input", str(fasta))
    assert status == 0 and [line.split("\t")[0] for line in out.splitlines()] == ["p1", "p2", "p1", "p3", "p2"]
    assert "5 records" in err and "duplicate_ids=2" in err, err
    status, _, err = run_cli(capsys, *embed_command(fasta, tmp_path, model_dir))
    assert status == 0 and "duplicate_ids=2" in err, err
    saved = np.load(tmp_path / "embeddings.npz")
    assert npz_text(saved, "ids").tolist() == ["p1", "p2", "p1", "p3", "p2"]
    assert npz_text(saved, "sequences").tolist() == ["MKV", "MKL", "MKA", "MKC", "MKD"]


def test_duplicate_ids_reported_in_the_training_summary(capsys, tmp_path, model_dir):
    rng = np.random.default_rng(0)
    fasta = tmp_path / "dups.fasta"  # 40 distinct sequences under 10 ids: 30 records repeat an earlier id
    fasta.write_text("".join(f">p{i % 10}\n{''.join(rng.choice(list('ACDEFGHIKLMNPQRSTVWY'), 30))}\n" for i in range(40)))
    status, out, err = run_cli(capsys, *train_command(fasta, tmp_path, model_dir), "data.validation_fraction=0.3")
    assert status == 0, err
    assert "duplicate_ids=30" in out, out


def test_a_file_too_small_for_a_validation_split_is_one_line(capsys, tmp_path, model_dir):
    """Found by the duplicate-id test: an empty validation split crashed after training (IndexError)."""
    fasta = tmp_path / "two.fasta"
    fasta.write_bytes(b">p1\nMKVLA\n>p2\nMSTNP\n")
    status, _, err = run_cli(capsys, *train_command(fasta, tmp_path, model_dir))
    assert_one_line_error(status, err, fasta, "split is empty")
    assert not (tmp_path / "run" / "checkpoints").exists()


# --- exported model directories (biotf.Model.load) ------------------------------------------------
EXPORTED_FILES = ["model.safetensors", "config.json", "tokenizer.json"]


@pytest.mark.parametrize("kind", ["empty", "binary_garbage", "truncated"])
@pytest.mark.parametrize("file", EXPORTED_FILES)
def test_damaged_exported_directory(capsys, tmp_path, model_dir, file, kind):
    """Each file of an exported model damaged: Model.load raises a BiotfError, `biotf embed` exits 2."""
    import shutil

    from biotf.errors import BiotfError
    from biotf.api import Model

    exported = tmp_path / "exported"
    shutil.copytree(model_dir, exported)
    data = (exported / file).read_bytes()
    (exported / file).write_bytes({"empty": b"", "binary_garbage": bytes(range(256)) * 8,
                                   "truncated": data[: len(data) // 2]}[kind])
    with pytest.raises(BiotfError):
        Model.load(exported)
    fasta = tmp_path / "clean.fasta"
    fasta.write_bytes(CLEAN_FASTA)
    status, _, err = run_cli(capsys, *embed_command(fasta, tmp_path, exported))
    assert status == 2 and len(err.strip().splitlines()) == 1, err
    assert not (tmp_path / "embeddings.npz").exists()


# --- crafted JSON in a model's config.json and tokenizer.json -------------------------------------
DEEPLY_NESTED = "[" * 200_000  # json.loads raises RecursionError on it


def edited(**changes):
    """A config.json edit: the exported one with some fields changed (None removes nothing; it sets null)."""
    return lambda config: json.dumps({**config, **changes})


def with_model(**changes):
    return lambda config: json.dumps({**config, "model": {**config["model"], **changes}})


# kind -> (file, new text (or a function of the original config.json), what the one error line must say)
CRAFTED_EXPORT_FILES = {
    "config_deeply_nested": ("config.json", DEEPLY_NESTED, "nested too deeply"),
    "config_an_array": ("config.json", "[1, 2]", "expected a JSON object, found an array"),
    "config_not_utf8": ("config.json", b'{"biotf_format": 1, "model": "caf\xe9"}', "not UTF-8"),
    "config_model_null": ("config.json", edited(model=None), "'model' is null, expected an object"),
    "config_model_an_array": ("config.json", edited(model=[1]), "'model' is an array, expected an object"),
    "config_without_model": ("config.json", lambda c: json.dumps({k: v for k, v in c.items() if k != "model"}),
                             "no 'model'"),
    "config_model_field_of_wrong_type": ("config.json", with_model(d_model="x"), "d_model"),
    "config_checksum_a_string": ("config.json", edited(weights_crc32="abc"), "'weights_crc32' is a string"),
    "config_fingerprint_an_array": ("config.json", edited(tokenizer_fingerprint=[1]),
                                    "'tokenizer_fingerprint' is an array"),
    "tokenizer_deeply_nested": ("tokenizer.json", DEEPLY_NESTED, "nested too deeply"),
    "tokenizer_kind_an_array": ("tokenizer.json", '{"biotf_tokenizer": ["protein"]}',
                                "'biotf_tokenizer' is an array, expected a string"),
    "tokenizer_config_an_array": ("tokenizer.json", '{"biotf_tokenizer": "protein", "config": [1]}',
                                  "'config' is an array, expected an object"),
    "tokenizer_hf_model_null": ("tokenizer.json", '{"model": null}', "not a Hugging Face tokenizer.json"),
}


@pytest.mark.parametrize("kind", sorted(CRAFTED_EXPORT_FILES))
def test_crafted_json_in_an_exported_directory(capsys, tmp_path, model_dir, kind):
    """Deep nesting (RecursionError inside json), wrong types and missing sections: one line naming the file."""
    import shutil

    exported = shutil.copytree(model_dir, tmp_path / "exported")
    name, content, fragment = CRAFTED_EXPORT_FILES[kind]
    if callable(content):
        content = content(json.loads((exported / "config.json").read_text()))
    (exported / name).write_bytes(content if isinstance(content, bytes) else content.encode())
    fasta = tmp_path / "clean.fasta"
    fasta.write_bytes(CLEAN_FASTA)
    status, _, err = run_cli(capsys, *embed_command(fasta, tmp_path, exported))
    assert_one_line_error(status, err, exported / name, fragment)
    assert not (tmp_path / "embeddings.npz").exists()


CRAFTED_HF_CONFIGS = {
    "deeply_nested": (DEEPLY_NESTED, "nested too deeply"),
    "null": ("null", "expected a JSON object, found null"),
    "model_type_an_array": ('{"model_type": ["qwen2"]}', "'model_type' is an array, expected a string"),
    "architectures_a_number": ('{"model_type": "esm", "architectures": 5}', "'architectures' is a number"),
    "qwen2_without_hidden_size": ('{"model_type": "qwen2", "architectures": ["Qwen2ForCausalLM"]}', "hidden_size"),
}


@pytest.mark.parametrize("kind", sorted(CRAFTED_HF_CONFIGS))
def test_crafted_config_json_in_a_hugging_face_directory(capsys, tmp_path, qwen_tokenizer_dir, kind):
    import shutil

    directory = shutil.copytree(qwen_tokenizer_dir, tmp_path / "hf")
    content, fragment = CRAFTED_HF_CONFIGS[kind]
    (directory / "config.json").write_text(content)
    fasta = tmp_path / "clean.fasta"
    fasta.write_bytes(CLEAN_FASTA)
    status, _, err = run_cli(capsys, *embed_command(fasta, tmp_path, directory))
    assert_one_line_error(status, err, directory / "config.json", fragment)


@pytest.mark.parametrize("model", [None, [1], {"d_model": "x"}])
def test_a_checkpoint_whose_stored_model_config_is_crafted(capsys, tmp_path, model):
    from biotf.checkpoint import tokenizer_payload
    from biotf.tokenizers import AminoAcidTokenizer

    path = tmp_path / "model.ckpt"
    torch.save({"state_dict": {}, "biotf": {"format": 1, "model": model, "train_config": None,
                                            "tokenizer": tokenizer_payload(AminoAcidTokenizer())}}, path)
    status, _, err = run_cli(capsys, "export-model", str(path), str(tmp_path / "exported"))
    assert_one_line_error(status, err, path, "stored model config")
    assert not (tmp_path / "exported").exists()


# --- values checked where they enter: a Hugging Face directory's weights, config.json and special ids (#39) --------
@pytest.fixture(scope="module")
def gpt2_dir(tmp_path_factory) -> Path:
    """A tiny GPT-2 directory without bos/eos ids (each test copies and edits it)."""
    pytest.importorskip("transformers")
    from tiny_models import save_tiny_gpt2

    return save_tiny_gpt2(tmp_path_factory.mktemp("gpt2") / "gpt2", bos_token_id=None, eos_token_id=None)


def copy_of(directory: Path, target: Path) -> Path:
    import shutil

    return Path(shutil.copytree(directory, target))


def generate_prompt(capsys, model: Path, *flags: str) -> tuple[int, str, str]:
    return run_cli(capsys, "generate", "--model", str(model), "--prompt", "hello", "--max-new-tokens", "3", *flags)


def set_weights(directory: Path, value: float, tensor: str = "transformer.h.1.mlp.c_fc.weight") -> None:
    from safetensors.torch import load_file, save_file

    state = load_file(directory / "model.safetensors")
    state[tensor][0, 0] = value
    save_file(state, directory / "model.safetensors", metadata={"format": "pt"})


@pytest.mark.parametrize("value, kind", [(float("nan"), "NaN"), (float("inf"), "an infinity")])
def test_non_finite_hf_weights_are_refused_naming_the_file_and_tensor(capsys, tmp_path, gpt2_dir, value, kind):
    """A directory whose weights hold NaN generated empty samples with exit status 0."""
    model = copy_of(gpt2_dir, tmp_path / "model")
    set_weights(model, value)
    status, out, err = generate_prompt(capsys, model)
    assert_one_line_error(status, err, model / "model.safetensors", f"tensor transformer.h.1.mlp.c_fc.weight holds "
                                                                    f"{kind}")
    assert out == ""


def test_non_finite_weights_of_a_pytorch_model_bin_are_refused(tmp_path, gpt2_dir):
    from safetensors.torch import load_file

    from biotf.api import Model
    from biotf.errors import CheckpointError

    model = copy_of(gpt2_dir, tmp_path / "model")
    state = load_file(model / "model.safetensors")
    state["transformer.wte.weight"][3, 1] = float("nan")
    torch.save(state, model / "pytorch_model.bin")
    (model / "model.safetensors").unlink()
    with pytest.raises(CheckpointError, match=r"pytorch_model.bin: tensor transformer.wte.weight holds NaN"):
        Model.load(model)


def test_non_finite_weights_of_a_biotf_export_are_refused(tmp_path):
    from biotf.checkpoint import save_pretrained
    from biotf.api import Model
    from biotf.errors import CheckpointError
    from biotf.model import Transformer, TransformerConfig
    from biotf.tokenizers import AminoAcidTokenizer

    model = Transformer(TransformerConfig(vocab_size=33, d_model=16, n_layers=1, n_heads=2, d_ff=32))
    with torch.no_grad():
        model.blocks[0].mlp.down.weight[0, 0] = float("inf")
    exported = save_pretrained(model, AminoAcidTokenizer(), tmp_path / "exported")  # its CRC-32 matches
    with pytest.raises(CheckpointError, match=r"model.safetensors: tensor blocks.0.mlp.down.weight holds an infinity"):
        Model.load(exported)


def edit_config(directory: Path, **changes) -> None:
    config = json.loads((directory / "config.json").read_text())
    (directory / "config.json").write_text(json.dumps({**config, **changes}))


@pytest.mark.parametrize("changes, fragment", [
    # Storage size calculation overflowed (a traceback) while the model was built, even on the meta device.
    (dict(n_embd=10**9), "config.json does not describe a gpt2 model biotf can build: n_embd=1000000000 (biotf's "
                         "d_model): with d_model=1000000000 its matrix would hold 3e+18 numbers"),
    (dict(vocab_size=10**15), "vocab_size=1000000000000000 (biotf's vocab_size)"),
    # Every family's fields are of one JSON type each (`CONFIG_FIELD_TYPES`), checked before its reader runs.
    (dict(n_embd=32.5), "does not describe a gpt2 model biotf can build: 'n_embd' is 32.5, expected an integer"),
    (dict(n_embd=1e9), "'n_embd' is 1000000000.0, expected an integer"),
    (dict(n_layer="2"), "'n_layer' is a string, expected an integer"),
    (dict(n_embd="32"), "'n_embd' is a string, expected an integer"),  # was Python's string-formatting error
    (dict(initializer_range="0.02"), "'initializer_range' is a string, expected a number"),
])
def test_a_bad_hf_config_value_is_a_config_error_naming_the_field(capsys, tmp_path, gpt2_dir, changes, fragment):
    model = copy_of(gpt2_dir, tmp_path / "model")
    edit_config(model, **changes)
    status, _, err = generate_prompt(capsys, model)
    assert_one_line_error(status, err, model / "config.json", fragment)


def test_special_ids_outside_a_small_vocabulary(capsys, tmp_path):
    """GPT2Config(vocab_size=300) keeps bos/eos 50256: transformers warns and generates from a prompt (eos 50256 is
    never drawn), as biotf does; an unprompted sample needs the start token, which fails in transformers (IndexError)
    and is one line here; a pad id outside the vocabulary is refused at load, naming the file."""
    pytest.importorskip("transformers")
    from tiny_models import save_tiny_gpt2

    model = save_tiny_gpt2(tmp_path / "gpt2")
    status, out, err = generate_prompt(capsys, model)
    assert status == 0 and "3 new tokens" in err, err
    prompts = tmp_path / "prompts.txt"
    prompts.write_text("hello\nthe quick brown fox\n")  # left padding: the pad id is the first eos *in* the vocabulary
    status, out, err = run_cli(capsys, "generate", "--model", str(model), "--prompt-file", str(prompts),
                               "--max-new-tokens", "2")
    assert status == 0 and len(out.splitlines()) == 2, err
    status, _, err = run_cli(capsys, "generate", "--model", str(model), "--num-samples", "2", "--output",
                             str(tmp_path / "samples.csv"), "--max-new-tokens", "3")
    assert_one_line_error(status, err, Path("generation_config.json"), "the start token id 50256 (the checkpoint's "
                          "bos_token_id, else its first eos_token_id) is outside the model's vocabulary of 300 ids")
    assert not (tmp_path / "samples.csv").exists()
    generation = json.loads((model / "generation_config.json").read_text())
    (model / "generation_config.json").write_text(json.dumps({**generation, "pad_token_id": 300}))
    status, _, err = generate_prompt(capsys, model)
    assert_one_line_error(status, err, model / "generation_config.json", "pad_token_id=300 is outside the model's "
                                                                         "vocabulary of 300 ids (0..299)")


def damage_header(path: Path, kind: str) -> None:
    import struct

    data = path.read_bytes()
    length = struct.unpack("<Q", data[:8])[0]
    path.write_bytes({"huge_header_length": struct.pack("<Q", 2**60) + data[8:],
                      "header_not_json": data[:8] + b"{" + b"x" * (length - 1) + data[8 + length:],
                      "truncated": data[: len(data) // 2]}[kind])


@pytest.mark.parametrize("kind, reason", [("huge_header_length", "header too large"),
                                          ("header_not_json", "invalid JSON in header"),
                                          ("truncated", "incomplete metadata")])
def test_damaged_safetensors_headers_are_one_line_naming_the_file(capsys, tmp_path, gpt2_dir, model_dir, kind,
                                                                   reason):
    """safetensors' own SafetensorError came out raw from a Hugging Face directory (an export said it in a line)."""
    model = copy_of(gpt2_dir, tmp_path / "hf")
    damage_header(model / "model.safetensors", kind)
    status, _, err = generate_prompt(capsys, model)
    assert_one_line_error(status, err, model / "model.safetensors",
                          f"not a readable safetensors file (Error while deserializing header: {reason}")
    exported = copy_of(model_dir, tmp_path / "exported")
    damage_header(exported / "model.safetensors", kind)
    status, _, err = run_cli(capsys, "generate", "--model", str(exported), "--prompt", "MKV")
    assert_one_line_error(status, err, exported / "model.safetensors", "not a readable safetensors file")
