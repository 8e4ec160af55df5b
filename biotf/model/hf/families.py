"""The families biotf reads and writes, by config.json's `model_type`: a new family is one module defining a
`Family` and one entry here."""

from __future__ import annotations

from biotf.model.hf import bert, esm, qwen2
from biotf.model.hf.family import Family

FAMILIES: dict[str, Family] = {family.model_type: family for family in (qwen2.FAMILY, esm.FAMILY,
                                                                      bert.BERT_FAMILY, bert.ROBERTA_FAMILY)}
