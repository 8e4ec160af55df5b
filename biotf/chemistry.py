"""biotf's one home for chemistry (RDKit, the `[chem]` extra): parsing SMILES (validity, canonical form), Morgan
fingerprints, the Tanimoto similarity of fingerprint bits and Bemis-Murcko scaffolds. Tokenizers, splits,
baselines, search and the MOSES metrics all take them from here, each with its own settings as parameters
(fingerprint radius and bits, stereochemistry in a scaffold's SMILES, what two empty fingerprints score).

RDKit is imported on first use, so biotf runs without it; calling a helper without RDKit raises a
BiotfError that says how to install it. RDKit's own parse warnings are silenced: a SMILES RDKit
rejects is reported by the return value (`is_valid`) or one InputError naming it (the others).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np

from biotf.errors import BiotfError, InputError, check_choice

INVALID_SMILES = ("error", "skip")  # data.invalid_smiles, --invalid-smiles: what a SMILES RDKit cannot parse does


def _chem():
    try:
        from rdkit import Chem, RDLogger
    except ImportError:
        raise BiotfError("RDKit is not installed; the SMILES chemistry helpers need it: "
                         "pip install 'biotf[chem]'") from None
    RDLogger.DisableLog("rdApp.*")
    return Chem


def molecule(smiles: str, record: str | None, skip_option: str | None = None):
    """RDKit's molecule of `smiles`; an InputError naming the record (and `skip_option`, the setting that would
    leave such records out, where the caller has one) if RDKit cannot parse it, a BiotfError with the install line
    if RDKit is missing."""
    parsed = _chem().MolFromSmiles(smiles)
    if parsed is None or not smiles:
        where = f" (record {record!r})" if record is not None else ""
        fix = f"; set {skip_option} to leave such records out" if skip_option is not None else ""
        raise InputError(f"RDKit cannot parse SMILES {smiles!r}{where}{fix}")
    return parsed


def molecules(smiles: Sequence[str], ids: Sequence[str], invalid: str = "error",
              key: str = "data.invalid_smiles") -> tuple[list, list[int]]:
    """(RDKit's molecule of each SMILES, None where it cannot parse; the positions of those) under the policy
    `invalid` (`INVALID_SMILES`), the caller's setting `key` (a config key, or a command's flag such as
    `--invalid-smiles`): "error" refuses the first unparsable one in one line naming its record and the setting
    that leaves such records out; "skip" leaves them to the caller to leave out and count (MoleculeNet's BBBP has
    11 of 2,050), and refuses, saying so, SMILES of which RDKit parses none: whatever the caller would report next
    ("found 0 classes", "only 0 groups") would hide that every record was left out."""
    check_choice(key, invalid, INVALID_SMILES)
    skip = f"{key} skip" if key.startswith("--") else f"{key}=skip"
    if invalid == "error":
        return [molecule(s, record, skip) for s, record in zip(smiles, ids)], []
    parsed = [parse(s) for s in smiles]
    unparsable = [position for position, mol in enumerate(parsed) if mol is None]
    if parsed and len(unparsable) == len(parsed):
        first = list(ids[:3])
        raise InputError(f"RDKit parses none of the {len(parsed):,} SMILES (records {', '.join(map(repr, first))}"
                         f"{', ...' if len(parsed) > 3 else ''}): {skip} would leave every record out; are they "
                         "SMILES?")
    return parsed, unparsable


def parse(smiles: str):
    """RDKit's molecule of `smiles`, or None where RDKit cannot parse it (valences, aromaticity, ring closures) or
    `smiles` is empty."""
    return _chem().MolFromSmiles(smiles) if smiles else None


def is_valid(smiles: str) -> bool:
    """Whether RDKit parses `smiles` into a molecule."""
    return parse(smiles) is not None


def canonicalize(smiles: str, record: str | None = None, isomeric: bool = True) -> str:
    """RDKit's canonical SMILES of `smiles` (stereochemistry kept unless `isomeric=False`)."""
    return _chem().MolToSmiles(molecule(smiles, record), isomericSmiles=isomeric)


def fingerprint_bits(molecules: Iterable, radius: int, bits: int) -> np.ndarray:
    """(n, bits) uint8 0/1: the Morgan fingerprints (RDKit's Morgan generator, chirality off, its default) of RDKit
    molecules; (0, bits) for none."""
    from rdkit.Chem import rdFingerprintGenerator

    generator = rdFingerprintGenerator.GetMorganGenerator(radius=radius, fpSize=bits)
    rows = [generator.GetFingerprintAsNumPy(molecule) for molecule in molecules]
    return np.stack(rows) if rows else np.zeros((0, bits), dtype=np.uint8)


def tanimoto(shared: np.ndarray, row_bits: np.ndarray, column_bits: np.ndarray, empty: float) -> np.ndarray:
    """Tanimoto similarity |a & b| / |a | b| of 0/1 rows (the Jaccard of their on-bits), from `shared` = a @ b.T
    and each side's count of on-bits; `empty`: the score of two empty rows (0/0), 1 in MOSES, 0 in `biotf search`."""
    union = row_bits[:, None] + column_bits[None, :] - shared
    return np.divide(shared, union, out=np.full_like(shared, empty), where=union > 0)


def murcko_scaffold(molecule, isomeric: bool, min_rings: int = 0) -> str | None:
    """The canonical SMILES of a molecule's Bemis-Murcko scaffold (RDKit's `GetScaffoldForMol`; an acyclic molecule's
    is ""), with stereochemistry when `isomeric`; None when it has fewer than `min_rings` rings."""
    from rdkit import Chem
    from rdkit.Chem.Scaffolds import MurckoScaffold

    core = MurckoScaffold.GetScaffoldForMol(molecule)
    smiles = Chem.MolToSmiles(core, isomericSmiles=isomeric)
    return smiles if core.GetRingInfo().NumRings() >= min_rings else None
