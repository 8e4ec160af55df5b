"""Whether a causal SMILES model is usable for what it exists for: the share of its samples RDKit parses.

    check = sample_validity(model, tokenizer, samples=1000, seed=0)
    print(check.line)   # "sample validity 0.412 (412 valid of 1,000 samples, 398 unique; 23 s)"

The samples are drawn as `biotf generate --num-samples N` draws them from a biotf run (temperature 1, no top-k,
from <eos>, each sample its own random stream of `seed`), so the figure is the one `biotf generate evaluate`'s
validity would give for them; a sample cut before its eos counts as invalid (MOSES' validity: the share of all
samples that parse). A training run ends with it where `trainer.validity_samples` asks (`biotf.entry.train`).
"""

from __future__ import annotations

import copy
import time
from dataclasses import dataclass

from biotf.chemistry import canonicalize, is_valid
from biotf.inference.fast import optimize_for_decoding
from biotf.inference.generation import Sampling
from biotf.inference.pretrained import GenerationDefaults
from biotf.inference.sampling import sample_sequences
from biotf.model import Transformer
from biotf.tokenizers.base import Tokenizer
from biotf.conventions import counted


@dataclass(frozen=True)
class SampleValidity:
    """`valid` of `samples` drawn parse (`unique`: distinct canonical SMILES among them); `seconds` to draw and
    check them."""

    samples: int
    valid: int
    unique: int
    seconds: float

    @property
    def validity(self) -> float:
        return self.valid / self.samples

    @property
    def line(self) -> str:
        return (f"sample validity {self.validity:.3f} ({self.valid:,} valid of {counted(self.samples, 'sample')}, "
                f"{self.unique:,} unique; {self.seconds:.0f} s)")


def sample_validity(model: Transformer, tokenizer: Tokenizer, samples: int, seed: int = 0,
                    batch_size: int = 64) -> SampleValidity:
    """`samples` molecules drawn from `model` (a copy arranged for decoding: the model itself is left as it was)
    and checked with RDKit; see the module docstring."""
    start = time.perf_counter()
    decoder = optimize_for_decoding(copy.deepcopy(model).eval())
    drawn = sample_sequences(decoder, tokenizer, GenerationDefaults.for_run(tokenizer), samples,
                             sampling=Sampling(temperature=1.0), seed=seed, batch_size=batch_size)
    valid = [sample.sequence for sample in drawn.samples if sample.finished and is_valid(sample.sequence)]
    unique = len({canonicalize(smiles) for smiles in valid})
    return SampleValidity(samples, len(valid), unique, time.perf_counter() - start)
