"""The `biotf` command starts fast: building every subcommand's parser imports no heavy library."""

from __future__ import annotations

import subprocess
import sys

HEAVY = ("torch", "lightning", "pytorch_lightning", "hydra", "omegaconf", "transformers", "pandas", "matplotlib",
         "sklearn", "anndata", "Bio", "tokenizers")


def test_building_the_parsers_imports_no_heavy_library():
    code = ("import sys; from biotf.cli import build_parser; build_parser(); "
            f"print(sorted({{m.split('.')[0] for m in sys.modules}} & set({HEAVY!r})))")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "[]", result.stdout


def test_help_lists_every_command():
    result = subprocess.run([sys.executable, "-m", "biotf", "--help"], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    for command in ("tokenize", "train", "export-model", "embed", "score", "predict", "probe", "plot", "search",
                    "generate", "experiment", "compare"):
        assert command in result.stdout
