"""Hugging Face equivalents of biotf's vocabulary tokenizers, built as `tokenizers` pipelines.

Every pipeline has the same shape: normalizer (the character policies as `Replace` / `Strip`)
-> `Split` pre-tokenizer with the scheme's regex, each match one piece -> `WordLevel` model ->
`<cls> $A <eos>` post-processor -> `Fuse` decoder, wrapped in `transformers.PreTrainedTokenizerFast`.
HF cannot refuse a character, so what biotf refuses becomes `<unk>` there; on every input biotf
accepts the ids are identical (tests check this on the real data sets).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence


def wordlevel_hf_tokenizer(vocab: Mapping[str, int], *, piece_pattern: str, replacements: Mapping[str, str] = {},
                           strip: bool = False, remove_pattern: str | None = None, unk: str, cls: str, eos: str,
                           pad: str, mask: str, special_tokens: Sequence[str], split_special_tokens: bool = True):
    """A `PreTrainedTokenizerFast`: `remove_pattern` (a regex, deleted first), `replacements` (char -> token)
    and `strip` normalize, `piece_pattern` cuts the text into vocabulary pieces, `<cls> $A <eos>` wraps
    each sequence.

    `split_special_tokens=True` (the default) reads `<mask>` written in a text as characters, as
    biotf's scheme does; False reads it as the token (the amino-acid scheme, like ESM)."""
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
    backend.pre_tokenizer = pre_tokenizers.Split(Regex(piece_pattern), behavior="isolated")
    backend.post_processor = processors.TemplateProcessing(
        single=f"{cls} $A {eos}", pair=f"{cls} $A {eos} $B:1 {eos}:1",
        special_tokens=[(cls, vocab[cls]), (eos, vocab[eos])])
    backend.decoder = decoders.Fuse()
    backend.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in special_tokens])
    extra = [t for t in special_tokens if t not in (unk, cls, eos, pad, mask)]
    return PreTrainedTokenizerFast(tokenizer_object=backend, unk_token=unk, cls_token=cls, eos_token=eos,
                                   pad_token=pad, mask_token=mask, additional_special_tokens=extra,
                                   split_special_tokens=split_special_tokens)
