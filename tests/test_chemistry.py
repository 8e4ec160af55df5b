"""biotf's chemistry has one home (`biotf.chemistry`): no other module computes Morgan fingerprints, Murcko scaffolds
or a Tanimoto similarity itself, and each caller keeps the settings it had (fingerprint bits, what 0/0 scores,
stereochemistry in a scaffold's SMILES), value for value against RDKit called directly."""

from __future__ import annotations

import ast
from pathlib import Path

import numpy as np
import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "biotf"
SMILES = ["CCO", "c1ccccc1CCN", "C[C@H](N)C(=O)O", "c1ccc2c(c1)[C@@H]1CC[C@H]2C1", "CCc1ccccc1Cc1ccncc1", "CC"]


def test_only_the_chemistry_module_computes_fingerprints_scaffolds_and_tanimoto():
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path.name == "chemistry.py" and path.parent == PACKAGE:
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module and (
                    "Scaffolds" in node.module or any(a.name == "rdFingerprintGenerator" for a in node.names)):
                found.append(f"{path.relative_to(PACKAGE)}: imports {node.module}")
            if isinstance(node, ast.Name) and node.id == "union" and isinstance(node.ctx, ast.Store):
                found.append(f"{path.relative_to(PACKAGE)}: computes a union of bits (a Tanimoto of its own)")
    assert found == []


def test_each_caller_keeps_its_settings():
    pytest.importorskip("rdkit")
    from rdkit import Chem
    from rdkit.Chem import rdFingerprintGenerator
    from rdkit.Chem.Scaffolds import MurckoScaffold

    from biotf.analysis.feature_baselines import morgan_fingerprints
    from biotf.data.splits import scaffold_groups
    from biotf_recipes.moses import metrics

    molecules = [Chem.MolFromSmiles(s) for s in SMILES]
    ids = [str(i) for i in range(len(SMILES))]
    generator = rdFingerprintGenerator.GetMorganGenerator(radius=2, fpSize=2048)
    expected = np.stack([generator.GetFingerprintAsNumPy(m) for m in molecules]).astype(np.float32)
    assert np.array_equal(morgan_fingerprints(SMILES, ids), expected)  # baselines, search: 2048 bits
    generator = rdFingerprintGenerator.GetMorganGenerator(radius=2, fpSize=1024)
    packed = np.stack([np.packbits(generator.GetFingerprintAsNumPy(m).astype(bool)) for m in molecules])
    assert np.array_equal(metrics.fingerprints(molecules), packed)  # MOSES: 1024 bits, packed
    assert metrics.fingerprints([]).shape == (0, 128)

    empty = np.zeros((1, 128), np.uint8)
    assert next(metrics.tanimoto_blocks(empty, empty))[0, 0] == 1.0  # MOSES: two empty fingerprints are alike
    from biotf.analysis.search.neighbours import exact_search
    zero = np.zeros((2, 8), np.float32)
    assert exact_search(zero, zero[:1], 1, "jaccard")[0][0, 0] == 0.0  # search: two empty sets score 0

    plain = [MurckoScaffold.MurckoScaffoldSmiles(mol=m, includeChirality=False) for m in molecules]
    groups = scaffold_groups(SMILES, ids)  # splits: scaffolds without stereochemistry
    assert [groups[i] == groups[j] for i in range(len(SMILES)) for j in range(len(SMILES))] == \
           [plain[i] == plain[j] for i in range(len(SMILES)) for j in range(len(SMILES))]
    with_stereo = [Chem.MolToSmiles(MurckoScaffold.GetScaffoldForMol(m)) for m in molecules]
    assert metrics.scaffold(molecules[3], min_rings=1) == with_stereo[3] != plain[3]  # MOSES keeps stereochemistry
    assert metrics.scaffold(molecules[0], min_rings=0) is None  # an acyclic molecule has no MOSES scaffold
