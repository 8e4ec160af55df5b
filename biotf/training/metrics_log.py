"""metrics.csv continued across resumes: Lightning's CSVLogger deletes an existing file when it starts."""

from __future__ import annotations

import csv
from pathlib import Path

from lightning.pytorch.loggers import CSVLogger
from lightning.pytorch.loggers.csv_logs import ExperimentWriter
from lightning.pytorch.loggers.logger import rank_zero_experiment


class _ContinuingWriter(ExperimentWriter):
    """Lightning's CSV writer deletes an existing metrics.csv when it starts; a resumed run appends to it."""

    def _check_log_dir_exists(self) -> None:
        path = Path(self.metrics_file_path)
        if path.is_file():
            with open(path, newline="", encoding="utf-8") as handle:
                self.metrics_keys = next(csv.reader(handle), [])


class RunCSVLogger(CSVLogger):
    """`run_dir/metrics.csv`, continued across resumes (Lightning's CSVLogger would start it afresh)."""

    def __init__(self, run_dir: str | Path):
        super().__init__(save_dir=run_dir, name="", version="")

    @property
    @rank_zero_experiment
    def experiment(self) -> ExperimentWriter:
        if self._experiment is None:
            self._experiment = _ContinuingWriter(log_dir=self.log_dir)
        return self._experiment
