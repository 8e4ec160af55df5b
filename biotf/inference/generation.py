"""Text generation with a causal biotf `Transformer` and its KV cache.

    texts = generate(model, tokenizer, ["The capital of France is"], max_new_tokens=32)  # greedy
    texts = generate(model, tokenizer, prompts, chat=True, temperature=0.7, top_p=0.8, seed=0)

How it works, and where each convention comes from (`transformers`' `generate`, so that greedy
output is token for token the same):
- Prompts of different lengths are left-padded into one batch; the attention mask hides the pads and
  the model counts position ids over real tokens only, so a padded prompt continues exactly as alone.
- `model` is a Transformer, or the `DecodingModel` of `biotf.inference.fast.optimize_for_decoding(model)`
  (its weights in the layout its device decodes fastest: faster, the same tokens); a Transformer is used
  as it is, never changed.
- One prefill forward fills the `KVCache` (preallocated for prompt + new tokens); the last block's MLP
  and the LM head see the last position only. Each further step feeds one token per row.
- Next-token scores (float32): repetition penalty over prompt and generated ids (HF
  `RepetitionPenaltyLogitsProcessor`), then temperature, top-k, top-p (HF's warpers, in that order);
  temperature 0 is greedy argmax. `suppress_ids` (special tokens that must never appear inside a sequence)
  are set to -inf before all of them (HF `SuppressTokensLogitsProcessor`).
- Sampling draws row i's tokens from its own random stream, numpy's `default_rng([seed, first_row + i])`
  (one uniform per step, inverse CDF in float64), so that a row's tokens depend on its seed and index only,
  never on which other rows share its batch: N samples drawn 1, 8 or 64 at a time are the same samples
  (up to float rounding of the batched matrix products, which could move a draw that falls on a boundary).
- A row stops at its first eos id (the eos is kept in its ids, not in its text); finished rows are fed
  the pad id until every row is done or `max_new_tokens` is reached.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from numbers import Integral
from typing import Any, NamedTuple

import numpy as np
import torch

from biotf.errors import ConfigError, InputError, check_int, check_number
from biotf.inference.chat import render_chat
from biotf.inference.fast import DecodingModel
from biotf.model import KVCache, Transformer
from biotf.tokenizers.base import PolicyStats, Tokenizer
from biotf.naming import parameter

log = logging.getLogger(__name__)

# Beyond these, sampling is greedy or uniform to float32 precision (and temperature inf turns every score into NaN
# or 0): a value outside is a typo, refused rather than sampled from. 0 is greedy.
MIN_TEMPERATURE, MAX_TEMPERATURE = 1e-3, 1e3
MAX_PENALTY = 1e3  # the repetition penalty lies in [1 / MAX_PENALTY, MAX_PENALTY]
MAX_SEED = 2**63 - 1  # a sampling seed: an integer from 0 to this (a fresh seed is drawn from that range too)

# Called with (row, token id) for every token as it is produced (eos included), e.g. to stream text.
TokenCallback = Callable[[int, int], None]


@dataclass(frozen=True)
class Sampling:
    """How the next token is chosen; validated here so that the CLI and the API refuse the same values."""

    temperature: float = 0.0
    top_k: int | None = None
    top_p: float = 1.0
    repetition_penalty: float = 1.0

    def __post_init__(self):
        if isinstance(self.temperature, bool) or self.temperature != 0:
            check_number("temperature", self.temperature, f"0 (greedy) or a number in [{MIN_TEMPERATURE:g}, "
                         f"{MAX_TEMPERATURE:g}]", MIN_TEMPERATURE, MAX_TEMPERATURE)
        if self.top_k is not None and (isinstance(self.top_k, bool) or not isinstance(self.top_k, Integral)
                                       or self.top_k < 0):
            raise ConfigError("top_k", self.top_k, allowed="an integer >= 0 (0 or None = no top-k cut)")
        check_number("top_p", self.top_p, "a number in (0, 1]", 0, 1, above_minimum=True)
        check_number("repetition_penalty", self.repetition_penalty, f"a number in [{1 / MAX_PENALTY:g}, "
                     f"{MAX_PENALTY:g}] (1 = none)", 1 / MAX_PENALTY, MAX_PENALTY)

    @property
    def greedy(self) -> bool:
        return self.temperature == 0


def sampling_over(defaults: Any, *, temperature: float | None = None, top_k: int | None = None,
                  top_p: float | None = None, repetition_penalty: float | None = None) -> Sampling:
    """The sampling of `defaults` (a checkpoint's generation settings: any object with Sampling's four fields) with
    each value that is given (not None) put in its place: the one rule by which the CLI's flags and the Python API's
    arguments override a checkpoint. Checked once, merged, so a checkpoint's bad value that is overridden is no
    error."""
    given = {"temperature": temperature, "top_k": top_k, "top_p": top_p, "repetition_penalty": repetition_penalty}
    return Sampling(**{key: getattr(defaults, key) if value is None else value for key, value in given.items()})


def next_token_scores(logits: torch.Tensor, tokens: torch.Tensor, sampling: Sampling) -> torch.Tensor:
    """Float32 scores (B, V) of last-position `logits` after the repetition penalty and, when sampling, the
    temperature, top-k and top-p cuts (-inf marks a token that cannot be drawn); `tokens` (B, T) are the ids so far."""
    scores = logits.float()
    if sampling.repetition_penalty != 1.0:
        seen = torch.gather(scores, 1, tokens)
        seen = torch.where(seen < 0, seen * sampling.repetition_penalty, seen / sampling.repetition_penalty)
        scores = scores.scatter(1, tokens, seen)
    if sampling.greedy:
        return scores
    scores = scores / sampling.temperature
    if sampling.top_k:
        kth_best = torch.topk(scores, min(sampling.top_k, scores.shape[-1])).values[:, -1:]
        scores = scores.masked_fill(scores < kth_best, float("-inf"))
    if sampling.top_p < 1.0:
        # HF TopPLogitsWarper: drop the least likely tokens whose total probability is <= 1 - top_p,
        # always keeping the most likely one.
        ordered, order = torch.sort(scores, descending=False)
        cumulative = ordered.softmax(dim=-1).cumsum(dim=-1)
        drop = cumulative <= 1 - sampling.top_p
        drop[:, -1] = False
        scores = scores.masked_fill(drop.scatter(1, order, drop), float("-inf"))
    return scores


def stream_seed(seed: int | None) -> int:
    """`seed` checked (an integer from 0 to MAX_SEED), or a fresh one for None, to be said in a summary so a run can
    be repeated."""
    seed = int(np.random.SeedSequence().entropy % (MAX_SEED + 1)) if seed is None else seed
    check_int("seed", seed, minimum=0, maximum=MAX_SEED)
    return seed


class RowStreams:
    """One random stream per row (numpy's `default_rng([seed, index])`): a row's draws never depend on the others."""

    def __init__(self, seed: int | None, rows: int, first_row: int = 0):
        self.seed = stream_seed(seed)
        self.generators = [np.random.default_rng([self.seed, first_row + row]) for row in range(rows)]

    def draw(self, probabilities: torch.Tensor) -> torch.Tensor:
        """One index per row of `probabilities` (B, V), by inverse CDF on the row's next uniform."""
        uniforms = torch.tensor([generator.random() for generator in self.generators], dtype=torch.float64,
                                device=probabilities.device)
        cdf = probabilities.double().cumsum(dim=-1)
        chosen = torch.searchsorted(cdf, (uniforms * cdf[:, -1])[:, None], right=True).squeeze(1)
        return chosen.clamp_(max=probabilities.shape[-1] - 1)


def next_tokens(logits: torch.Tensor, tokens: torch.Tensor, sampling: Sampling,
                streams: RowStreams | None) -> torch.Tensor:
    """Next token per row: argmax when greedy, else a draw from the softmax of the processed scores."""
    scores = next_token_scores(logits, tokens, sampling)
    if sampling.greedy:
        return scores.argmax(dim=-1)
    return streams.draw(scores.softmax(dim=-1))


def left_pad(prompts: Sequence[Sequence[int]], pad_id: int,
             device: torch.device) -> tuple[torch.Tensor, torch.Tensor | None]:
    """(ids, attention mask) of left-padded prompts; the mask is None when no row needs padding."""
    width = max(len(p) for p in prompts)
    ids = torch.full((len(prompts), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(prompts), width), dtype=torch.long)
    for row, prompt in enumerate(prompts):
        ids[row, width - len(prompt):] = torch.as_tensor(list(prompt), dtype=torch.long)
        mask[row, width - len(prompt):] = 1
    padded = bool((mask == 0).any())
    return ids.to(device), mask.to(device) if padded else None


def fit_prompts(prompts: Sequence[Sequence[int]], max_new_tokens: int, max_length: int | None,
                truncate: bool) -> list[list[int]]:
    """Prompts that leave room for `max_new_tokens` within the model's `max_length` positions.

    Too long a prompt is an InputError, or with `truncate` it loses its oldest tokens (a warning says so).
    """
    prompts = [list(map(int, p)) for p in prompts]
    if any(not p for p in prompts):
        raise InputError("a prompt is empty: generation needs at least one prompt token")
    if max_length is None:
        return prompts
    room = max_length - max_new_tokens
    if room < 1:
        raise ConfigError("max_new_tokens", max_new_tokens, allowed=f"at most {max_length - 1}: the model has "
                          f"{max_length} positions and the prompt needs at least one")
    fitted = []
    for row, prompt in enumerate(prompts):
        if len(prompt) > room:
            if not truncate:
                raise InputError(f"prompt {row} has {len(prompt)} tokens; with {max_new_tokens} new tokens that "
                                 f"exceeds the model's maximum length of {max_length} positions (shorten it, lower "
                                 "max_new_tokens, or truncate the prompt from the left with "
                                 f"{parameter('truncate_prompt')})")
            log.warning("prompt %d has %d tokens: keeping its last %d so that %d new tokens fit in the model's "
                        "%d positions", row, len(prompt), room, max_new_tokens, max_length)
            prompt = prompt[len(prompt) - room:]
        fitted.append(prompt)
    return fitted


def check_token_ids(prompts: Sequence[Sequence[int]], pad_token_id: int, suppress_ids: Collection[int],
                    eos_token_ids: Sequence[int], vocab_size: int) -> None:
    """Refuse ids the model has no embedding row for (torch's IndexError otherwise, mid-generation): in a prompt
    (InputError naming it) or as the pad id or a suppressed id (ConfigError). Eos ids are only compared with what is
    drawn, so one outside the vocabulary is kept, as `transformers` keeps it: it can never be drawn, nor stop a row."""
    ids = f"an integer in [0, {vocab_size - 1}] (the model's vocabulary has {vocab_size} ids)"
    for row, prompt in enumerate(prompts):
        outside = [token for token in prompt if not 0 <= token < vocab_size]
        if outside:
            raise InputError(f"prompt {row} holds token id {outside[0]}, outside the model's vocabulary of "
                             f"{vocab_size} ids (0..{vocab_size - 1}): the tokenizer does not match the model")
    check_int("pad_token_id", pad_token_id, minimum=0)
    if pad_token_id >= vocab_size:
        raise ConfigError("pad_token_id", pad_token_id, ids)
    for token in suppress_ids:
        if isinstance(token, bool) or not isinstance(token, Integral) or not 0 <= token < vocab_size:
            raise ConfigError("suppress_ids", token, ids)
    for token in eos_token_ids:
        check_int("eos_token_ids", token, minimum=0)


class Generated(NamedTuple):
    """What `generate_batch` returns: new ids per row, and (when asked) each row's log-probability."""

    ids: list[list[int]]
    log_probs: list[float] | None = None


def generate_ids(model: Transformer | DecodingModel, prompts: Sequence[Sequence[int]], **options) -> list[list[int]]:
    """New token ids for each prompt (lists of ids), up to and including the eos that stopped it
    (`generate_batch`'s ids; it takes the same options)."""
    return generate_batch(model, prompts, **options).ids


@torch.inference_mode()
def generate_batch(model: Transformer | DecodingModel, prompts: Sequence[Sequence[int]], *,
                   max_new_tokens: int = 32, sampling: Sampling = Sampling(), eos_token_ids: Sequence[int] = (),
                   pad_token_id: int | None = None, seed: int | None = None, first_row: int = 0,
                   suppress_ids: Collection[int] = (), log_probs: bool = False, on_token: TokenCallback | None = None,
                   truncate_prompt: bool = False) -> Generated:
    """New token ids for each prompt, up to and including the eos that stopped it.

    `pad_token_id` fills left padding and finished rows (default: the first eos id in the vocabulary, else 0); pads
    are masked, so their value never changes a real token's output. Row i samples from the stream (`seed`,
    `first_row` + i). `suppress_ids` can never be chosen. `log_probs`: also each row's summed log-probability of its
    new tokens under the model itself (temperature 1, no cuts, nothing suppressed), the eos included.
    """
    decoder = model if isinstance(model, DecodingModel) else DecodingModel(model)
    check_int("max_new_tokens", max_new_tokens)
    check_int("first_row", first_row, minimum=0)
    if not prompts:
        return []
    prompts = fit_prompts(prompts, max_new_tokens, decoder.config.max_seq_len, truncate_prompt)
    vocab_size = decoder.config.vocab_size
    if pad_token_id is None:
        pad_token_id = next((i for i in eos_token_ids if 0 <= i < vocab_size), 0)
    check_token_ids(prompts, pad_token_id, suppress_ids, eos_token_ids, vocab_size)
    device = decoder.device
    ids, mask = left_pad(prompts, pad_token_id, device)
    batch = ids.shape[0]
    streams = None if sampling.greedy else RowStreams(seed, batch, first_row)
    suppressed = torch.tensor(sorted(suppress_ids), dtype=torch.long, device=device)
    totals = [0.0] * batch
    cache = KVCache(decoder.config.n_layers, initial_capacity=ids.shape[1] + max_new_tokens)
    eos = set(eos_token_ids)
    finished = [False] * batch
    tokens = ids  # prompt (padded) + generated, for the repetition penalty
    new: list[list[int]] = [[] for _ in range(batch)]
    logits = decoder(ids, mask, cache)
    for step in range(max_new_tokens):
        # Bookkeeping on Python ints: the chosen ids come to the host once per step anyway (to stream them).
        scores = logits.float()  # one float32 copy per step, for the suppression and the log-probabilities
        allowed = scores.index_fill(1, suppressed, float("-inf")) if len(suppressed) else scores
        chosen_ids = next_tokens(allowed, tokens, sampling, streams)
        if log_probs:
            chosen_log_probs = scores.log_softmax(dim=-1).gather(1, chosen_ids[:, None]).squeeze(1).tolist()
        chosen = chosen_ids.tolist()
        for row, token in enumerate(chosen):
            if finished[row]:
                chosen[row] = pad_token_id
                continue
            new[row].append(token)
            if log_probs:
                totals[row] += chosen_log_probs[row]
            finished[row] = token in eos
            if on_token is not None:
                on_token(row, token)
        if all(finished) or step == max_new_tokens - 1:
            break
        step_ids = torch.tensor(chosen, dtype=torch.long, device=device)[:, None]
        if sampling.repetition_penalty != 1.0:
            tokens = torch.cat([tokens, step_ids], dim=1)
        if mask is not None:
            mask = torch.cat([mask, mask.new_ones(batch, 1)], dim=1)
        logits = decoder(step_ids, mask, cache)
    return Generated(new, totals if log_probs else None)


class TextStreamer:
    """An `on_token` callback that writes one row's text as it grows (HF `TextStreamer`'s approach).

    The row's new ids are decoded whole each time and only the unseen suffix is written, so that a
    character split over several byte-level tokens appears once complete (never as U+FFFD).
    """

    def __init__(self, tokenizer: Tokenizer, write: Callable[[str], object], row: int = 0):
        self.tokenizer, self.write, self.row = tokenizer, write, row
        self.ids: list[int] = []
        self.shown = 0

    def __call__(self, row: int, token: int) -> None:
        if row != self.row:
            return
        self.ids.append(token)
        text = self.tokenizer.decode(self.ids, skip_special_tokens=True)
        if not text.endswith("\ufffd") and len(text) > self.shown:
            self.write(text[self.shown:])
            self.shown = len(text)


def encode_prompts(tokenizer: Tokenizer, prompts: Sequence[str], chat: bool = False,
                   system: str | None = None, stats: PolicyStats | None = None) -> list[list[int]]:
    """Token ids of each prompt: as plain text, or (`chat`) as one user turn in the chat template; what the
    tokenizer's policies changed is counted in `stats`."""
    if system is not None and not chat:
        raise ConfigError("system", system, reason=f"a system prompt needs chat mode (chat=True / {parameter('chat')})")
    texts = list(prompts) if not chat else [chat_prompt(tokenizer, prompt, system) for prompt in prompts]
    return [list(map(int, ids)) for ids in tokenizer.encode_batch(texts, add_special_tokens=not chat, stats=stats)]


def chat_prompt(tokenizer: Tokenizer, prompt: str, system: str | None = None) -> str:
    """The chat template rendered for an optional system turn and one user turn, ready for the reply."""
    messages = ([{"role": "system", "content": system}] if system is not None else []) + \
        [{"role": "user", "content": prompt}]
    return render_chat(tokenizer, messages, add_generation_prompt=True)


def generate(model: Transformer | DecodingModel, tokenizer: Tokenizer, prompts: str | Sequence[str], *,
             max_new_tokens: int = 32, temperature: float = 0.0, top_k: int | None = None, top_p: float = 1.0,
             repetition_penalty: float = 1.0, seed: int | None = None, chat: bool = False,
             system: str | None = None, eos_token_ids: Sequence[int] | None = None,
             truncate_prompt: bool = False, on_token: TokenCallback | None = None) -> list[str]:
    """The generated text of each prompt (special tokens left out), greedy unless `temperature` > 0.

    `eos_token_ids` default to the tokenizer's eos; `on_token(row, id)` sees every token as it comes.
    """
    texts = [prompts] if isinstance(prompts, str) else list(prompts)
    if eos_token_ids is None:
        eos_token_ids = [tokenizer.eos_id] if tokenizer.eos_id is not None else []
    ids = generate_ids(model, encode_prompts(tokenizer, texts, chat, system), max_new_tokens=max_new_tokens,
                       sampling=Sampling(temperature, top_k, top_p, repetition_penalty),
                       eos_token_ids=eos_token_ids, pad_token_id=tokenizer.pad_id, seed=seed, on_token=on_token,
                       truncate_prompt=truncate_prompt)
    return [tokenizer.decode(row, skip_special_tokens=True) for row in ids]
