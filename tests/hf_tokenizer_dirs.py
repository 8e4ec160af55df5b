"""Tokenizer directories as the checkpoints of #26 ship them, built locally (no hub): tiny vocabularies trained
with `tokenizers` on real data, written as the files the hub holds (vocab.txt, vocab.json + merges.txt,
tokenizer.json) with the tokenizer_config.json / config.json that tell `transformers` which class reads them.

Model tests can put one beside a tiny model: `write_tokenizer("roberta", directory, smiles)`."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

BERT_SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
ROBERTA_SPECIALS = ["<s>", "<pad>", "</s>", "<unk>", "<mask>"]
# Rostlab/prot_bert's vocab.txt, in its order.
PROTBERT_VOCAB = BERT_SPECIALS + list("LAGVESIKRDTPNQFYMHCWXUBZO")
KINDS = ("bert", "bert-cased", "protbert", "dnabert", "gpt2", "roberta", "bloom", "llama", "mistral")


def _json(path: Path, data: dict) -> None:
    path.write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")


def _model_config(directory: Path, model_type: str) -> None:
    """A config.json naming the model_type (AutoTokenizer's fallback when tokenizer_config names no class);
    a model's own config.json, when already there, is kept."""
    if not (directory / "config.json").is_file():
        _json(directory / "config.json", {"model_type": model_type})


def wordpiece_vocab(texts: Sequence[str], vocab_size: int, lowercase: bool) -> list[str]:
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, trainers

    backend = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    backend.normalizer = normalizers.BertNormalizer(lowercase=lowercase)
    backend.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    backend.train_from_iterator(texts, trainers.WordPieceTrainer(vocab_size=vocab_size, special_tokens=BERT_SPECIALS,
                                                                 show_progress=False))
    vocab = backend.get_vocab()
    return sorted(vocab, key=vocab.get)


def kmer_vocab(k: int) -> list[str]:
    """DNABERT's vocabulary: the specials, then every k-mer of ACGT."""
    kmers = [""]
    for _ in range(k):
        kmers = [kmer + base for kmer in kmers for base in "ACGT"]
    return BERT_SPECIALS + kmers


def overlapping_kmers(sequence: str, k: int) -> str:
    """How DNABERT's users write a sequence (its `seq2kmer`): every k-mer at stride 1, space-separated."""
    return " ".join(sequence[i:i + k] for i in range(len(sequence) - k + 1))


def write_wordpiece(directory: Path, vocab: Sequence[str], do_lower_case: bool, model_type: str = "bert") -> Path:
    """vocab.txt and a tokenizer_config.json without tokenizer class (as ProtBert's and DNABERT's on the hub), with
    the decoding clean-up transformers 4 wrote into every BERT's."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "vocab.txt").write_text("\n".join(vocab) + "\n", encoding="utf-8")
    _json(directory / "tokenizer_config.json", {"do_lower_case": do_lower_case, "model_max_length": 512,
                                                "clean_up_tokenization_spaces": True})
    _model_config(directory, model_type)
    return directory


def train_byte_level(texts: Sequence[str], vocab_size: int, special_tokens: Sequence[str]) -> tuple[dict, list]:
    """(vocab, merges) of a byte-level BPE (GPT-2's scheme) learned on `texts`, the specials first."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    backend = Tokenizer(models.BPE())
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = decoders.ByteLevel()
    backend.train_from_iterator(texts, trainers.BpeTrainer(
        vocab_size=vocab_size, special_tokens=list(special_tokens), show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    model = json.loads(backend.to_str())["model"]
    return model["vocab"], [" ".join(m) if isinstance(m, list) else m for m in model["merges"]]


def write_byte_level(directory: Path, texts: Sequence[str], model_type: str, vocab_size: int = 800) -> Path:
    """vocab.json + merges.txt (GPT-2 / ProtGPT2 with `<|endoftext|>`; RoBERTa / ChemBERTa with `<s>`, `<pad>`,
    `</s>`, `<unk>`, `<mask>` first), no tokenizer.json: `transformers` converts them."""
    directory.mkdir(parents=True, exist_ok=True)
    specials = ["<|endoftext|>"] if model_type == "gpt2" else ROBERTA_SPECIALS
    vocab, merges = train_byte_level(texts, vocab_size, specials)
    _json(directory / "vocab.json", vocab)
    (directory / "merges.txt").write_text("#version: 0.2\n" + "\n".join(merges) + "\n", encoding="utf-8")
    _json(directory / "tokenizer_config.json", {"model_max_length": 512})
    _model_config(directory, model_type)
    return directory


def write_bloom(directory: Path, texts: Sequence[str], vocab_size: int = 800) -> Path:
    """BLOOM's layout: one tokenizer.json (byte-level BPE, `<unk>` `<s>` `</s>` `<pad>` first, no special tokens
    added around a text) and tokenizer_config.json naming BloomTokenizerFast."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors

    directory.mkdir(parents=True, exist_ok=True)
    specials = ["<unk>", "<s>", "</s>", "<pad>"]
    vocab, merges = train_byte_level(texts, vocab_size, specials)
    backend = Tokenizer(models.BPE(vocab, [tuple(m.split(" ")) for m in merges]))
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = decoders.ByteLevel()
    backend.post_processor = processors.ByteLevel(trim_offsets=False)
    backend.add_special_tokens(specials)
    backend.save(str(directory / "tokenizer.json"))
    _json(directory / "tokenizer_config.json", {"tokenizer_class": "BloomTokenizerFast", "unk_token": "<unk>",
                                                "bos_token": "<s>", "eos_token": "</s>", "pad_token": "<pad>",
                                                "add_prefix_space": False})
    _model_config(directory, "bloom")
    return directory


def write_sentencepiece_bpe(directory: Path, texts: Sequence[str], model_type: str, vocab_size: int = 800,
                            add_eos_token: bool = False) -> Path:
    """Llama's / Mistral's layout, saved by transformers' LlamaTokenizer: a SentencePiece-style BPE (`▁` for spaces,
    byte fallback `<0x00>`..`<0xFF>` at ids 3..258 after `<unk>` `<s>` `</s>`) in tokenizer.json, with
    tokenizer_config.json's add_bos_token / add_eos_token."""
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers
    from transformers import LlamaTokenizer

    trainer_backend = Tokenizer(models.BPE(unk_token="<unk>"))
    trainer_backend.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="first", split=True)
    trainer_backend.train_from_iterator(texts, trainers.BpeTrainer(vocab_size=vocab_size, show_progress=False,
                                                                   special_tokens=["<unk>", "<s>", "</s>"]))
    model = json.loads(trainer_backend.to_str())["model"]
    tokens = ["<unk>", "<s>", "</s>"] + [f"<0x{byte:02X}>" for byte in range(256)]
    learned = sorted((t for t in model["vocab"] if t not in tokens), key=model["vocab"].get)
    vocab = {token: index for index, token in enumerate(tokens + learned)}
    merges = [tuple(m) if isinstance(m, list) else tuple(m.split(" ")) for m in model["merges"]]
    tokenizer = LlamaTokenizer(vocab=vocab, merges=merges, add_bos_token=True, add_eos_token=add_eos_token)
    tokenizer.save_pretrained(directory)
    _model_config(directory, model_type)
    return directory


def write_tokenizer(kind: str, directory: Path, texts: Sequence[str]) -> Path:
    """The tokenizer directory of `kind` (`KINDS`) trained on `texts` (for dnabert: DNA sequences, read as 6-mers;
    for protbert: unused, its vocabulary is fixed)."""
    directory = Path(directory)
    if kind in ("bert", "bert-cased"):
        lowercase = kind == "bert"
        return write_wordpiece(directory, wordpiece_vocab(texts, 600, lowercase), do_lower_case=lowercase)
    if kind == "protbert":
        return write_wordpiece(directory, PROTBERT_VOCAB, do_lower_case=False)
    if kind == "dnabert":
        return write_wordpiece(directory, kmer_vocab(6), do_lower_case=False)
    if kind in ("gpt2", "roberta"):
        return write_byte_level(directory, texts, kind)
    if kind == "bloom":
        return write_bloom(directory, texts)
    if kind in ("llama", "mistral"):
        return write_sentencepiece_bpe(directory, texts, kind)
    raise ValueError(f"unknown tokenizer kind {kind!r}; known: {', '.join(KINDS)}")


def with_fixed_padding_and_truncation(directory: Path, length: int = 128) -> Path:
    """`directory`'s tokenizer.json (transformers' own, written first where the directory has none) padded and cut
    to `length` tokens, as every sentence-transformers export ships it (`"padding": {"strategy": {"Fixed": 128}}`,
    truncation to 128); returns `directory`."""
    from tokenizers import Tokenizer
    from transformers import AutoTokenizer

    reference = AutoTokenizer.from_pretrained(directory)
    if not (directory / "tokenizer.json").is_file():
        reference.save_pretrained(directory)
    backend = Tokenizer.from_file(str(directory / "tokenizer.json"))
    pad = reference.pad_token or reference.unk_token
    backend.enable_padding(length=length, pad_id=backend.token_to_id(pad), pad_token=pad)
    backend.enable_truncation(length)
    backend.save(str(directory / "tokenizer.json"))
    return directory
