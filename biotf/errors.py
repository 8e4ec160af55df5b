"""One error family for every user-facing failure.

The CLI catches `BiotfError`, prints its message on one line and exits with status 2;
anything else is a bug and keeps its traceback. A write the system refuses (a full disk, a read-only file system,
no permission: `DISK_CAUSES`) is the user's to fix, so it too becomes one line (`disk_error`), wherever it happens.
"""

from __future__ import annotations

import errno
import math
import os
import re
import reprlib
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from numbers import Integral, Real
from pathlib import Path

from biotf.naming import Parameter


class BiotfError(Exception):
    """Base class of every error a user can cause (bad input, bad config, bad file)."""


class BiotfWarning(UserWarning):
    """Something a user should know that does not stop the work; the CLI prints it as one line."""


class ConfigError(BiotfError, ValueError):
    """An invalid configuration value or combination; names the key and the allowed values.

    A key that is a parameter (`biotf.naming.parameter`: a keyword argument or request field, or its flag while a
    command line runs) is worded as the user gave it: `invalid limit=-1` (`invalid --limit=-1` on the command line),
    `invalid both_strands` (a switch, value True), `reference is required with variants` (value None, `required_with`
    the parameter that needs it). Any other key is a config key: `invalid config model.pos='foo'`.
    """

    def __init__(self, key: str, value: object, allowed: str | None = None, reason: str | None = None,
                 required_with: str | None = None):
        self.key, self.value, self.allowed, self.reason = key, value, allowed, reason
        if not key.startswith("-") and not isinstance(key, Parameter):
            message = f"invalid config {key}={value!r}"
        elif value is None:
            message = f"{key} is required" + (f" with {required_with}" if required_with else "")
        else:
            message = f"invalid {key}" + ("" if value is True else f"={value!r}")
        if reason:
            message += f": {reason}"
        if allowed:
            message += f" (allowed: {allowed})"
        super().__init__(message)


class ArgumentError(ConfigError):
    """A bad argument of a Python call (`biotf.Model`'s methods), named as the caller wrote it: `invalid argument
    seed=-1 (allowed: an integer from 0 to ...)`, `invalid argument sequences[2]='': an empty sequence ...`."""

    def __init__(self, key: str, value: object, allowed: str | None = None, reason: str | None = None):
        super().__init__(key, value, allowed, reason)
        message = f"invalid argument {key}={reprlib.repr(value)}"  # a list of a million sequences stays one line
        self.args = (message + (f": {reason}" if reason else "") + (f" (allowed: {allowed})" if allowed else ""),)


def check_choice(key: str, value: object, allowed: Iterable[str]) -> None:
    """ConfigError unless `value` is one of `allowed` (listed in order, `a | b | c`)."""
    allowed = tuple(allowed)
    if value not in allowed:
        raise ConfigError(key, value, " | ".join(allowed))


def check_int(key: str, value: object, minimum: int = 1, optional: bool = False,
              maximum: int | None = None) -> None:
    """ConfigError unless `value` is an integer (numpy's too; a bool is not) >= `minimum` (and <= `maximum`), or None
    where `optional`."""
    if optional and value is None:
        return
    if (isinstance(value, bool) or not isinstance(value, Integral) or value < minimum
            or (maximum is not None and value > maximum)):
        bounds = f">= {minimum}" if maximum is None else f"from {minimum} to {maximum}"
        raise ConfigError(key, value, f"an integer {bounds}" + (", or null" if optional else ""))


def check_number(key: str, value: object, allowed: str, minimum: float = -math.inf, maximum: float = math.inf,
                 above_minimum: bool = False) -> None:
    """ConfigError (`allowed` says the range) unless `value` is a finite real number (int or float, numpy's too; not a
    bool) within [`minimum`, `maximum`] (`above_minimum`: strictly above `minimum`). NaN and infinities are refused
    whatever the range: a comparison with NaN is always false, so `not 0 < nan` is the only safe way to ask."""
    finite = not isinstance(value, bool) and isinstance(value, Real) and math.isfinite(value)
    if not finite or not (value > minimum if above_minimum else value >= minimum) or not value <= maximum:
        raise ConfigError(key, value, allowed)


class InputError(BiotfError, ValueError):
    """A bad input file or record: names the file, the record and the position when known."""


class TokenizationError(InputError):
    """A character the tokenizer's policy refuses; names record, 0-based position and character."""

    def __init__(self, char: str, position: int, record: str | None = None, detail: str | None = None,
                 source: str | None = None):
        self.char, self.position, self.record, self.source = char, position, record, source
        where = []
        if source:
            where.append(f"file {source}")
        if record is not None:
            where.append(f"record {record!r}")
        where.append(f"position {position}")
        message = f"unexpected character {char!r} (U+{ord(char):04X}) at {', '.join(where)}"
        if detail:
            message += f": {detail}"
        super().__init__(message)


class CheckpointError(BiotfError):
    """A checkpoint or model directory that cannot be loaded safely or does not match."""


# What the system says when it refuses a write, and what the user can do about it.
DISK_CAUSES = {errno.ENOSPC: ("no space left on device", "free space there or write elsewhere"),
               errno.EDQUOT: ("disk quota exceeded", "free space there or write elsewhere"),
               errno.EACCES: ("permission denied", "choose a directory you may write to"),
               errno.EROFS: ("read-only file system", "choose a writable directory")}


class DiskError(BiotfError):
    """A write the system refused: a full disk (or quota), a read-only file system, no permission. Names the file
    and the cause; the work files of the failed write are already removed."""

    def __init__(self, message: str, errno_: int):
        self.errno = errno_
        super().__init__(message)

    def naming(self, target: str | Path) -> DiskError:
        """The same refusal naming `target` instead: the directory the user asked for, of a file of its staging."""
        cause, fix = DISK_CAUSES[self.errno]
        return DiskError(f"cannot write {target}: {cause} ({fix})", self.errno)


# How Rust's std::io::Error ends its message ("I/O error: No space left on device (os error 28)"): the errno of a
# write that a Rust-backed library (safetensors' `save_file`) reports as its own exception type.
RUST_OS_ERROR = re.compile(r"\(os error (\d+)\)")


def _refused_write(error: BaseException) -> OSError | None:
    """The OSError of a full, read-only or forbidden place that is `error` or that it was raised from or while
    handling: torch's zip writer, cleaning up after the OSError of a full disk, raises "unexpected pos" over it; a
    Rust-backed library's error (safetensors' `SafetensorError`) carries it as Rust's "(os error N)"."""
    seen: set[int] = set()
    while error is not None and id(error) not in seen:
        if isinstance(error, OSError) and error.errno in DISK_CAUSES:
            return error
        rust = None if isinstance(error, OSError) else RUST_OS_ERROR.search(str(error))
        if rust is not None and int(rust.group(1)) in DISK_CAUSES:
            return OSError(int(rust.group(1)), os.strerror(int(rust.group(1))))
        seen.add(id(error))
        error = error.__cause__ or error.__context__
    return None


def disk_error(error: BaseException, target: str | Path | None = None) -> DiskError | None:
    """The one-line `DiskError` for an OSError of a full, read-only or forbidden place, or for an error raised over
    one (`_refused_write`); None for any other error.

    It names `target`, the file the user asked for, when given (else the file the system names), and the file the
    system refused too when that is not a work file beside `target` (the directory a `mkdir` could not create)."""
    if isinstance(error, BiotfError) or (error := _refused_write(error)) is None:
        return None
    cause, fix = DISK_CAUSES[error.errno]
    refused = None if error.filename is None else Path(os.fsdecode(error.filename))
    if target is None:
        where = f"{refused}: " if refused is not None else ""
        return DiskError(f"{where}{cause} ({fix})", error.errno)
    target = Path(target)
    also = f" at {refused}" if refused is not None and refused != target and refused.parent != target.parent else ""
    return DiskError(f"cannot write {target}: {cause}{also} ({fix})", error.errno)


@contextmanager
def disk_errors(target: str | Path | None = None) -> Iterator[None]:
    """Turn a refused write inside the block into `disk_error(error, target)`; other errors pass unchanged."""
    try:
        yield
    except Exception as error:
        translated = disk_error(error, target)
        if translated is None:
            raise
        raise translated from None  # the one line says all of it


def user_error(error: BaseException) -> BiotfError | None:
    """`error` itself if it is a `BiotfError`, a refused write as its `DiskError`; None for anything else (a bug,
    which keeps its traceback). What the command lines print as one line."""
    return error if isinstance(error, BiotfError) else disk_error(error)
