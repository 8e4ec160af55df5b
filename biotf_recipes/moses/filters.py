"""MOSES's "Filters" metric: whether a molecule passes the filters MOSES built its data set with
(`mol_passes_filters` in molecularsets/moses, `moses/metrics/utils.py`; Polykovskiy et al. 2020).

A molecule passes when it has no ring of 8 or more atoms, no charged atom, only the atoms C, N, S, O, F, Cl, Br, H,
matches none of the medicinal-chemistry filters (MCF) and PAINS substructures (matched on the molecule with explicit
hydrogens, since the SMARTS name [#1]), and its canonical SMILES (without stereo) parses again.

- MCF: `mcf.csv` beside this module is MOSES's `moses/metrics/mcf.csv` (22 SMARTS; molecularsets/moses, MIT
  licence, Copyright (c) 2018 Insilico Medicine; taken from the copy in harryjo97/GDSS @ 30edac0 :
  moses/metrics/mcf.csv, line endings made LF).
- PAINS: the 480 SMARTS of `wehi_pains.csv` (Baell & Holloway 2010, as converted at WEHI), which MOSES ships and
  RDKit ships too (`rdkit/Data/Pains/wehi_pains.csv`); read from RDKit's copy, which carries RDKit's later
  corrections of a few SMARTS.
"""

from __future__ import annotations

import csv
from functools import lru_cache
from pathlib import Path

ALLOWED_ATOMS = frozenset({"C", "N", "S", "O", "F", "Cl", "Br", "H"})
MCF_FILE = Path(__file__).resolve().parent / "mcf.csv"


def _smarts_rows(path: Path, column: int, header: bool) -> list[str]:
    with open(path, newline="", encoding="utf-8") as handle:
        rows = list(csv.reader(handle))
    return [row[column].strip() for row in rows[1 if header else 0:] if row]


@lru_cache(maxsize=1)
def substructure_filters() -> tuple:
    """The MCF and PAINS patterns as RDKit query molecules."""
    from rdkit import Chem, RDConfig

    pains = Path(RDConfig.RDDataDir) / "Pains" / "wehi_pains.csv"
    patterns = _smarts_rows(MCF_FILE, 1, header=True) + _smarts_rows(pains, 0, header=False)
    queries = tuple(Chem.MolFromSmarts(smarts) for smarts in patterns)
    if any(query is None for query in queries):
        raise RuntimeError("an MCF/PAINS SMARTS did not parse")  # shipped data: a broken install, not user input
    return queries


def passes_filters(molecule) -> bool:
    """Whether an RDKit molecule passes MOSES's filters (see the module docstring)."""
    from rdkit import Chem

    if any(len(ring) >= 8 for ring in molecule.GetRingInfo().AtomRings()):
        return False
    atoms = molecule.GetAtoms()
    if any(atom.GetFormalCharge() != 0 for atom in atoms) or any(atom.GetSymbol() not in ALLOWED_ATOMS
                                                                  for atom in atoms):
        return False
    with_hydrogens = Chem.AddHs(molecule)
    if any(with_hydrogens.HasSubstructMatch(query) for query in substructure_filters()):
        return False
    smiles = Chem.MolToSmiles(molecule, isomericSmiles=False)
    return bool(smiles) and Chem.MolFromSmiles(smiles) is not None
