"""What a run prints: plain progress lines when stdout is not a terminal (no tqdm escape codes in a log), a bar on a
terminal or when asked for, and none of Lightning's per-run notices. Pretraining and fine-tuning alike."""

from __future__ import annotations

import io
import logging
import re

import pytest
from lightning.pytorch.callbacks import TQDMProgressBar

from biotf.errors import ConfigError
from biotf.entry import train as entry
from biotf.training.train_config import TrainerConfig
from biotf.training.fit_progress import ProgressLines, progress_form
from biotf.training.run import build_trainer
from training_helpers import TINY, finetune_overrides, run_script, write_proteins

LIGHTNING_NOTICES = ["GPU available", "TPU available", "litlogger", "limit_val_batches", "`Trainer.fit` stopped"]
WITH_PROGRESS = [o for o in TINY if not o.startswith("trainer.enable_progress_bar=")]  # TINY turns it off


def assert_quiet_plain_output(text: str) -> None:
    assert "\x1b[" not in text and "\r" not in text, repr(text[:500])
    assert not [notice for notice in LIGHTNING_NOTICES if notice in text], text


@pytest.mark.slow
def test_a_piped_training_run_prints_plain_lines_and_no_lightning_notices(tmp_path):
    fasta = write_proteins(tmp_path / "proteins.fasta")
    result = run_script([*WITH_PROGRESS, "trainer.limit_val_batches=1.0", f"data.path={fasta}",
                         f"data.cache_dir={tmp_path / 'cache'}", f"hydra.run.dir={tmp_path / 'run'}"], cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    assert_quiet_plain_output(result.stdout + result.stderr)
    progress = [line for line in result.stdout.splitlines() if line.startswith("step ")]
    # after the first step, after each validation (every 2 steps) and never twice for one step
    assert [line.split("  ")[0] for line in progress] == ["step 1/4 (25%)", "step 2/4 (50%)", "step 4/4 (100%)"]
    numbers = r"train/loss \d\.\d+  train/tokens_per_s [\d,]+  val/loss \d\.\d+"
    assert re.fullmatch(rf"step 4/4 \(100%\)  {numbers}  \d+m\d\ds", progress[-1]), progress[-1]
    assert len(result.stdout) + len(result.stderr) < 4000


@pytest.mark.slow
def test_a_piped_fine_tuning_run_prints_plain_lines_and_no_lightning_notices(pretrained, tmp_path):
    overrides = [o for o in finetune_overrides(pretrained, "data.label_column=label", "trainer.max_steps=4",
                                               "trainer.val_check_interval=2")
                 if not o.startswith("trainer.enable_progress_bar=")]
    result = run_script([*overrides, f"hydra.run.dir={tmp_path / 'run'}"], cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    assert_quiet_plain_output(result.stdout + result.stderr)
    assert [line.split("  ")[0] for line in result.stdout.splitlines() if line.startswith("step ")] == [
        "step 1/4 (25%)", "step 2/4 (50%)", "step 4/4 (100%)"]


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_auto_draws_a_bar_on_a_terminal_and_lines_elsewhere():
    assert progress_form("auto", Terminal()) == "bar" and progress_form("auto", io.StringIO()) == "lines"
    assert progress_form("bar", io.StringIO()) == "bar" and progress_form("lines", Terminal()) == "lines"


@pytest.mark.parametrize("settings, expected", [({"progress": "bar"}, TQDMProgressBar),
                                                ({"progress": "lines"}, ProgressLines),
                                                ({"progress": "bar", "enable_progress_bar": False}, None)])
def test_the_trainer_gets_the_progress_asked_for(tmp_path, settings, expected):
    trainer = build_trainer(TrainerConfig(accelerator="cpu", **settings), tmp_path)
    shown = [c for c in trainer.callbacks if isinstance(c, (TQDMProgressBar, ProgressLines))]
    assert [type(c) for c in shown] == ([expected] if expected else [])
    # Lightning adds a bar of its own unless told there is none
    assert (trainer.progress_bar_callback is not None) == (expected is TQDMProgressBar)


def test_an_unknown_progress_form_is_refused_at_construction():
    with pytest.raises(ConfigError, match=r"trainer.progress='dots' \(allowed: auto \| bar \| lines\)"):
        TrainerConfig(progress="dots")


def test_lightning_logging_is_left_as_it_was_after_a_run(tmp_path, cache_dir):
    logger = logging.getLogger("lightning.pytorch")
    before = logger.level
    fasta = write_proteins(tmp_path / "proteins.fasta")
    assert entry.main([*TINY, "trainer.max_steps=1", f"data.path={fasta}", f"data.cache_dir={cache_dir}",
                       f"hydra.run.dir={tmp_path / 'run'}"]) == 0
    assert logger.level == before
