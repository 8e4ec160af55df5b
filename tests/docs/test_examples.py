"""Every ```bash and ```python block of the documentation runs here, as a reader would type it, unless an HTML
comment on the line above says why not:

    <!-- not run: needs a GPU -->          the block is skipped, and the reason is the skip's
    <!-- exit status: 2 -->                the block runs and must end with that status (a refusal shown on purpose)

```text (output), ```yaml and blocks without a language are never run. Pages: docs/**/*.md and README.md
(README_BLOCKS_COVERED).

Each page's blocks run in order in one temporary directory (files and a Python namespace carry from block to block,
as in a reader's session). What differs between a reader's checkout and this test, and how it is substituted:
- the directory holds links to the checkout's `train.py`, `conf/`, `data/`, `scripts/` and `docs/`, so relative
  paths work, and its `.cache/` is one for every page, so the token cache of the shipped samples is built once;
- `python`, `.venv/bin/python` and `biotf` (`.venv/bin/biotf`) are this interpreter and `python -m biotf`, with
  PYTHONPATH the checkout, so the checkout's biotf runs;
- `../shared` is the checkout's ../shared (the real data sets beside it);
- a placeholder run `outputs/<name>/<...>` (e.g. `outputs/protein_mlm/<run>`) is a tiny model of that kind built
  once per test session (`STAND_IN_RUNS`: random weights, except the causal SMILES model, trained for 300
  steps so that some of its samples parse), or, for a kind without one (`outputs/finetune/<run>`), the newest run
  an earlier command of the page trained into `outputs/<name>/`;
- a Hugging Face checkpoint a reader downloads (`esm2_t6_8M_UR50D`, `Qwen2.5-0.5B-Instruct`, ...) is a tiny random
  model of the same family that `transformers` saved, under the same name (`STAND_IN_CHECKPOINTS`; Qwen2.5's with
  the real tokenizer of ../shared/qwen2.5-tokenizer);
- a training command (`python train.py`, `biotf train`) without `trainer.max_steps` of at most 10 runs cut to
  `SHORT_TRAINING` (2 steps, one validation batch);
- `--num-samples N` of `biotf generate` asks for at most 200 samples, and the MOSES reference files of
  `biotf generate evaluate` are their first 200 molecules (`REFERENCE_CUT`): the full files cost half an hour.
- a page of `SHORTENED` (the long-DNA tutorial, the README) reads a shortened copy of a long input and trains for
  a few steps (`shortened`): the 154 kb chloroplast genome is its first `SHORT_GENOME_BASES` bases;
- a page of `SAMPLED` reads every `SAMPLE_EVERY`-th record of the whole data sets of ../shared its worked examples
  embed and probe (`sampled`): the same commands, in seconds instead of minutes (the page's figures are the full
  sets', from the commands it shows).
A bash block runs under `bash -e -o pipefail`, a Python block through `exec`. A bash block made of simple commands
runs line by line: a plain `biotf ...`, `python -m biotf ...` or `python train.py ...` line (no variables, globs,
pipes or redirections) calls `biotf.cli.main` / `biotf.entry.train.main` in this process, with its output
captured and its exit status kept (what a shell's `-e` does with it); every other line runs in bash. A block with
loops, variables, `cd` or here-documents runs in bash whole. Starting a process per command costs 5 CPU-seconds
of imports; in this process they are paid once.

Besides running them, every bash block (marked or not, README.md's too) is read for `biotf COMMAND --flag` and
`train.py KEY=VALUE`: an option the parsers lack, a config key the schema lacks or a group option with no file in
conf/ fails here, so a renamed option breaks a test even where its block cannot run.
"""

from __future__ import annotations

import argparse
import gzip
import json
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
LINKED = ("train.py", "conf", "data", "scripts", "docs")
MARKER = re.compile(r"<!--\s*(not run|exit status)\s*:?\s*(.*?)\s*-->")
PLACEHOLDER_RUN = re.compile(r"outputs/([\w.-]+)/<[^>\s]+>")
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


# --- stand-ins for what a reader has -------------------------------------------------------------------------------
SHORT_TRAINING = ["trainer.max_steps=2", "trainer.val_check_interval=2", "trainer.limit_val_batches=1",
                  "trainer.checkpoint_every_n_steps=2", "optim.warmup_steps=1"]
MOST_SAMPLES = 200
REFERENCE_CUT = 200  # molecules of each MOSES reference file
MOSES_REFERENCES = ("moses_test.csv.gz", "moses_test_scaffolds.csv.gz", "moses_train.csv.gz")
SMALL = {"d_model": 16, "n_layers": 2, "n_heads": 2, "n_kv_heads": 2, "d_ff": 32}  # the stand-in runs' widths
SMILES_TRAINING = ["experiment=smiles_clm", "model.d_model=32", "model.n_layers=2", "model.n_heads=4",
                   "model.n_kv_heads=4", "model.d_ff=64", "model.max_seq_len=64", "data.max_length=64",
                   "data.batch_size=32", "trainer.max_steps=300", "trainer.val_check_interval=300",
                   "trainer.limit_val_batches=1", "optim.lr=1e-2", "optim.warmup_steps=10",
                   "trainer.enable_progress_bar=false", "trainer.validity_samples=0"]


def causal_smiles_run(directory: Path, cache: Path) -> Path:
    """`experiment=smiles_clm` at width 32 for 300 steps (15 s): of 200 samples (seed 0) 7 parse, so that the MOSES
    metrics have molecules to measure. It skips the preset's closing draw of 1,000 samples (7 s): the pages draw
    their own, and tests/inference/test_smiles_clm.py tests that check."""
    from biotf.entry import train

    code = train.main([*SMILES_TRAINING, f"data.cache_dir={cache}", f"hydra.run.dir={directory}"],
                      script=str(REPO / "train.py"))
    assert code == 0, f"training the causal SMILES stand-in exited with status {code}"
    return directory


def random_run(directory: Path, tokenizer: dict, causal: bool, max_seq_len: int) -> Path:
    """The recipes' model (protein-small: ESM's shape) at SMALL widths, random, with the tokenizer `build_tokenizer`
    makes."""
    import torch

    from biotf.checkpoint import save_pretrained
    from biotf.model import Transformer, TransformerConfig
    from biotf.tokenizers import build_tokenizer

    built = build_tokenizer(tokenizer)
    torch.manual_seed(0)
    config = TransformerConfig.preset("protein-small", vocab_size=built.vocab_size, max_seq_len=max_seq_len,
                                      causal=causal, **SMALL)
    return save_pretrained(Transformer(config), built, directory)


def esm2_checkpoint(directory: Path, request) -> Path:
    """ESM-2's layout (rotary, token dropout, contact head, 33 tokens) at 3 layers x 4 heads x 32, 1,026 positions."""
    model = request.getfixturevalue("random_esm")(seed=5, max_positions=1026)
    return request.getfixturevalue("save_esm")(model, directory)


def esmc_checkpoint(directory: Path, request) -> Path:
    """transformers' EsmcForMaskedLM at 3 layers x 4 heads x 32, with EsmcTokenizer's files."""
    from esmc_models import build_random_esmc, save_esmc_directory

    return save_esmc_directory(build_random_esmc(seed=5), directory)


def qwen_checkpoint(directory: Path, request) -> Path:
    from tiny_models import save_tiny_qwen2

    return save_tiny_qwen2(directory, request.getfixturevalue("qwen_tokenizer_dir"), tied=True)


def gpt2_checkpoint(directory: Path, request) -> Path:
    from tiny_models import save_tiny_gpt2

    return save_tiny_gpt2(directory)


def chemberta_checkpoint(directory: Path, request) -> Path:
    """A RoBERTa over a byte-level BPE learnt on ESOL's SMILES, as ChemBERTa's directories hold."""
    import csv

    from hf_tokenizer_dirs import write_tokenizer

    with open(REPO / "data" / "molnet_esol.csv", newline="") as handle:
        smiles = [row["smiles"] for row in csv.DictReader(handle)]
    write_tokenizer("roberta", directory, smiles)
    vocabulary = len(json.loads((directory / "vocab.json").read_text()))
    model = request.getfixturevalue("random_encoder")("roberta", vocab_size=vocabulary, max_positions=256)
    model.save_pretrained(directory)
    return directory


STAND_IN_RUNS = {
    "protein_mlm": lambda d, cache: random_run(d, {"kind": "protein"}, causal=False, max_seq_len=512),
    "protein_clm": lambda d, cache: random_run(d, {"kind": "protein"}, causal=True, max_seq_len=64),
    "dna_mlm": lambda d, cache: random_run(d, {"kind": "dna", "k": 6, "stride": 1}, causal=False, max_seq_len=128),
    "smiles_mlm": lambda d, cache: random_run(d, {"kind": "smiles"}, causal=False, max_seq_len=256),
    "smiles_clm": causal_smiles_run,
}
STAND_IN_CHECKPOINTS = {
    "esm2_t6_8M_UR50D": esm2_checkpoint,
    "ESMC-300M": esmc_checkpoint,
    "Qwen2.5-0.5B-Instruct": qwen_checkpoint,
    "Qwen2.5-0.5B": qwen_checkpoint,
    "gpt2-dir": gpt2_checkpoint,
    "ChemBERTa-zinc-base-v1": chemberta_checkpoint,
}


class StandIns:
    """The tiny runs and checkpoints of one test session, each built the first time a page names it."""

    def __init__(self, root: Path, request):
        self.root, self.request, self.built = root, request, {}
        self.cache = root / ".cache"

    def get(self, table: dict, name: str) -> Path:
        if name not in self.built:
            arguments = (self.cache,) if table is STAND_IN_RUNS else (self.request,)
            self.built[name] = table[name](self.root / "stand-ins" / name, *arguments)
        return self.built[name]

    def reference(self, name: str) -> Path:
        """The first REFERENCE_CUT molecules of a MOSES file of ../shared/data/smiles."""
        cut = self.root / "references" / name
        if not cut.is_file():
            cut.parent.mkdir(parents=True, exist_ok=True)
            with gzip.open(SHARED / "data" / "smiles" / name, "rt") as source, gzip.open(cut, "wt") as target:
                target.writelines(line for _, line in zip(range(REFERENCE_CUT + 1), source))
        return cut


def checkpoint_named(name: str) -> re.Pattern:
    return re.compile(rf"(?<![\w.-]){re.escape(name)}(?![\w.-])")


def substituted(text: str, session: "Session") -> str:
    """The block (or line) as it runs here (see the module docstring)."""
    text = text.replace(".venv/bin/python", "python").replace(".venv/bin/biotf", "biotf")
    for name in MOSES_REFERENCES:
        if f"../shared/data/smiles/{name}" in text:
            text = text.replace(f"../shared/data/smiles/{name}", str(session.stand_ins.reference(name)))
    text = text.replace("../shared", str(SHARED))
    text = re.sub(r"(--num-samples\s+)(\d+)", lambda m: m.group(1) + str(min(int(m.group(2)), MOST_SAMPLES)), text)
    return PLACEHOLDER_RUN.sub(lambda match: str(session.placeholder(match.group(1))), text)


@dataclass
class Session:
    """One page's directory and Python namespace, and how many of its blocks have run."""

    directory: Path
    stand_ins: StandIns
    namespace: dict = field(default_factory=lambda: {"__name__": "__main__"})
    done: int = 0

    def placeholder(self, kind: str) -> Path:
        if kind in STAND_IN_RUNS:
            return self.stand_ins.get(STAND_IN_RUNS, kind)
        runs = sorted((self.directory / "outputs" / kind).glob("*/"), key=lambda run: run.stat().st_mtime)
        assert runs, f"outputs/{kind}/<run>: no stand-in for {kind!r} and no run of the page under outputs/{kind}/"
        return runs[-1]


SESSIONS: dict[str, Session] = {}


@pytest.fixture(scope="session")
def pages_root(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("docs-pages")


@pytest.fixture(scope="session")
def stand_ins(pages_root, request) -> StandIns:
    return StandIns(pages_root, request)


def session_of(page: str, stand_ins: StandIns) -> Session:
    if page not in SESSIONS:
        directory = stand_ins.root / re.sub(r"\W", "_", page)
        directory.mkdir(parents=True)
        for name in LINKED:
            (directory / name).symlink_to(REPO / name)
        stand_ins.cache.mkdir(exist_ok=True)
        (directory / ".cache").symlink_to(stand_ins.cache)
        text = "\n".join(block.text for block in BLOCKS if block.page == page and not block.skip)
        for name in STAND_IN_CHECKPOINTS:
            if checkpoint_named(name).search(text):
                (directory / name).symlink_to(stand_ins.get(STAND_IN_CHECKPOINTS, name))
        SESSIONS[page] = Session(directory, stand_ins)
    return SESSIONS[page]


# --- running ------------------------------------------------------------------------------------------------------
PRELUDE = """set -e -o pipefail
python() { "$BIOTF_DOCS_PYTHON" "$@"; }
biotf() { "$BIOTF_DOCS_PYTHON" -m biotf "$@"; }
export -f python biotf
"""
WHOLE_BLOCK = re.compile(r"^\s*(for|while|until|if|case|function|cd|export|source|\.|set|\{|\(|\w+=)(\s|$)"
                         r"|<<|^\s*\w+\(\)", re.MULTILINE)
SHELL_CHARACTERS = set("|&;<>(){}*?[]~")


GENOME = "data/biopython_NC_000932_Athaliana_chloroplast.gb"
SHORT_GENOME_BASES = 4000
SHORTENED = {"docs/tutorials/long_dna.md", "README.md"}


def shortened(text: str, directory: Path) -> str:
    """The block on the genome's first `SHORT_GENOME_BASES` bases (a FASTA written once into the page's directory),
    training for 2 steps."""
    short = directory / "chloroplast_start.fasta"
    if not short.exists():
        from biotf.io import read_records

        (genome,) = read_records(REPO / GENOME)
        short.write_text(f">{genome.id}\n{genome.sequence[:SHORT_GENOME_BASES]}\n")
    return re.sub(r"trainer\.max_steps=\d+", "trainer.max_steps=2", text.replace(GENOME, short.name))



# page: the files of ../shared/data its blocks read whole
SAMPLED = {"docs/tutorials/token_embeddings.md": ("proteins/deeploc_test_set.fasta", "dna/uci_splice.csv",
                                                  "smiles/molnet_esol.csv")}
SAMPLE_EVERY = 10


def sampled(text: str, names: tuple[str, ...], directory: Path) -> str:
    """The block on every `SAMPLE_EVERY`-th record of each of `names` (a copy written once into the page's
    directory, in the same format: FASTA records as written, or CSV rows under their header)."""
    import csv

    for name in names:
        full, sample = SHARED / "data" / name, directory / "samples" / name
        if str(full) not in text:
            continue
        if not sample.exists():
            sample.parent.mkdir(parents=True, exist_ok=True)
            if sample.suffix == ".csv":
                with open(full, newline="") as source, open(sample, "w", newline="") as target:
                    rows = csv.reader(source)
                    header = next(rows)
                    csv.writer(target, lineterminator="\n").writerows(
                        [header, *(row for i, row in enumerate(rows) if i % SAMPLE_EVERY == 0)])
            else:  # FASTA: each record as it is written, header and lines
                records = re.split(r"^(?=>)", full.read_text(), flags=re.MULTILINE)[1:]
                sample.write_text("".join(records[::SAMPLE_EVERY]))
        text = text.replace(str(full), str(sample))
    return text


def page_input(block: Block, text: str, session: Session) -> str:
    if block.page in SAMPLED:
        return sampled(text, SAMPLED[block.page], session.directory)
    return shortened(text, session.directory) if block.page in SHORTENED else text


def plain_words(line: str) -> list[str] | None:
    """The words of `line` when it is one simple command a shell would pass on unchanged (quotes removed, a
    trailing comment dropped); None when a shell would expand, redirect or chain anything in it."""
    quote, escaped, end = None, False, len(line)
    for i, character in enumerate(line):
        if escaped:
            escaped = False
        elif quote == "'":
            quote = None if character == "'" else quote
        elif character == "\\":
            escaped = True
        elif character in "$`":
            return None
        elif quote == '"':
            quote = None if character == '"' else quote
        elif character in "'\"":
            quote = character
        elif character == "#" and (i == 0 or line[i - 1].isspace()):
            end = i
            break
        elif character in SHELL_CHARACTERS:
            return None
    return shlex.split(line[:end]) or None


def in_process(words: list[str]) -> tuple | None:
    """(function, argv, keyword arguments) for a command this process runs itself, else None."""
    if words[0] == "biotf":
        return "cli", words[1:]
    if words[0] == "python" and words[1:3] == ["-m", "biotf"]:
        return "cli", words[3:]
    if words[0] == "python" and words[1:2] == ["train.py"]:
        return "train", words[2:]
    return None


def short(kind: str, argv: list[str]) -> list[str]:
    """A training command's argv cut to SHORT_TRAINING unless it trains for at most 10 steps already."""
    training = kind == "train" or argv[:1] == ["train"]
    if not training or any(word.startswith(("-m", "--cfg", "--help", "--info")) for word in argv):
        return argv
    steps = [int(w.split("=", 1)[1]) for w in argv if re.fullmatch(r"trainer\.max_steps=\d+", w)]
    return argv if steps and steps[-1] <= 10 else [*argv, *SHORT_TRAINING]


def run_in_process(kind: str, argv: list[str], directory: Path) -> tuple[int, str]:
    """Run `biotf ARGV` or `python train.py ARGV` here, in `directory`, as a shell would: (exit status, output)."""
    import contextlib
    import io
    import traceback
    import warnings

    from biotf import cli
    from biotf.entry import train

    output = io.TextIOWrapper(io.BytesIO(), encoding="utf-8", write_through=True)
    cwd, argv0, environment = os.getcwd(), sys.argv[:], dict(os.environ)
    os.chdir(directory)
    try:
        with contextlib.redirect_stdout(output), contextlib.redirect_stderr(output), warnings.catch_warnings():
            warnings.simplefilter("default")
            try:
                code = cli.main(argv) if kind == "cli" else train.main(argv, script=str(REPO / "train.py"))
            except SystemExit as exit_:
                code = exit_.code if isinstance(exit_.code, int) else (0 if exit_.code is None else 1)
            except Exception:  # a traceback: what the interpreter prints before it exits with status 1
                traceback.print_exc()
                code = 1
    finally:
        os.chdir(cwd)
        sys.argv[:] = argv0
        os.environ.clear()
        os.environ.update(environment)
    return int(code or 0), output.buffer.getvalue().decode("utf-8", "replace")


def run_in_bash(text: str, directory: Path) -> tuple[int, str]:
    environment = {**os.environ, "BIOTF_DOCS_PYTHON": sys.executable, "OMP_NUM_THREADS": "1",
                   "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    done = subprocess.run(["bash", "-c", PRELUDE + text], cwd=directory, env=environment, text=True,
                          capture_output=True, timeout=TIMEOUT_S)
    return done.returncode, f"--- stdout\n{done.stdout[-4000:]}\n--- stderr\n{done.stderr[-4000:]}"


def steps_of(text: str) -> list[str]:
    """A bash block cut where this process can take over: the whole block for a shell construct, else one step per
    line that runs in-process and one for each stretch of lines between them."""
    if WHOLE_BLOCK.search(text):
        return [text]
    steps, pending = [], []
    for line in text.replace("\\\n", " ").splitlines():
        # a placeholder's `<run>` is no redirection: it becomes a path before the line runs
        words = plain_words(PLACEHOLDER_RUN.sub("outputs/run", line)) if line.strip() else None
        if words and in_process(words):
            steps += ["\n".join(pending)] if pending else []
            steps.append(line)
            pending = []
        elif line.strip():
            pending.append(line)
    return steps + (["\n".join(pending)] if pending else [])


def run_block(block: Block, session: Session) -> None:
    if block.language == "python":
        text = page_input(block, substituted(block.text, session), session)
        cwd = os.getcwd()
        os.chdir(session.directory)
        try:
            exec(compile(text, block.name, "exec"), session.namespace)
        finally:
            os.chdir(cwd)
        return
    code = 0
    for step in steps_of(block.text):
        # substituted here, step by step, so that a placeholder names a run an earlier step trained
        text = page_input(block, substituted(step, session), session)
        words = plain_words(text)
        command = in_process(words) if words and "\n" not in text else None
        if command:
            code, output = run_in_process(command[0], short(*command), session.directory)
        else:
            code, output = run_in_bash(text, session.directory)
        if code:
            break
    assert code == block.status, (
        f"{block.name} exited with status {code}, not {block.status}:\n{text}\n{output[-8000:]}")


def trains(block: Block) -> bool:
    return "train.py" in block.text or re.search(r"\bbiotf train\b", block.text) is not None


@pytest.mark.parametrize("block", [pytest.param(b, marks=pytest.mark.slow) if trains(b) else b for b in BLOCKS],
                         ids=[block.name for block in BLOCKS])
def test_block_runs(block: Block, stand_ins: StandIns):
    if block.skip:
        pytest.skip(f"not run: {block.skip}")
    page = [b for b in BLOCKS if b.page == block.page]
    session = session_of(block.page, stand_ins)
    for earlier in page[session.done:page.index(block) + 1]:  # a page's blocks build on the ones before
        if not earlier.skip:
            run_block(earlier, session)
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
    from biotf.training.train_config import check_key

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


def test_a_page_runs_in_order_and_an_exit_status_is_checked(tmp_path, stand_ins):
    blocks = [b for b in blocks_of(PAGE, "page.md") if not b.skip]
    session = Session(tmp_path, stand_ins)
    for block in blocks:
        run_block(block, session)
    assert (tmp_path / "greeting.txt").read_text() == "hello\n"
    with pytest.raises(AssertionError, match="exited with status 2, not 0"):
        run_block(Block("page.md", 1, "bash", "biotf embed --model missing/ --input x.fasta --output y.npz"), session)
    run_block(Block("page.md", 1, "bash", "echo a > a.txt\nbiotf embed --model missing/ --output y.npz\necho b > b.txt",
                    status=2), session)
    assert (tmp_path / "a.txt").is_file() and not (tmp_path / "b.txt").exists()  # as bash -e: it stops there


def test_simple_lines_run_here_and_shell_constructs_in_bash():
    assert plain_words("biotf embed --model m 'a b' --label-pattern '^(\\S+?)-[MSU]\\b'  # a comment") == [
        "biotf", "embed", "--model", "m", "a b", "--label-pattern", "^(\\S+?)-[MSU]\\b"]
    assert plain_words('biotf probe --label "measured log solubility"') == [
        "biotf", "probe", "--label", "measured log solubility"]
    for line in ("biotf embed --output $OUT", "biotf embed > log.txt", "biotf a && biotf b", "ls *.npz",
                 'biotf x --name "$HOME"', "biotf a | head"):
        assert plain_words(line) is None, line
    assert in_process(["python", "train.py", "seed=1"]) == ("train", ["seed=1"])
    assert in_process(["python", "-m", "biotf", "embed"]) == ("cli", ["embed"])
    assert in_process(["python", "scripts/bench.py"]) is None
    assert steps_of("printf x > a.fa\nhead a.fa\nbiotf embed --model m \\\n  --input a.fa\ncat b") == [
        "printf x > a.fa\nhead a.fa", "biotf embed --model m    --input a.fa", "cat b"]
    placeholder = "biotf embed --model outputs/protein_mlm/<run>"
    assert steps_of(placeholder) == [placeholder]
    loop = "for s in 0 1; do\n  biotf embed --seed $s\ndone"
    assert steps_of(loop) == [loop]
    assert short("train", ["experiment=dna_mlm"]) == ["experiment=dna_mlm", *SHORT_TRAINING]
    assert short("train", ["trainer.max_steps=4"]) == ["trainer.max_steps=4"]
    assert short("cli", ["embed", "--model", "m"]) == ["embed", "--model", "m"]


def test_a_placeholder_run_is_a_stand_in_and_shared_is_the_checkouts(tmp_path, stand_ins):
    session = Session(tmp_path, stand_ins)
    text = substituted("biotf embed --model outputs/protein_mlm/<run> --input ../shared/data/x.fasta", session)
    assert text == f"biotf embed --model {stand_ins.get(STAND_IN_RUNS, 'protein_mlm')} --input {SHARED}/data/x.fasta"
    with pytest.raises(AssertionError, match="no run of the page under outputs/finetune/"):
        substituted("biotf predict --model outputs/finetune/<run>", session)
    (tmp_path / "outputs" / "finetune" / "2026-12-02_10-00-00").mkdir(parents=True)
    assert substituted("outputs/finetune/<run>", session) == str(tmp_path / "outputs/finetune/2026-12-02_10-00-00")
    assert substituted("biotf generate --num-samples 10000", session) == "biotf generate --num-samples 200"


def test_a_shortened_page_reads_the_genomes_start_and_trains_two_steps(tmp_path):
    from biotf.io import read_records

    text = shortened(f"python train.py trainer.max_steps=300 && biotf embed --input {GENOME}", tmp_path)
    assert text == "python train.py trainer.max_steps=2 && biotf embed --input chloroplast_start.fasta"
    (record,) = read_records(tmp_path / "chloroplast_start.fasta")
    assert len(record.sequence) == SHORT_GENOME_BASES and record.id == "NC_000932.1"


def test_a_sampled_page_reads_every_tenth_record_in_the_same_format(tmp_path, shared_data):
    fasta, csv_name = "proteins/deeploc_test_set.fasta", "smiles/molnet_esol.csv"
    text = sampled(f"biotf embed --input {SHARED}/data/{fasta} && biotf embed --input {SHARED}/data/{csv_name}",
                   (fasta, csv_name, "dna/uci_splice.csv"), tmp_path)
    samples = tmp_path / "samples"
    assert text == f"biotf embed --input {samples / fasta} && biotf embed --input {samples / csv_name}"
    from biotf.io import read_records
    from biotf.io.readers import ReaderOptions

    for name, options in ((fasta, None), (csv_name, ReaderOptions(column="smiles", id_column="Compound ID"))):
        full, sample = (list(read_records(path, options))
                        for path in (SHARED / "data" / name, tmp_path / "samples" / name))
        assert [(r.id, r.sequence, r.metadata) for r in sample] == \
            [(r.id, r.sequence, r.metadata) for r in full[::SAMPLE_EVERY]], name
    assert not (tmp_path / "samples" / "dna").exists()  # a file the block does not read is not copied


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
