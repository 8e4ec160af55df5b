"""The families biotf reads and writes, by config.json's `model_type`: a new family is one module defining a
`Family` and one entry here."""

from __future__ import annotations

from biotf.model.hf.bert import BERT_FAMILY, ROBERTA_FAMILY
from biotf.model.hf.esm import FAMILY as ESM
from biotf.model.hf.family import Family
from biotf.model.hf.qwen2 import FAMILY as QWEN2

FAMILIES: dict[str, Family] = {family.model_type: family for family in (QWEN2, ESM, BERT_FAMILY, ROBERTA_FAMILY)}
