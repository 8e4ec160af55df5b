"""`biotf contacts fit` fits Rao et al.'s L1 logistic regression on real chains and saves the model with the head,
which `biotf contacts` then applies; `biotf contacts evaluate` reports precision at L, L/2, L/5 by range, beside a
no-model prior. Features are recomputed here from `encode(output_attentions=True)`, not from the streaming path."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from biotf.api import Model
from biotf.cli import main
from biotf.structure.chains import Chain, read_chain
from biotf.structure.contact_precision import precisions

TRAIN = ["2xcjA", "3a4rA"]  # 84 and 79 residues: within the tiny model's 128 positions
L1_C = 5.0  # a weak penalty on a random model's weak signal: some weights come out 0 (L1), some do not


def reference_features(model, tokenizer, sequence: str) -> np.ndarray:
    """(L, L, layers x heads), layer-major: APC(A + A^T) of every map over the residues, computed from the full
    attention tuple the model returns (special tokens excluded before symmetrising, as HF's head does)."""
    ids = torch.tensor([tokenizer.encode(sequence)])
    start = next(at for at in range(ids.shape[1]) if tokenizer.encode(sequence, False)[0] == ids[0, at])
    with torch.no_grad():
        attentions = model.encode(ids, output_attentions=True).attentions
    maps = torch.stack(attentions, 1)[0].flatten(0, 1)[:, start:start + len(sequence), start:start + len(sequence)]
    maps = maps + maps.transpose(-1, -2)
    maps = maps - maps.sum(-1, keepdim=True) * maps.sum(-2, keepdim=True) / maps.sum((-1, -2), keepdim=True)
    return maps.permute(1, 2, 0).double().numpy()


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    """A tiny random protein model whose attention is sharp enough (init_std 0.3) to vary from pair to pair."""
    from biotf.checkpoint import save_pretrained
    from biotf.model import Transformer, TransformerConfig
    from biotf.tokenizers import build_tokenizer

    tokenizer = build_tokenizer({"kind": "protein"})
    torch.manual_seed(0)
    model = Transformer(TransformerConfig.preset("tiny", causal=False, vocab_size=tokenizer.vocab_size,
                                                 init_std=0.3))
    return save_pretrained(model, tokenizer, tmp_path_factory.mktemp("fit-base") / "base")


@pytest.fixture(scope="module")
def fitted(base, shared_data, tmp_path_factory):
    root = tmp_path_factory.mktemp("fit")
    (root / "train.txt").write_text("\n".join(TRAIN) + "\n")
    before = {p.name: p.read_bytes() for p in base.iterdir()}
    status = main(["contacts", "fit", "--model", str(base), "--structures",
                   str(shared_data / "structures"), "--train-list", str(root / "train.txt"), "--output",
                   str(root / "model"), "--l1-c", str(L1_C)])
    assert status == 0
    assert {p.name: p.read_bytes() for p in base.iterdir()} == before  # the input is untouched
    return root


def test_fit_is_the_l1_regression_on_every_pair_at_separation_six_and_saves_the_head(fitted, base, shared_data):
    from sklearn.linear_model import LogisticRegression

    loaded = Model.load(base)
    model, tokenizer = loaded.network, loaded.tokenizer
    features, labels = [], []
    for name in TRAIN:
        chain = read_chain(shared_data / "structures" / f"{name}.pdb.gz")
        rows, columns = np.triu_indices(len(chain.sequence), k=6)
        features.append(reference_features(model, tokenizer, chain.sequence)[rows, columns])
        labels.append(chain.contacts()[rows, columns])
    expected = LogisticRegression(l1_ratio=1.0, C=L1_C, solver="liblinear", random_state=0, max_iter=1000)
    expected.fit(np.concatenate(features), np.concatenate(labels))
    saved = Model.load(fitted / "model").network
    assert saved.config.contact_head and json.loads((fitted / "model" / "config.json").read_text())["model"][
        "contact_head"]
    weight = saved.contact_head.regression.weight.detach().double().numpy()[0]
    assert 0 < np.count_nonzero(weight) < len(weight)
    np.testing.assert_allclose(weight, expected.coef_[0], atol=1e-3)
    assert abs(saved.contact_head.regression.bias.item() - expected.intercept_[0]) < 1e-3
    trunk = {k: v for k, v in saved.state_dict().items() if not k.startswith("contact_head.")}
    assert all(torch.equal(v, model.state_dict()[k]) for k, v in trunk.items())  # only the head is new


def test_biotf_contacts_applies_the_fitted_head_in_its_plain_and_predict_forms(fitted, shared_data, tmp_path,
                                                                                capsys):
    chain = read_chain(shared_data / "structures" / "2xcjA.pdb.gz")
    fasta = tmp_path / "chain.fasta"
    fasta.write_text(f">2xcjA\n{chain.sequence}\n")
    for form, name in (([], "plain.npz"), (["predict"], "predict.npz")):
        assert main(["contacts", *form, "--model", str(fitted / "model"), "--input", str(fasta), "--output",
                     str(tmp_path / name)]) == 0, capsys.readouterr().err
    loaded = Model.load(fitted / "model")
    saved, tokenizer = loaded.network, loaded.tokenizer
    head = saved.contact_head.regression
    logits = reference_features(saved, tokenizer, chain.sequence) @ head.weight.detach().double().numpy()[0]
    expected = 1 / (1 + np.exp(-(logits + head.bias.item())))
    with np.load(tmp_path / "plain.npz") as plain, np.load(tmp_path / "predict.npz") as predict:
        assert np.array_equal(plain["contacts/2xcjA"], predict["contacts/2xcjA"])
        np.testing.assert_allclose(plain["contacts/2xcjA"], expected, atol=1e-5)


def test_fit_refuses_an_existing_model_directory_before_any_work(base, shared_data, tmp_path, capsys):
    status = main(["contacts", "fit", "--model", str(base), "--structures",
                   str(shared_data / "structures"), "--output", str(base)])
    err = capsys.readouterr().err
    assert status == 2 and len(err.strip().splitlines()) == 1
    assert "already exists and is not empty; choose a new one" in err
    status = main(["contacts", "fit", "--model", str(base), "--structures", str(shared_data / "structures"),
                   "--output", str(tmp_path / "new"), "--l1-c", "0"])
    err = capsys.readouterr().err
    assert status == 2 and "invalid --l1-c=0.0 (allowed: a finite number > 0)" in err and not (tmp_path / "new").exists()


@pytest.mark.parametrize("value", ["inf", "nan", "-1"])
def test_fit_refuses_an_l1_c_that_is_not_finite_and_positive_before_any_work(base, shared_data, tmp_path, capsys,
                                                                              value):
    status = main(["contacts", "fit", "--model", str(base), "--structures", str(shared_data / "structures"),
                   "--output", str(tmp_path / "new"), "--l1-c", value])
    err = capsys.readouterr().err
    assert status == 2 and len(err.strip().splitlines()) == 1 and "(allowed: a finite number > 0)" in err, err
    assert not (tmp_path / "new").exists()


def test_fit_on_chains_without_pairs_at_the_minimum_separation_says_so_before_the_model_runs(base, shared_data,
                                                                                              tmp_path, capsys,
                                                                                              monkeypatch):
    """Two 6-residue chains have no pair i, j >= i + 6: not "0 residue pairs are all non-contacts"."""
    import gzip

    from biotf.structure import fit

    structures = tmp_path / "short"
    structures.mkdir()
    for name in TRAIN:
        with gzip.open(shared_data / "structures" / f"{name}.pdb.gz", "rt") as handle:
            atoms = [line for line in handle if line.startswith("ATOM")]
        first = sorted({int(line[22:26]) for line in atoms})[:6]
        (structures / f"{name}.pdb").write_text("".join(line for line in atoms if int(line[22:26]) in first))
    monkeypatch.setattr(fit, "pair_features", None)  # the model must not run
    status = main(["contacts", "fit", "--model", str(base), "--structures", str(structures),
                   "--output", str(tmp_path / "new")])
    err = capsys.readouterr().err
    assert status == 2 and len(err.strip().splitlines()) == 1, err
    assert "the structures have no residue pair at separation >= 6 with both residues observed" in err
    assert not (tmp_path / "new").exists()


def test_the_plain_form_without_its_arguments_is_a_usage_error(capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["contacts", "--model", "m"])
    assert exit_.value.code == 2
    assert "the following arguments are required: --input, --output" in capsys.readouterr().err


def synthetic_chain(length: int, contacts: list[tuple[int, int]], unknown: tuple[int, ...] = ()) -> Chain:
    """Residues 100 angstrom apart on a line, but the listed pairs, put on top of each other via a shared spot."""
    positions = np.arange(length, dtype=np.float64)[:, None] * np.array([100.0, 0, 0])
    positions = positions + np.zeros((length, 3))
    for i, j in contacts:
        positions[j] = positions[i] + np.array([0, 1.0, 0])
    positions[list(unknown)] = np.nan
    return Chain("synthetic", "A" * length, positions)


def test_precision_counts_the_top_k_of_each_range_and_unscorable_pairs_as_misses():
    """L = 50: k = 50, 25, 10. One long-range contact (0, 40) ranked first: P@L/5 = 1/10. A contact with an
    unknown residue is never scored, so a perfect predictor of the rest still gets 0 in the short range."""
    chain = synthetic_chain(50, [(0, 40), (10, 18)], unknown=(18,))
    truth = chain.contacts()
    assert truth[0, 40] and not truth[10, 18]
    scores = np.zeros((50, 50))
    scores[0, 40] = scores[40, 0] = 1.0
    found = precisions(scores, chain)
    assert found["long"] == (1 / 50, 1 / 25, 1 / 10) and found["short"] == (0.0, 0.0, 0.0)
    assert found["medium"] == (0.0, 0.0, 0.0)


def test_evaluate_writes_per_chain_rows_and_means_for_the_model_and_the_prior(fitted, shared_data, tmp_path,
                                                                               capsys):
    output = tmp_path / "metrics.tsv"
    status = main(["contacts", "evaluate", "--model", str(fitted / "model"), "--structures",
                   str(shared_data / "structures"), "--list", str(fitted / "train.txt"), "--output", str(output)])
    captured = capsys.readouterr()
    assert status == 0, captured.err
    lines = [line.split("\t") for line in output.read_text().splitlines()]
    assert lines[0] == ["chain", "length", "predictor", "range", "P@L", "P@L/2", "P@L/5"]
    rows = lines[1:]
    assert len(rows) == 2 * 2 * 3 + 2 * 3
    assert [r[0] for r in rows[:6]] == ["2xcjA"] * 6 and rows[0][1] == "84"
    for predictor in ("model", "separation prior"):
        for band in ("short", "medium", "long"):
            chains = [r for r in rows if r[2] == predictor and r[3] == band and r[0] != "mean"]
            (mean,) = [r for r in rows if r[2] == predictor and r[3] == band and r[0] == "mean"]
            assert len(chains) == 2 and mean[1] == "2"
            for column in (4, 5, 6):
                assert abs(float(mean[column]) - np.mean([float(r[column]) for r in chains])) < 1e-4
    prior_long = [r for r in rows if r[:4] == ["2xcjA", "84", "separation prior", "long"]][0]
    chain = read_chain(shared_data / "structures" / "2xcjA.pdb.gz")
    rows_, columns = np.triu_indices(84, k=24)
    first = np.lexsort((rows_, columns - rows_))[:84 // 5]  # closest first, then in sequence order
    assert float(prior_long[6]) == pytest.approx(chain.contacts()[rows_[first], columns[first]].mean(), abs=1e-4)
    assert "separation prior\tlong" in captured.out and "2 chains, 163 residues" in captured.err


def test_evaluate_plot_draws_each_chain_with_its_true_map_and_keeps_existing_pictures(fitted, shared_data, tmp_path,
                                                                                     capsys):
    from biotf.io.outputs import is_png

    arguments = ["contacts", "evaluate", "--model", str(fitted / "model"), "--structures",
                 str(shared_data / "structures"), "--list", str(fitted / "train.txt"), "--plot", str(tmp_path / "maps")]
    assert main(arguments) == 0, capsys.readouterr().err
    pictures = sorted((tmp_path / "maps").iterdir())
    assert [p.name for p in pictures] == ["2xcjA.png", "3a4rA.png"] and all(is_png(p) for p in pictures)
    before = {p.name: p.stat().st_mtime_ns for p in pictures}
    capsys.readouterr()
    assert main(arguments) == 2
    err = capsys.readouterr().err
    assert "2xcjA.png already exists; pass --overwrite" in err and len(err.strip().splitlines()) == 1
    assert {p.name: p.stat().st_mtime_ns for p in (tmp_path / "maps").iterdir()} == before
    assert main([*arguments, "--overwrite"]) == 0


def test_fit_refuses_a_stem_model_in_one_line(shared_data, tmp_path, capsys):
    """Attention over bins has no row per residue: refused before any chain is read or the model runs."""
    from biotf.checkpoint import save_pretrained
    from biotf.model import Transformer, TransformerConfig
    from biotf.tokenizers import AminoAcidTokenizer

    config = TransformerConfig(vocab_size=33, d_model=16, n_layers=1, n_heads=2, n_kv_heads=2, d_ff=32,
                               max_seq_len=128, causal=False, stem="conv")
    save_pretrained(Transformer(config), AminoAcidTokenizer(), tmp_path / "stem")
    status = main(["contacts", "fit", "--model", str(tmp_path / "stem"), "--structures",
                   str(shared_data / "structures"), "--output", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert status == 2 and len(err.strip().splitlines()) == 1
    assert "model.stem=conv" in err and "one attention row per residue" in err and not (tmp_path / "out").exists()


def test_evaluate_and_fit_say_how_far_they_are_into_a_file(fitted, base, shared_data, tmp_path, monkeypatch):
    """`contacts evaluate` was silent until its table (80 s on 15 chains): with stderr a file, the structures read,
    the residues mapped (to the total its summary counts) and the forward's layers come as plain lines, before the
    summary; `contacts fit` says the same of its structures and attention maps."""
    import re
    import sys

    from biotf.progress import SECONDS_VARIABLE

    monkeypatch.setenv(SECONDS_VARIABLE, "0")  # a line at every update
    log = tmp_path / "err.log"
    structures = str(shared_data / "structures")
    with open(log, "w") as handle:
        monkeypatch.setattr(sys, "stderr", handle)
        assert main(["contacts", "evaluate", "--model", str(fitted / "model"), "--structures", structures,
                     "--list", str(fitted / "train.txt")]) == 0
    lines = log.read_text().splitlines()
    assert [line.split(",")[0] for line in lines if line.startswith("reading ")] == [
        "reading structures: 1/2 structures (50%)", "reading structures: 2/2 structures (100%)"]
    residues = [line for line in lines if line.startswith("contacts structures: ")]
    assert any("layer" in line for line in residues)
    assert residues[-1].startswith("contacts structures: 163/163 residues (100%)")
    assert lines[-1] == f"{structures}: 2 chains, 163 residues (0 missing residues read as X, 0 non-standard " \
                        "residues as X, 1 numbering jumps between bonded residues)"
    with open(log, "w") as handle:
        monkeypatch.setattr(sys, "stderr", handle)
        assert main(["contacts", "fit", "--model", str(base), "--structures", structures, "--train-list",
                     str(fitted / "train.txt"), "--output", str(tmp_path / "refit"), "--l1-c", str(L1_C)]) == 0
    lines = log.read_text().splitlines()
    assert "reading structures: 2/2 structures (100%)" in [line.split(",")[0] for line in lines]
    assert any(re.match(r"attention maps: 2/2 chains \(100%\)", line) for line in lines)


def test_evaluate_loads_through_model_load_with_precision_and_option(fitted, shared_data, tmp_path, capsys):
    """`contacts evaluate` loads as every command does (`biotf.Model.load`): `--option` reaches the tokenizer and
    `--precision bf16` the network, whose long-range precision stays near fp32's."""
    arguments = ["contacts", "evaluate", "--model", str(fitted / "model"), "--structures",
                 str(shared_data / "structures"), "--list", str(fitted / "train.txt")]
    assert main([*arguments, "--output", str(tmp_path / "fp32.tsv")]) == 0
    assert main([*arguments, "--output", str(tmp_path / "bf16.tsv"), "--precision", "bf16",
                 "--option", "unknown=to_unk"]) == 0, capsys.readouterr().err
    fp32, bf16 = ([line.split("\t") for line in (tmp_path / name).read_text().splitlines()[1:]]
                  for name in ("fp32.tsv", "bf16.tsv"))
    assert [row[:4] for row in fp32] == [row[:4] for row in bf16]
    assert max(abs(float(a[6]) - float(b[6])) for a, b in zip(fp32, bf16)) <= 0.1
    assert main([*arguments, "--option", "unknown=sometimes"]) == 2
    assert "--option unknown" in capsys.readouterr().err
