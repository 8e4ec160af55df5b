"""The model package is torch only: importing it pulls in nothing from Lightning, Hydra or transformers."""

from __future__ import annotations

import subprocess
import sys


def test_model_package_imports_no_lightning_hydra_or_transformers():
    code = ("import sys, biotf.model, biotf.model.hf; "
            "bad = sorted(m for m in sys.modules if m.split('.')[0] in "
            "{'lightning', 'pytorch_lightning', 'lightning_fabric', 'hydra', 'omegaconf', 'transformers'}); "
            "print(bad); sys.exit(1 if bad else 0)")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr
