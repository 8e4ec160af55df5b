"""Every ```bash and ```python block of the documentation runs here, as a reader would type it, unless an HTML
comment on the line above says why not:

    <!-- not run: needs a GPU -->          the block is skipped, and the reason is the skip's
    <!-- exit status: 2 -->                the block runs and must end with that status (a refusal shown on purpose)

```text (output), ```yaml and blocks without a language are never run. Pages: docs/**/*.md and README.md
(README_BLOCKS_COVERED).

Each page's blocks run in order in one temporary directory (files and a Python namespace carry from block to block,
as in a reader's session). What differs between a reader's checkout and this test, and how it is substituted:
- the directory holds links to the checkout's `train.py`, `conf/`, `data/` and `scripts/`, so relative paths work,
  and its `.cache/` is one for every page, so the token cache of the shipped samples is built once;
- `python`, `.venv/bin/python` and `biotf` (`.venv/bin/biotf`) are this interpreter and `python -m biotf`, with
  PYTHONPATH the checkout, so the checkout's biotf runs;
- `../shared` is the checkout's ../shared (the real data sets beside it);
- a placeholder run `outputs/<name>/<...>` (e.g. `outputs/protein_mlm/<run>`) is a tiny saved protein model built
  here (tests/tiny_models.py);
- a page of `SHORTENED` reads a shortened copy of a long input and trains for a few steps (`shortened`): the long
  DNA tutorial's 154 kb chloroplast is its first `SHORT_GENOME_BASES` bases.
A bash block runs under `bash -e -o pipefail`, a Python block through `exec`.

Besides running them, every bash block (marked or not, README.md's too) is read for `biotf COMMAND --flag` and
`train.py KEY=VALUE`: an option the parsers lack, a config key the schema lacks or a group option with no file in
conf/ fails here, so a renamed option breaks a test even where its block cannot run.
"""

from __future__ import annotations

import argparse
import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SHARED = REPO.parent / "shared"
README_BLOCKS_COVERED = True  # README.md's blocks run here, or say above them why not
BASH, PYTHON = {"bash", "sh", "shell"}, {"python", "py"}
LINKED = ("train.py", "conf", "data", "scripts")
MARKER = re.compile(r"<!--\s*(not run|exit status)\s*:?\s*(.*?)\s*-->")
PLACEHOLDER_RUN = re.compile(r"outputs/[\w.-]+/<[^>\s]+>")
TIMEOUT_S = 600


@dataclass(frozen=True)
class Block:
    page: str  # relative to the repository
    line: int  # of the opening fence, 1-based
    language: str
    text: str
    skip: str | None = None  # the reason it is not run
    status: int = 0  # the exit status it must end with

    @property
    def name(self) -> str:
        return f"{self.page}:{self.line}"


def blocks_of(text: str, page: str) -> list[Block]:
    """The bash and Python blocks of a Markdown page, each with what the comment above it says. A marker without a
    reason, or with an exit status that is not a number, is a ValueError naming the line."""
    lines, found, i = text.splitlines(), [], 0
    while i < len(lines):
        opening = re.match(r"(\s*)(`{3,})\s*([\w+-]*)", lines[i])
        if not opening:
            i += 1
            continue
        indent, fence, language = opening.groups()
        end = next((j for j in range(i + 1, len(lines)) if lines[j].strip() == fence), len(lines))
        body = "\n".join(line[len(indent):] for line in lines[i + 1:end])
        if language.lower() in BASH | PYTHON:
            above = next((lines[j].strip() for j in range(i - 1, -1, -1) if lines[j].strip()), "")
            marker, skip, status = MARKER.fullmatch(above), None, 0
            if marker and not marker.group(2):
                raise ValueError(f"{page}:{i + 1}: a `{marker.group(1)}` marker needs a reason or status")
            if marker and marker.group(1) == "not run":
                skip = marker.group(2)
            elif marker:
                if not marker.group(2).isdigit():
                    raise ValueError(f"{page}:{i + 1}: exit status {marker.group(2)!r} is not a number")
                status = int(marker.group(2))
            found.append(Block(page, i + 1, "bash" if language.lower() in BASH else "python", body, skip, status))
        i = end + 1
    return found


def pages() -> list[Path]:
    found = sorted((REPO / "docs").rglob("*.md"))
    return found + [REPO / "README.md"] if README_BLOCKS_COVERED else found


def collect(paths: list[Path]) -> list[Block]:
    return [block for path in paths for block in blocks_of(path.read_text(encoding="utf-8"),
                                                            str(path.relative_to(REPO)))]


BLOCKS = collect(pages())


# --- running ------------------------------------------------------------------------------------------------------
@dataclass
class Session:
    """One page's directory and Python namespace, and how many of its blocks have run."""

    directory: Path
    namespace: dict = field(default_factory=lambda: {"__name__": "__main__"})
    done: int = 0


SESSIONS: dict[str, Session] = {}


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory) -> Path:
    from tiny_models import save_tiny_protein_model

    return save_tiny_protein_model(tmp_path_factory.mktemp("docs-tiny-model") / "model")


def substituted(text: str, model: Path) -> str:
    """The block as it runs here (see the module docstring)."""
    text = text.replace(".venv/bin/python", "python").replace(".venv/bin/biotf", "biotf")
    return PLACEHOLDER_RUN.sub(str(model), text.replace("../shared", str(SHARED)))


PRELUDE = f"""set -e -o pipefail
python() {{ "$BIOTF_DOCS_PYTHON" "$@"; }}
biotf() {{ "$BIOTF_DOCS_PYTHON" -m biotf "$@"; }}
export -f python biotf
"""


GENOME = "data/biopython_NC_000932_Athaliana_chloroplast.gb"
SHORT_GENOME_BASES = 4000
SHORTENED = {"docs/tutorials/long_dna.md"}


def shortened(text: str, directory: Path) -> str:
    """The block on the genome's first `SHORT_GENOME_BASES` bases (a FASTA written once into the page's directory),
    training for 2 steps."""
    short = directory / "chloroplast_start.fasta"
    if not short.exists():
        from biotf.io import read_records

        (genome,) = read_records(REPO / GENOME)
        short.write_text(f">{genome.id}\n{genome.sequence[:SHORT_GENOME_BASES]}\n")
    return re.sub(r"trainer\.max_steps=\d+", "trainer.max_steps=2", text.replace(GENOME, short.name))


def run_block(block: Block, session: Session, model: Path) -> None:
    text = substituted(block.text, model)
    if block.page in SHORTENED:
        text = shortened(text, session.directory)
    if block.language == "python":
        cwd = os.getcwd()
        os.chdir(session.directory)
        try:
            exec(compile(text, block.name, "exec"), session.namespace)
        finally:
            os.chdir(cwd)
        return
    environment = {**os.environ, "BIOTF_DOCS_PYTHON": sys.executable,
                   "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    done = subprocess.run(["bash", "-c", PRELUDE + text], cwd=session.directory, env=environment, text=True,
                          capture_output=True, timeout=TIMEOUT_S)
    assert done.returncode == block.status, (
        f"{block.name} exited with status {done.returncode}, not {block.status}:\n{text}\n"
        f"--- stdout\n{done.stdout[-4000:]}\n--- stderr\n{done.stderr[-4000:]}")


def session_of(page: str, root: Path) -> Session:
    if page not in SESSIONS:
        directory = root / re.sub(r"\W", "_", page)
        directory.mkdir(parents=True)
        for name in LINKED:
            (directory / name).symlink_to(REPO / name)
        (root / ".cache").mkdir(exist_ok=True)
        (directory / ".cache").symlink_to(root / ".cache")
        SESSIONS[page] = Session(directory)
    return SESSIONS[page]


@pytest.fixture(scope="session")
def pages_root(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("docs-pages")


def trains(block: Block) -> bool:
    return "train.py" in block.text or re.search(r"\bbiotf train\b", block.text) is not None


@pytest.mark.parametrize("block", [pytest.param(b, marks=pytest.mark.slow) if trains(b) else b for b in BLOCKS],
                         ids=[block.name for block in BLOCKS])
def test_block_runs(block: Block, pages_root: Path, tiny_model: Path):
    if block.skip:
        pytest.skip(f"not run: {block.skip}")
    page = [b for b in BLOCKS if b.page == block.page]
    session = session_of(block.page, pages_root)
    for earlier in page[session.done:page.index(block) + 1]:  # a page's blocks build on the ones before
        if not earlier.skip:
            run_block(earlier, session, tiny_model)
        session.done += 1


# --- options named in bash blocks --------------------------------------------------------------------------------
def commands_of(text: str) -> list[list[str]]:
    """The words of each command of a bash block: continuation lines joined, comments dropped, split at line ends,
    `&&`, `;`, `|` and redirections."""
    commands = []
    for line in text.replace("\\\n", " ").splitlines():
        lexer = shlex.shlex(line, posix=True, punctuation_chars=";&|<>()")
        lexer.whitespace_split, lexer.commenters = True, "#"
        current: list[str] = []
        try:
            for word in lexer:
                if word and set(word) <= set(";&|<>()"):
                    commands.append(current)
                    current = []
                else:
                    current.append(word)
        except ValueError:  # an unclosed quote in a line shown as a fragment: check what was read
            pass
        commands.append(current)
    return [command for command in commands if command]


def option_strings(parser: argparse.ArgumentParser) -> set[str]:
    return {name for action in parser._actions for name in action.option_strings}


def subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    return {name: sub for action in parser._actions if isinstance(action, argparse._SubParsersAction)
            for name, sub in action.choices.items()}


def override_problems(words: list[str]) -> list[str]:
    from biotf.errors import ConfigError
    from biotf.training.config import check_key

    problems = []
    for word in words:
        key, equals, value = word.partition("=")
        if not equals or word.startswith(("-", "+", "~")) or key.startswith("hydra.") or not re.fullmatch(
                r"[\w.]+", key):
            continue
        try:
            check_key(key, value)
        except ConfigError as error:
            problems.append(str(error))
            continue
        if (REPO / "conf" / key).is_dir() and re.fullmatch(r"[\w.-]+", value) \
                and not (REPO / "conf" / key / f"{value}.yaml").is_file():
            problems.append(f"{key}={value}: no conf/{key}/{value}.yaml")
    return problems


def option_problems(text: str) -> list[str]:
    """What in a bash block names an option, key or group option that does not exist."""
    from biotf.cli import build_parser

    top, problems = build_parser(), []
    for words in commands_of(text):
        for i, word in enumerate(words):
            if word.endswith("train.py"):
                problems += override_problems(words[i + 1:])
                break
            if Path(word).name != "biotf" or i + 1 >= len(words) or words[i + 1] not in subparsers(top):
                continue
            if words[i + 1] == "train":
                problems += override_problems(words[i + 2:])
                break
            prog, parser, rest = f"biotf {words[i + 1]}", subparsers(top)[words[i + 1]], words[i + 2:]
            if rest and rest[0] in subparsers(parser):
                prog, parser, rest = f"{prog} {rest[0]}", subparsers(parser)[rest[0]], rest[1:]
            known = option_strings(parser)
            problems += [f"{prog} has no option {flag}" for flag in (w.split("=", 1)[0] for w in rest)
                         if flag.startswith("--") and flag not in known]
            break
    return problems


def bash_blocks_everywhere() -> list[Block]:
    return [b for b in collect(sorted((REPO / "docs").rglob("*.md")) + [REPO / "README.md"]) if b.language == "bash"]


@pytest.mark.parametrize("block", bash_blocks_everywhere(), ids=lambda block: block.name)
def test_every_option_a_block_names_exists(block: Block):
    assert option_problems(block.text) == [], block.name


# --- the collector itself ---------------------------------------------------------------------------------------
PAGE = """# A page

<!-- not run: needs a GPU -->
```bash
python train.py trainer=gpu
```

```bash
echo hello > greeting.txt
```

<!-- exit status: 2 -->
```bash
biotf embed --model missing/ --input x.fasta --output y.npz
```

```text
not a command
```

```python
print(open("greeting.txt").read())
```

- a list item's block:

    ```python
    x = 1
    ```
"""


def test_the_collector_reads_markers_and_languages():
    blocks = blocks_of(PAGE, "page.md")
    assert [(b.line, b.language, b.skip, b.status) for b in blocks] == [
        (4, "bash", "needs a GPU", 0), (8, "bash", None, 0), (13, "bash", None, 2), (21, "python", None, 0),
        (27, "python", None, 0)]
    assert blocks[4].text == "x = 1"
    with pytest.raises(ValueError, match="page.md:4: a `not run` marker needs a reason"):
        blocks_of("# A page\n\n<!-- not run -->\n```bash\nls\n```\n", "page.md")


def test_a_page_runs_in_order_and_an_exit_status_is_checked(tmp_path, tiny_model):
    blocks = [b for b in blocks_of(PAGE, "page.md") if not b.skip]
    session = Session(tmp_path)
    for block in blocks:
        run_block(block, session, tiny_model)
    assert (tmp_path / "greeting.txt").read_text() == "hello\n"
    with pytest.raises(AssertionError, match="exited with status 2, not 0"):
        run_block(Block("page.md", 1, "bash", "biotf embed --model missing/ --input x.fasta --output y.npz"),
                  session, tiny_model)


def test_a_placeholder_run_is_the_tiny_model_and_shared_is_the_checkouts(tiny_model):
    text = substituted("biotf embed --model outputs/protein_mlm/<run> --input ../shared/data/x.fasta", tiny_model)
    assert text == f"biotf embed --model {tiny_model} --input {SHARED}/data/x.fasta"


def test_a_shortened_page_reads_the_genomes_start_and_trains_two_steps(tmp_path):
    from biotf.io import read_records

    text = shortened(f"python train.py trainer.max_steps=300 && biotf embed --input {GENOME}", tmp_path)
    assert text == "python train.py trainer.max_steps=2 && biotf embed --input chloroplast_start.fasta"
    (record,) = read_records(tmp_path / "chloroplast_start.fasta")
    assert len(record.sequence) == SHORT_GENOME_BASES and record.id == "NC_000932.1"


def test_a_renamed_option_or_key_in_a_block_is_caught():
    assert option_problems("biotf embed --model m --input x.fasta --batch-tokens 8 --output y.npz") == []
    assert option_problems("biotf embed --model m --batch-token 8 \\\n  --output y.npz  # a comment --nothing") == [
        "biotf embed has no option --batch-token"]
    assert option_problems("biotf search query --index i --top 3") == ["biotf search query has no option --top"]
    assert option_problems("python train.py trainer=gpu model.pos=alibi trainer.max_steps=5 hydra.run.dir=x") == []
    problems = option_problems("python train.py model.poss=rope && python train.py trainer=tpu")
    assert len(problems) == 2 and "did you mean `pos`" in problems[0] and problems[1] == \
        "trainer=tpu: no conf/trainer/tpu.yaml"


def test_readme_blocks_are_run_only_once_covered():
    assert (REPO / "README.md" in pages()) is README_BLOCKS_COVERED
    if not README_BLOCKS_COVERED:
        print(f"README.md's {len(collect([REPO / 'README.md']))} bash/python blocks are checked for their options "
              "but not run (README_BLOCKS_COVERED is False)")
