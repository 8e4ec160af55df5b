"""The statistics of a reference set of molecules (MOSES test, test-scaffolds, train) that the metrics compare a
generated set with, computed once per file and cached.

A test set's statistics are what MOSES's `compute_intermediate_statistics` keeps: the mean and covariance of the
ChemNet activations (FCD), the packed Morgan fingerprints (SNN), and the BRICS fragment and scaffold counts (Frag,
Scaf). A training set's are the hashes of its canonical SMILES (novelty). Each is cached as one .npz (numbers, and
a JSON text for the counts and the key; read with allow_pickle=False) in the cache directory under the file's
CRC-32: `<cache>/<test|train>-<crc32>.npz`. The key holds the CRC, the file's size, the column read, the
statistics' version and RDKit's version (canonical SMILES and fingerprints may change with it): a cache entry whose
key differs, or that cannot be read (truncated, not an .npz), is computed again and replaced, and the caller is told
which happened. A directory in an entry's place is not biotf's to delete: it is refused in one line, left as it was.
"""

from __future__ import annotations

import json
import time
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from biotf.io.atomic import atomic_write
from biotf.io.readers import ReaderOptions, read_records
from biotf.errors import ConfigError, InputError
from biotf_recipes.moses import chemnet, metrics
from biotf.naming import parameter
from biotf.progress import counting, reporting
from biotf.tokenizers.base import PolicyStats
from biotf.untrusted import file_crc32

STATISTICS_VERSION = 1
DEFAULT_CACHE_DIR = ".cache/biotf/moses"


@dataclass
class SmilesFile:
    """The rows of a SMILES file, parsed: `canonical[i]` is None where RDKit cannot parse row i; `molecules` holds
    RDKit's molecules (None where invalid) unless the reader was told not to keep them (a training set of
    millions)."""

    path: Path
    rows: list[str]
    canonical: list[str | None]
    molecules: list | None
    policies: PolicyStats = field(default_factory=PolicyStats)

    @property
    def valid(self) -> list[str]:
        return [smiles for smiles in self.canonical if smiles is not None]


def read_smiles(path: str | Path, options: ReaderOptions, keep_molecules: bool = True,
                progress: bool = False) -> SmilesFile:
    """Every row of `path` (read by biotf's readers), parsed by RDKit; with `progress`, the rows parsed on stderr."""
    from biotf.chemistry import parse

    parse("C")  # RDKit missing: its install line, before the import below
    from rdkit import Chem

    policies = PolicyStats()
    rows = [record.sequence for record in read_records(path, options, policies)]
    canonical, molecules = [], []
    with reporting(progress, f"parsing {Path(path).name}", "molecules", total=len(rows)) as shown:
        for smiles in counting(rows, shown):
            molecule = parse(smiles)
            canonical.append(Chem.MolToSmiles(molecule) if molecule is not None else None)
            if keep_molecules:
                molecules.append(molecule)
    return SmilesFile(Path(path), rows, canonical, molecules if keep_molecules else None, policies)


@dataclass
class ReferenceStatistics:
    """What SNN, Frag, Scaf and FCD need of a reference set; `molecules` valid of `rows` read."""

    rows: int
    molecules: int
    fcd_mean: np.ndarray
    fcd_cov: np.ndarray
    fingerprints: np.ndarray
    fragments: dict[str, int]
    scaffolds: dict[str, int]


@dataclass
class TrainingStatistics:
    """The sorted distinct hashes of a training set's canonical SMILES (`metrics.smiles_hashes`)."""

    rows: int
    molecules: int
    hashes: np.ndarray


def gaussian(activations: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Mean and covariance of ChemNet activations, one row a molecule (FCD's Gaussian)."""
    return activations.mean(0).astype(np.float64), np.cov(activations.T)


def reference_statistics(parsed: SmilesFile, batch_size: int = 1024, device: str = "cpu",
                         progress: bool = False) -> ReferenceStatistics:
    """A test set's statistics (MOSES's `compute_intermediate_statistics`). Its molecules are parsed again from
    their canonical SMILES for each statistic, not kept: RDKit molecules of 176k SMILES take gigabytes. With
    `progress`, each statistic's molecules done on stderr (minutes each for MOSES test)."""
    from rdkit import Chem

    valid = parsed.valid
    if len(valid) < 2:
        raise InputError(f"{parsed.path}: {len(valid)} valid molecule(s); a reference set needs at least 2")

    def stage(what: str):
        return reporting(progress, f"{what} of {parsed.path.name}", "molecules", total=len(valid))

    def molecules(what: str):
        with stage(what) as shown:
            yield from counting((Chem.MolFromSmiles(smiles) for smiles in valid), shown)

    with stage("ChemNet activations") as shown:
        mean, cov = gaussian(chemnet.activations(valid, batch_size, device, shown))
    return ReferenceStatistics(len(parsed.rows), len(valid), mean, cov, metrics.fingerprints(molecules("fingerprints")),
                               dict(metrics.fragment_counts(molecules("fragments"))),
                               dict(metrics.scaffold_counts(molecules("scaffolds"))))


def training_statistics(parsed: SmilesFile) -> TrainingStatistics:
    """A training set's statistics: the hashes of its distinct canonical SMILES."""
    return TrainingStatistics(len(parsed.rows), len(parsed.valid), np.unique(metrics.smiles_hashes(parsed.valid)))


@dataclass
class Loaded:
    """A reference's statistics and how they were had: "cache" (read from `path`), or "computed" in `seconds`
    (then written to `path`; `replaced` says why an existing entry was not used)."""

    statistics: ReferenceStatistics | TrainingStatistics
    how: str
    path: Path
    seconds: float = 0.0
    replaced: str | None = None


def _key(path: Path, kind: str, column: str | None) -> dict:
    from rdkit import __version__ as rdkit_version

    return {"kind": kind, "crc32": f"{file_crc32(path):08x}", "size": path.stat().st_size, "column": column,
            "version": STATISTICS_VERSION, "rdkit": rdkit_version}


def _save(target: Path, key: dict, statistics: ReferenceStatistics | TrainingStatistics) -> None:
    arrays = {name: value for name, value in vars(statistics).items() if isinstance(value, np.ndarray)}
    meta = {"key": key, **{name: value for name, value in vars(statistics).items() if name not in arrays}}

    def write(temporary: Path) -> None:
        with open(temporary, "wb") as handle:
            np.savez(handle, meta=np.array(json.dumps(meta)), **arrays)

    atomic_write(target, write)


def _load(target: Path, key: dict, kind: type) -> ReferenceStatistics | TrainingStatistics | str:
    """The cached statistics, or why they cannot be used: any damage (truncated, not an .npz, other content) is a
    reason to compute them again, never an error. A directory in the entry's place (a link to one too) is refused:
    the cache deletes nothing it did not write."""
    if target.is_dir():
        raise ConfigError(parameter("cache_dir"), str(target.parent),
                          reason=f"{target} is a directory, where the cache keeps a file; it is left as it is: move it "
                                 f"away or give another {parameter('cache_dir')}")
    if not target.exists():
        return "absent"
    try:
        with np.load(target, allow_pickle=False) as data:
            meta = json.loads(str(data["meta"]))
            if meta.pop("key") != key:
                return "its key differs (another RDKit or statistics version)"
            return kind(**meta, **{name: data[name] for name in data.files if name != "meta"})
    except (OSError, ValueError, KeyError, TypeError, AttributeError, EOFError, zipfile.BadZipFile) as error:
        return f"unreadable ({type(error).__name__})"


def check_reference_file(path: str | Path) -> Path:
    """`path`, refused in one line where it is missing or not a file: checked for every reference before the first
    one's statistics are computed (minutes for MOSES's test set)."""
    path = Path(path)
    if not path.is_file():
        raise InputError(f"reference file {path} does not exist" if not path.exists()
                         else f"reference {path} is not a file")
    return path


def load_reference(path: str | Path, kind: str, options: ReaderOptions, cache_dir: str | Path,
                   batch_size: int = 1024, device: str = "cpu", progress: bool = False) -> Loaded:
    """The statistics of the reference file `path` (`kind` "test" or "train"), from the cache or computed (with
    `progress`, saying how far on stderr) and cached."""
    path = check_reference_file(path)
    key = _key(path, kind, options.column)
    target = Path(cache_dir) / f"{kind}-{key['crc32']}.npz"
    statistics_type = ReferenceStatistics if kind == "test" else TrainingStatistics
    cached = _load(target, key, statistics_type)
    if not isinstance(cached, str):
        return Loaded(cached, "cache", target)
    start = time.perf_counter()
    parsed = read_smiles(path, options, keep_molecules=False, progress=progress)
    statistics = (reference_statistics(parsed, batch_size, device, progress) if kind == "test"
                  else training_statistics(parsed))
    _save(target, key, statistics)
    return Loaded(statistics, "computed", target, time.perf_counter() - start,
                  None if cached == "absent" else cached)
