"""`biotf.data.splits`: leakage-aware splits (whatever the method, no group, cluster or scaffold has records on two
sides), the validation split of pretraining (a pure function of sequence and seed: duplicates never straddle
train/validation), and split.tsv (written by fine-tuning, read back by id: a resume's check, `biotf probe --split`)."""

from __future__ import annotations

import csv
import random
from collections import defaultdict

import numpy as np
import pytest

from biotf.data.splits import (MIN_SHARED, assign, automatic_k, exact_groups, identity_clusters, is_validation,
                               read_sides, scaffold_groups, sides_of, split_groups, validate_fraction,
                               validation_mask, write_split)
from biotf.errors import ConfigError, InputError

AMINO = "ACDEFGHIKLMNPQRSTVWY"


def mutate(sequence: str, rate: float, rng: random.Random) -> str:
    return "".join(rng.choice(AMINO) if rng.random() < rate else c for c in sequence)


def families(n_families: int = 12, members: int = 5, length: int = 150, rate: float = 0.08, seed: int = 0):
    rng = random.Random(seed)
    sequences, family = [], []
    for f in range(n_families):
        root = "".join(rng.choice(AMINO) for _ in range(length + rng.randrange(50)))
        for _ in range(members):
            sequences.append(mutate(root, rate, rng))
            family.append(f)
    return sequences, np.array(family)


def assert_apart(groups: np.ndarray, splits: np.ndarray) -> None:
    sides = defaultdict(set)
    for group, split in zip(groups.tolist(), splits.tolist()):
        sides[group].add(split)
    assert all(len(s) == 1 for s in sides.values()), {g: s for g, s in sides.items() if len(s) > 1}


def linked(a: str, b: str, k: int, threshold: float) -> bool:
    """The rule of the module docstring, from Python sets: (shared / k-mers of the shorter)^(1/k) >= threshold
    with at least MIN_SHARED k-mers shared."""
    ka = {a[i:i + k] for i in range(len(a) - k + 1)}
    kb = {b[i:i + k] for i in range(len(b) - k + 1)}
    shared = len(ka & kb)
    return shared >= MIN_SHARED and (shared / min(len(ka), len(kb))) ** (1 / k) >= threshold


def test_assign_keeps_groups_whole_and_near_the_fractions():
    groups = np.repeat(np.arange(200), np.random.default_rng(0).integers(1, 6, 200))
    splits = assign(groups, validation=0.1, test=0.2, seed=3)
    assert_apart(groups, splits)
    shares = {name: float(np.mean(splits == name)) for name in ("train", "validation", "test")}
    assert shares == pytest.approx({"train": 0.7, "validation": 0.1, "test": 0.2}, abs=0.02)
    assert not np.array_equal(splits, assign(groups, 0.1, 0.2, seed=4))  # the seed deals groups differently
    np.testing.assert_array_equal(splits, assign(groups, 0.1, 0.2, seed=3))


def test_a_group_larger_than_the_test_share_goes_to_train():
    groups = np.r_[np.zeros(300, np.int64), np.arange(1, 701)]  # one group of 300 among 700 singletons
    for seed in range(10):
        splits = assign(groups, validation=0.1, test=0.1, seed=seed)
        assert set(splits[:300].tolist()) == {"train"}
        assert abs(np.mean(splits == "test") - 0.1) < 0.01


def test_identity_clusters_recover_families_of_homologs():
    sequences, family = families()
    assert automatic_k(sequences) == 5  # 20 amino acids: 20^-5 = 3e-7 <= 10^-6 < 20^-4
    clusters = identity_clusters(sequences, threshold=0.5)
    # members of a family are ~85% identical, unrelated proteins share no 5-mer by chance at this size
    np.testing.assert_array_equal(exact_groups([str(f) for f in family]), clusters)
    assert len(set(identity_clusters(sequences, threshold=0.99).tolist())) == len(sequences)
    splits = assign(clusters, 0.2, 0.2, seed=0)
    assert_apart(family, splits)


@pytest.mark.parametrize("threshold", [0.6, 0.8])
def test_no_pair_across_identity_splits_reaches_the_threshold(threshold):
    sequences, _ = families(n_families=8, members=4, rate=0.15, seed=1)
    rng = random.Random(2)
    sequences += [mutate(s, 0.3, rng) for s in sequences[::3]]  # distant relatives around the threshold
    groups = split_groups("identity", sequences, [str(i) for i in range(len(sequences))], identity=threshold)
    splits = assign(groups, 0.2, 0.2, seed=0)
    for i in range(len(sequences)):
        for j in range(i + 1, len(sequences)):
            if linked(sequences[i], sequences[j], 5, threshold):
                assert groups[i] == groups[j] and splits[i] == splits[j], (i, j)


def test_identity_split_on_uci_splice_keeps_duplicates_and_near_copies_together(shared_data):
    with open(shared_data / "dna" / "uci_splice.csv") as handle:
        rows = list(csv.DictReader(handle))
    sequences = [r["sequence"].strip() for r in rows[:600]]
    groups = identity_clusters(sequences, threshold=0.9)
    splits = assign(groups, 0.1, 0.1, seed=0)
    assert_apart(exact_groups(sequences), splits)
    k = automatic_k(sequences)
    assert k in (10, 11)  # near-uniform ACGT: 4^-10 ~ 10^-6 (this GC-rich subset needs 11); rare N, D, R, S count little
    for i in range(0, 600, 7):  # a sample of pairs, brute force
        for j in range(600):
            if splits[i] != splits[j]:
                assert not linked(sequences[i], sequences[j], k, 0.9)


def test_scaffold_split_keeps_scaffolds_apart(shared_data):
    pytest.importorskip("rdkit")
    from rdkit import Chem
    from rdkit.Chem.Scaffolds import MurckoScaffold

    with open(shared_data / "smiles" / "molnet_esol.csv") as handle:
        smiles = [row["smiles"].strip() for row in csv.DictReader(handle)]
    groups = scaffold_groups(smiles, [str(i) for i in range(len(smiles))])
    splits = assign(groups, 0.1, 0.1, seed=0)
    by_scaffold = defaultdict(set)
    for s, split in zip(smiles, splits):
        scaffold = Chem.MolToSmiles(MurckoScaffold.GetScaffoldForMol(Chem.MolFromSmiles(s)))
        by_scaffold[scaffold].add(split)
    assert all(len(sides) == 1 for sides in by_scaffold.values())
    assert len(by_scaffold) > 200 and {"train", "validation", "test"} == set(splits.tolist())
    assert groups[smiles.index("c1ccccc1")] == groups[smiles.index("Cc1ccccc1")]  # benzene, toluene: one scaffold


def test_group_and_random_splits_keep_their_units_whole():
    sequences = ["AAA", "CCC", "AAA", "GGG", "TTT", "CCC", "ACG", "TGA"]
    groups = ["g1", "g1", "g1", "g2", "g2", "g3", "g3", "g4"]
    ids = [str(i) for i in range(8)]
    by_column = split_groups("group", sequences, ids, groups)
    assert_apart(exact_groups(groups), assign(by_column, 0.25, 0.25))
    random_groups = split_groups("random", sequences, ids)
    assert_apart(exact_groups(sequences), assign(random_groups, 0.25, 0.25))  # duplicates stay together


def test_bad_split_settings_are_refused():
    with pytest.raises(ConfigError, match="split.method"):
        split_groups("kmeans", ["A"], ["1"])
    with pytest.raises(ConfigError, match="split.group_column"):
        split_groups("group", ["A"], ["1"])
    with pytest.raises(ConfigError, match="split.identity"):
        identity_clusters(["ACGT"], 1.5)
    with pytest.raises(ConfigError, match="split.test"):
        assign(np.arange(10), 0.5, 0.5)
    with pytest.raises(InputError, match="only 2 group"):
        assign(np.array([0, 0, 1]), 0.2, 0.2)
    pytest.importorskip("rdkit")
    with pytest.raises(InputError, match="record 'bad'"):
        scaffold_groups(["c1ccccc1", "C1CC"], ["ok", "bad"])


def test_scaffold_groups_skip_leaves_unparsable_smiles_unplaced_and_the_rest_as_without_them():
    pytest.importorskip("rdkit")
    from biotf.data.splits import UNPLACED

    smiles = ["c1ccccc1", "C1=CC=CN1(C)(C)", "Cc1ccccc1", "C1CCCCC1", "OC1CCCCC1", "c1ccncc1", "CCO", "c1ccccc1C1CC1"]
    ids = [f"m{i}" for i in range(len(smiles))]
    with pytest.raises(InputError, match=r"\(record 'm1'\); set data.invalid_smiles=skip to leave such records out"):
        scaffold_groups(smiles, ids)
    with pytest.raises(InputError, match=r"set --invalid-smiles skip to leave"):
        scaffold_groups(smiles, ids, key="--invalid-smiles")
    with pytest.raises(ConfigError, match="data.invalid_smiles"):
        scaffold_groups(smiles, ids, "drop")
    groups = split_groups("scaffold", smiles, ids, invalid_smiles="skip")
    assert groups[1] == UNPLACED and (np.delete(groups, 1) >= 0).all()
    without = scaffold_groups(smiles[:1] + smiles[2:], ids[:1] + ids[2:])
    assert np.delete(groups, 1).tolist() == without.tolist()
    assert assign(np.delete(groups, 1), 0.2, 0.2, seed=3).tolist() == assign(without, 0.2, 0.2, seed=3).tolist()


# --- the validation split of pretraining --------------------------------------------------------------------------
def test_fraction_is_respected_and_deterministic():
    sequences = [f"SEQ{i}" for i in range(20000)]
    flags = [is_validation(s, 0.1, seed=3) for s in sequences]
    assert 0.09 < sum(flags) / len(flags) < 0.11
    assert flags == [is_validation(s, 0.1, seed=3) for s in sequences]
    assert flags != [is_validation(s, 0.1, seed=4) for s in sequences]


def test_edges():
    assert not any(is_validation(f"S{i}", 0.0) for i in range(1000))
    with pytest.raises(ConfigError, match="validation_fraction.*0 <= fraction < 1"):
        validate_fraction(1.0)


@pytest.mark.parametrize("fraction", [0.0, 1e-19, 2**-60, 0.05, 0.5, 1 - 2**-53])
@pytest.mark.parametrize("seed", [0, 7, -3])
def test_the_bulk_mask_is_is_validation_of_each_sequence(fraction, seed):
    """The token cache's bulk split decides exactly as `is_validation`, down to fractions whose threshold is not
    an integer; sequences include the empty one and non-ASCII text."""
    sequences = ["", "MKV", "é" * 3, "MKV" * 700] + [f"SEQ{i}" for i in range(3000)]
    assert validation_mask(sequences, fraction, seed).tolist() == [is_validation(s, fraction, seed) for s in sequences]
    assert validation_mask([], fraction, seed).tolist() == []


def test_duplicates_land_together(shared_data):
    """uci_splice has 185 duplicate sequences (SOURCES.md): each lands wholly on one side."""
    from biotf.io.readers import read_records

    sides: dict[str, set[bool]] = {}
    for record in read_records(shared_data / "dna/uci_splice.csv"):
        sides.setdefault(record.sequence, set()).add(is_validation(record.sequence, 0.2))
    assert len(sides) < 3190  # duplicates exist
    assert all(len(s) == 1 for s in sides.values())


# --- split.tsv ----------------------------------------------------------------------------------------------------
def test_split_file_sides_are_read_by_id_and_ambiguous_ids_refused(tmp_path):
    path = tmp_path / "split.tsv"
    path.write_text("id\tsplit\tgroup\na\ttrain\t0\nb\ttest\t1\na\ttrain\t0\n")
    assert sides_of(path, ["b", "a", "c"]).tolist() == ["test", "train", ""]
    path.write_text("id\tsplit\tgroup\na\ttrain\t0\na\ttest\t1\n")
    with pytest.raises(InputError, match="id 'a' is on two sides"):
        sides_of(path, ["a"])


def test_a_written_split_reads_back(tmp_path):
    path = tmp_path / "split.tsv"
    write_split(path, ["a", "b", "c"], np.array(["train", "validation", "test"]), np.array([0, 1, 1]))
    assert read_sides(path) == {"a": "train", "b": "validation", "c": "test"}
    assert not list(tmp_path.glob(".*"))  # written atomically: no temporary left
