"""The work of `biotf generate` with a loaded causal model: the request its flags make (checked before anything is
loaded), prompts completed (one streamed as its tokens come, several as JSON lines), and N sequences drawn into a
file. Each job writes its text where it is told and returns the summary lines the command prints on stderr."""

from __future__ import annotations

import json
import logging
import sys
import time
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any, TextIO

from biotf.io.readers import ReaderOptions, read_records
from biotf.errors import CheckpointError, ConfigError, check_int
from biotf.inference.fast import DecodingModel
from biotf.inference.generation import MAX_SEED, Sampling, TextStreamer, sampling_over
from biotf.inference.pretrained import GenerationDefaults, complete
from biotf.inference.sampling import sample_sequences, write_samples
from biotf.progress import reporting
from biotf.tokenizers.base import PolicyStats, Tokenizer
from biotf.conventions import counted

# The flag of each `Sampling` field: a value refused is named as the user gave it.
SAMPLING_FLAGS = {"temperature": "--temperature", "top_k": "--top-k", "top_p": "--top-p",
                  "repetition_penalty": "--repetition-penalty"}


def option(value, default):
    return default if value is None else value


@dataclass(frozen=True)
class GenerateRequest:
    """What `biotf generate`'s flags ask for, under their argparse names (`--top-k` is `top_k`)."""

    model: Path | str
    prompt: str | None
    prompt_file: Path | None
    num_samples: int | None
    output: Path | None
    batch_size: int
    valid_only: bool
    max_draws: int | None
    no_progress: bool
    chat: bool
    system: str | None
    max_new_tokens: int | None
    temperature: float | None
    top_k: int | None
    top_p: float | None
    repetition_penalty: float | None
    seed: int | None
    truncate_prompt: bool

    @classmethod
    def of(cls, arguments: Any) -> GenerateRequest:
        """The request of parsed arguments (any object with an attribute per field)."""
        return cls(**{item.name: getattr(arguments, item.name) for item in fields(cls)})

    def sampling(self, defaults: GenerationDefaults | Sampling, temperature: float) -> Sampling:
        """The sampling the flags ask for, each one that is not given taken from the checkpoint's `defaults`
        (`temperature`: the default temperature, which differs between prompts and drawn samples). A value refused
        is named by its flag, or as the checkpoint's (its generation_config.json) where it came from there."""
        try:
            return sampling_over(defaults, temperature=option(self.temperature, temperature), top_k=self.top_k,
                                 top_p=self.top_p, repetition_penalty=self.repetition_penalty)
        except ConfigError as error:
            if getattr(self, error.key) is not None:
                raise ConfigError(SAMPLING_FLAGS[error.key], error.value, error.allowed) from None
            raise CheckpointError(f"the generation settings of {self.model} set {error.key}={error.value!r}, which "
                                  f"biotf cannot sample with (allowed: {error.allowed}); override it with "
                                  f"{SAMPLING_FLAGS[error.key]}") from None

    def check(self) -> None:
        """Refuse a bad count, a sampling value out of range, a flag of the other mode (prompts vs --num-samples) or
        --system without --chat, before anything is loaded."""
        for flag, value, minimum in (("--batch-size", self.batch_size, 1), ("--num-samples", self.num_samples, 1),
                                     ("--max-draws", self.max_draws, 1), ("--max-new-tokens", self.max_new_tokens, 1)):
            if value is not None:
                check_int(flag, value, minimum)
        if self.seed is not None:
            check_int("--seed", self.seed, 0, maximum=MAX_SEED)
        self.sampling(Sampling(), 0.0)  # the flags alone: those not given take valid defaults here
        self._check_mode()
        if self.system is not None and not self.chat:
            raise ConfigError("--system", self.system, reason="a system prompt needs --chat")

    def _check_mode(self) -> None:
        sample_flags = {"--output": None if self.output is None else str(self.output),
                        "--valid-only": self.valid_only or None, "--max-draws": self.max_draws}
        if self.num_samples is None:
            for flag, value in sample_flags.items():
                if value is not None:
                    raise ConfigError(flag, value, reason="it belongs to drawing samples: give --num-samples N")
            if self.prompt is None and self.prompt_file is None:
                raise ConfigError("--prompt", None,
                                  reason="give --prompt, --prompt-file, or --num-samples N --output FILE")
            return
        if self.output is None:
            raise ConfigError("--output", None, required_with="--num-samples")
        for flag, value in {"--prompt-file": self.prompt_file, "--chat": self.chat or None}.items():
            if value is not None:
                raise ConfigError(flag, str(value) if flag == "--prompt-file" else value,
                                  reason="--num-samples draws from one start (--prompt at most)")
        if self.max_draws is not None and not self.valid_only:
            raise ConfigError("--max-draws", self.max_draws, reason="only --valid-only draws more than --num-samples")

    def prompts(self) -> list[str]:
        """--prompt, or the non-blank lines of --prompt-file read by biotf's text reader: gzip and Windows line
        endings read transparently, a non-UTF-8 byte or an empty file is one InputError naming the file and line."""
        if self.prompt_file is None:
            return [self.prompt]
        return [record.sequence for record in read_records(self.prompt_file, ReaderOptions(format="text"))]


def complete_prompts(decoder: DecodingModel, tokenizer: Tokenizer, defaults: GenerationDefaults,
                     request: GenerateRequest, prompts: list[str], out: TextIO, command: str) -> list[str]:
    """Complete `prompts`: one streams its text to `out` as it comes, several go there as JSON lines
    {"prompt": ..., "completion": ...}; library warnings (a truncated prompt) are "biotf `command`: warning: ..."
    lines on stderr meanwhile. Returns the summary lines."""
    policies = PolicyStats()
    sampling = request.sampling(defaults, defaults.temperature)
    streamer = None
    if len(prompts) == 1:
        streamer = TextStreamer(tokenizer, lambda text: (out.write(text), out.flush()))
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter(f"biotf {command}: warning: %(message)s"))
    logger = logging.getLogger("biotf.inference")
    logger.addHandler(handler)
    start = time.perf_counter()
    try:
        ids, new = complete(decoder, tokenizer, defaults, prompts, chat=request.chat, system=request.system,
                            max_new_tokens=request.max_new_tokens, sampling=sampling, seed=request.seed,
                            truncate_prompt=request.truncate_prompt, on_token=streamer, stats=policies)
    finally:
        logger.removeHandler(handler)
    seconds = time.perf_counter() - start
    if streamer is not None:
        out.write("\n")
    else:
        for prompt, row in zip(prompts, new):
            completion = tokenizer.decode(row, skip_special_tokens=True)
            out.write(json.dumps({"prompt": prompt, "completion": completion}, ensure_ascii=False) + "\n")
    out.flush()
    produced = sum(len(row) for row in new)
    mode = "greedy" if sampling.greedy else f"sampling (temperature {sampling.temperature}, top-k {sampling.top_k}, " \
                                           f"top-p {sampling.top_p})"
    lines = [f"{len(prompts)} prompt(s), {sum(map(len, ids))} prompt tokens, {produced} new tokens in {seconds:.2f} s "
             f"({produced / seconds:.1f} tokens/s), {mode}"]
    if policies:
        lines.append(f"tokenizer policies: {policies.summary()}")
    return lines


def draw_samples(decoder: DecodingModel, tokenizer: Tokenizer, defaults: GenerationDefaults,
                 request: GenerateRequest, command: str) -> list[str]:
    """`--num-samples N --output FILE`: draw, write all or nothing, and return the lines that say what was drawn."""
    valid = None
    if request.valid_only:
        if tokenizer.kind != "smiles":
            raise ConfigError("--valid-only", True, reason=f"it checks SMILES with RDKit, and this model's tokenizer "
                                                           f"is {tokenizer.kind!r}, not 'smiles'")
        from biotf.chemistry import is_valid

        is_valid("C")  # RDKit missing: its install line now, before any sampling
        valid = is_valid
    sampling = request.sampling(defaults, defaults.temperature or 1.0)  # drawing samples: never greedy
    start = time.perf_counter()
    with reporting(not request.no_progress, f"sampling {request.output.name}", "samples",
                   total=request.num_samples) as shown:
        drawn = sample_sequences(decoder, tokenizer, defaults, request.num_samples,
                                 prompt=request.prompt, sampling=sampling, seed=request.seed,
                                 batch_size=request.batch_size, max_new_tokens=request.max_new_tokens, valid=valid,
                                 max_draws=request.max_draws, progress=shown)
    seconds = time.perf_counter() - start
    write_samples(request.output, drawn.samples)
    mode = "greedy" if sampling.greedy else f"temperature {sampling.temperature}, top-k {sampling.top_k or 'none'}, " \
                                           f"top-p {sampling.top_p}"
    tokens = sum(sample.tokens for sample in drawn.samples + drawn.rejected)
    lines = [f"wrote {counted(len(drawn.samples), 'sample')} to {request.output} from {counted(drawn.draws, 'draw')} "
             f"({tokens:,} tokens in {seconds:.2f} s; seed {drawn.seed}; {mode})"]
    if valid is not None:
        cut = sum(not sample.finished for sample in drawn.rejected)
        lines.append(f"invalid SMILES drawn: {len(drawn.rejected):,} ({len(drawn.rejected) - cut:,} not parsed by "
                     f"RDKit, {cut:,} cut at --max-new-tokens before <eos>); not written")
        if len(drawn.samples) < request.num_samples:
            lines.append(f"biotf {command}: warning: only {len(drawn.samples):,} valid of the {request.num_samples:,} "
                         f"asked within {counted(drawn.draws, 'draw')} (raise --max-draws)")
    elif drawn.unfinished:
        lines.append(f"{counted(drawn.unfinished, 'sample')} cut at --max-new-tokens before <eos> (kept; the CSV's "
                     "finished column marks them)")
    if drawn.policies:
        lines.append(f"tokenizer policies: {drawn.policies.summary()}")
    return lines
