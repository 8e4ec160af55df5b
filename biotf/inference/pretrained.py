"""A causal model's generation defaults, and prompts continued.

    model = biotf.Model.load("Qwen2.5-0.5B-Instruct", dtype="bfloat16", for_generation=True)
    completion = complete(model.network, model.tokenizer, model.generation, ["The ribosome"], max_new_tokens=20)

(`biotf.Model.load` reads every model source, and keeps the defaults of one that generates.)

A Hugging Face directory's `generation_config.json` gives the defaults, read as `transformers` does
(`biotf.checkpoint.hf_directory.read_generation_settings`, when generation is asked for); loaded for generation, its
matrices are read straight into their decoding layout (`biotf.inference.fast`). Other sources (biotf runs and exports)
store no generation settings; they were trained on records packed end to end with `<eos>` between them
(`biotf.data.prepare`, objective clm), so a sequence starts after an `<eos>`: that is their start token, and a
prompt is that `<eos>` and the prompt's tokens without special tokens (what training saw before a record's rest).
A masked-LM is refused: it was never trained to predict the next token.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

from biotf.checkpoint.hf_directory import GenerationSettings
from biotf.errors import CheckpointError
from biotf.inference.fast import DecodingModel
from biotf.inference.generation import Sampling, TokenCallback, encode_prompts, fit_prompts, generate_ids
from biotf.model import Transformer
from biotf.model.hf import hf_model_config
from biotf.tokenizers.base import PolicyStats, Tokenizer
from biotf.naming import parameter

FALLBACK_NEW_TOKENS = 256  # transformers' own default cap, for a model without a position limit


@dataclass(frozen=True)
class GenerationDefaults:
    """Generation settings of a checkpoint; `transformers`' defaults where generation_config.json is silent.

    `temperature` 0 means greedy decoding (generation_config.json's `do_sample: false`). `start_token_id` begins an
    unprompted sequence; `prompt_after_start`: a prompt is the start token then its tokens without special tokens
    (biotf runs), else the tokenizer's own encoding (Hugging Face checkpoints, as `transformers` does).
    `max_new_tokens` None: until eos or the model's positions run out.
    """

    eos_token_ids: tuple[int, ...] = ()
    pad_token_id: int | None = None
    max_new_tokens: int | None = 256
    temperature: float = 0.0
    top_k: int | None = 50
    top_p: float = 1.0
    repetition_penalty: float = 1.0
    start_token_id: int | None = None
    prompt_after_start: bool = False

    @classmethod
    def for_run(cls, tokenizer: Tokenizer) -> GenerationDefaults:
        """A biotf run's (it stores none): greedy, or plain sampling without a top-k cut when a temperature is
        given; stop at and start after `<eos>`; up to the model's positions."""
        eos = tokenizer.eos_id
        return cls(eos_token_ids=() if eos is None else (eos,), pad_token_id=tokenizer.pad_id, max_new_tokens=None,
                   top_k=None, start_token_id=eos, prompt_after_start=eos is not None)

    def new_tokens(self, prompt_length: int, positions: int | None) -> int:
        """The default number of new tokens: `max_new_tokens`, at most what `positions` leave after the prompt
        (None: all they leave; `FALLBACK_NEW_TOKENS` for a model without a position limit)."""
        room = None if positions is None else max(positions - prompt_length, 1)
        limits = [limit for limit in (self.max_new_tokens, room) if limit is not None]
        return min(limits) if limits else FALLBACK_NEW_TOKENS

    def encode_prompt(self, tokenizer: Tokenizer, text: str | None, stats: PolicyStats | None = None) -> list[int]:
        """Token ids a generation starts from: the start token alone when `text` is None, else the prompt."""
        if text is None:
            if self.start_token_id is None:
                raise CheckpointError("this model's tokenizer has no bos or eos token to start a sequence from; "
                                      f"give a {parameter('prompt')}")
            return [self.start_token_id]
        return self.encode_prompts(tokenizer, [text], stats)[0]

    def encode_prompts(self, tokenizer: Tokenizer, texts: list[str],
                       stats: PolicyStats | None = None) -> list[list[int]]:
        """Token ids of each plain-text prompt, in one batch: after the start token where the model was trained so
        (`prompt_after_start`), else with the tokenizer's own special tokens."""
        start = [self.start_token_id] if self.prompt_after_start else []
        return [start + [int(i) for i in ids]
                for ids in tokenizer.encode_batch(texts, add_special_tokens=not self.prompt_after_start, stats=stats)]

    @classmethod
    def from_hf(cls, generation: Mapping[str, Any], tokenizer: Tokenizer | None = None) -> GenerationDefaults:
        """From generation_config.json's fields; the tokenizer's eos id is an eos id too."""
        eos = generation.get("eos_token_id")
        eos_ids = [eos] if isinstance(eos, int) else list(eos or [])
        if tokenizer is not None and tokenizer.eos_id is not None:
            eos_ids.append(tokenizer.eos_id)
        pad = generation.get("pad_token_id")
        if pad is None and tokenizer is not None:
            pad = tokenizer.pad_id
        sample = bool(generation.get("do_sample", False))
        max_new_tokens = generation.get("max_new_tokens") or cls.max_new_tokens
        bos = generation.get("bos_token_id")
        if bos is None and tokenizer is not None:
            bos = tokenizer.bos_id
        if bos is None and eos_ids:
            bos = eos_ids[0]
        return cls(eos_token_ids=tuple(dict.fromkeys(int(i) for i in eos_ids)), start_token_id=bos,
                   pad_token_id=None if pad is None else int(pad), max_new_tokens=int(max_new_tokens),
                   temperature=float(generation.get("temperature") or 1.0) if sample else 0.0,
                   top_k=generation.get("top_k", cls.top_k), top_p=float(generation.get("top_p") or 1.0),
                   repetition_penalty=float(generation.get("repetition_penalty") or 1.0))


    @classmethod
    def from_settings(cls, settings: GenerationSettings, tokenizer: Tokenizer, vocab_size: int) -> GenerationDefaults:
        """From what a directory stores (`read_generation_settings`), with the tokenizer's eos id; a pad id outside
        the vocabulary is refused naming its file, as it is fed to the model for every pad and finished row (where
        transformers' own generate fails: IndexError)."""
        defaults = cls.from_hf(settings.values, tokenizer)
        if defaults.pad_token_id is not None and not 0 <= defaults.pad_token_id < vocab_size:
            raise CheckpointError(f"{settings.file}: pad_token_id={defaults.pad_token_id} is outside the model's "
                                  f"vocabulary of {vocab_size} ids (0..{vocab_size - 1}): set it to a token of the "
                                  "vocabulary, or to null")
        return defaults


class Completion(NamedTuple):
    """What `complete` returns: each prompt's token ids as the model saw them, and its new token ids."""

    prompts: list[list[int]]
    new: list[list[int]]


def complete(model: Transformer | DecodingModel, tokenizer: Tokenizer, defaults: GenerationDefaults,
             prompts: Sequence[str], *, chat: bool = False, system: str | None = None,
             max_new_tokens: int | None = None, sampling: Sampling = Sampling(), seed: int | None = None,
             truncate_prompt: bool = False, on_token: TokenCallback | None = None,
             stats: PolicyStats | None = None) -> Completion:
    """Continue each prompt as `biotf generate` does, as one left-padded batch: plain prompts encoded by `defaults`
    (after the start token where the model was trained so), `chat` ones through the tokenizer's chat template
    (after `system`); `max_new_tokens` None: the checkpoint's, at most what the model's positions leave after the
    longest prompt; a prompt that leaves no room is refused, or loses its oldest tokens with `truncate_prompt`.
    Generation stops at any of `defaults.eos_token_ids`; `stats` counts what the tokenizer's policies changed."""
    ids = (encode_prompts(tokenizer, list(prompts), True, system, stats) if chat
           else defaults.encode_prompts(tokenizer, list(prompts), stats))
    positions = model.config.max_seq_len
    if max_new_tokens is None:
        max_new_tokens = defaults.new_tokens(max(map(len, ids)), positions)
    ids = fit_prompts(ids, max_new_tokens, positions, truncate_prompt)
    new = generate_ids(model, ids, max_new_tokens=max_new_tokens, sampling=sampling, seed=seed,
                       eos_token_ids=defaults.eos_token_ids, pad_token_id=defaults.pad_token_id, on_token=on_token)
    return Completion(ids, new)
