"""Files shipped inside the package (package data in pyproject.toml), found from the package itself so that
an installed wheel works outside the repository: the Hydra config tree and the sample data."""

from __future__ import annotations

from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parent
CONF_DIR = PACKAGE_DIR / "conf"  # Hydra groups; conf/model/<name>.yaml is the one source of each preset
SAMPLES_DIR = PACKAGE_DIR / "samples"  # the small public data files the default configs train on
