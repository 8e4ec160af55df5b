"""The families biotf reads and writes, by config.json's `model_type`: a new family is one module defining a
`Family` and one entry here. `save_hf` without a model_type writes the first, in this order, that holds a model."""

from __future__ import annotations

from biotf.model.hf.albert import FAMILY as ALBERT  # read only
from biotf.model.hf.bert import BERT_FAMILY, ROBERTA_FAMILY
from biotf.model.hf.bloom import FAMILY as BLOOM
from biotf.model.hf.esm import FAMILY as ESM
from biotf.model.hf.esmc import FAMILY as ESMC
from biotf.model.hf.family import Family
from biotf.model.hf.gpt2 import FAMILY as GPT2
from biotf.model.hf.llama import FAMILIES as LLAMA_STYLE  # qwen2, llama, mistral
from biotf.model.hf.t5 import FAMILY as T5  # read only

FAMILIES: dict[str, Family] = {family.model_type: family for family in
                               (*LLAMA_STYLE, ESM, ESMC, BERT_FAMILY, ROBERTA_FAMILY, GPT2, BLOOM, T5, ALBERT)}
# The families biotf writes (`biotf export-model --hf MODEL_TYPE`), in the order `save_hf` tries them.
WRITABLE_FAMILIES: dict[str, Family] = {name: family for name, family in FAMILIES.items()
                                        if family.export_config is not None}
