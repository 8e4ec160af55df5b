"""Hugging Face equivalents of biotf's vocabulary tokenizers, built as `tokenizers` pipelines.

Every pipeline has the same shape: normalizer (the character policies as `Replace` / `Strip`)
-> `Split` pre-tokenizer with the scheme's regex, each match one piece -> `WordLevel` model ->
`<cls> $A <eos>` post-processor -> `Fuse` decoder, wrapped in `transformers.PreTrainedTokenizerFast`.
`transformers`' `EsmTokenizer` (a Python tokenizer: vocabulary tokens cut out longest first, the rest split on
whitespace, tokens decoded with spaces between them) is the same shape too (`esm_vocabulary_tokenizer`), so that
an ESM directory whose vocab.txt is not ESM-2's (Nucleotide Transformer's k-mers, SaProt's residue + 3Di letters)
runs on `tokenizers` with the ids `transformers` gives.
HF cannot refuse a character, so what biotf refuses becomes `<unk>` there; on every input biotf
accepts the ids are identical (tests check this on the real data sets).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence


def wordlevel_hf_tokenizer(vocab: Mapping[str, int], *, piece_pattern: str, replacements: Mapping[str, str] = {},
                           strip: bool = False, remove_pattern: str | None = None, unk: str, cls: str,
                           eos: str | None, pad: str, mask: str, special_tokens: Sequence[str],
                           split_special_tokens: bool = True, between_pieces: str = "unknown"):
    """A `PreTrainedTokenizerFast`: `remove_pattern` (a regex, deleted first), `replacements` (char -> token)
    and `strip` normalize, `piece_pattern` cuts the text into vocabulary pieces, `<cls> $A <eos>` wraps
    each sequence (`<cls> $A` without eos).

    `split_special_tokens=True` (the default) reads `<mask>` written in a text as characters, as
    biotf's scheme does; False reads it as the token (the amino-acid scheme, like ESM). `between_pieces`: what
    becomes of the text between two pieces: one unknown token ("unknown"), or one per word, whitespace dropped, and
    tokens decoded with spaces between them ("words", as `EsmTokenizer`)."""
    from tokenizers import AddedToken, Regex, decoders, models, normalizers, pre_tokenizers, processors
    from tokenizers import Tokenizer as HFTokenizer
    from transformers import PreTrainedTokenizerFast

    backend = HFTokenizer(models.WordLevel(dict(vocab), unk_token=unk))
    steps = [normalizers.Replace(Regex(remove_pattern), "")] if remove_pattern else []
    steps += [normalizers.Replace(source, target) for source, target in replacements.items()]
    if strip:
        steps.append(normalizers.Strip())
    if steps:
        backend.normalizer = normalizers.Sequence(steps)
    pieces = pre_tokenizers.Split(Regex(piece_pattern), behavior="isolated")
    words = between_pieces == "words"
    backend.pre_tokenizer = pre_tokenizers.Sequence([pieces, pre_tokenizers.WhitespaceSplit()]) if words else pieces
    ends = [token for token in (cls, eos) if token is not None]
    backend.post_processor = processors.TemplateProcessing(
        single=" ".join([cls, "$A", *([eos] if eos else [])]),
        pair=f"{cls} $A {eos} $B:1 {eos}:1" if eos else None, special_tokens=[(t, vocab[t]) for t in ends])
    if not words:  # without a decoder, `tokenizers` joins tokens with spaces
        backend.decoder = decoders.Fuse()
    backend.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in special_tokens])
    extra = [t for t in special_tokens if t not in (unk, cls, eos, pad, mask)]
    return PreTrainedTokenizerFast(tokenizer_object=backend, unk_token=unk, cls_token=cls, eos_token=eos,
                                   pad_token=pad, mask_token=mask, additional_special_tokens=extra,
                                   split_special_tokens=split_special_tokens)


def esm_vocabulary_tokenizer(reference):
    """The `tokenizers` pipeline of a `transformers` `EsmTokenizer` (any vocab.txt): every vocabulary token but the
    special ones cut out of the text longest first (its trie's split), what lies between split on whitespace, each
    word one token or `<unk>`; `<cls> $A <eos>` (no eos where the tokenizer has none); decoded with spaces."""
    roles = {role: getattr(reference, f"{role}_token", None) for role in ("unk", "cls", "eos", "pad", "mask")}
    specials = [token for token in reference.all_special_tokens if token in reference.get_vocab()]
    pieces = sorted({token for token in reference.get_vocab() if token not in specials}, key=lambda t: (-len(t), t))
    return wordlevel_hf_tokenizer(reference.get_vocab(), piece_pattern="|".join(map(re.escape, pieces)),
                                  special_tokens=specials, split_special_tokens=False, between_pieces="words",
                                  **{role: None if token is None else str(token) for role, token in roles.items()})
