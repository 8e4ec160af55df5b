"""The RDKit helpers of SMILES data moved to `biotf.chemistry` (the package's one home for chemistry); their names
stay importable from here."""

from biotf.chemistry import canonicalize, is_valid, molecule, parse, randomize

__all__ = ["canonicalize", "is_valid", "molecule", "parse", "randomize"]
