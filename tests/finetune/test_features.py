"""Frozen fine-tuning on cached trunk features: the features are the trunk's own outputs, the head trained on them is
the head trained by running the trunk at every step, a second run reads them from the cache, and a damaged cache is
refused."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from safetensors.torch import load_file

from biotf.api import Model
from biotf.data.collators import content_mask, pad_batch
from biotf.errors import InputError
from biotf.finetune.features import VALUES_FILE, compute_features
from biotf.model.heads import TaskModel, pool_tokens
from training_helpers import finetune_config

SEQUENCES = ["MKTAYIAKQR", "GAV", "MKTAYIAKQRQISFVKSHFSRQLEERLGLIEVQ", "WWWK"]


@pytest.mark.parametrize("task, pool", [("classification", "mean"), ("regression", "max"), ("token", "mean")])
def test_features_are_the_trunks_outputs_of_each_record_alone(pretrained, task, pool):
    loaded = Model.load(pretrained / "base")
    trunk, tokenizer = loaded.network, loaded.tokenizer
    model = TaskModel(trunk, task, 1 if task == "regression" else 2, pool=pool)
    token_ids = [np.asarray(tokenizer.encode(s), np.int64) for s in SEQUENCES]
    features = compute_features(model, tokenizer, token_ids)
    for row, ids in enumerate(token_ids):  # each record alone, no padding: batching must not change its features
        batch, attention = (torch.from_numpy(a) for a in pad_batch([ids], tokenizer.pad_id))
        with torch.no_grad():
            hidden = trunk.eval().encode(batch, attention).last_hidden_state
        expected = hidden[0] if task == "token" else pool_tokens(hidden, content_mask(batch, attention, tokenizer),
                                                                 pool)[0]
        torch.testing.assert_close(torch.from_numpy(np.array(features[row])).reshape(expected.shape), expected,
                                   rtol=1e-5, atol=1e-5)
    assert features.values.shape[0] == (sum(map(len, token_ids)) if task == "token" else len(token_ids))


def test_a_frozen_head_on_cached_features_is_the_head_that_runs_the_trunk(pretrained, tmp_path, capsys):
    from biotf.finetune.finetune_run import train_task

    heads = {}
    for cache in ("true", "false"):
        cfg = finetune_config(pretrained, "data.label_column=label", "finetune.mode=frozen", "trainer.max_steps=20",
                              f"finetune.cache_features={cache}", f"data.cache_dir={tmp_path / 'cache'}",
                              "finetune.head_dropout=0.1")
        train_task(cfg, tmp_path / cache)
        heads[cache] = load_file(str(tmp_path / cache / "model" / "task_head.safetensors"))
    for name, tensor in heads["false"].items():
        torch.testing.assert_close(heads["true"][name], tensor, rtol=1e-4, atol=1e-5)
    assert "trunk features of 239 records computed in" in capsys.readouterr().err

    again = finetune_config(pretrained, "data.label_column=label", "finetune.mode=frozen", "trainer.max_steps=2",
                            f"data.cache_dir={tmp_path / 'cache'}")
    train_task(again, tmp_path / "again")
    assert "trunk features of 239 records read from" in capsys.readouterr().err

    [entry] = (tmp_path / "cache" / "trunk_features").iterdir()
    values = np.load(entry / VALUES_FILE)
    values[3, 5] += 1.0
    np.save(entry / VALUES_FILE, values)
    with pytest.raises(InputError, match="trunk feature cache .* is damaged"):
        train_task(again, tmp_path / "damaged")
    assert not (tmp_path / "damaged" / "model").exists()


def test_features_another_process_caches_meanwhile_are_taken(pretrained, tmp_path, monkeypatch):
    """Two processes computing one entry at once (the ranks of a distributed frozen run, two runs over one
    data.cache_dir): the one that publishes second takes the other's entry (same key, same values) instead of failing."""
    from biotf.finetune import features

    loaded = Model.load(pretrained / "base")
    model = TaskModel(loaded.network, "classification", 2, pool="mean")
    token_ids = [np.asarray(loaded.tokenizer.encode(s), np.int64) for s in SEQUENCES]
    compute = features.compute_features

    def another_process_first(*args):
        monkeypatch.setattr(features, "compute_features", compute)
        features.cached_features(model, loaded.tokenizer, token_ids, tmp_path)  # publishes the entry
        return compute(*args)

    monkeypatch.setattr(features, "compute_features", another_process_first)
    found, directory, cached = features.cached_features(model, loaded.tokenizer, token_ids, tmp_path)
    assert not cached and (directory / features.INFO_FILE).is_file()
    again, _, cached = features.cached_features(model, loaded.tokenizer, token_ids, tmp_path)
    assert cached
    np.testing.assert_array_equal(found.values, again.values)
    assert [path.name for path in tmp_path.joinpath("trunk_features").iterdir()] == [directory.name]  # no staging left
