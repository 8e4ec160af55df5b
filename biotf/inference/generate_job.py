"""The work of `biotf generate` with a loaded causal model: the request (checked before anything is loaded), prompts completed (one streamed as its tokens come, several as JSON lines), and N sequences drawn into a
file. Each job writes its text where it is told and returns the summary lines the command prints on stderr."""

from __future__ import annotations

import json
import logging
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

from biotf.io.readers import ReaderOptions, read_records
from biotf.errors import CheckpointError, ConfigError, check_int
from biotf.inference.fast import DecodingModel
from biotf.inference.generation import MAX_SEED, Sampling, TextStreamer, sampling_over
from biotf.inference.pretrained import GenerationDefaults, complete
from biotf.inference.sampling import sample_sequences, write_samples
from biotf.naming import parameter
from biotf.progress import reporting
from biotf.tokenizers.base import PolicyStats, Tokenizer
from biotf.conventions import counted

def option(value, default):
    return default if value is None else value


@dataclass(frozen=True)
class GenerateRequest:
    """What to generate: prompts to complete (`prompt` or `prompt_file`), or `num_samples` sequences drawn into
    `output`; a sampling value left None is the checkpoint's (its generation_config.json)."""

    model: Path | str
    prompt: str | None = None
    prompt_file: Path | None = None
    num_samples: int | None = None
    output: Path | None = None
    batch_size: int = 64
    valid_only: bool = False
    max_draws: int | None = None
    progress: bool = True
    chat: bool = False
    system: str | None = None
    max_new_tokens: int | None = None
    temperature: float | None = None
    top_k: int | None = None
    top_p: float | None = None
    repetition_penalty: float | None = None
    seed: int | None = None
    truncate_prompt: bool = False

    def sampling(self, defaults: GenerationDefaults | Sampling, temperature: float) -> Sampling:
        """The sampling asked for, each value that is not given taken from the checkpoint's `defaults`
        (`temperature`: the default temperature, which differs between prompts and drawn samples). A value refused
        is named as the request's, or as the checkpoint's (its generation_config.json) where it came from there."""
        try:
            return sampling_over(defaults, temperature=option(self.temperature, temperature), top_k=self.top_k,
                                 top_p=self.top_p, repetition_penalty=self.repetition_penalty)
        except ConfigError as error:
            if getattr(self, error.key) is not None:
                raise ConfigError(parameter(error.key), error.value, error.allowed) from None
            raise CheckpointError(f"the generation settings of {self.model} set {error.key}={error.value!r}, which "
                                  f"biotf cannot sample with (allowed: {error.allowed}); override it with "
                                  f"{parameter(error.key)}") from None

    def check(self) -> None:
        """Refuse a bad count, a sampling value out of range, a value of the other mode (prompts vs num_samples) or
        system without chat, before anything is loaded."""
        for name, minimum in (("batch_size", 1), ("num_samples", 1), ("max_draws", 1), ("max_new_tokens", 1)):
            if getattr(self, name) is not None:
                check_int(parameter(name), getattr(self, name), minimum)
        if self.seed is not None:
            check_int(parameter("seed"), self.seed, 0, maximum=MAX_SEED)
        self.sampling(Sampling(), 0.0)  # the request alone: values not given take valid defaults here
        self._check_mode()
        if self.system is not None and not self.chat:
            raise ConfigError(parameter("system"), self.system, reason=f"a system prompt needs {parameter('chat')}")

    def _check_mode(self) -> None:
        samples = parameter("num_samples")
        sample_values = {"output": None if self.output is None else str(self.output),
                         "valid_only": self.valid_only or None, "max_draws": self.max_draws}
        if self.num_samples is None:
            for name, value in sample_values.items():
                if value is not None:
                    raise ConfigError(parameter(name), value, reason=f"it belongs to drawing samples: give {samples} N")
            if self.prompt is None and self.prompt_file is None:
                prompt, prompt_file, output = parameter("prompt"), parameter("prompt_file"), parameter("output")
                raise ConfigError(prompt, None, reason=f"give {prompt}, {prompt_file}, or {samples} N {output} FILE")
            return
        if self.output is None:
            raise ConfigError(parameter("output"), None, required_with=samples)
        for name, value in {"prompt_file": self.prompt_file, "chat": self.chat or None}.items():
            if value is not None:
                raise ConfigError(parameter(name), str(value) if name == "prompt_file" else value,
                                  reason=f"{samples} draws from one start ({parameter('prompt')} at most)")
        if self.max_draws is not None and not self.valid_only:
            raise ConfigError(parameter("max_draws"), self.max_draws,
                              reason=f"only {parameter('valid_only')} draws more than {samples}")

    def prompts(self) -> list[str]:
        """`prompt`, or the non-blank lines of `prompt_file` read by biotf's text reader: gzip and Windows line
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
    """`num_samples` sequences into `output`: draw, write all or nothing, and return the lines that say what was drawn."""
    valid = None
    if request.valid_only:
        if tokenizer.kind != "smiles":
            raise ConfigError(parameter("valid_only"), True, reason=f"it checks SMILES with RDKit, and this model's tokenizer "
                                                           f"is {tokenizer.kind!r}, not 'smiles'")
        from biotf.chemistry import is_valid

        is_valid("C")  # RDKit missing: its install line now, before any sampling
        valid = is_valid
    sampling = request.sampling(defaults, defaults.temperature or 1.0)  # drawing samples: never greedy
    start = time.perf_counter()
    with reporting(request.progress, f"sampling {request.output.name}", "samples",
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
                     f"RDKit, {cut:,} cut at {parameter('max_new_tokens')} before <eos>); not written")
        if len(drawn.samples) < request.num_samples:
            lines.append(f"biotf {command}: warning: only {len(drawn.samples):,} valid of the {request.num_samples:,} "
                         f"asked within {counted(drawn.draws, 'draw')} (raise {parameter('max_draws')})")
    elif drawn.unfinished:
        lines.append(f"{counted(drawn.unfinished, 'sample')} cut at {parameter('max_new_tokens')} before <eos> "
                     "(kept; the CSV's finished column marks them)")
    if drawn.policies:
        lines.append(f"tokenizer policies: {drawn.policies.summary()}")
    return lines
