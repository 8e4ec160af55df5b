"""Tokenizers: one interface (`Tokenizer`), four built-in schemes, and a registry for plugins.

| name      | class                 | scheme                                                        |
|-----------|-----------------------|---------------------------------------------------------------|
| `protein` | `AminoAcidTokenizer`  | one token per residue, ESM-2's 33-token vocabulary            |
| `dna`     | `KmerTokenizer`       | k-mers with a stride (Nucleotide Transformer / DNABERT / chars)|
| `smiles`  | `SmilesTokenizer`     | Schwaller et al. 2019 regex, strict round trip, learned vocab |
| `bpe`     | `BPETokenizer`        | byte-level BPE on HF `tokenizers`; wraps any HF tokenizer      |

`build_tokenizer(config)` builds from `conf/tokenizer/<name>.yaml`; `load_tokenizer(path)` reads a
saved biotf or Hugging Face tokenizer. A new scheme subclasses `Tokenizer` and registers itself
with `@register_tokenizer("name")` (or a `biotf.tokenizers` entry point).
"""

from biotf.tokenizers.base import PolicyStats, Tokenizer, register_tokenizer, registered_tokenizers, tokenizer_class
from biotf.tokenizers.amino_acid import AminoAcidTokenizer
from biotf.tokenizers.kmer import KmerTokenizer, reverse_complement
from biotf.tokenizers.smiles import SmilesTokenizer
from biotf.tokenizers.bpe import BPETokenizer
from biotf.tokenizers.build import build_tokenizer, load_tokenizer

# The policies of the built-in schemes (`Tokenizer.policy_options`): the keys `finetune.tokenizer_options` declares.
POLICY_OPTIONS = tuple(dict.fromkeys(option for scheme in (AminoAcidTokenizer, KmerTokenizer, SmilesTokenizer,
                                                            BPETokenizer)
                                     for option in scheme.policy_options))

__all__ = [
    "AminoAcidTokenizer", "BPETokenizer", "KmerTokenizer", "POLICY_OPTIONS", "PolicyStats", "SmilesTokenizer",
    "Tokenizer", "build_tokenizer", "load_tokenizer", "register_tokenizer", "registered_tokenizers",
    "reverse_complement", "tokenizer_class",
]
