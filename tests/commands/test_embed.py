"""`biotf embed` / `biotf plot` through the real CLI: every format, long records, one-line errors, nothing half-written."""

from __future__ import annotations

import json
import re
import sys

import numpy as np
import pytest

from biotf.cli import main
from biotf.io.embeddings import npz_text
from biotf.tokenizers import AminoAcidTokenizer
from tiny_models import save_tiny_protein_model

FASTA = ">P1 Nucleus-S test\nMKVLAAGIVG\n>P2 Cytoplasm-U test\nMSTNPKPQRKTKRNTNRRPQDVKFPGG\n>P3 Nucleus-M test\nMA\n"


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return save_tiny_protein_model(tmp_path_factory.mktemp("models") / "tiny")


def embed(capsys, *args: str) -> tuple[int, str, str]:
    status = main(["embed", "--no-progress", *args])
    captured = capsys.readouterr()
    return status, captured.out, captured.err


def test_every_format_with_summary_and_map(capsys, tmp_path, model_dir):
    fasta = tmp_path / "in.fasta"
    fasta.write_text(FASTA)
    outputs = {}
    for suffix in (".npz", ".parquet", ".h5ad"):
        out = tmp_path / f"e{suffix}"
        status, _, err = embed(capsys, "--model", str(model_dir), "--input", str(fasta), "--output", str(out),
                               "--layer", "all")
        assert status == 0, err
        assert "3 records, 39 tokens" in err and "1 chunked, 0 truncated" in err
        outputs[suffix] = out
    import anndata
    import pandas as pd

    npz = np.load(outputs[".npz"])
    frame = pd.read_parquet(outputs[".parquet"])
    adata = anndata.read_h5ad(outputs[".h5ad"])
    assert npz_text(npz, "ids").tolist() == frame["id"].tolist() == adata.obs_names.tolist() == ["P1", "P2", "P3"]
    assert adata.obs["description"].tolist()[0] == "Nucleus-S test"
    np.testing.assert_array_equal(npz["embeddings"], adata.X)
    np.testing.assert_array_equal(np.stack(frame["layer_0"].to_numpy()), adata.obsm["layer_0"])


def test_map_from_embed_and_from_plot(capsys, tmp_path, model_dir):
    fasta = tmp_path / "in.fasta"
    fasta.write_text(FASTA)
    status, _, err = embed(capsys, "--model", str(model_dir), "--input", str(fasta), "--output", str(tmp_path / "e.npz"),
                           "--plot", str(tmp_path / "map.png"), "--color", "description",
                           "--label-pattern", r"^(\S+?)-[MSU]\b")
    assert status == 0 and "map (pca: 3 records, too few for UMAP's 15 neighbours)" in err
    assert (tmp_path / "map.png").read_bytes()[:4] == b"\x89PNG"
    status = main(["plot", str(tmp_path / "e.npz"), "--color", "nothing"])
    assert status == 2 and "label column 'nothing' not found" in capsys.readouterr().err
    assert not (tmp_path / "e.png").exists()


@pytest.mark.parametrize("umap_importable", [False, pytest.param(True, marks=pytest.mark.slow)])
@pytest.mark.parametrize("records", [1, 2, 3, 500])
def test_embed_plot_on_any_number_of_records_names_its_projection(capsys, monkeypatch, tmp_path, model_dir, records,
                                                                  umap_importable):
    """`embed --plot` draws 1, 2, 3 or 500 records whether or not umap-learn imports (once, 3 records crashed in
    UMAP's spectral start), and the summary and the picture's title name the projection and why it was chosen."""
    if umap_importable:
        pytest.importorskip("umap")
    else:
        monkeypatch.setitem(sys.modules, "umap", None)
    import biotf.analysis.plot as plot

    titles = []
    draw = plot.plot_map
    monkeypatch.setattr(plot, "plot_map", lambda coordinates, colors, path, title, *rest: (
        titles.append(title), draw(coordinates, colors, path, title, *rest))[1])
    fasta = tmp_path / "in.fasta"
    rng = np.random.default_rng(0)
    residues = list("ACDEFGHIKLMNPQRSTVWY")
    fasta.write_text("".join(f">p{i}\n{''.join(rng.choice(residues, 12))}\n" for i in range(records)))
    status, _, err = embed(capsys, "--model", str(model_dir), "--input", str(fasta), "--output",
                           str(tmp_path / "e.npz"), "--plot", str(tmp_path / "map.png"))
    assert status == 0, err
    few = f"pca: {records} record{'s' if records > 1 else ''}, too few for UMAP's 15 neighbours"
    expected = {(True, True): "umap: umap-learn is installed",
                (True, False): "pca: umap-learn is not installed"}.get((records > 15, umap_importable), few)
    assert f"map ({expected}) -> {tmp_path / 'map.png'}" in err
    method, reason = expected.split(": ")
    assert titles == [f"e.npz: {records} record{'s' if records > 1 else ''}, embeddings\n{method.upper()} ({reason})"]
    assert (tmp_path / "map.png").read_bytes()[:4] == b"\x89PNG"


def test_embed_plot_checks_its_colour_before_embedding(capsys, tmp_path, model_dir):
    """A --color the input lacks, or a --label-pattern that is no regex, is one line before anything is embedded
    (the map comes after the embedding, which once ran to its end first)."""
    fasta = tmp_path / "in.fasta"
    fasta.write_text(FASTA)
    for extra, message in ((["--color", "nothing"], f"--color: label column 'nothing' not found in {fasta} "
                                                    "(columns: id, description)"),
                           (["--color", "description", "--label-pattern", "(["], "--label-pattern")):
        status, _, err = embed(capsys, "--model", str(model_dir), "--input", str(fasta), "--output",
                               str(tmp_path / "e.npz"), "--plot", str(tmp_path / "map.png"), *extra)
        assert status == 2 and len(err.splitlines()) == 1 and message in err, err
        assert not (tmp_path / "e.npz").exists() and not (tmp_path / "map.png").exists()


def test_long_records_truncated_or_refused(capsys, tmp_path, model_dir):
    fasta = tmp_path / "in.fasta"
    fasta.write_text(FASTA)
    status, _, err = embed(capsys, "--model", str(model_dir), "--input", str(fasta), "--output", str(tmp_path / "t.npz"),
                           "--pool", "none", "--long", "truncate")
    assert status == 0 and "0 chunked, 1 truncated (13 tokens cut)" in err
    assert np.load(tmp_path / "t.npz")["offsets"].tolist() == [0, 10, 24, 26]
    status, _, err = embed(capsys, "--model", str(model_dir), "--input", str(fasta), "--output", str(tmp_path / "x.npz"),
                           "--long", "error")
    assert status == 2 and re.search(r"record 'P2' .* 27 tokens", err)
    assert not (tmp_path / "x.npz").exists()


def test_reading_past_the_trained_length_warns_in_one_line(capsys, tmp_path, model_dir):
    """The RoPE model was trained with max_seq_len 16: --max-length 40 reads P2 (29 tokens) in one window, with one
    warning line naming 16."""
    fasta = tmp_path / "in.fasta"
    fasta.write_text(FASTA)
    status, _, err = embed(capsys, "--model", str(model_dir), "--input", str(fasta), "--output", str(tmp_path / "l.npz"),
                           "--max-length", "40")
    assert status == 0 and "0 chunked" in err, err
    warnings = [line for line in err.splitlines() if "warning" in line]
    assert len(warnings) == 1 and warnings[0].startswith("biotf embed: warning: max_length=40 reads past the 16 "
                                                         "tokens this model was trained with"), err


def _mismatched_tokenizer(model_dir, tmp_path):
    broken = tmp_path / "mismatch"
    broken.mkdir()
    for name in ("config.json", "model.safetensors"):
        (broken / name).write_bytes((model_dir / name).read_bytes())
    AminoAcidTokenizer(unknown="to_unk").save(broken)
    return broken


def _without_tokenizer(model_dir, tmp_path):
    broken = tmp_path / "no_tokenizer"
    broken.mkdir()
    for name in ("config.json", "model.safetensors"):
        (broken / name).write_bytes((model_dir / name).read_bytes())
    return broken


@pytest.mark.parametrize("case, message", [
    ("empty input", r"empty\.fasta: no records found"),
    ("unreadable input", r"missing\.fasta does not exist"),
    ("bad extension", r"unsupported extension '\.csv' \(allowed: \.npz, \.parquet, \.h5ad\)"),
    ("no tokenizer", r"has no tokenizer\.json"),
    ("tokenizer mismatch", r"tokenizer mismatch.*fingerprint"),
    ("bad layer", r"--layer.*allowed"),
])
def test_bad_input_is_one_line_status_2_and_no_output(capsys, tmp_path, model_dir, case, message):
    fasta = tmp_path / "in.fasta"
    fasta.write_text(FASTA)
    (tmp_path / "empty.fasta").write_bytes(b"")
    model, source, output, extra = model_dir, fasta, tmp_path / "out" / "e.npz", []
    if case == "empty input":
        source = tmp_path / "empty.fasta"
    elif case == "unreadable input":
        source = tmp_path / "missing.fasta"
    elif case == "bad extension":
        output = tmp_path / "out" / "e.csv"
    elif case == "no tokenizer":
        model = _without_tokenizer(model_dir, tmp_path)
    elif case == "tokenizer mismatch":
        model = _mismatched_tokenizer(model_dir, tmp_path)
    else:
        extra = ["--layer", "last"]
    status, out, err = embed(capsys, "--model", str(model), "--input", str(source), "--output", str(output), *extra)
    assert status == 2 and out == ""
    assert len(err.strip().splitlines()) == 1 and err.startswith("biotf embed: error: ")
    assert re.search(message, err), err
    assert not output.parent.exists() or list(output.parent.iterdir()) == []  # no temporary or spool left


def test_tokenizer_options_change_a_policy_of_the_models_tokenizer(capsys, tmp_path, model_dir):
    """Translated genes end in `*`: the error's hint (stop='strip_terminal') is reachable from embed with --option;
    the stripped record embeds exactly as the one without `*`, and the summary and info count it."""
    fasta = tmp_path / "orfs.fasta"
    fasta.write_text(">a\nMKVLAAGIVG*\n>b\nMKVLAAGIVG\n")
    status, _, err = embed(capsys, "--model", str(model_dir), "--input", str(fasta), "--output", str(tmp_path / "x.npz"))
    assert status == 2 and "record 'a', position 10" in err and "stop='strip_terminal'" in err
    out = tmp_path / "e.npz"
    status, _, err = embed(capsys, "--model", str(model_dir), "--input", str(fasta), "--output", str(out),
                           "--option", "stop=strip_terminal")
    assert status == 0, err
    assert "stop_stripped=1" in err
    data = np.load(out, allow_pickle=False)
    np.testing.assert_array_equal(data["embeddings"][0], data["embeddings"][1])
    info = json.loads(str(data["info"]))
    assert info["tokenizer_options"] == {"stop": "strip_terminal"}
    for option, message in (("colour=red", "invalid --option colour='red': not an option of tokenizer "
                                            "'protein'"),
                            ("stop=drop", "invalid --option stop='drop' (allowed: error | strip_terminal | "
                                          "to_unk)")):
        status, _, err = embed(capsys, "--model", str(model_dir), "--input", str(fasta), "--output",
                               str(tmp_path / "y.npz"), "--option", option)
        assert status == 2 and err.count("\n") == 1 and message in err, err


def test_packing_writes_the_unpacked_vectors(capsys, tmp_path, model_dir):
    fasta = tmp_path / "in.fasta"
    fasta.write_text(FASTA)
    for name, extra in (("plain.npz", ()), ("packed.npz", ("--packing",))):
        status, _, err = embed(capsys, "--model", str(model_dir), "--input", str(fasta), "--output",
                               str(tmp_path / name), "--layer", "all", *extra)
        assert status == 0, err
    plain, packed = np.load(tmp_path / "plain.npz"), np.load(tmp_path / "packed.npz")
    assert npz_text(packed, "ids").tolist() == npz_text(plain, "ids").tolist()
    np.testing.assert_allclose(packed["embeddings"], plain["embeddings"], rtol=0, atol=1e-5)
    assert [json.loads(str(data["info"]))["packing"] for data in (plain, packed)] == [False, True]  # provenance
