"""Fixtures for training tests: a shared token cache, a tiny pretrained model with labelled data to fine-tune, and
the steps at which last.ckpt was written."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
import torch

from biotf.training import callbacks

AMINO = "ACDEFGHIKLMNPQRSTVY"  # no W: the fine-tuning classification label is "has a W"


@pytest.fixture(scope="session")
def cache_dir(tmp_path_factory) -> Path:
    """One token cache for the whole session: each shipped file is tokenized once."""
    return tmp_path_factory.mktemp("token-cache")


@pytest.fixture(scope="session")
def pretrained(tmp_path_factory) -> Path:
    """base/: a tiny exported bidirectional model with the protein tokenizer; labelled.csv: 240 proteins with a
    class (contains W), a value (K count + W count / 2), per-residue labels (H for AELMQKRH, else C), a family."""
    from biotf.checkpoint import save_pretrained
    from biotf.model import Transformer, TransformerConfig
    from biotf.tokenizers import build_tokenizer

    root = tmp_path_factory.mktemp("finetune")
    tokenizer = build_tokenizer({"kind": "protein"})
    torch.manual_seed(0)
    model = Transformer(TransformerConfig.preset("tiny", causal=False, vocab_size=tokenizer.vocab_size))
    save_pretrained(model, tokenizer, root / "base")
    rng = random.Random(0)
    lines = ["id,sequence,label,value,ss,family"]
    for i in range(240):
        n = rng.randrange(15, 40)
        sequence = "".join(rng.choice(AMINO) for _ in range(n))
        if i % 2:
            p = rng.randrange(n - 3)
            sequence = sequence[:p] + "WWW" + sequence[p + 3:]
        ss = "".join("H" if c in "AELMQKRH" else "C" for c in sequence)
        label = "yes" if "W" in sequence else ("" if i == 4 else "no")  # record p4 is unlabelled
        lines.append(f"p{i},{sequence},{label},{sequence.count('K') + 0.5 * sequence.count('W')},{ss},f{i % 17}")
    (root / "labelled.csv").write_text("\n".join(lines) + "\n")
    return root


@pytest.fixture
def saves(monkeypatch) -> list[int]:
    """The global steps at which last.ckpt was written, in order."""
    steps: list[int] = []
    save = callbacks.save_checkpoint

    def recording(checkpoint, path):
        if Path(path).name == "last.ckpt":
            steps.append(checkpoint["global_step"])
        return save(checkpoint, path)

    monkeypatch.setattr(callbacks, "save_checkpoint", recording)
    return steps
