"""Tests mirror the library: every module of `biotf/` (commands aside: `tests/commands/` and the command tests test
them) has a test file of its name (`biotf/io/fasta.py` -> a `tests/**/test_fasta.py`), or an entry naming the test
file that tests it: `TESTED_IN` (that file names the module or one of its names) or `EXERCISED_BY` (that file runs it
through a command or its package, and how). The recipes beside the library (`biotf_recipes/`, tested under
`tests/recipes/`) follow the same rule with their own two tables."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LIBRARY, RECIPES, TESTS = ROOT / "biotf", ROOT / "biotf_recipes", ROOT / "tests"

# Modules whose tests live in a file named after something else, and that file (under tests/).
TESTED_IN = {
    "__main__.py": "commands/test_cli.py",
    "analysis/probe_labels.py": "analysis/test_analysis_probe.py",
    "analysis/search/agreement.py": "analysis/test_analysis_search.py",
    "analysis/search/classical.py": "analysis/test_analysis_search.py",
    "analysis/search/expression.py": "analysis/test_analysis_search.py",
    "analysis/search/index.py": "analysis/test_analysis_search.py",
    "analysis/search/neighbours.py": "analysis/test_analysis_search.py",
    "analysis/search/query.py": "analysis/test_analysis_search.py",
    "checkpoint/digest.py": "model/test_contacts.py",
    "checkpoint/format.py": "checkpoint/test_checkpoint.py",
    "checkpoint/hf_directory.py": "inference/test_hf_checkpoint.py",
    "checkpoint/store.py": "checkpoint/test_checkpoint.py",
    "checkpoint/stored_model.py": "checkpoint/test_checkpoint.py",
    "checkpoint/task_export.py": "finetune/test_finetune_export.py",
    "checkpoint/task_model.py": "checkpoint/test_checkpoint.py",
    "conventions.py": "commands/test_sharded_launch.py",
    "data/labels.py": "analysis/test_plot.py",
    "data/windows.py": "export/test_export_embed.py",
    "devices.py": "reliability/test_api_arguments.py",
    "entry/train.py": "training/test_training_multinode.py",
    "finetune/finetune_run.py": "commands/test_esmc_jobs.py",
    "finetune/labelled.py": "finetune/test_finetune.py",
    "finetune/task_module.py": "finetune/test_finetune.py",
    "inference/chat.py": "inference/test_generate.py",
    "inference/fast/decoding.py": "inference/test_fast_decoding.py",
    "inference/fast/layout.py": "inference/test_fast_decoding.py",
    "inference/fast/linear.py": "inference/test_fast_decoding.py",
    "inference/fast/plan.py": "inference/test_fast_decoding.py",
    "inference/generate_job.py": "test_naming.py",
    "inference/generation.py": "inference/test_generate.py",
    "inference/pretrained.py": "inference/test_hf_checkpoint.py",
    "inference/validity.py": "inference/test_smiles_clm.py",
    "model/attention.py": "model/test_attention_mask.py",
    "model/block.py": "finetune/test_finetune.py",
    "model/heads.py": "model/test_tasks.py",
    "model/hf/bert.py": "model/test_hf_bert.py",
    "model/hf/encoder.py": "export/test_hf_encoders.py",
    "model/hf/esmc.py": "model/test_hf_esmc.py",
    "model/hf/llama.py": "model/test_hf_decoders.py",
    "model/hf/weights.py": "reliability/test_safe_loading.py",
    "model/int8.py": "model/test_precision.py",
    "model/mlp.py": "model/test_hf_esmc.py",
    "model/modes.py": "finetune/test_finetune.py",
    "scoring/assays.py": "scoring/test_score_proteingym.py",
    "structure/contact_files.py": "structure/test_contacts_command.py",
    "structure/contact_precision.py": "structure/test_fit_evaluate.py",
    "structure/fit.py": "structure/test_fit_evaluate.py",
    "tokenizers/base.py": "commands/test_tokenize.py",
    "tokenizers/build.py": "tokenizers/test_interface.py",
    "training/callbacks.py": "training/test_training_rundir.py",
    "training/fit_progress.py": "training/test_console.py",
    "training/hints.py": "training/test_printed_commands.py",
    "training/module.py": "reliability/test_faults.py",
    "training/optim.py": "training/test_training_units.py",
    "training/run.py": "checkpoint/test_checkpoint.py",
    "training/rundir.py": "finetune/test_finetune_resume.py",
    "training/summary.py": "training/test_printed_commands.py",
}

# Modules exercised only through a command or their package (no test names them), the test file that does, and how.
EXERCISED_BY = {
    "export/embed_job.py": ("commands/test_embed.py", "biotf embed's job (embed_file)"),
    "export/pooling.py": ("export/test_export_embed.py", "the pooling of every embedding"),
    "export/sentence_transformers.py": ("commands/test_embed_sentence_transformers.py", "embed of such directories"),
    "finetune/batches.py": ("finetune/test_finetune.py", "the batches of every fine-tuning run"),
    "inference/fast/products.py": ("inference/test_fast_decoding.py", "the decoding plan's matrix products"),
    "model/hf/albert.py": ("model/test_hf_t5_albert.py", "ALBERT directories read, against transformers"),
    "model/hf/bloom.py": ("model/test_hf_decoders.py", "the BLOOM family, read and written"),
    "model/hf/convert.py": ("commands/test_export_model_hf.py", "biotf export-model --hf"),
    "model/hf/esm.py": ("inference/test_esm_checkpoint.py", "ESM-2 directories read"),
    "model/hf/families.py": ("model/test_hf_decoders.py", "the table of Hugging Face families"),
    "model/hf/family.py": ("model/test_hf_decoders.py", "each Hugging Face family's reader"),
    "model/hf/gpt2.py": ("model/test_hf_decoders.py", "the GPT-2 family, read and written"),
    "model/hf/t5.py": ("model/test_hf_t5_albert.py", "T5 encoders read and written, against transformers"),
    "scoring/baselines.py": ("scoring/test_score_command.py", "biotf score's substitution baseline"),
    "scoring/score_job.py": ("scoring/test_score_command.py", "biotf score's job (score_file)"),
    "scoring/variant_files.py": ("scoring/test_mutations.py", "variant files read by biotf score"),
    "structure/formats.py": ("structure/test_contacts_command.py", "the contact-map files biotf contacts writes"),
    "tokenizers/_arrays.py": ("tokenizers/test_interface.py", "the array helpers of every tokenizer"),
    "tokenizers/vocabulary.py": ("tokenizers/test_hf_tokenizer_directory.py", "Hugging Face vocabularies read"),
    "training/datamodule.py": ("training/test_training_run.py", "the data of every training run"),
    "training/finetune_config.py": ("finetune/test_finetune.py", "fine-tuning configs"),
    "training/resumable.py": ("training/test_training_rundir.py", "every resume's check of its checkpoint"),
    "training/sharding.py": ("training/test_training_fsdp.py", "every trainer.strategy=fsdp run (FSDP2 on gloo)"),
    "training/metrics_log.py": ("training/test_training_run.py", "metrics.csv of every run"),
}

# The recipes' modules (relative to biotf_recipes/) tested in a file named after something else, or exercised only
# through their command.
RECIPES_TESTED_IN = {
    "experiments/annotation_anchors.py": "recipes/experiments/test_annotation_scores.py",
    "moses/chemnet.py": "recipes/moses/test_moses_metrics.py",
    "moses/filters.py": "recipes/moses/test_moses_metrics.py",
    "moses/metrics.py": "recipes/moses/test_moses_metrics.py",
    "scales.py": "recipes/test_tokens.py",
}
RECIPES_EXERCISED_BY = {
    "moses/benchmark.py": ("recipes/moses/test_moses_command.py", "biotf generate evaluate"),
}
# Each package's root and its two tables.
PACKAGES = {"biotf": (LIBRARY, TESTED_IN, EXERCISED_BY),
            "biotf_recipes": (RECIPES, RECIPES_TESTED_IN, RECIPES_EXERCISED_BY)}


def library_modules(package: Path = LIBRARY) -> list[str]:
    return sorted(path.relative_to(package).as_posix() for path in package.rglob("*.py")
                  if path.name != "__init__.py" and path.relative_to(package).parts[0] != "commands")


def named_test_files() -> set[str]:
    return {path.name for path in TESTS.rglob("test_*.py")}


def uses(test_file: Path, module: str, package: Path = LIBRARY) -> bool:
    """Whether `test_file` names `module` of `package` (its dotted path) or one of its public top-level names."""
    text = test_file.read_text(encoding="utf-8")
    dotted = f"{package.name}." + module.removesuffix(".py").replace("/", ".")
    if dotted in text or module == "__main__.py":
        return True
    tree = ast.parse((package / module).read_text(encoding="utf-8"))
    names = [node.name for node in tree.body if isinstance(node, (ast.FunctionDef, ast.ClassDef))]
    names += [target.id for node in tree.body if isinstance(node, ast.Assign) for target in node.targets
              if isinstance(target, ast.Name)]
    return any(re.search(rf"\b{re.escape(name)}\b", text) for name in names if not name.startswith("__"))


@pytest.mark.parametrize("name", PACKAGES)
def test_every_library_module_has_its_test_file_or_names_the_one_that_tests_it(name):
    package, tested_in, exercised_by = PACKAGES[name]
    named = named_test_files()
    untested = [module for module in library_modules(package)
                if f"test_{Path(module).stem}.py" not in named and module not in tested_in | exercised_by]
    assert untested == []


@pytest.mark.parametrize("name", PACKAGES)
def test_every_stated_test_file_exists_uses_its_module_and_is_still_needed(name):
    package, tested_in, exercised_by = PACKAGES[name]
    named, stated = named_test_files(), {**tested_in, **{module: test for module, (test, _) in exercised_by.items()}}
    assert [module for module in stated if not (package / module).is_file()] == []  # a module gone: drop its entry
    assert [module for module in stated if f"test_{Path(module).stem}.py" in named] == []  # it has its own now
    assert [test for test in stated.values() if not (TESTS / test).is_file()] == []
    assert [f"{module}: {test}" for module, test in tested_in.items() if not uses(TESTS / test, module, package)] == []


def test_no_two_library_modules_share_a_name():
    """A module's name says what it holds, so no two library modules share one, nor a recipe's module one of the
    library's. Command modules keep their verb (`commands/embed.py` beside `export/embed.py`), as does the entry point
    of `python train.py` (`entry/train.py`)."""
    by_name: dict[str, list[str]] = {}
    for package in (LIBRARY, RECIPES):
        for path in package.rglob("*.py"):
            relative = path.relative_to(package)
            if path.name != "__init__.py" and relative.parts[0] not in ("commands", "entry"):
                by_name.setdefault(path.name, []).append(f"{package.name}/{relative.as_posix()}")
    assert {name: paths for name, paths in by_name.items() if len(paths) > 1} == {}
