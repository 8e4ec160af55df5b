"""`biotf generate evaluate`: the MOSES metrics of a small generated file against tiny reference files (counts by
hand, SNN and FCD against direct computations), the reference cache, and one-line refusals of bad input."""

from __future__ import annotations

import csv
import gzip
import json
import re
from itertools import islice
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("rdkit")
from rdkit import Chem, DataStructs  # noqa: E402
from rdkit.Chem import AllChem  # noqa: E402

from biotf.cli import main  # noqa: E402
from biotf.progress import SECONDS_VARIABLE  # noqa: E402

PROGRESS_LINE = re.compile(r"^([\w ]+ \S+): ([\d,]+)/([\d,]+) molecules")
DATA = Path(__file__).resolve().parents[4] / "shared" / "data" / "smiles"


def head(name: str, n: int, skip: int = 0) -> list[str]:
    path = DATA / name
    if not path.exists():
        pytest.skip(f"{path} is not here")
    with gzip.open(path, "rt") as handle:
        return [line.strip() for line in islice(handle, 1 + skip, 1 + skip + n)]


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("moses")
    test, scaffolds, train = head("moses_test.csv.gz", 30), head("moses_test_scaffolds.csv.gz", 30), \
        head("moses_train.csv.gz", 200)
    paths = {}
    for name, rows in (("test", test), ("scaffolds", scaffolds), ("train", train)):
        paths[name] = folder / f"{name}.csv"
        paths[name].write_text("SMILES\n" + "\n".join(rows) + "\n")
    # 5 training molecules, 3 test ones (one twice), one invalid, one empty: 11 rows
    generated = train[:5] + test[:3] + [test[0], "C1CC", ""]
    paths["generated"] = folder / "samples.csv"
    with open(paths["generated"], "w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["id", "sequence", "tokens"])
        writer.writerows([f"sample_{i}", smiles, 5] for i, smiles in enumerate(generated, 1))
    paths["valid"] = folder / "valid.txt"
    paths["valid"].write_text("\n".join(train[:5] + test[:3] + [test[0]]) + "\n")
    return paths


def evaluate(capsys, files: dict[str, Path], cache: Path, *extra: str,
             scaffolds: bool = True) -> tuple[int, str, str]:
    status = main(["generate", "evaluate", "--input", str(files["generated"]), "--test", str(files["test"]),
                   *(["--test-scaffolds", str(files["scaffolds"])] if scaffolds else []), "--train",
                   str(files["train"]), "--cache-dir", str(cache), *extra])
    captured = capsys.readouterr()
    return status, captured.out, captured.err


def table(text: str) -> dict[str, list[str]]:
    lines = text.splitlines()
    assert lines[0].split("\t") == ["metric", "value", "molecules", "note"]
    return {line.split("\t")[0]: line.split("\t")[1:] for line in lines[1:]}


def fingerprint(smiles: str):
    return AllChem.GetMorganFingerprintAsBitVect(Chem.MolFromSmiles(smiles), 2, nBits=1024)


@pytest.mark.slow  # FCD: two 512 x 512 matrix square roots, and fcd's own for the check
@pytest.mark.filterwarnings("ignore::DeprecationWarning:fcd")
def test_metrics_of_a_small_set_by_hand_and_against_direct_computations(capsys, files, tmp_path):
    status, out, err = evaluate(capsys, files, tmp_path / "cache", "--output", str(tmp_path / "m.tsv"))
    assert status == 0, err
    rows = table(out)
    assert (tmp_path / "m.tsv").read_text() == out  # the file holds the table printed
    assert rows["rows"][:2] == ["11", "11"] and rows["invalid"] == ["2", "11", "1 empty"]
    assert float(rows["validity"][0]) == pytest.approx(9 / 11, abs=5e-5)
    assert rows["duplicates"][:2] == ["1", "9"]
    assert float(rows["unique@1k"][0]) == pytest.approx(8 / 9, abs=5e-5)
    assert "only 9 valid molecules, fewer than 1000" in rows["unique@1k"][2]
    assert float(rows["novelty"][0]) == pytest.approx(3 / 8, abs=5e-5) and rows["novelty"][1] == "8"
    assert set(rows) >= {"IntDiv1", "IntDiv2", "filters", *(f"{m}/{s}" for m in ("FCD", "SNN", "Frag", "Scaf")
                                                             for s in ("Test", "TestSF"))}
    valid = [line for line in files["valid"].read_text().splitlines()]
    reference = [fingerprint(s) for s in files["test"].read_text().split()[1:]]
    snn = np.mean([max(DataStructs.BulkTanimotoSimilarity(fingerprint(s), reference)) for s in valid])
    assert float(rows["SNN/Test"][0]) == pytest.approx(snn, abs=5e-5)
    fcd = pytest.importorskip("fcd")
    canonical = [Chem.MolToSmiles(Chem.MolFromSmiles(s)) for s in valid]
    test = [Chem.MolToSmiles(Chem.MolFromSmiles(s)) for s in files["test"].read_text().split()[1:]]
    assert float(rows["FCD/Test"][0]) == pytest.approx(fcd.get_fcd(canonical, test, device="cpu"), abs=5e-4)
    assert err.count("computed in") == 3 and "reference Test: 30 molecules" in err


def test_every_long_step_says_how_far_it_has_come_on_stderr(capsys, files, tmp_path, monkeypatch):
    """Computing MOSES test's statistics takes minutes a step the first time: parsing, ChemNet, fingerprints,
    fragments and scaffolds of each reference, and the generated set's filters and ChemNet, each print progress
    lines on stderr (here one at every update), ending at their total; stdout is the table alone."""
    monkeypatch.setenv(SECONDS_VARIABLE, "0")
    status, out, err = evaluate(capsys, files, tmp_path / "cache")
    assert status == 0 and out.startswith("metric\t")
    progress = [m.groups() for line in err.splitlines() if (m := PROGRESS_LINE.match(line))]
    last = {step: (done, total) for step, done, total in progress}
    steps = [f"{what} of {name}" for name in ("test.csv", "scaffolds.csv")
             for what in ("ChemNet activations", "fingerprints", "fragments", "scaffolds")]
    assert set(last) == {"parsing samples.csv", "parsing test.csv", "parsing scaffolds.csv", "parsing train.csv",
                         *steps, "filters of samples.csv", "ChemNet activations of samples.csv"}
    assert all(done == total for done, total in last.values())
    assert last["parsing train.csv"] == ("200", "200") and last["fingerprints of test.csv"] == ("30", "30")
    status, _, err = evaluate(capsys, files, tmp_path / "other", "--no-progress")
    assert status == 0 and not [line for line in err.splitlines() if PROGRESS_LINE.match(line)]


def test_the_reference_statistics_are_cached_and_a_damaged_entry_is_computed_again(capsys, files, tmp_path):
    cache = tmp_path / "cache"
    status, first, _ = evaluate(capsys, files, cache, "--output", str(tmp_path / "m.json"), scaffolds=False)
    assert status == 0
    status, again, err = evaluate(capsys, files, cache, scaffolds=False)
    assert status == 0 and again == first and err.count("read from") == 2, err
    document = json.loads((tmp_path / "m.json").read_text())
    assert document["metrics"]["rows"] == 11 and document["references"]["train"]["valid"] == 200
    Path(document["references"]["Test"]["cache"]).write_bytes(b"not a zip")
    status, third, err = evaluate(capsys, files, cache, scaffolds=False)
    assert status == 0 and third == first
    assert "the entry there was not used: unreadable" in err and err.count("read from") == 1


def damage_entry(entry: Path, kind: str) -> None:
    data = entry.read_bytes()
    entry.write_bytes({"empty": b"", "half": data[: len(data) // 2], "its end cut": data[:-10]}[kind])


@pytest.mark.parametrize("kind", ["empty", "half", "its end cut"])
def test_every_damage_of_a_cache_entry_is_computed_again_and_said_so_in_one_line(capsys, files, tmp_path, kind):
    """Before: BadZipFile or EOFError (a truncated entry) and IsADirectoryError (a directory) tracebacks."""
    argv = ["generate", "evaluate", "--input", str(files["generated"]), "--train", str(files["train"]),
            "--cache-dir", str(tmp_path / "cache")]
    assert main(argv) == 0
    first = capsys.readouterr().out
    (entry,) = (tmp_path / "cache").iterdir()
    damage_entry(entry, kind)
    assert main(argv) == 0
    captured = capsys.readouterr()
    said = [line for line in captured.err.splitlines() if line.startswith("reference train:")]
    assert captured.out == first and len(said) == 1 and "Traceback" not in captured.err, captured.err
    assert f"cached in {entry} (the entry there was not used: " in said[0]
    assert "unreadable (" in said[0]
    assert entry.is_file() and main(argv) == 0 and "read from" in capsys.readouterr().err


@pytest.mark.parametrize("link", [False, True])
def test_a_users_directory_at_a_cache_entrys_name_is_refused_and_kept(capsys, files, tmp_path, link):
    """Before: deleted with its files (or the link replaced), exit 0."""
    argv = ["generate", "evaluate", "--input", str(files["generated"]), "--train", str(files["train"]),
            "--cache-dir", str(tmp_path / "cache")]
    assert main(argv) == 0
    (entry,) = (tmp_path / "cache").iterdir()
    entry.unlink()
    folder = tmp_path / "mine" if link else entry
    (folder / "notes").mkdir(parents=True)
    (folder / "notes" / "a.txt").write_bytes(b"mine\n")
    if link:
        entry.symlink_to(folder, target_is_directory=True)
    before = {p.relative_to(tmp_path): (p.is_symlink(), p.read_bytes() if p.is_file() else None)
              for p in tmp_path.rglob("*")}
    capsys.readouterr()
    status = main(argv)
    one_line(status, capsys.readouterr().err, f"invalid --cache-dir='{tmp_path / 'cache'}': {entry} is a directory",
             "left as it is")
    assert {p.relative_to(tmp_path): (p.is_symlink(), p.read_bytes() if p.is_file() else None)
            for p in tmp_path.rglob("*")} == before


def test_a_cache_dir_that_is_a_file_is_one_line_naming_the_flag(capsys, files, tmp_path):
    blocking = tmp_path / "cache"
    blocking.write_text("my notes\n")
    for cache_dir in (blocking, blocking / "moses"):
        status = main(["generate", "evaluate", "--input", str(files["generated"]), "--train", str(files["train"]),
                       "--cache-dir", str(cache_dir)])
        one_line(status, capsys.readouterr().err, f"invalid --cache-dir='{cache_dir}'", f"{blocking} is a file")
    assert blocking.read_text() == "my notes\n"


def test_a_txt_file_of_valid_molecules_and_no_reference(capsys, files):
    status = main(["generate", "evaluate", "--input", str(files["valid"])])
    out = capsys.readouterr().out
    rows = table(out)
    assert status == 0 and rows["validity"][0] == "1.0000" and "novelty" not in rows and "FCD/Test" not in rows


@pytest.mark.parametrize("name", ["samples.smi", "samples.csv", "samples.tsv"])
def test_a_blank_line_is_an_invalid_row_in_a_smi_and_a_one_column_table_alike(capsys, files, tmp_path, name):
    """The same rows, one of them blank, counted the same way whatever the file (the shared readers' rule)."""
    valid = files["valid"].read_text().splitlines()[:3]
    path = tmp_path / name
    path.write_text(("" if name.endswith(".smi") else "SMILES\n") + "\n".join([valid[0], "", *valid[1:]]) + "\n")
    status = main(["generate", "evaluate", "--input", str(path)] + ([] if name.endswith(".smi") else
                                                                    ["--column", "SMILES"]))
    captured = capsys.readouterr()
    assert status == 0, captured.err
    rows = table(captured.out)
    assert rows["rows"][:2] == ["4", "4"] and rows["invalid"] == ["1", "4", "1 empty"]


def one_line(status: int, err: str, *fragments: str) -> None:
    lines = [line for line in err.splitlines() if line.strip()]
    assert status == 2 and len(lines) == 1 and "Traceback" not in err, err
    for fragment in fragments:
        assert fragment in lines[0], lines[0]


def test_bad_input_is_one_line(capsys, files, tmp_path):
    status, _, err = evaluate(capsys, files, tmp_path / "c", "--column", "smiles_column")
    one_line(status, err, "column 'smiles_column' not found", "columns: id, sequence, tokens")
    invalid = tmp_path / "invalid.txt"
    invalid.write_text("C1CC\nXYZ\n\n")
    status = main(["generate", "evaluate", "--input", str(invalid)])
    one_line(status, capsys.readouterr().err, "no valid molecule among 3 rows")
    status = main(["generate", "evaluate", "--input", str(tmp_path / "absent.csv")])
    one_line(status, capsys.readouterr().err, "absent.csv does not exist")
    binary = tmp_path / "binary.txt"
    binary.write_bytes(b"CCO\n\xff\xfe\n")
    status = main(["generate", "evaluate", "--input", str(binary)])
    one_line(status, capsys.readouterr().err, "binary.txt", "UTF-8")
    status = main(["generate", "evaluate", "--input", str(files["valid"]), "--test", str(tmp_path / "no.csv")])
    one_line(status, capsys.readouterr().err, "reference file", "no.csv does not exist")
    status = main(["generate", "evaluate", "--input", str(files["valid"]), "--output", str(tmp_path / "m.csv")])
    one_line(status, capsys.readouterr().err, "unsupported extension '.csv' (allowed: .tsv, .json)")
    (tmp_path / "exists.tsv").write_text("x")
    status = main(["generate", "evaluate", "--input", str(files["valid"]), "--output", str(tmp_path / "exists.tsv")])
    one_line(status, capsys.readouterr().err, "already exists; pass --overwrite")


def test_generate_without_a_model_or_a_form_says_both(capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["generate", "--prompt", "CC"])
    assert exit_.value.code == 2 and "--model (or use `biotf generate evaluate`)" in capsys.readouterr().err


def test_input_is_checked_before_any_reference_is_computed(capsys, files, tmp_path, monkeypatch):
    """A sample file with no valid molecule, and a missing --train after a --test that would take minutes, are
    refused in one line naming `generate evaluate` before any reference's statistics are read or computed."""
    import biotf_recipes.moses.benchmark as benchmark

    loaded = []
    monkeypatch.setattr(benchmark, "load_reference", lambda path, *rest, **options: loaded.append(path))
    invalid = tmp_path / "invalid.csv"
    invalid.write_text("SMILES\n" + "\n".join(["C1CC", "XYZ", ""] * 60) + "\n")
    status = main(["generate", "evaluate", "--input", str(invalid), "--column", "SMILES", "--test", str(files["test"]),
                   "--train", str(files["train"]), "--cache-dir", str(tmp_path / "cache")])
    err = capsys.readouterr().err
    one_line(status, err, "biotf generate evaluate: error:", "no valid molecule among 180 rows")
    status = main(["generate", "evaluate", "--input", str(files["valid"]), "--test", str(files["test"]),
                   "--train", str(tmp_path / "absent.csv"), "--cache-dir", str(tmp_path / "cache")])
    one_line(status, capsys.readouterr().err, "biotf generate evaluate: error: reference file", "absent.csv")
    assert loaded == [] and not (tmp_path / "cache").exists()
