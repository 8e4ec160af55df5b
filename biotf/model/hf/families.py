"""The families biotf reads and writes, by config.json's `model_type`: a new family is one module defining a
`Family` and one entry here. `save_hf` without a model_type writes the first, in this order, that holds a model."""

from __future__ import annotations

from biotf.model.hf import bloom, esm, gpt2, llama
from biotf.model.hf.family import Family

FAMILIES: dict[str, Family] = {family.model_type: family for family in (*llama.FAMILIES, esm.FAMILY, gpt2.FAMILY,
                                                                         bloom.FAMILY)}
