"""N new sequences from a causal model (protein, DNA, SMILES, text), and the file that holds them.

    model = biotf.Model.load("outputs/smiles_clm/<run>")
    decoder, defaults = model.decoding()
    drawn = sample_sequences(decoder, model.tokenizer, defaults, 100, sampling=Sampling(temperature=1.0), seed=0)
    write_samples("samples.fasta", drawn.samples)

Every sample starts from the model's start token (`GenerationDefaults`: what training saw before a sequence) or
from the start and a prompt, and ends at its first eos. The tokenizer's special tokens other than eos, and ids the
tokenizer does not have (padding rows of the embedding), are suppressed, so none appears inside a sequence.
Sample i is drawn from its own random stream (`seed`, i), so the same seed gives the same samples whatever the
batch size (`biotf.inference.generation`). With `valid` (e.g. RDKit's parse for SMILES), drawing goes on until
`n` samples pass it or `max_draws` samples were drawn; the rejected ones are counted, never dropped unsaid.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from os import PathLike
from pathlib import Path

from biotf.io.atomic import atomic_write_text
from biotf.io.outputs import output_format
from biotf.io.tables import write_rows
from biotf.errors import CheckpointError, ConfigError, InputError, check_int
from biotf.inference.fast import DecodingModel
from biotf.inference.generation import Sampling, fit_prompts, generate_batch, stream_seed
from biotf.inference.pretrained import GenerationDefaults
from biotf.model import Transformer
from biotf.progress import Progress
from biotf.tokenizers.base import PolicyStats, Tokenizer
from biotf.naming import parameter

SAMPLE_FORMATS = (".fasta", ".csv", ".txt")


@dataclass(frozen=True)
class Sample:
    """One drawn sequence: `index` is its random stream (and its id `sample_<index + 1>` among kept ones)."""

    index: int
    sequence: str
    tokens: int          # new tokens, the eos included
    log_prob: float      # summed log-probability of the new tokens under the model (temperature 1)
    finished: bool       # stopped at eos (False: cut at max_new_tokens)


@dataclass
class SampleSet:
    """The kept samples, in stream order, and what was drawn to get them."""

    samples: list[Sample]
    seed: int
    draws: int = 0       # samples looked at: kept + rejected
    rejected: list[Sample] = field(default_factory=list)  # drawn but failing `valid` (or cut before eos)
    policies: PolicyStats = field(default_factory=PolicyStats)

    @property
    def unfinished(self) -> int:
        """Kept samples cut at max_new_tokens before their eos."""
        return sum(not sample.finished for sample in self.samples)


def suppressed_ids(tokenizer: Tokenizer, defaults: GenerationDefaults, vocab_size: int) -> set[int]:
    """Ids that must never be sampled inside a sequence: every special token but the eos ids (unk too), and ids
    past the tokenizer's vocabulary (rows a model's embedding may have for alignment)."""
    specials = set(tokenizer.special_ids) | ({tokenizer.unk_id} if tokenizer.unk_id is not None else set())
    return (specials - set(defaults.eos_token_ids)) | set(range(tokenizer.vocab_size, vocab_size))


def sample_sequences(model: Transformer | DecodingModel, tokenizer: Tokenizer, defaults: GenerationDefaults, n: int,
                     *, prompt: str | None = None, sampling: Sampling = Sampling(temperature=1.0),
                     seed: int | None = None, batch_size: int = 64, max_new_tokens: int | None = None,
                     valid: Callable[[str], bool] | None = None, max_draws: int | None = None,
                     progress: Progress | None = None) -> SampleSet:
    """`n` samples (fewer only when `valid` is given and `max_draws` ran out: `SampleSet.rejected` says why);
    `progress` counts the samples kept, and the draws, batch by batch.

    `max_new_tokens` None: `defaults.new_tokens` (the checkpoint's, at most what the model's positions leave).
    A sample cut at `max_new_tokens` is kept and counted (`SampleSet.unfinished`) unless `valid` is given, where
    it is rejected (an unfinished sequence is not a complete molecule).
    """
    check_int("num_samples", n)
    check_int("batch_size", batch_size)
    check_int("max_draws", max_draws, optional=True)
    check_int("max_new_tokens", max_new_tokens, optional=True)
    if valid is None and max_draws is not None:
        raise ConfigError("max_draws", max_draws, reason="only a validity filter draws more than num_samples")
    if max_draws is not None and max_draws < n:
        raise ConfigError("max_draws", max_draws, allowed=f"at least num_samples ({n})")
    config = model.config
    policies = PolicyStats()
    start = defaults.encode_prompt(tokenizer, prompt, policies)
    if prompt is None and not 0 <= start[0] < config.vocab_size:
        raise CheckpointError(f"the start token id {start[0]} (the checkpoint's bos_token_id, else its first "
                              f"eos_token_id) is outside the model's vocabulary of {config.vocab_size} ids: give a "
                              f"{parameter('prompt')}, or set bos_token_id in generation_config.json to an id below "
                              f"{config.vocab_size}")
    if max_new_tokens is None:
        max_new_tokens = defaults.new_tokens(len(start), config.max_seq_len)
    start = fit_prompts([start], max_new_tokens, config.max_seq_len, truncate=False)[0]
    seed = stream_seed(seed)
    suppress = suppressed_ids(tokenizer, defaults, config.vocab_size)
    drawn = SampleSet([], seed, policies=policies)
    limit = n if valid is None else (max_draws or 10 * n)
    while len(drawn.samples) < n and drawn.draws < limit:
        rows = min(batch_size, limit - drawn.draws)  # limit is n without a validity filter
        batch = generate_batch(model, [start] * rows, max_new_tokens=max_new_tokens, sampling=sampling,
                               eos_token_ids=defaults.eos_token_ids, pad_token_id=defaults.pad_token_id, seed=seed,
                               first_row=drawn.draws, suppress_ids=suppress, log_probs=True,
                               on_token=_batch_notes(progress, rows, drawn.draws))
        for ids, log_prob in zip(batch.ids, batch.log_probs):
            # Stream order: the kept samples are the first n that pass, whatever the batch size; the rest of the
            # last batch is not looked at (nor counted as drawn).
            if len(drawn.samples) == n:
                break
            finished = bool(ids) and ids[-1] in defaults.eos_token_ids
            text = tokenizer.decode(ids, skip_special_tokens=True)
            sample = Sample(drawn.draws, (prompt or "") + text, len(ids), log_prob, finished)
            keep = valid is None or (finished and valid(sample.sequence))
            (drawn.samples if keep else drawn.rejected).append(sample)
            drawn.draws += 1
        if progress is not None:
            progress.update(len(drawn.samples) - progress.done, f"{drawn.draws:,} drawn")
    return drawn


def _batch_notes(progress: Progress | None, rows: int, drawn: int) -> Callable[[int, int], None] | None:
    """An `on_token` that tells `progress` how far the batch being drawn has come (`2,048 tokens into a batch of 64`),
    so that a batch of a large model is not silent until its end; None without progress."""
    if progress is None:
        return None
    tokens = 0

    def note(row: int, token: int) -> None:
        nonlocal tokens
        tokens += 1
        progress.detail(f"{drawn:,} drawn; {tokens:,} tokens into a batch of {rows}")

    return note


def write_samples(path: str | PathLike, samples: list[Sample]) -> Path:
    """Write `samples` (ids `sample_1`, `sample_2`, ... in order) by extension, all or nothing: FASTA (id and
    sequence), CSV (id, sequence, tokens, log_prob, finished) or TXT (one sequence a line)."""
    suffix = output_format(path, SAMPLE_FORMATS, parameter("output"))
    ids = [f"sample_{number}" for number in range(1, len(samples) + 1)]
    if suffix != ".csv":
        for name, sample in zip(ids, samples):
            if "\n" in sample.sequence or "\r" in sample.sequence:
                raise InputError(f"{path}: {name} holds a line break, which a {suffix} line cannot; write a .csv "
                                 "(it quotes such a sequence)")
    if suffix == ".csv":
        return write_rows(path, ["id", "sequence", "tokens", "log_prob", "finished"],
                          ([name, s.sequence, s.tokens, f"{s.log_prob:.6g}", str(s.finished).lower()]
                           for name, s in zip(ids, samples)), ",")
    if suffix == ".fasta":
        text = "".join(f">{name}\n{sample.sequence}\n" for name, sample in zip(ids, samples))
    else:
        text = "".join(f"{sample.sequence}\n" for sample in samples)
    return atomic_write_text(path, text)
