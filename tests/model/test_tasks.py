"""Task heads: pooling over content tokens, and each head's loss falls when it trains on a learnable fixture."""

from __future__ import annotations

import pytest
import torch

from biotf.errors import ConfigError, InputError
from biotf.model import Transformer, TransformerConfig
from biotf.model.lora import apply_lora
from biotf.model.heads import TaskModel, pool_tokens

VOCAB, CLS, EOS, PAD = 12, 0, 1, 2  # ids 3..11 are content tokens


def trunk() -> Transformer:
    torch.manual_seed(0)
    return Transformer(TransformerConfig(vocab_size=VOCAB, d_model=32, n_layers=2, n_heads=4, d_ff=64, causal=False,
                                         lm_head=False, init_std=0.1))


def batch(seed: int, size: int = 16):
    """<cls> content <eos> <pad>...: content of 4-9 tokens; the labels are functions of the content."""
    generator = torch.Generator().manual_seed(seed)
    ids = torch.full((size, 12), PAD)
    for row in range(size):
        n = int(torch.randint(4, 10, (1,), generator=generator))
        ids[row, 0], ids[row, n + 1] = CLS, EOS
        ids[row, 1:n + 1] = torch.randint(3, VOCAB, (n,), generator=generator)
    attention = (ids != PAD).long()
    content = (ids >= 3).long()
    count5 = ((ids == 5).sum(1)).float()
    token_labels = torch.where(content.bool(), ids % 2, torch.full_like(ids, -100))
    return ids, attention, content, {"classification": (count5 > 0).long(), "regression": count5[:, None],
                                     "token": token_labels}


@pytest.mark.parametrize("task, outputs, pool", [("classification", 2, "mean"), ("classification", 2, "max"),
                                                 ("regression", 1, "cls"), ("token", 2, "mean")])
def test_each_head_trains_and_its_loss_falls(task, outputs, pool):
    model = TaskModel(trunk(), task, outputs, pool=pool)
    if task == "regression":
        model.set_target_scale(torch.tensor([1.0]), torch.tensor([1.0]))
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    ids, attention, content, labels = batch(99, 64)
    with torch.no_grad():
        first = float(model(ids, attention, content, labels[task]).loss)
    for step in range(40):
        b_ids, b_attention, b_content, b_labels = batch(step)
        loss = model(b_ids, b_attention, b_content, b_labels[task]).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
    with torch.no_grad():
        out = model(ids, attention, content, labels[task])
    assert float(out.loss) < 0.6 * first, (first, float(out.loss))
    if task == "regression":  # predictions are in the label's unit
        assert float(((out.predictions - labels[task]) ** 2).mean()) == pytest.approx(float(out.loss), rel=1e-4)


def test_pooling_sees_content_tokens_only():
    hidden = torch.arange(2 * 4 * 3, dtype=torch.float32).view(2, 4, 3)
    content = torch.tensor([[0, 1, 1, 0], [0, 1, 0, 0]])
    torch.testing.assert_close(pool_tokens(hidden, content, "mean"), torch.stack([hidden[0, 1:3].mean(0), hidden[1, 1]]))
    torch.testing.assert_close(pool_tokens(hidden, content, "max"), torch.stack([hidden[0, 2], hidden[1, 1]]))
    torch.testing.assert_close(pool_tokens(hidden, content, "cls"), hidden[:, 0])
    with pytest.raises(InputError, match="batch row 1 has no content tokens"):
        pool_tokens(hidden, torch.tensor([[0, 1, 1, 0], [0, 0, 0, 0]]), "mean")


def test_padding_and_specials_do_not_change_a_pooled_prediction():
    model = TaskModel(trunk(), "classification", 3).eval()
    ids, attention, content, _ = batch(5, 4)
    with torch.no_grad():
        together = model(ids, attention, content).logits
        for row in range(4):
            n = int(attention[row].sum())
            alone = model(ids[row:row + 1, :n], attention[row:row + 1, :n], content[row:row + 1, :n]).logits
            torch.testing.assert_close(alone[0], together[row], rtol=1e-5, atol=1e-5)


def test_lora_on_the_trunk_keeps_the_head_trainable():
    model = TaskModel(trunk(), "classification", 2)
    apply_lora(model.trunk, ["qkv"], rank=2, alpha=4)
    trainable = {n for n, p in model.named_parameters() if p.requires_grad}
    assert {"head.weight", "head.bias"} <= trainable
    assert all(n.startswith("head.") or n.endswith(("lora_a", "lora_b")) for n in trainable)


def test_bad_heads_are_refused():
    with pytest.raises(ConfigError, match="task"):
        TaskModel(trunk(), "ranking", 2)
    with pytest.raises(ConfigError, match="finetune.pool"):
        TaskModel(trunk(), "classification", 2, pool="none")
    with pytest.raises(ConfigError, match="two classes"):
        TaskModel(trunk(), "classification", 1)
    with pytest.raises(InputError, match="do not vary"):
        TaskModel(trunk(), "regression", 1).set_target_scale(torch.zeros(1), torch.zeros(1))


def stem_trunk() -> Transformer:
    torch.manual_seed(0)
    return Transformer(TransformerConfig(vocab_size=VOCAB, d_model=32, n_layers=2, n_heads=4, d_ff=64, causal=False,
                                         lm_head=False, init_std=0.1, stem="conv", stem_widths=[16, 32],
                                         stem_kernel=3, stem_pool=[2, 2]))


@pytest.mark.parametrize("resolution", ["base", "bin"])
def test_a_stem_token_head_is_per_token_at_either_resolution_and_padding_side_changes_nothing(resolution):
    model = TaskModel(stem_trunk(), "token", 2, resolution=resolution).eval()
    ids, attention, content, labels = batch(3)
    right = model(ids, attention, content, labels["token"])
    assert right.logits.shape == (16, 12, 2) and right.predictions.shape == (16, 12)
    # the frozen-trunk path (cached features of right-padded rows, then the head) is the same computation
    cached = model.from_features(model.features(ids, attention, content), labels["token"])
    torch.testing.assert_close(cached.logits, right.logits, rtol=0, atol=1e-6)
    torch.testing.assert_close(cached.loss, right.loss, rtol=0, atol=1e-6)
    # left padding: the same rows, real tokens last; every real token's output and the loss stay
    order = torch.argsort(attention, dim=1, stable=True)
    left = model(ids.gather(1, order), attention.gather(1, order), content.gather(1, order),
                 labels["token"].gather(1, order))
    real = attention.bool()
    torch.testing.assert_close(left.logits[attention.gather(1, order).bool()], right.logits[real], rtol=0, atol=1e-5)
    torch.testing.assert_close(left.loss, right.loss, rtol=0, atol=1e-6)
    if resolution == "bin":  # one prediction per bin of 4 tokens, counted from <cls>
        assert torch.equal(right.predictions, right.predictions[:, ::4].repeat_interleave(4, 1)[:, :12])


def test_a_bin_head_trains_on_majority_labels_and_its_loss_falls():
    model = TaskModel(stem_trunk(), "token", 2, resolution="bin")
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    losses = []
    for step in range(30):
        ids, attention, content, labels = batch(step % 4)
        loss = model(ids, attention, content, labels["token"]).loss
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(float(loss.detach()))
    assert sum(losses[-4:]) < 0.9 * sum(losses[:4]), losses


def test_a_bin_resolution_is_refused_without_a_stem_or_a_token_task():
    with pytest.raises(ConfigError, match=r"finetune.resolution='bin': the model has no stem"):
        TaskModel(trunk(), "token", 2, resolution="bin")
    with pytest.raises(ConfigError, match=r"finetune.resolution='bin': task=classification predicts one value"):
        TaskModel(stem_trunk(), "classification", 2, resolution="bin")
    with pytest.raises(ConfigError, match=r"\(allowed: base \| bin\)"):
        TaskModel(stem_trunk(), "token", 2, resolution="residue")
