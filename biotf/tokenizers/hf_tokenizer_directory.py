"""A Hugging Face checkpoint's tokenizer directory as a biotf tokenizer, with the ids `transformers` gives it.

`read_hf_tokenizer(directory)` reads what `AutoTokenizer.from_pretrained(directory)` reads, locally:
- `tokenizer.json` (GPT-2, RoBERTa, BLOOM, Llama, Mistral, ...), with `tokenizer_config.json` beside it;
- `vocab.txt` + `tokenizer_config.json` (WordPiece: BERT, `do_lower_case`, ProtBert, DNABERT; ESM's `EsmTokenizer`
  for any vocabulary, Nucleotide Transformer's k-mers and SaProt's residue + 3Di tokens too, on the pipeline
  `hf.esm_vocabulary_tokenizer` builds with its ids) and `vocab.json` +
  `merges.txt` (byte-level BPE: GPT-2, ProtGPT2, RoBERTa, ChemBERTa), which `transformers` converts into a
  `tokenizers` pipeline without network;
- a lone SentencePiece model, `tokenizer.model` (Llama) or `spiece.model` (T5, ProtT5, Ankh, ALBERT), converted the
  same way when `sentencepiece` and `protobuf` are installed (`pip install biotf[sentencepiece]`), else refused in one
  line naming them.
The pipeline comes from `transformers`, not from tokenizer.json alone, because a tokenizer class may rebuild parts
of it (transformers 5's `LlamaTokenizer` builds its own Metaspace pre-tokenizer and decoder, and the post-processor
follows `add_bos_token` / `add_eos_token`). It is copied into a `BPETokenizer` (biotf's wrapper of any
`tokenizers.Tokenizer`) with the roles of its special tokens, so encode, decode, fingerprint and `save` (HF's own
`tokenizer.json` + `tokenizer_config.json`, which `load_tokenizer` and `AutoTokenizer` both read back) are that
class's. A directory asking for custom code (`auto_map`, a tokenizer class `transformers` lacks) is refused; nothing
is downloaded. A model card (README.md) that maps the rare residues U, Z, O and B to X before tokenizing sets
`rare_residues="to_x"` (`model_card_convention`). `bpe.cleans_up_spaces` / `bpe.clean_up_tokenization` are transformers' decoding clean-up, which a WordPiece
(BERT) tokenizer_config.json asks for; `BPETokenizer.decode` applies it where the directory did.
"""

from __future__ import annotations

import importlib.util
import json
import re
from pathlib import Path
from typing import Any

from biotf.errors import InputError
from biotf.tokenizers.base import ROLES, TOKENIZER_FILE
from biotf.tokenizers.bpe import TOKENIZER_CONFIG_FILE, BPETokenizer, cleans_up_spaces
from biotf.tokenizers.hf import esm_vocabulary_tokenizer
from biotf.untrusted import read_json_object

CONFIG_FILE = "config.json"
SENTENCEPIECE_FILES = ("tokenizer.model", "spiece.model")  # Llama's name; T5's and ALBERT's
# What AutoTokenizer builds a tokenizer from, besides tokenizer.json.
VOCABULARY_FILES = ("vocab.txt", "vocab.json", *SENTENCEPIECE_FILES)
SENTENCEPIECE_PACKAGES = {"sentencepiece": "sentencepiece", "google.protobuf": "protobuf"}
MODEL_CARD_FILE = "README.md"
MODEL_CARD_LIMIT = 1_000_000  # characters of a model card read: the usage examples come early
# A model card's `re.sub(r"[UZOB]", "X", sequence)`, any order of the four letters.
RARE_TO_X = re.compile(r"""re\.sub\(\s*r?["']\[([UZOB]{4})\]\+?["']\s*,\s*["']X["']""")


def read_hf_tokenizer(directory: str | Path) -> BPETokenizer:
    """The tokenizer of the checkpoint `directory`, ids equal to `AutoTokenizer.from_pretrained(directory)`'s."""
    directory = Path(directory)
    tokenizer_config = _read_optional(directory / TOKENIZER_CONFIG_FILE, "tokenizer config")
    _refuse_custom_code(directory, tokenizer_config)
    if not (directory / TOKENIZER_FILE).is_file():
        present = [name for name in VOCABULARY_FILES if (directory / name).is_file()]
        if not present:
            raise InputError(f"{directory} has no tokenizer files: biotf reads {TOKENIZER_FILE}, vocab.txt "
                             f"(WordPiece), vocab.json + merges.txt (byte-level BPE) or "
                             f"{' / '.join(SENTENCEPIECE_FILES)} (SentencePiece)")
        if set(present) <= set(SENTENCEPIECE_FILES):
            missing = [package for module, package in SENTENCEPIECE_PACKAGES.items()
                       if importlib.util.find_spec(module.split(".")[0]) is None]
            if missing:
                raise InputError(f"{directory} has only {present[0]} (SentencePiece): converting it needs "
                                 f"`pip install {' '.join(missing)}`, or put the checkpoint's {TOKENIZER_FILE} "
                                 "beside it")
    reference = _auto_tokenizer(directory)
    _refuse_special_tokens_only(directory, reference)
    return from_transformers(reference, **model_card_convention(directory))


def model_card_convention(directory: Path) -> dict[str, str]:
    """The input convention the checkpoint's model card (README.md, which a hub download holds) gives its users:
    `rare_residues="to_x"` where it maps U, Z, O and B to X before tokenizing (ProtBert's and ProtT5's
    `re.sub(r"[UZOB]", "X", sequence)`); {} otherwise."""
    card = directory / MODEL_CARD_FILE
    if not card.is_file():
        return {}
    with open(card, encoding="utf-8", errors="replace") as handle:
        text = handle.read(MODEL_CARD_LIMIT)
    found = RARE_TO_X.search(text)
    return {"rare_residues": "to_x"} if found and set(found.group(1)) == set("UZOB") else {}


def _refuse_special_tokens_only(directory: Path, reference) -> None:
    """A tokenizer class that finds none of its vocabulary files builds a vocabulary of special tokens alone, and
    `transformers` reads every input as `<unk>` with it: an ALBERT directory whose vocab.txt is a WordPiece one (the
    ALBERT classes read spiece.model), as rxnmapper's. Refused, saying how the directory names its class."""
    if len(reference) > len(set(reference.all_special_tokens)):
        return
    present = [name for name in VOCABULARY_FILES if (directory / name).is_file()]
    hint = (f"; its {present[0]} is not what {type(reference).__name__} reads: name the class that reads it in "
            f"{TOKENIZER_CONFIG_FILE} (\"tokenizer_class\": \"BertTokenizer\" for a WordPiece vocab.txt)"
            if present else "")
    raise InputError(f"{directory}: transformers builds {type(reference).__name__} with its {len(reference)} special "
                     f"tokens alone (no vocabulary file it reads), which turns every input into {reference.unk_token}"
                     f"{hint}")


def from_transformers(reference, **convention: str) -> BPETokenizer:
    """A `BPETokenizer` over a copy of the pipeline of a `transformers` tokenizer (a `TokenizersBackend`), with the
    roles of its special tokens and its decoding clean-up; `convention`: how plain text is typed for it
    (`biotf.tokenizers.spacing`)."""
    from tokenizers import Tokenizer as HFTokenizer

    if type(reference).__name__ == "EsmTokenizer":  # a Python tokenizer: its pipeline, run on `tokenizers`
        reference = esm_vocabulary_tokenizer(reference)
    backend = getattr(reference, "backend_tokenizer", None)
    if backend is None:
        raise InputError(f"{reference.name_or_path}: transformers reads it with {type(reference).__name__}, which has "
                         "no `tokenizers` pipeline biotf can run")
    if getattr(reference, "split_special_tokens", False):
        raise InputError(f"{reference.name_or_path}: split_special_tokens=true (special tokens written in a text read "
                         "as characters) is not supported")
    copy = HFTokenizer.from_str(backend.to_str())
    flags = {"clean_up_tokenization_spaces": reference.clean_up_tokenization_spaces,
             "clean_up_tokenization_spaces_for_bpe_even_though_it_will_corrupt_output":
                 getattr(reference, "clean_up_tokenization_spaces_for_bpe_even_though_it_will_corrupt_output", False)}
    # through the registry: bpe.py imports this module for the decoding clean-up
    return BPETokenizer(copy, special_tokens=special_token_roles(reference),
                                  chat_template=reference.chat_template,
                                  clean_up_tokenization_spaces=cleans_up_spaces(copy, flags), **convention)


def special_token_roles(reference) -> dict[str, str]:
    """biotf's roles (pad, unk, mask, cls, bos, eos) of a `transformers` tokenizer's special tokens.

    BERT has no eos token: its `[SEP]` ends every sequence, so it plays eos. GPT-2 names `<|endoftext|>` as its unk
    token too, but byte-level BPE has no unknown input: an unk token that plays another role is no unk."""
    roles = {role: getattr(reference, f"{role}_token", None) for role in ROLES}
    if roles["eos"] is None:
        roles["eos"] = getattr(reference, "sep_token", None)
    if roles["unk"] is not None and roles["unk"] in {token for role, token in roles.items() if role != "unk"}:
        roles["unk"] = None
    return {role: str(token) for role, token in roles.items() if token is not None}


def _auto_tokenizer(directory: Path):
    from transformers import AutoTokenizer

    try:
        # The two places AutoTokenizer finds custom code (the auto_maps) were refused before: it runs none here.
        return AutoTokenizer.from_pretrained(str(directory), local_files_only=True)
    except Exception as error:  # transformers raises ValueError, OSError, KeyError, ... on a directory it cannot read
        first_line = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise InputError(f"{directory}: transformers cannot read its tokenizer: {first_line}") from None


def _read_optional(path: Path, what: str) -> dict[str, Any]:
    return read_json_object(path, what) if path.is_file() else {}


def _refuse_custom_code(directory: Path, tokenizer_config: dict[str, Any]) -> None:
    """biotf runs no code from a checkpoint: a tokenizer that names its own (auto_map) is refused before
    `transformers` looks at it."""
    model_config = _read_optional(directory / CONFIG_FILE, "model config")
    model_map = model_config.get("auto_map")
    for file, asks in ((TOKENIZER_CONFIG_FILE, tokenizer_config.get("auto_map")),
                       (CONFIG_FILE, model_map.get("AutoTokenizer") if isinstance(model_map, dict) else None)):
        if asks:
            raise InputError(f"{directory / file} asks for custom tokenizer code (auto_map: "
                             f"{json.dumps(asks)}); biotf runs no code from a checkpoint")
