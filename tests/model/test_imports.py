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


def test_loading_and_embedding_with_a_checkpoint_never_imports_torch_dynamo(esm2_checkpoint):
    """Building a checkpoint's model on the meta device ran torch's Python references (normal_, a division), which
    import torch._dynamo: as long again as importing torch, for a job that compiles nothing."""
    directory, _ = esm2_checkpoint
    code = ("import sys, biotf; model = biotf.Model.load(sys.argv[1]); model.embed(['MKTAYIAKQR']); "
            "model.score(['MKTAYIAKQR']); print(sorted(m for m in sys.modules if m.startswith('torch._dynamo')))")
    result = subprocess.run([sys.executable, "-c", code, str(directory)], capture_output=True, text=True)
    assert result.returncode == 0 and result.stdout.strip() == "[]", result.stdout + result.stderr
