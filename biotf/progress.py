"""What a long command prints while it works, on stderr: a tqdm bar on a terminal, plain lines anywhere else.

A bar redraws itself in place with `\\r`: live on a terminal, a wall of escape codes in a log file or a pipe, so
where stderr is not a terminal a `Progress` prints one plain line at most every `line_seconds()` (`LINE_SECONDS`,
or the environment variable `BIOTF_PROGRESS_SECONDS` for tests and impatient logs), e.g.
`embedding proteins.fasta: 52,431/? tok, 1,204 tok/s, 43s; windows 12/40 of this block, layer 3/6`
or, where the total is known, `contacts proteins.fasta: 8,112/20,480 residues (39%), 410 residues/s, 19s, ~30s left`.
A single long record reports its own progress through `detail` (windows of its block) and `layer_notes` (the
layers one forward has passed, and the query rows of a layer whose attention runs in chunks), so a one-pass record
of 150 kb says something every interval too; a step that counts nothing (loading a model's weights) is announced
every interval by `waiting`. Nothing goes to stdout, which may be a command's data. Training's
plain lines (`biotf.training.fit_progress`) share the interval and the number and duration forms.

Every entry point runs its job under `messages_to_stderr()`: what it says on stderr (progress, summaries, warnings)
can never fail the job, nor land in its data. A closed stderr (`2>&-`, where Python's `print(file=sys.stderr)`
would write to stdout) becomes /dev/null, on file descriptor 2 too, so no file the job opens takes that number; a
stderr that refuses a write (a reader gone: broken pipe; `/dev/full`) is given up at the first refusal, and the job
goes on to write its outputs.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Any, Callable, TextIO, TypeVar

from biotf.errors import ConfigError

LINE_SECONDS = 30.0  # a plain line at most this often: a log of a long run stays readable
SECONDS_VARIABLE = "BIOTF_PROGRESS_SECONDS"
MIN_WAIT_SECONDS = 0.05  # `waiting`'s thread wakes at most this often, even where lines are asked for at every update
T = TypeVar("T")


def line_seconds() -> float:
    """Seconds between plain progress lines: `LINE_SECONDS`, or `BIOTF_PROGRESS_SECONDS` where it is set."""
    text = os.environ.get(SECONDS_VARIABLE)
    if text is None:
        return LINE_SECONDS
    try:
        seconds = float(text)
    except ValueError:
        seconds = -1.0
    if not seconds >= 0:
        raise ConfigError(SECONDS_VARIABLE, text, allowed="a number of seconds >= 0")
    return seconds


class _Messages:
    """sys.stderr while a job runs: `stream`'s writes, where the first one that the system refuses (OSError) silences
    the stream for good, and, where it is file descriptor 2, points that at /dev/null, so that what it still holds
    (and Python's flush at exit) goes nowhere instead of failing again."""

    def __init__(self, stream: TextIO):
        self._stream, self._silent = stream, False

    def _give_up(self) -> None:
        self._silent = True
        try:
            if self._stream.fileno() == 2:
                _devnull_onto(2)
        except (OSError, ValueError, AttributeError):  # not a real file (a test's capture): nothing to repoint
            pass

    def write(self, text: str) -> int:
        if not self._silent:
            try:
                return self._stream.write(text)
            except OSError:
                self._give_up()
        return len(text)

    def flush(self) -> None:
        if not self._silent:
            try:
                self._stream.flush()
            except OSError:
                self._give_up()

    def __getattr__(self, name: str) -> Any:  # isatty, fileno, encoding...: the stream's own
        return getattr(self._stream, name)


def _devnull_onto(descriptor: int) -> None:
    null = os.open(os.devnull, os.O_WRONLY)
    if null != descriptor:
        os.dup2(null, descriptor)
        os.close(null)


@contextmanager
def messages_to_stderr() -> Iterator[None]:
    """Run a job with `sys.stderr` that cannot fail it (module docstring), and restore it after."""
    before = sys.stderr
    stream = before
    if stream is None:  # Python found file descriptor 2 closed at start
        try:
            os.fstat(2)
        except OSError:
            _devnull_onto(2)
        stream = open(os.devnull, "w", encoding="utf-8")
    sys.stderr = _Messages(stream)
    try:
        yield
    finally:
        sys.stderr = before
        if stream is not before:
            stream.close()


def number(value: float) -> str:
    """4 significant digits, and large figures (tokens/s) whole with thousands separators."""
    return f"{value:,.0f}" if abs(value) >= 1000 else f"{value:.4g}"


def duration(seconds: float) -> str:
    seconds = int(round(seconds))
    hours, rest = divmod(seconds, 3600)
    return f"{hours}h{rest // 60:02d}m" if hours else f"{rest // 60}m{rest % 60:02d}s"


def is_terminal(stream: TextIO) -> bool:
    return hasattr(stream, "isatty") and stream.isatty()


class Progress:
    """Counts `unit`s done of `total` (None: not known in advance) under `description`: a tqdm bar when `stream`
    (default stderr) is a terminal, else a plain line after the first `every_seconds` and at most that often.
    `update(n, detail)` counts work done (`detail`: where a long piece of work stands, e.g. the windows of a
    block), `detail(text, "layer")` the layer a forward has reached (cleared by the next `update`), each printing
    a line if one is due, `close()` prints nothing more (the commands print their own summary)."""

    def __init__(self, description: str, unit: str, total: int | None = None, stream: TextIO | None = None,
                 every_seconds: float | None = None, clock: Callable[[], float] = time.monotonic):
        self.description, self.unit, self.total = description, unit, total
        self.stream = stream or sys.stderr
        self.every_seconds = line_seconds() if every_seconds is None else every_seconds
        self.clock = clock
        self.done = 0
        self._details: dict[str, str] = {}  # "work": where a long piece stands; "layer": the forward's layer
        self._start = self._last = clock()
        self._bar = None
        if is_terminal(self.stream):
            from tqdm.auto import tqdm

            self._bar = tqdm(total=total, unit=unit, unit_scale=True, desc=description, leave=False,
                             file=self.stream)

    def update(self, n: int, detail: str | None = None) -> None:
        self.done += n
        self._details.pop("layer", None)  # a forward finished
        if detail is not None:
            self._details["work"] = detail
        if self._bar is not None:
            if detail is not None:
                self._bar.set_postfix_str(detail, refresh=False)
            self._bar.update(n)
        self._maybe_print()

    def set_total(self, total: int) -> None:
        """The total, once it is known (an input read to its end)."""
        self.total = total
        if self._bar is not None:
            self._bar.total = total
            self._bar.refresh()

    def detail(self, text: str, slot: str = "work") -> None:
        self._details[slot] = text
        if self._bar is not None:
            self._bar.set_postfix_str(", ".join(self._details.values()), refresh=False)
        self._maybe_print()

    def line(self) -> str:
        elapsed = self.clock() - self._start
        counted = f"{self.done:,}/{self.total:,}" if self.total is not None else f"{self.done:,}/?"
        parts = [f"{counted} {self.unit}" + (f" ({100 * self.done // self.total}%)" if self.total else "")]
        if elapsed > 0 and self.done:  # nothing counted yet (one long forward): its details say how far it is
            parts.append(f"{number(self.done / elapsed)} {self.unit}/s")
        timing = duration(elapsed)
        if self.total and 0 < self.done < self.total:
            timing += f", ~{duration(elapsed / self.done * (self.total - self.done))} left"
        parts.append(timing)
        text = f"{self.description}: " + ", ".join(parts)
        details = ", ".join(self._details.values())
        return f"{text}; {details}" if details else text

    def _maybe_print(self) -> None:
        if self._bar is None and self.clock() - self._last >= self.every_seconds:
            self._last = self.clock()
            print(self.line(), file=self.stream, flush=True)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


@contextmanager
def reporting(enabled: bool, description: str, unit: str, model: Any = None,
              total: int | None = None) -> Iterator[Progress | None]:
    """A `Progress` on stderr while the block runs, `model`'s layers noted in it (`layer_notes`); None when not
    `enabled` (`--no-progress`, a rank other than 0)."""
    if not enabled:
        yield None
        return
    with Progress(description, unit, total) as shown, layer_notes(model, shown):
        yield shown


@contextmanager
def waiting(enabled: bool, description: str, stream: TextIO | None = None,
            every_seconds: float | None = None) -> Iterator[None]:
    """While the block runs, `description: 1m00s` on `stream` (default stderr) every `line_seconds()` (at least every
    `MIN_WAIT_SECONDS`), from a background thread: for one call that counts nothing itself (reading a large model's
    weights), so that no job is silent for longer than the interval. Nothing when not `enabled`, nor when the block
    ends within the first interval."""
    if not enabled:
        yield
        return
    stream = stream or sys.stderr
    seconds = max(line_seconds() if every_seconds is None else every_seconds, MIN_WAIT_SECONDS)
    start = time.monotonic()
    done = threading.Event()

    def beat() -> None:
        while not done.wait(seconds):
            try:  # one write a line: the main thread's own lines (a warning) never land inside it
                stream.write(f"{description}: {duration(time.monotonic() - start)}\n")
                stream.flush()
            except (OSError, ValueError):  # stderr gone (a closed pipe or file): the work goes on, unannounced
                return

    thread = threading.Thread(target=beat, name="biotf-waiting", daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join()


def counting(items: Iterable[T], progress: Progress | None) -> Iterator[T]:
    """`items` as they come, each counted as one unit of `progress` once the consumer is done with it (passed through
    unchanged when `progress` is None): progress over a loop that someone else's function runs."""
    if progress is None:
        yield from items
        return
    for item in items:
        yield item
        progress.update(1)


@contextmanager
def layer_notes(model: Any, progress: Progress | None) -> Iterator[None]:
    """While the block runs, the attention of each of `model.blocks` (a biotf Transformer's layers, which every
    forward runs, `attention_maps` too) tells `progress` it has run: `layer i/n`, and, where attention runs in
    chunks of queries (a mask too large to build: ALiBi over a long record), how far the layer it is in has come:
    `layer i/n: 40,960/154,000 query rows`, so one forward over a long record is not silent. Nothing when `progress`
    is None."""
    blocks = getattr(model, "blocks", None)
    if progress is None or blocks is None:
        yield
        return
    total = len(blocks)
    for i, block in enumerate(blocks, 1):
        block.attn.report_done = lambda i=i: progress.detail(f"layer {i}/{total}", "layer")
        block.attn.report_rows = (lambda done, rows, i=i:
                                  progress.detail(f"layer {i}/{total}: {done:,}/{rows:,} query rows", "layer"))
    try:
        yield
    finally:
        for block in blocks:
            block.attn.report_rows = block.attn.report_done = None
