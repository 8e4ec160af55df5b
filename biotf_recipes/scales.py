"""Amino-acid property scales: what `biotf tokens` asks a protein model's token embeddings to reproduce.

Three classical scales of the 20 standard amino acids (one-letter codes, the tokens of ESM-2's vocabulary):

- `hydrophobicity_kd`: Kyte & Doolittle hydropathy index. J. Kyte, R. F. Doolittle (1982), "A simple method for
  displaying the hydropathic character of a protein", J. Mol. Biol. 157:105-132, Table 2 (I 4.5 ... R -4.5).
- `charge_ph7`: net side-chain charge at pH 7 by Henderson-Hasselbalch with the side-chain pKa values of Lehninger
  (D 3.9, E 4.1, H 6.0, C 8.3, Y 10.1, K 10.5, R 12.5), rounded to one decimal: D, E -1; K, R +1; H +0.1
  (1 / (1 + 10^(7 - 6.0)) = 0.09); every other residue 0 (C -0.05 and Y -0.001 round to 0). Termini are not
  counted: a token is a residue inside a chain.
- `volume_a3`: residue volume in cubic angstroms (the whole residue in solution, not the side chain alone),
  A. A. Zamyatnin (1972), "Protein volume in solution", Prog. Biophys. Mol. Biol. 24:107-123, as tabulated by
  IMGT ("IMGT classes of the 20 common amino acids", volume column).
"""

from __future__ import annotations

AMINO_ACIDS = "ACDEFGHIKLMNPQRSTVWY"

AMINO_ACID_SCALES: dict[str, dict[str, float]] = {
    "hydrophobicity_kd": {
        "A": 1.8, "C": 2.5, "D": -3.5, "E": -3.5, "F": 2.8, "G": -0.4, "H": -3.2, "I": 4.5, "K": -3.9, "L": 3.8,
        "M": 1.9, "N": -3.5, "P": -1.6, "Q": -3.5, "R": -4.5, "S": -0.8, "T": -0.7, "V": 4.2, "W": -0.9, "Y": -1.3,
    },
    "charge_ph7": {
        "A": 0.0, "C": 0.0, "D": -1.0, "E": -1.0, "F": 0.0, "G": 0.0, "H": 0.1, "I": 0.0, "K": 1.0, "L": 0.0,
        "M": 0.0, "N": 0.0, "P": 0.0, "Q": 0.0, "R": 1.0, "S": 0.0, "T": 0.0, "V": 0.0, "W": 0.0, "Y": 0.0,
    },
    "volume_a3": {
        "A": 88.6, "C": 108.5, "D": 111.1, "E": 138.4, "F": 189.9, "G": 60.1, "H": 153.2, "I": 166.7, "K": 168.6,
        "L": 166.7, "M": 162.9, "N": 114.1, "P": 112.7, "Q": 143.8, "R": 173.4, "S": 89.0, "T": 116.1, "V": 140.0,
        "W": 227.8, "Y": 193.6,
    },
}
