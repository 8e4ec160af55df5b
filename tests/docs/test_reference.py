"""The generated reference pages (docs/reference/cli.md, config.md) are what scripts/docs_reference.py writes from
the code now: a renamed option, a new config field or a new conf/ file without the docs following fails here.
Fix: `python scripts/docs_reference.py`."""

from __future__ import annotations

import argparse
import dataclasses
import importlib.util
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def load_generator():
    spec = importlib.util.spec_from_file_location("docs_reference", REPO / "scripts" / "docs_reference.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


generator = load_generator()


@pytest.mark.parametrize("name", sorted(generator.PAGES))
def test_the_committed_page_is_what_the_code_generates(name):
    committed = (REPO / "docs" / name).read_text(encoding="utf-8")
    assert committed == generator.PAGES[name](), f"docs/{name} is stale: run python scripts/docs_reference.py"


def every_parser(parser: argparse.ArgumentParser, prog: str = "biotf"):
    yield prog, parser
    for name, _, sub in generator.subcommands(parser):
        yield from every_parser(sub, f"{prog} {name}")


def test_every_subcommand_and_option_is_on_the_cli_page():
    from biotf.cli import COMMANDS, build_parser

    page = generator.cli_page()
    parsers = dict(every_parser(build_parser()))
    assert {prog.split()[1] for prog in parsers if prog != "biotf"} == {c.replace("_", "-") for c in COMMANDS}
    assert {"biotf contacts fit", "biotf generate evaluate", "biotf search query"} <= set(parsers)
    for prog, parser in parsers.items():
        if prog != "biotf":
            assert f"`{prog}`" in page
        for action in parser._actions:
            if not isinstance(action, (argparse._HelpAction, argparse._SubParsersAction)):
                assert generator.code(generator.option_name(action)) in page, (prog, action.option_strings)


def test_a_renamed_option_makes_the_cli_page_stale(monkeypatch):
    import biotf.cli

    build_parser = biotf.cli.build_parser

    def renamed():
        parser = build_parser()
        embed = {name: sub for name, _, sub in generator.subcommands(parser)}["embed"]
        action = next(a for a in embed._actions if "--batch-tokens" in a.option_strings)
        action.option_strings = ["--batch"]
        return parser

    assert "`--batch-tokens N`" in generator.cli_page().split("## `biotf embed`")[1].split("\n## ")[0]
    monkeypatch.setattr(biotf.cli, "build_parser", renamed)
    assert "reference/cli.md" in generator.stale_pages()
    section = generator.cli_page().split("## `biotf embed`")[1].split("\n## ")[0]
    assert "`--batch N`" in section and "--batch-tokens" not in section


def test_every_config_key_and_conf_file_is_on_the_config_page():
    from biotf.training.train_config import TrainConfig

    page = generator.config_page()

    def keys(schema, prefix=""):
        for f in dataclasses.fields(schema):
            key = f"{prefix}{f.name}"
            yield key
            default = generator.field_default(schema, f)
            sub = type(default) if dataclasses.is_dataclass(default) else generator.model_schema() if key == "model" \
                else None
            if sub is not None:
                yield from keys(sub, f"{key}.")

    for key in keys(TrainConfig):
        assert f"| `{key}` |" in page, key
    for path in (REPO / "conf").glob("*/*.yaml"):
        assert f"`{path.parent.name}={path.stem}`: conf/{path.parent.name}/{path.name}" in page, path


def test_allowed_values_come_from_the_validation():
    from biotf.model.config import TransformerConfig
    from biotf.training.train_config import TrainerConfig

    assert generator.allowed_values(TransformerConfig, "pos") == " | ".join(TransformerConfig.choices()["pos"])
    assert generator.allowed_values(TrainerConfig, "precision") == "32 | 32-true | bf16-mixed"
    assert generator.allowed_values(TrainerConfig, "max_steps") == "an integer >= 1"
    assert generator.allowed_values(TrainerConfig, "compile") == ""  # not checked: nothing claimed
