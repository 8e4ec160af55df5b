"""Unit checks of the training pieces: weight-decay groups, the optimizers, the schedule."""

from __future__ import annotations

import copy
import math

import pytest
import torch

from biotf.errors import ConfigError
from biotf.model import Transformer, TransformerConfig
from biotf.training.train_config import OptimConfig
from biotf.training.optim import WarmupCosine, build_optimizer, parameter_groups


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


def test_muon_takes_the_blocks_matrices_and_adamw_the_rest():
    model = Transformer(TransformerConfig.preset("tiny", tie_embeddings=False, pos="learned", bias=True))
    optimizer, _ = build_optimizer(model, OptimConfig(optimizer="muon", weight_decay=0.1), total_steps=10)
    muon, adamw = optimizer.members
    assert isinstance(muon, torch.optim.Muon) and isinstance(adamw, torch.optim.AdamW)
    names = {id(p): name for name, p in model.named_parameters()}
    orthogonalised = {names[id(p)] for group in muon.param_groups for p in group["params"]}
    rest = {names[id(p)] for group in adamw.param_groups for p in group["params"]}
    assert orthogonalised == {name for name, p in model.named_parameters() if name.startswith("blocks.") and p.ndim == 2}
    assert {"embed.weight", "lm_head.weight", "blocks.0.attn.qkv.bias"} <= rest
    assert not rest & orthogonalised and len(rest) + len(orthogonalised) == len(names)
    assert [group["weight_decay"] for group in muon.param_groups] == [0.1]  # every block matrix decays
    assert optimizer.param_groups == muon.param_groups + adamw.param_groups
    with pytest.raises(ConfigError, match=r"optim.optimizer='sgd' \(allowed: adamw \| muon\)"):
        OptimConfig(optimizer="sgd")


def test_muon_keeps_each_groups_learning_rate():
    """Fine-tuning's groups (the head at optim.lr, the trunk at finetune.trunk_lr): Muon takes the trunk's block
    matrices at the trunk's rate, AdamW the rest at theirs."""
    trunk, head = Transformer(TransformerConfig.preset("tiny")), torch.nn.Linear(32, 3)
    groups = [dict(g, lr=1e-3) for g in parameter_groups(head, 0.01)]
    groups += [dict(g, lr=1e-5) for g in parameter_groups(trunk, 0.01)]
    muon, adamw = build_optimizer(trunk, OptimConfig(optimizer="muon"), 10, groups)[0].members
    assert [g["initial_lr"] for g in muon.param_groups] == [1e-5]
    assert sorted(g["initial_lr"] for g in adamw.param_groups) == [1e-5, 1e-3, 1e-3]
    assert {id(p) for p in head.parameters()} <= {id(p) for g in adamw.param_groups for p in g["params"]}


def _steps(model, optimizer, schedule, n: int) -> None:
    tokens = torch.arange(24).remainder(model.config.vocab_size).view(2, 12)
    for _ in range(n):
        logits = model(tokens).logits
        loss = torch.nn.functional.cross_entropy(logits[:, :-1].flatten(0, 1), tokens[:, 1:].flatten())
        optimizer.step(lambda: loss.backward() or loss)
        optimizer.zero_grad()
        schedule.step()


def test_muon_resumes_where_it_stopped():
    """A checkpointed Muon + AdamW pair, restored into a fresh one, takes the same next steps as the original: the
    momentum buffers, AdamW's moments and the schedule all come back, and the schedule drives the restored groups."""
    config = TransformerConfig.preset("tiny", causal=True, dropout=0.0)
    optim = OptimConfig(optimizer="muon", lr=1e-2, warmup_steps=2)
    torch.manual_seed(0)
    model = Transformer(config)
    optimizer, schedule = build_optimizer(model, optim, total_steps=8)
    _steps(model, optimizer, schedule, 3)
    # A deep copy, as a checkpoint file holds: the state dicts share tensors the next steps update in place.
    saved = copy.deepcopy({"model": model.state_dict(), "optimizer": optimizer.state_dict(),
                           "schedule": schedule.state_dict()})
    _steps(model, optimizer, schedule, 3)

    restored = Transformer(config)
    restored.load_state_dict(saved["model"])
    optimizer2, schedule2 = build_optimizer(restored, optim, total_steps=8)
    optimizer2.load_state_dict(saved["optimizer"])
    schedule2.load_state_dict(saved["schedule"])
    _steps(restored, optimizer2, schedule2, 3)
    assert [g["lr"] for g in optimizer2.members[0].param_groups] == [g["lr"] for g in optimizer.members[0].param_groups]
    for (name, a), b in zip(model.state_dict().items(), restored.state_dict().values()):
        torch.testing.assert_close(a, b, rtol=0, atol=0, msg=name)
    adamw_only, _ = build_optimizer(Transformer(config), OptimConfig(), total_steps=8)
    with pytest.raises(ValueError, match="not this optimizer's"):
        optimizer2.load_state_dict(adamw_only.state_dict())


def test_warmup_then_cosine_to_the_floor():
    schedule = WarmupCosine(warmup_steps=10, total_steps=110, min_ratio=0.1)
    assert schedule(0) == pytest.approx(0.1) and schedule(9) == pytest.approx(1.0)
    assert schedule(60) == pytest.approx(0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * 0.5)))
    assert schedule(110) == pytest.approx(0.1) and schedule(500) == pytest.approx(0.1)
    values = [schedule(s) for s in range(10, 111)]
    assert all(a >= b for a, b in zip(values, values[1:]))


@pytest.mark.parametrize("precision", ["32", "bf16-mixed"])
def test_bf16_mixed_on_a_cpu_without_native_bf16_is_warned_about(precision, tmp_path):
    import warnings

    import torch

    from biotf.training.train_config import TrainerConfig
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
    from biotf.training.train_config import OptimConfig
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
