"""Protein chains of PDB / mmCIF files (Biopython's parsers): the sequence a model reads and the true contact map.

    chain = read_chain("1eteA.pdb.gz")
    chain.sequence, chain.contacts()  # "TPL...", (L, L) bool: C-beta within 8 angstrom

The sequence is the chain's observed residues, in file order, of the first model (NMR files hold several):
- the 20 standard amino acids by their one-letter code; any other residue with a C-alpha (MSE, UNK, modified
  residues) is `X` and counted (`nonstandard`); waters and ligands (no C-alpha) are not residues;
- a gap in the residue numbering between residues that are not bonded (C-alpha over BONDED_CA angstrom apart)
  is residues the experiment did not see: one `X` per missing number is put in the sequence, so that position i
  of the sequence (and of every map) is residue i of the chain and sequence separations are true ones; these
  positions have no coordinates, so every pair with one of them is unknown (`known`), never counted as a
  contact or a non-contact (`missing` counts them); a gap that would make the chain longer than MAX_CHAIN
  positions is refused naming the file and the two residue numbers, before anything is put in (a damaged number,
  mmCIF's are unbounded: a jump of 2e9 must not become 2e9 X), so work stays bounded by the residues read;
- a gap in the numbering between bonded residues (deposited files renumber domains and tags: 3a4rA jumps from
  0 to 339) is no gap: nothing is put in, and it is counted (`renumbered`).
A residue's position for contacts is its C-beta, its C-alpha for glycine or a missing C-beta (Rao et al. 2020);
a pair is a contact when those are less than CONTACT_ANGSTROM apart (ESM's trRosetta targets: `dist < 8`).
"""

from __future__ import annotations

import io
import warnings
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from biotf.io.readers import open_binary
from biotf.errors import InputError
from biotf.naming import parameter

CONTACT_ANGSTROM = 8.0
BONDED_CA = 4.2  # consecutive C-alphas are 3.8 angstrom apart (2.9 for a cis peptide); more is a chain break
MAX_CHAIN = 100_000  # positions, gaps filled: about 3 x titin (~35,000 residues), the longest known protein
STRUCTURE_SUFFIXES = (".pdb", ".ent", ".cif", ".mmcif")
STANDARD = {"ALA": "A", "ARG": "R", "ASN": "N", "ASP": "D", "CYS": "C", "GLN": "Q", "GLU": "E", "GLY": "G",
            "HIS": "H", "ILE": "I", "LEU": "L", "LYS": "K", "MET": "M", "PHE": "F", "PRO": "P", "SER": "S",
            "THR": "T", "TRP": "W", "TYR": "Y", "VAL": "V"}


@dataclass(frozen=True)
class Chain:
    """One chain: `sequence` (what a model reads), `positions` (L, 3) float64, NaN where unobserved, and the
    counts of the policies in the module docstring."""

    name: str
    sequence: str
    positions: np.ndarray
    missing: int = 0
    renumbered: int = 0
    nonstandard: int = 0

    @property
    def known(self) -> np.ndarray:
        """(L,) bool: the residues with coordinates."""
        return ~np.isnan(self.positions).any(-1)

    def contacts(self) -> np.ndarray:
        """(L, L) bool: C-beta (C-alpha) within CONTACT_ANGSTROM; False at every unknown pair (see `known`)."""
        distances = np.linalg.norm(self.positions[:, None] - self.positions[None], axis=-1)
        with np.errstate(invalid="ignore"):
            return distances < CONTACT_ANGSTROM

    def drawn_contacts(self) -> tuple[np.ndarray, str]:
        """The true map as a picture shows it (`biotf.analysis.plot.plot_contacts`), with its title: 1 a contact, 0
        none, 0.5 (grey) a pair with an unobserved residue."""
        known = self.known
        truth = np.where(known[:, None] & known[None], self.contacts().astype(float), 0.5)
        return truth, f"true: C-beta < {CONTACT_ANGSTROM:g} A (grey: unobserved)"


def structure_name(path: str | Path) -> str | None:
    """The name of a structure file without its extension (`1eteA.pdb.gz` -> `1eteA`); None if it is none."""
    name = Path(path).name
    name = name[:-3] if name.lower().endswith(".gz") else name
    stem, dot, suffix = name.rpartition(".")
    return stem if dot and f".{suffix.lower()}" in STRUCTURE_SUFFIXES else None


def _parse(path: Path):
    from Bio.PDB import MMCIFParser, PDBParser

    mmcif = Path(path.name[:-3] if path.name.lower().endswith(".gz") else path.name).suffix.lower() in (".cif",
                                                                                                          ".mmcif")
    parser = MMCIFParser(QUIET=True) if mmcif else PDBParser(QUIET=True)
    with open_binary(path) as handle, io.TextIOWrapper(handle, encoding="utf-8", errors="replace") as text:
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                return parser.get_structure(structure_name(path) or path.name, text)
        except Exception as error:  # Biopython's parsers raise many kinds for damaged files
            raise InputError(f"{path}: not a readable {'mmCIF' if mmcif else 'PDB'} file ({error})") from None


def _position(residue) -> np.ndarray:
    atom = "CB" if residue.get_resname() != "GLY" and "CB" in residue else "CA"
    return residue[atom].coord.astype(np.float64)


def read_chain(path: str | Path, chain: str | None = None) -> Chain:
    """The chain `chain` of the file's first model (None: its only chain with residues); InputError naming the
    file when it has none, or several and `chain` is None."""
    path = Path(path)
    models = list(_parse(path))
    if not models:
        raise InputError(f"{path}: no model (no atoms)")
    chains = {c.id: [r for r in c if r.id[0] != "W" and "CA" in r] for c in models[0]}
    chains = {name: residues for name, residues in chains.items() if residues}
    if chain is None and len(chains) != 1:
        raise InputError(f"{path}: {len(chains)} chains with residues ({', '.join(chains) or 'none'}); name one")
    if chain is not None and chain not in chains:
        raise InputError(f"{path}: no chain {chain!r} with residues (chains: {', '.join(chains) or 'none'})")
    chain = chain if chain is not None else next(iter(chains))
    residues = chains[chain]
    letters: list[str] = []
    positions: list[np.ndarray] = []
    missing = renumbered = nonstandard = 0
    unseen = np.full(3, np.nan)
    for before, residue in zip([None, *residues], residues):
        if before is not None and residue.id[1] - before.id[1] > 1:
            if residue["CA"] - before["CA"] <= BONDED_CA:
                renumbered += 1
            else:
                gap = residue.id[1] - before.id[1] - 1
                if len(letters) + gap + 1 > MAX_CHAIN:
                    raise InputError(f"{path}: chain {chain!r}: residue numbers jump from {before.id[1]} to "
                                     f"{residue.id[1]} between residues that are not bonded; the {gap:,} missing "
                                     f"residues would make the chain longer than {MAX_CHAIN:,} (no protein is): "
                                     "a damaged residue number (fix the file or leave it out)")
                letters.extend("X" * gap)
                positions.extend([unseen] * gap)
                missing += gap
        letter = STANDARD.get(residue.get_resname()) if residue.id[0] == " " else None
        nonstandard += letter is None
        letters.append(letter or "X")
        positions.append(_position(residue))
    name = structure_name(path) or path.name
    return Chain(name, "".join(letters), np.stack(positions), missing, renumbered, nonstandard)


def structure_files(directory: str | Path, names: list[str] | None = None, listed_in: str | Path = "") -> list[Path]:
    """The structure files of `directory` (sorted by name), or those of `names` (file names or names without the
    extension, in that order; `listed_in` names the list in errors): an unknown or repeated name is refused."""
    directory = Path(directory)
    if not directory.is_dir():
        raise InputError(f"{parameter('structures')} {directory} is not a directory")
    files = {path.name: path for path in sorted(directory.iterdir()) if structure_name(path) and path.is_file()}
    if names is None:
        if not files:
            raise InputError(f"{parameter('structures')} {directory} holds no structure file "
                             f"({', '.join(STRUCTURE_SUFFIXES)}, optionally .gz)")
        return list(files.values())
    by_stem = {structure_name(name): path for name, path in files.items()}
    chosen: list[Path] = []
    for line, name in enumerate(names, 1):
        path = files.get(name) or by_stem.get(name)
        if path is None:
            raise InputError(f"{listed_in}: entry {line}: no structure {name!r} in {directory}")
        if path in chosen:
            raise InputError(f"{listed_in}: entry {line}: {name!r} is listed twice")
        chosen.append(path)
    if not chosen:
        raise InputError(f"{listed_in} lists no structure")
    return chosen


def read_list(path: str | Path) -> list[str]:
    """The names of a list file, one a line (blank lines and `#` comments skipped)."""
    with io.TextIOWrapper(open_binary(path), encoding="utf-8") as text:
        lines = text.read().splitlines()
    return [line.strip() for line in lines if line.strip() and not line.lstrip().startswith("#")]
