"""Where the Hydra config tree and the data samples lie: biotf/conf and biotf/samples, which are the repository's
conf/ and data/ (symbolic links in a checkout, copies inside an installed wheel)."""

from __future__ import annotations

from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parent
CONF_DIR = PACKAGE_DIR / "conf"  # Hydra groups; conf/model/<name>.yaml is the one source of each preset
SAMPLES_DIR = PACKAGE_DIR / "samples"  # the small public data files the default configs train on
