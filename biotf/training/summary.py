"""The run summary: did the model learn? Final validation loss next to the unigram baseline.

The unigram baseline is the cross-entropy of predicting every validation target with the training
set's token frequencies (`PreparedData.unigram_baseline`): a model that beats it clearly has
learned more than how common each token is. A run whose job has a figure of its own (a SMILES generator: the share
of its samples that parse) adds it as a `FinalCheck`, measured on the final weights.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

from biotf.io.atomic import atomic_write_text
from biotf.model import Transformer
from biotf.tokenizers.base import Tokenizer
from biotf.training.hints import command_line, data_command

SUMMARY_JSON = "summary.json"
SUMMARY_TEXT = "summary.txt"


@dataclass(frozen=True)
class FinalCheck:
    """A figure that says whether the model is usable for its job: `name` its key, `line` its summary line,
    `values` what summary.json keeps of it."""

    name: str
    line: str
    values: dict[str, float]


# Measures the trained model (the network, the tokenizer) once training has ended.
FinalCheckRun = Callable[[Transformer, Tokenizer], FinalCheck]


@dataclass
class RunSummary:
    experiment: str
    run_dir: str
    objective: str
    parameters: int
    steps: int
    train_seconds: float
    tokens_seen: int
    nonfinite_skipped: int  # batches skipped for a NaN/inf loss (trainer.nonfinite=skip)
    final_val_loss: float
    final_val_ppl: float
    final_val_acc: float
    best_val_loss: float | None
    unigram_baseline: float
    data: str  # the data layer's own summary: records, tokens, policies, long sequences
    checks: list[FinalCheck] = field(default_factory=list)

    @property
    def tokens_per_second(self) -> float:
        return self.tokens_seen / max(self.train_seconds, 1e-9)

    @property
    def beats_baseline_by(self) -> float:
        """How far (nats/token) the final validation loss is below the unigram baseline."""
        return self.unigram_baseline - self.final_val_loss

    def text(self) -> str:
        verdict = "below" if self.beats_baseline_by > 0 else "NOT below"
        best = f"{self.best_val_loss:.4f}" if self.best_val_loss is not None else "n/a"
        accuracy = "masked-token" if self.objective == "mlm" else "next-token"
        return "\n".join([
            f"biotf run summary: {self.experiment} ({self.objective}, {self.parameters:,} parameters)",
            f"  steps {self.steps}, {self.train_seconds:.0f} s, {self.tokens_seen:,} tokens "
            f"({self.tokens_per_second:,.0f} tokens/s), {self.nonfinite_skipped} batches skipped for a non-finite loss",
            f"  final validation loss  {self.final_val_loss:.4f} nats/token (perplexity {self.final_val_ppl:.2f}, "
            f"{accuracy} accuracy {self.final_val_acc:.3f})",
            f"  unigram baseline       {self.unigram_baseline:.4f} nats/token -> {verdict} the baseline by "
            f"{abs(self.beats_baseline_by):.4f}",
            f"  best validation loss   {best}",
            *("  " + check.line for check in self.checks),
            *("  " + line for line in self.data.splitlines()),
        ])

    def write(self, run_dir: Path) -> None:
        payload = {**asdict(self), "tokens_per_second": self.tokens_per_second,
                   "beats_baseline_by": self.beats_baseline_by}
        atomic_write_text(run_dir / SUMMARY_JSON, json.dumps(payload, indent=2) + "\n")
        atomic_write_text(run_dir / SUMMARY_TEXT, self.text() + "\n")


def next_steps(run_dir: Path, data_path: str, column: str | None = None, id_column: str | None = None) -> str:
    """What to do with the run: where it is, how to export it, how to embed its data with it."""
    return "\n".join([
        f"run directory: {run_dir}",
        f"export it:     {command_line('biotf', 'export-model', run_dir, run_dir / 'export')}",
        "embed with it: " + data_command("embed", run_dir, data_path, column, id_column, run_dir / "embeddings.h5ad"),
    ])
