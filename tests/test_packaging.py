"""The wheel carries what an installed `biotf train` needs: the Hydra config tree, the data samples and the base
SMILES vocabulary; and the recipes beside the library, with MOSES's filters and the entry points of their commands."""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def test_the_wheel_ships_the_configs_and_the_samples(tmp_path):
    source = tmp_path / "source"  # built from a copy: the build writes build/ and *.egg-info beside the sources
    for folder in ("biotf", "biotf_recipes", "conf", "data"):  # biotf/conf and biotf/samples: links to ../conf, ../data
        shutil.copytree(REPO / folder, source / folder, symlinks=True, ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(REPO / name, source / name)
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w",
                    str(tmp_path / "dist"), str(source)], check=True, capture_output=True)
    (wheel,) = (tmp_path / "dist").glob("biotf-*.whl")
    shipped = set(zipfile.ZipFile(wheel).namelist())
    wanted = {f"biotf/{inside}/{path.relative_to(source / folder).as_posix()}"
              for folder, inside in (("conf", "conf"), ("data", "samples"))
              for path in (source / folder).rglob("*") if path.is_file()}
    assert "biotf/conf/model/esm2-8m.yaml" in wanted and "biotf/samples/deeploc_our_val_set.fasta" in wanted
    assert wanted - shipped == set()
    assert "biotf/tokenizers/smiles_vocabulary.txt" in shipped  # every new SMILES tokenizer starts from it
    assert "biotf_recipes/moses/mcf.csv" in shipped  # MOSES's filters metric reads it
    assert {f"biotf_recipes/{path.relative_to(source / 'biotf_recipes').as_posix()}"  # the recipes beside the library
            for path in (source / "biotf_recipes").rglob("*.py")} - shipped == set()
    (metadata,) = [name for name in shipped if name.endswith(".dist-info/entry_points.txt")]
    commands = zipfile.ZipFile(wheel).read(metadata).decode().split("[biotf.commands]\n", 1)[1].split("\n[", 1)[0]
    assert set(commands.split("\n")) - {""} == {  # what `biotf` finds the recipes' commands by (biotf.added_commands)
        "tokens = biotf_recipes.commands.tokens", "experiment = biotf_recipes.commands.experiment",
        "compare = biotf_recipes.commands.compare", "generate evaluate = biotf_recipes.commands.generate_evaluate"}
