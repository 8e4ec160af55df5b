"""How the library names a parameter in what it tells the user: by its Python name (`top_k`), or, while a command
line runs it, by that command's flag (`--top-k`).

The library takes options as keyword arguments and dataclass fields and never spells a flag: its errors, warnings
and summaries name an option with `parameter("top_k")`. A Python caller reads `invalid top_k=5`; `biotf.cli` runs
each command inside `flags(...)`, the one place that maps a field to its flag (from the command's own parser), so a
user of the command reads `invalid --top-k=5`, as before.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar


class Parameter(str):
    """A Python parameter's name, as a message shows it: `ConfigError` words it like a flag (`invalid top_k=5`,
    `output is required with num_samples`), not as a config key (`invalid config model.pos='x'`)."""


# The flags of the command line running now, by parameter name; None when the library is called from Python.
_FLAGS: ContextVar[Mapping[str, str] | None] = ContextVar("biotf_flags", default=None)


def parameter(name: str) -> str:
    """`name` as the user gave it: its flag while a command line runs (the parser's own, else argparse's rule of
    `--` and dashes for underscores), else the `Parameter` itself. A dotted name is a field within a parameter:
    `settings.kmer_window` reads `--set kmer_window` where `--set` is the flag of `settings`."""
    flags = _FLAGS.get()
    if flags is None:
        return Parameter(name)
    head, dot, field = name.partition(".")
    flag = flags.get(head) or "--" + head.replace("_", "-")
    return f"{flag} {field}" if dot else flag


def given(name: str, value: str) -> str:
    """How a user sets parameter `name` to `value`: `--long chunk` on the command line, `long='chunk'` in Python."""
    return f"{parameter(name)} {value}" if _FLAGS.get() is not None else f"{name}={value!r}"


def parameters(*names: str, sep: str = "|") -> str:
    """Several names as one key, e.g. `ids|expression|input` (`--ids|--expression|--input` on the command line)."""
    joined = sep.join(parameter(name) for name in names)
    return joined if _FLAGS.get() is not None else Parameter(joined)


@contextmanager
def flags(by_parameter: Mapping[str, str]) -> Iterator[None]:
    """Within the block, name each parameter by its flag in `by_parameter` (field -> flag)."""
    token = _FLAGS.set(dict(by_parameter))
    try:
        yield
    finally:
        _FLAGS.reset(token)
