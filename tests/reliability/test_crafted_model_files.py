"""Model and index files whose values are wrong in kind, not only in form: each is one line naming the file and the
field, never a silently changed answer.

- a sentence-transformers directory's `max_seq_length` that is no length (0, -1, "abc", 3.5; before: ignored, or cut
  to 3), a Pooling `word_embedding_dimension` that is not the model's width (before: accepted), a pooling flag that
  is no true / false (before: the mode was "not one biotf computes", naming no field);
- a manifest naming a file outside its directory: an index.json shard, a weights index's shard (before: read, its
  CRC-32 recorded beside it), as modules.json already refused; one check (`biotf.untrusted.contained`);
- `invalid_smiles=skip` where RDKit parses none of the SMILES (before: "found 0 classes", "only 0 groups").
(A Hugging Face config.json field of the wrong JSON type: `test_bad_files.py`, `CONFIG_FIELD_TYPES`.)"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

import biotf
from biotf.cli import main
from biotf.errors import BiotfError, CheckpointError, InputError

TEXT = ">p1\nMKVLAAGIVG\n>p2\nMSTNPKPQRKTKRNTNRR\n"


def sentence_directory(model_dir: Path, target: Path, pooling: dict, max_seq_length: object = 12) -> Path:
    """`model_dir` (a biotf export, 16 wide) as a sentence-transformers directory: modules.json, a Pooling module
    and sentence_bert_config.json, as `SentenceTransformer.save` lays them out."""
    directory = shutil.copytree(model_dir, target)
    (directory / "modules.json").write_text(json.dumps([
        {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
        {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"}]))
    (directory / "1_Pooling").mkdir()
    (directory / "1_Pooling" / "config.json").write_text(json.dumps(pooling))
    (directory / "sentence_bert_config.json").write_text(json.dumps({"max_seq_length": max_seq_length}))
    return directory


def embed(capsys, model: Path, tmp_path: Path) -> tuple[int, str]:
    fasta = tmp_path / "in.fasta"
    fasta.write_text(TEXT)
    status = main(["embed", "--no-progress", "--model", str(model), "--input", str(fasta), "--output",
                   str(tmp_path / "e.npz")])
    return status, capsys.readouterr().err


def one_line(status: int, err: str, *fragments: str) -> None:
    lines = [line for line in err.splitlines() if line.strip()]
    assert status == 2 and len(lines) == 1, err
    for fragment in fragments:
        assert fragment in lines[0], lines[0]


MEAN = {"word_embedding_dimension": 16, "pooling_mode": "mean"}


def test_a_valid_sentence_transformers_directory_is_cut_at_its_length(capsys, tmp_path, model_dir):
    status, err = embed(capsys, sentence_directory(model_dir, tmp_path / "st", MEAN), tmp_path)
    assert status == 0 and "0 chunked, 1 truncated" in err, err
    assert json.loads(str(np.load(tmp_path / "e.npz")["info"]))["max_length"] == 12


@pytest.mark.parametrize("length", [0, -1, "abc", 3.5, True])
def test_a_max_seq_length_that_is_no_length_is_refused(capsys, tmp_path, model_dir, length):
    directory = sentence_directory(model_dir, tmp_path / "st", MEAN, max_seq_length=length)
    one_line(*embed(capsys, directory, tmp_path), "sentence_bert_config.json", f"max_seq_length={length!r}",
             "an integer >= 1")
    assert not (tmp_path / "e.npz").exists()


@pytest.mark.parametrize("pooling, fragments", [
    ({"word_embedding_dimension": 8, "pooling_mode": "mean"},
     ("1_Pooling/config.json", "word_embedding_dimension=8", "(16)")),
    ({"word_embedding_dimension": 16, "pooling_mode_mean_tokens": "yes"},
     ("1_Pooling/config.json", "'pooling_mode_mean_tokens' is a string, expected true or false")),
    ({"word_embedding_dimension": "16", "pooling_mode": "mean"},
     ("1_Pooling/config.json", "'word_embedding_dimension' is a string")),
])
def test_a_pooling_config_of_another_model_or_kind_is_refused(capsys, tmp_path, model_dir, pooling, fragments):
    directory = sentence_directory(model_dir, tmp_path / "st", pooling)
    one_line(*embed(capsys, directory, tmp_path), *fragments)
    with pytest.raises(BiotfError, match=fragments[1].replace("(", r"\(").replace(")", r"\)")):
        biotf.Model.load(directory).embed("MKV")


def test_a_module_path_out_of_its_directory_is_refused(capsys, tmp_path, model_dir):
    directory = sentence_directory(model_dir, tmp_path / "st", MEAN)
    modules = json.loads((directory / "modules.json").read_text())
    modules[1]["path"] = "../elsewhere"
    (directory / "modules.json").write_text(json.dumps(modules))
    one_line(*embed(capsys, directory, tmp_path), "modules.json", "module path '../elsewhere' leaves the directory")


# --- manifests name their own files --------------------------------------------------------------
@pytest.fixture
def index(tmp_path) -> Path:
    from biotf.analysis.search.index import build_from_arrays

    vectors = np.random.default_rng(0).standard_normal((6, 4)).astype(np.float32)
    info = {"model_fingerprint": "m", "tokenizer_fingerprint": "t", "pool": "mean", "dim": 4, "layers": [1]}
    build_from_arrays(tmp_path / "index", vectors, [f"r{i}" for i in range(6)], info)
    return tmp_path / "index"


@pytest.mark.parametrize("escape", ["../outside/vectors-0.npy", "{absolute}"])
def test_an_index_json_shard_outside_the_index_is_refused(capsys, tmp_path, index, escape):
    """The shard file is a real one with its CRC-32 in index.json: only its place gives it away."""
    outside = tmp_path / "outside"
    outside.mkdir()
    shutil.copy(index / "vectors-0.npy", outside / "vectors-0.npy")
    name = escape.format(absolute=outside / "vectors-0.npy")
    meta = json.loads((index / "index.json").read_text())
    meta["shards"][0]["vectors"] = name
    meta["crc32"][name] = meta["crc32"].pop("vectors-0.npy")
    (index / "index.json").write_text(json.dumps(meta))
    (index / "vectors-0.npy").unlink()
    status = main(["search", "query", "--index", str(index), "--ids", "r0", "--output", str(tmp_path / "hits.tsv")])
    one_line(status, capsys.readouterr().err, "index.json", f"file {name!r} leaves the directory")
    assert not (tmp_path / "hits.tsv").exists()


def test_a_weights_index_shard_outside_the_directory_is_refused(tmp_path):
    pytest.importorskip("transformers")
    from tiny_models import save_tiny_gpt2

    model = save_tiny_gpt2(tmp_path / "gpt2")
    (tmp_path / "outside").mkdir()
    (model / "model.safetensors").rename(tmp_path / "outside" / "model.safetensors")
    from safetensors import safe_open

    with safe_open(tmp_path / "outside" / "model.safetensors", "pt") as handle:
        names = list(handle.keys())
    (model / "model.safetensors.index.json").write_text(json.dumps(
        {"metadata": {}, "weight_map": dict.fromkeys(names, "../outside/model.safetensors")}))
    with pytest.raises(CheckpointError, match=r"model.safetensors.index.json: shard '../outside/model.safetensors' "
                                              r"leaves the directory"):
        biotf.Model.load(model)


# --- skip that leaves out every record -------------------------------------------------------------
NOT_SMILES = ["MKVLAAGIVGQQ", "XXJJ1", "((", "C1CC", "MSTNPKPQRK", "ZZ"]


def test_skip_leaving_out_every_smiles_says_so_in_the_probe():
    pytest.importorskip("rdkit")
    from biotf.analysis.probe import run_probe

    ids = np.array([f"m{i}" for i in range(len(NOT_SMILES))])
    arrays = {"embeddings": np.random.default_rng(0).standard_normal((len(ids), 4)).astype(np.float32)}
    with pytest.raises(InputError, match=r"RDKit parses none of the 6 SMILES \(records 'm0', 'm1', 'm2', \.\.\.\): "
                                         r"invalid_smiles=skip would leave every record out"):
        run_probe(arrays, np.array(["a", "b"] * 3), np.array(NOT_SMILES), ids, "smiles", folds=2,
                  invalid_smiles="skip")


def test_skip_leaving_out_every_smiles_says_so_in_a_scaffold_split():
    pytest.importorskip("rdkit")
    from biotf.data.splits import split_groups

    with pytest.raises(InputError, match=r"RDKit parses none of the 6 SMILES .*invalid_smiles=skip would leave "
                                         r"every record out"):
        split_groups("scaffold", NOT_SMILES, [f"m{i}" for i in range(6)], invalid_smiles="skip")
    # one parsable SMILES among them: the others are left out and counted, as before
    groups = split_groups("scaffold", ["c1ccccc1", *NOT_SMILES[1:]], [f"m{i}" for i in range(6)],
                          invalid_smiles="skip")
    assert len(groups) == 6
