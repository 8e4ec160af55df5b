#!/usr/bin/env python
"""Write biotf's base SMILES vocabulary, biotf/tokenizers/smiles_vocabulary.txt, which every new SMILES tokenizer
starts from (`SmilesTokenizer()`, and `SmilesTokenizer.train` before the pieces of its own corpus).

    python scripts/smiles_vocabulary.py                       # from ../shared/data/smiles, as shipped
    python scripts/smiles_vocabulary.py --data DIR --output FILE

In this order, each piece once:
1. every piece the regex makes outside brackets: organic subset and aromatic atoms, bonds, branches, `.`, ring
   closures 0-9 and %10-%99, `>`/`>>`, `*`, `$` (`REGEX_TOKENS`, the whole vocabulary of an untrained tokenizer
   before this file existed, so those ids are unchanged);
2. every element of the periodic table as a bracket atom (`[H]` ... `[Og]`), and the aromatic bracket atoms;
3. the forms of atoms that medicinal chemistry writes most (`COMMON`): tetrahedral centres, charged organic atoms,
   monatomic ions and isotopic labels;
4. every other bracket atom of the corpus files (`CORPUS`), most frequent first (ties in code-point order).
The corpus files must hold only pieces of the regex (whitespace around a SMILES is stripped); a piece that is not
in 1-3 and not a bracket atom (`%05`) is left out, so the vocabulary does not depend on one odd molecule.
"""

from __future__ import annotations

import argparse
import hashlib
from collections import Counter
from pathlib import Path

from biotf.io.readers import ReaderOptions, read_records
from biotf.tokenizers.smiles import REGEX_TOKENS, SPECIAL_TOKENS, VOCABULARY_FILE, SmilesTokenizer

REPO = Path(__file__).resolve().parents[1]

ELEMENTS = (
    "H He Li Be B C N O F Ne Na Mg Al Si P S Cl Ar K Ca Sc Ti V Cr Mn Fe Co Ni Cu Zn Ga Ge As Se Br Kr Rb Sr Y Zr Nb "
    "Mo Tc Ru Rh Pd Ag Cd In Sn Sb Te I Xe Cs Ba La Ce Pr Nd Pm Sm Eu Gd Tb Dy Ho Er Tm Yb Lu Hf Ta W Re Os Ir Pt Au "
    "Hg Tl Pb Bi Po At Rn Fr Ra Ac Th Pa U Np Pu Am Cm Bk Cf Es Fm Md No Lr Rf Db Sg Bh Hs Mt Ds Rg Cn Nh Fl Mc Lv "
    "Ts Og").split()
AROMATIC = "b c n o p s se as te".split()  # OpenSMILES' aromatic symbols, plus te (RDKit writes it)

COMMON = (
    # tetrahedral centres, as RDKit writes them
    *(f"[{element}{chirality}{h}{charge}]" for element, charge in (("C", ""), ("N", ""), ("P", ""), ("S", ""),
                                                                   ("Si", ""), ("N", "+"), ("P", "+"), ("S", "+"))
      for chirality in ("@", "@@") for h in ("", "H")),
    # charged and hydrogen-bearing organic atoms
    "[CH]", "[CH2]", "[CH3]", "[CH4]", "[C-]", "[C+]", "[CH-]", "[CH2-]", "[CH+]", "[CH2+]", "[c-]", "[cH-]", "[c+]",
    "[NH]", "[NH2]", "[NH3]", "[N+]", "[N-]", "[NH+]", "[NH2+]", "[NH3+]", "[NH4+]", "[NH-]", "[n+]", "[n-]", "[nH]",
    "[nH+]", "[O+]", "[O-]", "[OH]", "[OH+]", "[OH-]", "[OH2]", "[OH2+]", "[o+]", "[S+]", "[S-]", "[SH]", "[SH+]",
    "[SH-]", "[s+]", "[P+]", "[P-]", "[PH]", "[PH+]", "[PH2]", "[PH-]", "[B-]", "[BH-]", "[BH2-]", "[BH3-]", "[BH4-]",
    "[Se-]", "[SeH]", "[se+]", "[I+]", "[Cl+]", "[Br+]", "[SiH]", "[SiH2]", "[SiH3]", "[H+]", "[H-]",
    # monatomic ions: alkali, alkaline earth, halides, common metal ions
    "[Li+]", "[Na+]", "[K+]", "[Rb+]", "[Cs+]", "[Be+2]", "[Mg+2]", "[Ca+2]", "[Sr+2]", "[Ba+2]", "[F-]", "[Cl-]",
    "[Br-]", "[I-]", "[Al+3]", "[Ga+3]", "[Zn+2]", "[Cd+2]", "[Hg+2]", "[Hg+]", "[Cu+]", "[Cu+2]", "[Ag+]", "[Au+]",
    "[Au+3]", "[Fe+2]", "[Fe+3]", "[Co+2]", "[Co+3]", "[Ni+2]", "[Mn+2]", "[Cr+3]", "[Pt+2]", "[Pt+4]", "[Pd+2]",
    "[Sn+2]", "[Sn+4]", "[Pb+2]", "[Tl+]", "[Gd+3]", "[La+3]", "[Bi+3]", "[Sb+3]", "[Ti+4]", "[Zr+4]",
    # isotopic labels: deuterium, tritium, PET and radiotracer isotopes, stable labels
    "[2H]", "[3H]", "[11C]", "[11CH3]", "[13C]", "[13CH]", "[13CH2]", "[13CH3]", "[13c]", "[13cH]", "[14C]", "[14CH]",
    "[14CH2]", "[14CH3]", "[14c]", "[14cH]", "[13N]", "[15N]", "[15NH]", "[15NH2]", "[15n]", "[15O]", "[17O]", "[18O]",
    "[18F]", "[32P]", "[33P]", "[35S]", "[36Cl]", "[75Br]", "[76Br]", "[77Br]", "[82Br]", "[123I]", "[124I]", "[125I]",
    "[131I]", "[99Tc]", "[111In]", "[68Ga]", "[64Cu]", "[89Zr]", "[201Tl]",
)

CORPUS = {  # file under the data directory: its SMILES column
    "moses_train.csv.gz": "SMILES", "moses_test.csv.gz": "SMILES", "moses_test_scaffolds.csv.gz": "SMILES",
    "molnet_bbbp.csv": "smiles", "molnet_esol.csv": "smiles", "molnet_freesolv.csv": "smiles",
    "molnet_lipo.csv": "smiles", "molnet_hiv.csv.gz": "smiles",
}


def fixed_tokens() -> list[str]:
    """Parts 1-3 of the vocabulary: the ones that do not depend on the corpus."""
    return list(dict.fromkeys([*REGEX_TOKENS, *(f"[{e}]" for e in ELEMENTS), *(f"[{a}]" for a in AROMATIC), *COMMON]))


def vocabulary(data: Path) -> tuple[list[str], list[str]]:
    """(the base vocabulary, one header line per corpus file)."""
    fixed = fixed_tokens()
    splitter = SmilesTokenizer(vocab=REGEX_TOKENS, whitespace="strip")
    counts: Counter[str] = Counter()
    described = []
    for name, column in CORPUS.items():
        path = data / name
        texts = [record.sequence for record in read_records(path, ReaderOptions(column=column))]
        found = splitter.count_pieces(texts)
        counts.update(found)
        md5 = hashlib.md5(path.read_bytes()).hexdigest()[:12]
        described.append(f"{name} (column {column}, {len(texts)} SMILES, md5 {md5}): "
                         f"distinct bracket atoms {sum(p.startswith('[') for p in found)}")
    known = set(fixed)
    seen = sorted((p for p in counts if p.startswith("[") and p not in known), key=lambda p: (-counts[p], p))
    return fixed + seen, described


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, default=REPO.parent / "shared" / "data" / "smiles",
                        help="the directory holding the corpus files (default ../shared/data/smiles)")
    parser.add_argument("--output", type=Path, default=VOCABULARY_FILE)
    args = parser.parse_args()
    tokens, described = vocabulary(args.data)
    header = [
        "biotf's base SMILES vocabulary: every new SmilesTokenizer starts from it (ids 5, 6, ... in this order,",
        f"after the specials {' '.join(SPECIAL_TOKENS)}). {len(tokens)} pieces, one per line; lines starting",
        "with '# ' are comments (no piece holds a space). Generated by scripts/smiles_vocabulary.py (see its",
        "docstring for the order): the regex's pieces outside brackets, every element as a bracket atom, aromatic",
        "bracket atoms, common charged, chiral and isotopic forms, then every other bracket atom of these files",
        "(shared/data/smiles; MOSES from the molsets 0.3.1 wheel, MoleculeNet via aspuru-guzik-group/selfies):",
        *(f"  {line}" for line in described),
        "Do not edit by hand: a tokenizer saved with an earlier file keeps its own vocabulary (it is in its",
        "tokenizer.json); only tokenizers built after a change see it.",
    ]
    text = "".join(f"# {line}\n" for line in header) + "".join(f"{token}\n" for token in tokens)
    args.output.write_text(text, encoding="utf-8")
    print(f"{args.output}: {len(tokens)} pieces")


if __name__ == "__main__":
    main()
