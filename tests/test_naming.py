"""`biotf.naming`: the library names a parameter by its Python name; under `biotf.cli` by the command's flag."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from biotf.cli import build_parser, command_flags
from biotf.errors import ConfigError
from biotf.inference.generate_job import GenerateRequest
from biotf.naming import Parameter, flags, parameter, parameters


def test_a_python_caller_reads_parameter_names():
    assert parameter("top_k") == "top_k" and isinstance(parameter("top_k"), Parameter)
    assert parameters("ids", "expression") == "ids|expression"
    assert str(ConfigError(parameter("limit"), -1, "an integer >= 1")) == "invalid limit=-1 (allowed: an integer >= 1)"
    assert str(ConfigError(parameter("output"), None, required_with=parameter("num_samples"))) == \
        "output is required with num_samples"
    assert str(ConfigError("model.pos", "x")) == "invalid config model.pos='x'"  # a config key stays one


def test_within_flags_a_parameter_is_the_parsers_flag_or_argparses_rule():
    with flags({"top_k": "--top-k", "limit": "-n"}):
        assert parameter("top_k") == "--top-k" and parameter("limit") == "-n"
        assert parameter("max_new_tokens") == "--max-new-tokens"
        assert parameters("ids", "input") == "--ids|--input"
        assert str(ConfigError(parameter("top_k"), -1)) == "invalid --top-k=-1"
    assert parameter("top_k") == "top_k"


@pytest.mark.parametrize(("request_", "message"), [
    (GenerateRequest("m", prompt="Hi", system="S"), "invalid system='S': a system prompt needs chat"),
    (GenerateRequest("m", prompt="Hi", top_k=-1), "invalid top_k=-1"),
    (GenerateRequest("m", num_samples=3), "output is required with num_samples"),
    (GenerateRequest("m"), "prompt is required: give prompt, prompt_file, or num_samples N output FILE"),
    (GenerateRequest("m", prompt="C", output="x.fasta"),
     "invalid output='x.fasta': it belongs to drawing samples: give num_samples N"),
])
def test_a_generate_request_names_its_fields(request_, message):
    with pytest.raises(ConfigError) as caught:
        request_.check()
    assert str(caught.value).startswith(message)
    assert "--" not in str(caught.value)


def test_command_flags_follow_the_chosen_subcommand():
    parser = build_parser()
    query = command_flags(parser, parser.parse_args(["search", "query", "--index", "i", "--output", "o"]))
    assert query["index"] == "--index" and query["k"] == "-k" and "top_k" not in query  # the parser's own flags
    generate = command_flags(parser, parser.parse_args(["generate", "--model", "m"]))
    assert generate["top_k"] == "--top-k" and generate["no_progress"] == "--no-progress"


def test_a_search_query_names_its_parameters_to_python_and_its_flags_to_the_command(tmp_path, capsys):
    from biotf.analysis.search.query import check_query
    from biotf.cli import main

    with pytest.raises(ConfigError) as caught:
        check_query(None, ["a + b"], tmp_path / "q.fasta", "m", 10, None, tmp_path / "hits.tsv")
    assert str(caught.value) == ("invalid ids|expressions|input_path='expressions and input_path': give exactly one "
                                 "query form (allowed: ids, expressions or input_path)")
    assert main(["search", "query", "--index", str(tmp_path), "--expression", "a + b", "--input",
                 str(tmp_path / "q.fasta"), "--output", str(tmp_path / "hits.tsv")]) == 2
    assert capsys.readouterr().err == ("biotf search query: error: invalid --ids|--expression|--input='--expression and "
                                       "--input': give exactly one query form (allowed: --ids, --expression or "
                                       "--input)\n")
    assert main(["search", "query", "--index", str(tmp_path), "--ids", "a", "-k", "0", "--output",
                 str(tmp_path / "hits.tsv")]) == 2
    assert capsys.readouterr().err == "biotf search query: error: invalid -k=0 (allowed: an integer >= 1)\n"


def test_a_field_within_a_parameter_reads_as_its_flag_and_name(tmp_path, capsys):
    from biotf.cli import main

    assert main(["experiment", "genome-annotation", "--set", "train_context=4k", "--out", str(tmp_path)]) == 2
    assert capsys.readouterr().err.startswith("biotf experiment: error: invalid --set train_context='4k'")
    assert main(["experiment", "extrapolation", "--set", "train_context=5", "--out", str(tmp_path)]) == 2
    assert capsys.readouterr().err.startswith("biotf experiment: error: invalid --set / overrides='train_context'")
    assert main(["compare", str(tmp_path), "--out", str(tmp_path / "report.txt")]) == 2
    assert "error: --out " in capsys.readouterr().err


LIBRARY = Path(__file__).resolve().parents[1] / "biotf"
RECIPES = LIBRARY.parent / "biotf_recipes"
FLAG = re.compile(r"(?<![\w-])--[a-z][a-z0-9-]*")
# Modules outside the command line that may spell a flag, and why.
SPELLS_FLAGS = {
    "training/hints.py": "its text is whole command lines for the user to paste (what to run next)",
}


def flag_literals(path: Path) -> list[str]:
    """`line: text` of each string literal (docstrings aside) in `path` that holds a `--flag`."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    docstrings = {id(node.body[0].value) for node in ast.walk(tree)
                  if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
                  and node.body and isinstance(node.body[0], ast.Expr) and isinstance(node.body[0].value, ast.Constant)}
    return [f"{node.lineno}: {node.value!r}" for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings
            and FLAG.search(node.value)]


def test_no_library_module_spells_a_flag():
    """Only `biotf/cli.py` and `biotf/commands/` know the command line; the library names `parameter(...)`. The
    recipes beside it (`biotf_recipes/`) keep the same rule: their flags are in `biotf_recipes/commands/` only."""
    found = {}
    for package in (LIBRARY, RECIPES):
        for path in sorted(package.rglob("*.py")):
            inside = path.relative_to(package)
            relative = inside.as_posix() if package == LIBRARY else f"{package.name}/{inside.as_posix()}"
            if relative == "cli.py" or inside.parts[0] == "commands" or relative in SPELLS_FLAGS:
                continue
            if literals := flag_literals(path):
                found[relative] = literals
    assert found == {}
    assert all(flag_literals(LIBRARY / relative) for relative in SPELLS_FLAGS)  # an exemption still needed


def test_the_flag_check_finds_a_flag_in_an_f_string_and_not_in_a_docstring(tmp_path):
    module = tmp_path / "m.py"
    module.write_text('"""Use --flag here."""\n\ndef f(x):\n    """--doc"""\n'
                      '    return f"pass --top-k {x}", "a-b--c"\n')
    assert flag_literals(module) == ["5: 'pass --top-k '"]
