"""The RDKit helpers of SMILES data moved to `biotf.chemistry` (the package's one home for chemistry); their names
stay importable from here."""

from biotf.chemistry import INVALID_SMILES, canonicalize, is_valid, molecule, molecules, parse, randomize

__all__ = ["INVALID_SMILES", "canonicalize", "is_valid", "molecule", "molecules", "parse", "randomize"]
