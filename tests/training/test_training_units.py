"""Unit checks of the training pieces: weight-decay groups, the schedule, atomic writes."""

from __future__ import annotations

import math

import pytest

from biotf.io.atomic import atomic_write
from biotf.model import Transformer, TransformerConfig
from biotf.training.optim import WarmupCosine, parameter_groups


@pytest.mark.parametrize("tied", [True, False])
def test_no_weight_decay_on_norms_biases_and_embeddings(tied):
    model = Transformer(TransformerConfig.preset("tiny", tie_embeddings=tied, pos="learned", bias=True))
    decay, no_decay = parameter_groups(model, 0.1)
    assert decay["weight_decay"] == 0.1 and no_decay["weight_decay"] == 0.0
    decayed = {id(p) for p in decay["params"]}
    names = {id(p): name for name, p in model.named_parameters()}
    for name, parameter in model.named_parameters():
        undecayed = parameter.ndim < 2 or name.startswith(("embed.", "positions."))
        assert (id(parameter) not in decayed) == undecayed, name
    # Every parameter exactly once, a tied head included.
    assert len(decay["params"]) + len(no_decay["params"]) == len(names)
    assert any(".qkv.weight" in names[id(p)] for p in decay["params"])


def test_warmup_then_cosine_to_the_floor():
    schedule = WarmupCosine(warmup_steps=10, total_steps=110, min_ratio=0.1)
    assert schedule(0) == pytest.approx(0.1) and schedule(9) == pytest.approx(1.0)
    assert schedule(60) == pytest.approx(0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * 0.5)))
    assert schedule(110) == pytest.approx(0.1) and schedule(500) == pytest.approx(0.1)
    values = [schedule(s) for s in range(10, 111)]
    assert all(a >= b for a, b in zip(values, values[1:]))


def test_atomic_write_keeps_the_old_file_when_writing_fails(tmp_path):
    target = tmp_path / "last.ckpt"
    atomic_write(target, lambda path: path.write_bytes(b"complete"))

    def torn(path):
        path.write_bytes(b"half")
        raise KeyboardInterrupt  # as a kill mid-write would

    with pytest.raises(KeyboardInterrupt):
        atomic_write(target, torn)
    assert target.read_bytes() == b"complete"
    assert [p.name for p in tmp_path.iterdir()] == ["last.ckpt"]


@pytest.mark.parametrize("precision", ["32", "bf16-mixed"])
def test_bf16_mixed_on_a_cpu_without_native_bf16_is_warned_about(precision, tmp_path):
    import warnings

    import torch

    from biotf.training.config import TrainerConfig
    from biotf.training.run import build_trainer

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        build_trainer(TrainerConfig(accelerator="cpu", precision=precision, enable_progress_bar=False), tmp_path)
    slow = [w for w in caught if "bf16-mixed on a CPU without native bfloat16" in str(w.message)]
    native = torch.ops.mkldnn._is_mkldnn_bf16_supported()
    assert len(slow) == (precision == "bf16-mixed" and not native)


@pytest.mark.parametrize("causal", [True, False])
def test_the_fused_loss_is_an_opt_in_with_the_plain_loss_value(causal):
    """`trainer.fused_loss` picks how a step computes its loss, not what: both give the same loss and counts."""
    import torch

    from biotf.tokenizers.amino_acid import AminoAcidTokenizer
    from biotf.training.config import OptimConfig
    from biotf.training.module import LanguageModelTask

    config = TransformerConfig.preset("tiny", vocab_size=33, causal=causal)
    tasks = []
    for fused in (True, False):
        torch.manual_seed(0)
        tasks.append(LanguageModelTask(config, AminoAcidTokenizer(), OptimConfig(), total_steps=10, fused_loss=fused))
    ids = torch.randint(4, 24, (2, 12))
    labels = ids.clone()
    labels[:, :3] = -100
    fused, plain = (task(ids, None, labels) for task in tasks)
    assert fused.logits is None and plain.logits is not None
    torch.testing.assert_close(fused.loss, plain.loss, rtol=0, atol=1e-6)
    assert fused.scored == plain.scored == 2 * 9 and fused.correct == plain.correct
