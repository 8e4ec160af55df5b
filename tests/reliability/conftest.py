"""Reliability tests: the long fuzz runs are opt-in (`pytest -m fuzz`); everything else is fast."""

from __future__ import annotations

from pathlib import Path

import pytest


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Skip `fuzz` tests unless the marker expression asks for them."""
    if "fuzz" in (config.option.markexpr or ""):
        return
    skip = pytest.mark.skip(reason="long fuzz run: opt in with `pytest -m fuzz`")
    for item in items:
        if item.get_closest_marker("fuzz"):
            item.add_marker(skip)



@pytest.fixture(scope="session")
def classifier_dir(tmp_path_factory, model_dir) -> Path:
    """model_dir's trunk with an untrained two-class head, exported as fine-tuning exports it: enough for predict."""
    from biotf.api import Model
    from biotf.checkpoint.task_model import TaskInfo, save_task_model
    from biotf.model.heads import TaskModel

    loaded = Model.load(model_dir)
    trunk, tokenizer = loaded.network, loaded.tokenizer
    info = TaskInfo("classification", ["no", "yes"], "mean", max_length=64, long_policy="crop")
    return save_task_model(TaskModel(trunk, "classification", 2, pool="mean"), tokenizer, info,
                           tmp_path_factory.mktemp("models") / "classifier")
