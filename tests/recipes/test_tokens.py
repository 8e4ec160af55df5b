"""`biotf tokens`: the leave-one-out ridge R^2 against sklearn's, the shipped amino-acid scales, and the command end
to end on a tiny protein model (every token a row, missing tokens counted, the output rule, the PNG)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from biotf_recipes.scales import AMINO_ACID_SCALES, AMINO_ACIDS
from biotf_recipes.tokens import analyse_tokens, embedding_rows, initial_model, loo_ridge_r2
from biotf.cli import main
from biotf.errors import ConfigError

TOLERANCE = 1e-9  # float64 closed form against sklearn's n refits


def sklearn_loo_r2(features: np.ndarray, targets: np.ndarray, alpha: float) -> float:
    from sklearn.linear_model import Ridge
    from sklearn.metrics import r2_score
    from sklearn.model_selection import LeaveOneOut, cross_val_predict

    centred = features - features.mean(0)
    scaled = centred / np.sqrt((centred ** 2).sum(1).mean())
    predicted = cross_val_predict(Ridge(alpha=alpha), scaled, targets, cv=LeaveOneOut())
    return r2_score(targets, predicted)


@pytest.mark.parametrize("shape", [(20, 64), (30, 5)])  # fewer tokens than dimensions (the usual case), and more
@pytest.mark.parametrize("alpha", [0.1, 1.0, 10.0])
def test_loo_ridge_r2_is_sklearn_ridge_refitted_without_each_token(shape, alpha):
    rng = np.random.default_rng(shape[0])
    features = rng.normal(0.0, 0.02, shape) + 3.0  # offset and scale must not matter
    targets = features[:, :3] @ np.array([40.0, -20.0, 10.0]) + rng.normal(0.0, 0.3, shape[0])
    assert loo_ridge_r2(features, targets, alpha) == pytest.approx(sklearn_loo_r2(features, targets, alpha),
                                                                   abs=TOLERANCE)


def test_loo_ridge_r2_by_hand_on_three_points():
    """One feature x = (-1, 0, 1), divided by its RMS distance from the mean (sqrt(2/3)); each point is predicted by
    the ridge line through the other two: slope Sxy / (Sxx + alpha), through their means."""
    x = np.array([[-1.0], [0.0], [1.0]])
    y = np.array([0.0, 1.0, 3.0])
    scaled = x[:, 0] / np.sqrt(2 / 3)
    held_out = []
    for i in range(3):
        keep = np.arange(3) != i
        xs, ys = scaled[keep], y[keep]
        slope = ((xs - xs.mean()) * (ys - ys.mean())).sum() / (((xs - xs.mean()) ** 2).sum() + 1.0)
        held_out.append(ys.mean() + slope * (scaled[i] - xs.mean()))
    expected = 1 - ((y - held_out) ** 2).sum() / ((y - y.mean()) ** 2).sum()
    assert loo_ridge_r2(x, y, 1.0) == pytest.approx(expected, abs=1e-12)


def test_the_shipped_scales_hold_the_published_values():
    assert all(sorted(scale) == sorted(AMINO_ACIDS) for scale in AMINO_ACID_SCALES.values())
    kd, charge, volume = (AMINO_ACID_SCALES[name] for name in ("hydrophobicity_kd", "charge_ph7", "volume_a3"))
    assert (kd["I"], kd["V"], kd["R"], kd["G"], kd["W"]) == (4.5, 4.2, -4.5, -0.4, -0.9)  # Kyte & Doolittle Table 2
    assert {aa for aa, q in charge.items() if q} == set("DEKRH")
    assert (charge["D"], charge["E"], charge["K"], charge["R"], charge["H"]) == (-1.0, -1.0, 1.0, 1.0, 0.1)
    assert (volume["G"], volume["A"], volume["W"], volume["L"]) == (60.1, 88.6, 227.8, 166.7)  # Zamyatnin 1972


@pytest.fixture(scope="module")
def protein_model(tmp_path_factory):
    from biotf.checkpoint import save_pretrained
    from biotf.model import Transformer, TransformerConfig
    from biotf.tokenizers import build_tokenizer

    tokenizer = build_tokenizer({"kind": "protein"})
    torch.manual_seed(3)
    model = Transformer(TransformerConfig.preset("tiny", causal=False, vocab_size=tokenizer.vocab_size))
    return save_pretrained(model, tokenizer, tmp_path_factory.mktemp("tokens") / "model"), model


def tokens(capsys, *arguments) -> tuple[int, str, str]:
    status = main(["tokens", *map(str, arguments)])
    captured = capsys.readouterr()
    return status, captured.out, captured.err


def read_tsv(path) -> list[list[str]]:
    return [line.split("\t") for line in path.read_text().splitlines()]


def test_tokens_writes_every_token_and_the_r2_of_each_scale_trained_and_at_init(protein_model, tmp_path, capsys):
    directory, model = protein_model
    output = tmp_path / "tokens.tsv"
    status, out, err = tokens(capsys, "--model", directory, "--output", output, "--plot", tmp_path / "tokens.png")
    assert status == 0, err
    rows = read_tsv(output)
    assert rows[0] == ["token", "id", "trained_pc1", "trained_pc2", "init_pc1", "init_pc2", "hydrophobicity_kd",
                       "charge_ph7", "volume_a3"]
    assert len(rows) == 1 + 33 and [int(r[1]) for r in rows[1:]] == list(range(33))
    by_token = {r[0]: r for r in rows[1:]}
    assert by_token["I"][6:] == ["4.5", "0", "166.7"] and by_token["<cls>"][6:] == ["", "", ""]
    assert "without any value: 13 ('<cls>', '<pad>'" in err and "in the table but not in the model: none" in err
    scores = read_tsv(tmp_path / "tokens.r2.tsv")
    assert scores[0] == ["property", "tokens_scored", "tokens_without_value", "r2_trained", "r2_init", "ridge_alpha",
                         "init_seed"]
    assert out.splitlines() == ["\t".join(row) for row in scores]
    letters = [by_token[aa] for aa in AMINO_ACIDS]
    ids = [int(r[1]) for r in letters]
    init = initial_model(model.config, 0)
    for row, name in zip(scores[1:], AMINO_ACID_SCALES):
        values = np.array([AMINO_ACID_SCALES[name][aa] for aa in AMINO_ACIDS])
        assert row[:3] == [name, "20", "13"]
        assert float(row[3]) == pytest.approx(loo_ridge_r2(embedding_rows(model, 33)[ids], values), abs=1e-4)
        assert float(row[4]) == pytest.approx(loo_ridge_r2(embedding_rows(init, 33)[ids], values), abs=1e-4)
    assert (tmp_path / "tokens.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_python_caller_passes_a_source_or_the_model_it_loaded(protein_model, monkeypatch):
    """A source is loaded through `biotf.Model.load` (as every command loads), after the job's own checks."""
    from biotf import Model

    directory, _ = protein_model
    loads, load = [], Model.load

    def counted_load(cls, source, **options):
        loads.append(source)
        return load(source, **options)

    monkeypatch.setattr(Model, "load", classmethod(counted_load))
    with pytest.raises(ConfigError):
        analyse_tokens(directory, alpha=0)
    assert loads == []
    by_source = analyse_tokens(directory)
    assert loads == [directory]
    by_model = analyse_tokens(Model.load(directory))
    assert by_source.model == by_model.model == str(directory)
    assert [(s.name, s.r2) for s in by_source.scores] == [(s.name, s.r2) for s in by_model.scores]


def test_the_model_at_init_is_the_seeded_architecture_and_leaves_the_global_seed_alone(protein_model):
    _, model = protein_model
    torch.manual_seed(11)
    expected_next = torch.rand(1)
    torch.manual_seed(11)
    first = initial_model(model.config, 0)
    assert torch.rand(1) == expected_next
    assert torch.equal(first.embed.weight, initial_model(model.config, 0).embed.weight)
    assert not torch.equal(first.embed.weight, initial_model(model.config, 1).embed.weight)


def test_a_property_table_reports_missing_tokens_both_ways(protein_model, tmp_path, capsys):
    directory, _ = protein_model
    table = tmp_path / "props.csv"
    table.write_text("token,size,id\nA,1,1\nC,2,\nD,3,0\nE,5,1\nJ,9,0\n")  # J: not a token of the model
    status, out, err = tokens(capsys, "--model", directory, "--property-table", table, "--output",
                              tmp_path / "t.tsv")
    assert status == 0, err
    assert "4 with a value in" in err and "without any value: 29 (" in err
    assert "in the table but not in the model: 1 ('J')" in err
    rows = {r[0]: r for r in read_tsv(tmp_path / "t.r2.tsv")[1:]}
    assert rows["size"][1:3] == ["4", "29"] and rows["id"][1:3] == ["3", "30"]  # a column named id is a property


@pytest.mark.parametrize(("content", "message"), [
    ("token,gc\nAAA,0\nGGG,1\n", "none of its 2 tokens is a token of the model"),
    ("token,size\nA,1\nC,x\nD,2\n", "row 2 (token 'C'): size is 'x', not a number"),
    ("token,size\nA,1\nC,2\nA,3\n", "row 3 (token 'A'): the token is in the table twice"),
    ("token,size\nA,1\nC,2\n", "property 'size' has 2 values on tokens of the model"),
    ("token,size\nA,1\nC,1\nD,1\n", "property 'size' has the one value 1 for every token"),
])
def test_a_bad_property_table_is_refused_in_one_line_before_anything_is_written(protein_model, tmp_path, capsys,
                                                                                content, message):
    directory, _ = protein_model
    table = tmp_path / "props.csv"
    table.write_text(content)
    status, _, err = tokens(capsys, "--model", directory, "--property-table", table, "--output", tmp_path / "t.tsv")
    assert status == 2 and len(err.strip().splitlines()) == 1 and message in err, err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["props.csv"]


def test_outputs_follow_the_output_rule_before_any_work(protein_model, tmp_path, capsys):
    directory, _ = protein_model
    (tmp_path / "t.r2.tsv").write_text("keep me")
    status, _, err = tokens(capsys, "--model", directory, "--output", tmp_path / "t.tsv")
    assert status == 2 and "t.r2.tsv already exists; pass --overwrite" in err
    assert not (tmp_path / "t.tsv").exists() and (tmp_path / "t.r2.tsv").read_text() == "keep me"
    status, _, err = tokens(capsys, "--model", directory, "--output", tmp_path / "u.tsv", "--plot", tmp_path / "u.jpg")
    assert status == 2 and "a map is a PNG picture, so its name must end in .png" in err
    status, _, err = tokens(capsys, "--model", directory, "--output", tmp_path / "u.tsv", "--ridge-alpha", "0")
    assert status == 2 and "--ridge-alpha" in err and not (tmp_path / "u.tsv").exists()
    status, _, err = tokens(capsys, "--model", directory, "--output", tmp_path / "t.tsv", "--overwrite")
    assert status == 0, err
    assert (tmp_path / "t.r2.tsv").read_text().startswith("property\t")
