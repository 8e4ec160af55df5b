"""Which side of a split each record is on: every rule of biotf that decides it, in one place.

- Language-model training: a record's side (train / validation) is a pure function of its sequence and the seed (a
  keyed BLAKE2b hash mapped to [0, 1)), so identical sequences always land on one side -- duplicates cannot leak
  between train and validation -- and the split does not depend on file order, chunking or the machine.
  `validation_mask` decides a list of sequences at once (the token cache), with `is_validation`'s results.
- Labelled sets (fine-tuning): leakage-aware train / validation / test splits in which whole groups go to one side
  (`split_groups`, then `assign`), below.
- split.tsv: which side each labelled record of a fine-tuning run is on, and the group that kept it there.
  Fine-tuning writes it; a resume checks against it; `biotf probe --split` and `biotf search evaluate --split`
  score on it.

Labelled sets, in detail: a model scored on near-copies of its training records measures memory, not
generalisation. Each method first puts related records in one group, then `assign` deals whole groups to the
splits:

- random    each distinct sequence is a group (exact duplicates never straddle a split);
- group     a column of the input names the groups (a family, a patient, a gene);
- identity  proteins / DNA: single-linkage clusters of records whose estimated sequence identity reaches a
            threshold (`identity_clusters`; no external binaries);
- scaffold  SMILES: the Bemis-Murcko scaffold (Bemis & Murcko 1996; RDKit's MurckoScaffold), so the test set
            holds ring systems the model never saw. Acyclic molecules have the empty scaffold: one group. A SMILES
            RDKit cannot parse is refused, or with data.invalid_smiles=skip left out of every split, its id listed.

Identity is estimated from shared k-mers, as CD-HIT's short-word filter and Mash do: two sequences with
identity p over the shorter one's length (substitutions spread out) share about a fraction p^k of its k-mers,
so p ~ (shared / k-mers of the shorter)^(1/k); a link also needs MIN_SHARED k-mers in common. k is the smallest
at which two random k-mers of the data's composition match with probability <= 10^-6 (5 for proteins, 10 for
DNA), so that chance matches between unrelated sequences are rare. The estimate is good at high identity and
blind at low identity, as any alignment-free filter (CD-HIT itself needs 5-mers for >= 0.7, 2-mers for 0.4):
on DeepLoc's 4,446 test + validation proteins, thresholds 0.9 / 0.7 / 0.6 / 0.5 / 0.4 give 4,248 / 3,886 /
3,641 / 2,995 / 742 clusters, the largest of 8 / 23 / 38 / 651 / 3,599 proteins (chains through
low-complexity regions below 0.6). For remote homology, cluster with MMseqs2 / CD-HIT and pass the clusters
as a group column.
"""

from __future__ import annotations

import csv
import hashlib
import math
from collections.abc import Iterable, Sequence
from pathlib import Path

import numpy as np

from biotf.chemistry import molecules, murcko_scaffold  # without RDKit a BiotfError naming the install line
from biotf.errors import ConfigError, InputError
from biotf.io.atomic import atomic_write_text

SPLITS = ("train", "validation")  # the sides of language-model training
SPLIT_NAMES = ("train", "validation", "test")  # the sides of a labelled set
SPLIT_FILE = "split.tsv"
METHODS = ("random", "group", "identity", "scaffold")
KMER_SPACE = 10**6  # k is the smallest with alphabet^k >= this
MIN_SHARED = 4  # k-mers two sequences must share to be linked (two or three are met by chance in real proteins)
UNPLACED = -1  # the group of a record a method cannot place (`scaffold_groups`): in no split, left out
MAX_PAIRS = 50_000_000  # shared k-mer occurrences counted at most (memory: 16 bytes each)


# --- language-model training: train / validation by a keyed hash of the sequence ---------------------------------
def validate_fraction(validation_fraction: float) -> None:
    if not 0.0 <= validation_fraction < 1.0:
        raise ConfigError("data.validation_fraction", validation_fraction, allowed="0 <= fraction < 1")


def _hasher(seed: int):
    """BLAKE2b keyed by the seed, 8 bytes of digest: the split's hash."""
    return hashlib.blake2b(digest_size=8, key=seed.to_bytes(8, "little", signed=True))


def is_validation(sequence: str, validation_fraction: float, seed: int = 0) -> bool:
    """True when `sequence` belongs to the validation split."""
    hasher = _hasher(seed)
    hasher.update(sequence.encode("utf-8"))
    return int.from_bytes(hasher.digest(), "little") < validation_fraction * 2**64


def validation_mask(sequences: Sequence[str], validation_fraction: float, seed: int = 0) -> np.ndarray:
    """`is_validation` of each of `sequences` (for a fraction that `validate_fraction` accepts), as a bool array: the
    keyed hash state is copied rather than keyed again per sequence, and the digests are compared in one step."""
    if not sequences or validation_fraction == 0:  # no digest is below 0
        return np.zeros(len(sequences), bool)
    keyed = _hasher(seed)
    digests = []
    for sequence in sequences:
        hasher = keyed.copy()
        hasher.update(sequence.encode("utf-8"))
        digests.append(hasher.digest())
    # an integer is below the float fraction * 2**64 exactly when it is below its ceiling (<= 2**64 - 2048 here)
    threshold = np.uint64(math.ceil(validation_fraction * 2**64))
    return np.frombuffer(b"".join(digests), "<u8") < threshold


# --- labelled sets: whole groups to one side -----------------------------------------------------------------
def exact_groups(keys: Sequence[str]) -> np.ndarray:
    """Group ids (0..G-1, in order of first appearance) of equal keys."""
    first: dict[str, int] = {}
    return np.array([first.setdefault(key, len(first)) for key in keys], np.int64)


def _kmer_codes(sequence: str, index: dict[str, int], base: int, k: int) -> np.ndarray:
    """The distinct k-mers of `sequence` as integers in base `base`."""
    symbols = np.array([index[c] for c in sequence], np.int64)
    if len(symbols) < k:
        return np.zeros(0, np.int64)
    windows = np.lib.stride_tricks.sliding_window_view(symbols, k)
    return np.unique(windows @ (base ** np.arange(k - 1, -1, -1, dtype=np.int64)))


def _shared_pairs(codes: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(i, j, shared k-mer count) for every pair i < j of sequences with at least one k-mer in common."""
    kmers = np.concatenate(codes) if codes else np.zeros(0, np.int64)
    owners = np.repeat(np.arange(len(codes), dtype=np.int64), [len(c) for c in codes])
    order = np.lexsort((owners, kmers))
    kmers, owners = kmers[order], owners[order]
    starts = np.flatnonzero(np.r_[True, kmers[1:] != kmers[:-1]])
    sizes = np.diff(np.r_[starts, len(kmers)])
    total = int((sizes * (sizes - 1) // 2).sum())
    if total > MAX_PAIRS:
        raise InputError(f"identity split: {total:,} shared k-mer occurrences exceed the limit of {MAX_PAIRS:,} "
                         "(very repetitive or very many sequences); raise split.kmer or split by a group column")
    remaining = np.repeat(sizes, sizes) - (np.arange(len(kmers)) - np.repeat(starts, sizes))  # members from here on
    left, right = [], []
    active = np.flatnonzero(remaining > 1)
    offset = 1
    while len(active):  # pair each member with the one `offset` places later in its k-mer's list
        left.append(owners[active])
        right.append(owners[active + offset])
        offset += 1
        active = active[remaining[active] > offset]
    if not left:
        empty = np.zeros(0, np.int64)
        return empty, empty, empty
    keys = np.concatenate(left) * len(codes) + np.concatenate(right)  # owners ascend within a k-mer: i < j
    pairs, counts = np.unique(keys, return_counts=True)
    return pairs // len(codes), pairs % len(codes), counts


def _components(n: int, left: np.ndarray, right: np.ndarray) -> np.ndarray:
    """Connected components (single linkage) of n nodes and the given edges, as the smallest member's index."""
    labels = np.arange(n)
    while True:
        low = np.minimum(labels[left], labels[right])
        changed = labels.copy()
        np.minimum.at(changed, left, low)
        np.minimum.at(changed, right, low)
        changed = changed[changed]  # pointer jumping: follow labels to their own labels
        if np.array_equal(changed, labels):
            return labels
        labels = changed


def automatic_k(sequences: Sequence[str]) -> int:
    """The smallest k at which two random k-mers of this composition match with probability <= 1 / KMER_SPACE:
    (sum of squared symbol frequencies)^k, so rare symbols (N, X) do not count as letters of the alphabet."""
    counts = np.unique(np.frombuffer("".join(sequences).encode(), np.uint8), return_counts=True)[1]
    if counts.sum() == 0:
        return 1
    collision = float(((counts / counts.sum()) ** 2).sum())
    return 1 if collision >= 1.0 else max(1, int(np.ceil(np.log(KMER_SPACE) / -np.log(collision) - 1e-9)))


def identity_clusters(sequences: Sequence[str], threshold: float, k: int | None = None) -> np.ndarray:
    """Group ids of single-linkage clusters: records whose estimated identity (see the module docstring) is >=
    `threshold` share a group, and so does every chain of such records. Case is ignored."""
    if not 0.0 < threshold <= 1.0:
        raise ConfigError("split.identity", threshold, "a fraction in (0, 1]")
    upper = [s.upper() for s in sequences]
    distinct = exact_groups(upper)
    uniques = list(dict.fromkeys(upper))
    alphabet = sorted(set("".join(uniques)))
    if k is None:
        k = automatic_k(uniques)
    if isinstance(k, bool) or not isinstance(k, int) or k < 1 or max(len(alphabet), 2) ** k >= 2**62:
        raise ConfigError("split.kmer", k, f"an integer >= 1 with {len(alphabet)}^k < 2^62, or null (automatic)")
    index = {c: i for i, c in enumerate(alphabet)}
    codes = [_kmer_codes(s, index, len(alphabet), k) for s in uniques]
    left, right, shared = _shared_pairs(codes)
    sizes = np.array([len(c) for c in codes], np.int64)
    shorter = np.minimum(sizes[left], sizes[right])
    # (shared / shorter)^(1/k) >= threshold, on the evidence of MIN_SHARED k-mers at least
    linked = (shared >= np.ceil(threshold**k * shorter - 1e-9)) & (shared >= MIN_SHARED)
    labels = _components(len(uniques), left[linked], right[linked])
    return exact_groups([str(label) for label in labels[distinct]])


def scaffold_groups(smiles: Sequence[str], ids: Sequence[str], invalid_smiles: str = "error",
                    key: str = "data.invalid_smiles") -> np.ndarray:
    """Group ids by Bemis-Murcko scaffold (RDKit). An unparsable SMILES is an error naming its record and `key`, or
    with `invalid_smiles="skip"` the group UNPLACED (in no split); the others' groups are those of a file without
    it, so the rest of the split is the same."""
    parsed, unparsable = molecules(smiles, ids, invalid_smiles, key)
    groups = np.full(len(parsed), UNPLACED, np.int64)
    placed = np.setdiff1d(np.arange(len(parsed)), unparsable)
    groups[placed] = exact_groups([murcko_scaffold(parsed[i], isomeric=False) for i in placed])
    return groups


def assign(groups: np.ndarray, validation: float, test: float, seed: int = 0) -> np.ndarray:
    """Split names per record. Groups are dealt in a seeded random order, each to the split furthest below its
    share of records, so whole groups land on one side and the sizes come as close to the fractions as the
    group sizes allow. A group larger than the validation (test) share never goes there, and such groups are
    dealt first so that the others balance them: it would make that split mostly one group (ESOL's 317 acyclic
    molecules, one empty Bemis-Murcko scaffold, were the test set's majority for some seeds). The sizes are
    reported, never forced."""
    for key, value in (("split.validation", validation), ("split.test", test)):
        if not 0.0 < value < 1.0:
            raise ConfigError(key, value, "a fraction in (0, 1)")
    if validation + test >= 1.0:
        raise ConfigError("split.test", test, f"< {1 - validation:g} (1 - split.validation)",
                          reason="the training split needs records too")
    names, sizes = np.unique(groups, return_counts=True)
    if len(names) < 3:
        raise InputError(f"only {len(names)} group(s): a train / validation / test split needs at least 3")
    targets = np.array([1.0 - validation - test, validation, test]) * len(groups)
    filled = np.zeros(3)
    where = np.empty(len(names), np.int64)
    order = np.random.default_rng(seed).permutation(len(names))
    oversized = sizes[order] > targets[1:].min()
    order = np.r_[order[oversized], order[~oversized]]  # train's oversized groups first: the others balance them
    for rank, group in enumerate(order):
        empty = np.flatnonzero(filled == 0)
        # The last groups first fill any split still empty; otherwise the split furthest below its target.
        allowed = np.r_[True, sizes[group] <= targets[1:]]  # train takes any group
        if len(order) - rank <= len(empty):
            split = int(empty[0])
        else:
            split = int(np.flatnonzero(allowed)[np.argmin((filled / targets)[allowed])])
        where[group] = split
        filled[split] += sizes[group]
    position = np.searchsorted(names, groups)
    return np.array(SPLIT_NAMES, dtype=object)[where[position]].astype(str)


def split_groups(method: str, sequences: Sequence[str], ids: Sequence[str], groups: Sequence[str] | None = None,
                 identity: float = 0.5, k: int | None = None, invalid_smiles: str = "error") -> np.ndarray:
    """Group ids per record for `method` (see the module docstring); UNPLACED for a record the method cannot place
    (scaffold: a SMILES RDKit cannot parse, with `invalid_smiles="skip"`), which the caller leaves out."""
    if method == "random":
        return exact_groups(list(sequences))
    if method == "group":
        if groups is None:
            raise ConfigError("split.group_column", None, "a column of the input", reason="split.method=group")
        return exact_groups(list(groups))
    if method == "identity":
        return identity_clusters(sequences, identity, k)
    if method == "scaffold":
        return scaffold_groups(sequences, ids, invalid_smiles)
    raise ConfigError("split.method", method, " | ".join(METHODS))


# --- split.tsv ------------------------------------------------------------------------------------------------
def write_split(path: Path, ids: list[str], sides: np.ndarray, groups: np.ndarray) -> None:
    """split.tsv, written atomically: each labelled record's side and the group that kept it there."""
    atomic_write_text(path, "id\tsplit\tgroup\n" + "".join(f"{i}\t{s}\t{g}\n" for i, s, g in zip(ids, sides, groups)))


def read_sides(path: Path) -> dict[str, str]:
    """id -> side of a split file (tab-separated columns id and split); an id on two sides is refused."""
    with open(path, newline="", encoding="utf-8") as handle:
        rows = list(csv.DictReader(handle, delimiter="\t"))
    if not rows or not {"id", "split"} <= set(rows[0]):
        raise InputError(f"{path}: not a split file (needs tab-separated columns id and split)")
    side: dict[str, str] = {}
    for row in rows:
        if side.setdefault(row["id"], row["split"]) != row["split"]:
            raise InputError(f"{path}: id {row['id']!r} is on two sides ({side[row['id']]}, {row['split']}); "
                             "records sharing an id cannot be told apart")
    return side


def sides_of(path: Path, ids: Iterable) -> np.ndarray:
    """The side of each of `ids` in split file `path`; "" for ids it lacks."""
    side = read_sides(path)
    return np.array([side.get(str(i), "") for i in ids], dtype=object).astype(str)
