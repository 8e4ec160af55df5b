"""All-or-nothing writes: a file or a directory appears under its final name complete, or not at all.

Everything is written under a hidden temporary name beside the target and renamed into place at the
end (a rename within one directory is atomic on POSIX), so a killed process leaves at most a hidden
`.<name>.*.tmp`. A write the system refuses (a full disk, a read-only file system: `biotf.errors.disk_error`)
removes the temporary and is one `DiskError` naming the target. While a command holds its claim on a user-named
output without `--overwrite` (`biotf.io.outputs.claim_output`, which registers it here with `keep_existing`),
the rename never replaces a file that appeared under that name meanwhile: it is refused in one line instead.

The temporaries that `tempfile` creates are private (0600 / 0700); they are given the permissions a plain
`open()` / `mkdir()` would have had under the user's umask before the rename, so a checkpoint or an export is as
readable by the user's group as any other file they write.
"""

from __future__ import annotations

import errno
import os
import shutil
import tempfile
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO

import numpy as np

from biotf.errors import DiskError, InputError, disk_errors

# Outputs the running command claimed without --overwrite: their key (`_key`) -> the one line refusing to publish
# over a file that appeared meanwhile. Set only by `keep_existing`, for the length of its block.
_KEEP: dict[str, str] = {}
# Tests of concurrent runs: a FIFO at which this process's first `publish` waits until a line is written to it, so
# that a second process can be started against a run known to be between its claim and its rename.
PAUSE_BEFORE_PUBLISH = "BIOTF_PAUSE_BEFORE_PUBLISH"


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _key(path: Path) -> str:
    """One spelling per file whatever the caller's form of the path (relative, through a linked directory)."""
    return os.path.join(os.path.realpath(path.parent), path.name)


@contextmanager
def keep_existing(path: str | Path, refusal: str) -> Iterator[None]:
    """While the block runs, publishing `path` (`atomic_write`) raises InputError(`refusal`) if something appeared
    under that name, instead of replacing it."""
    key = _key(Path(path))
    _KEEP[key] = refusal
    try:
        yield
    finally:
        del _KEEP[key]


def publish(temporary: str | Path, path: str | Path) -> None:
    """Rename file `temporary` (beside `path`) to `path`. For a path under `keep_existing`, atomically never over an
    existing one: a hard link under the new name fails if the name exists, then the temporary's name goes; where a
    filesystem has no hard links (some network and FUSE ones) the name is checked just before the rename."""
    pause = os.environ.pop(PAUSE_BEFORE_PUBLISH, None)
    if pause:
        with open(pause, encoding="utf-8") as fifo:
            fifo.readline()
    temporary, path = Path(temporary), Path(path)
    refusal = _KEEP.get(_key(path))
    if refusal is None:
        os.replace(temporary, path)
        return
    try:
        os.link(temporary, path, follow_symlinks=False)
    except FileExistsError:
        raise InputError(refusal) from None
    except OSError:  # no hard links on this filesystem
        if os.path.lexists(path):
            raise InputError(refusal) from None
        os.replace(temporary, path)
    else:
        os.unlink(temporary)


def atomic_write(path: str | Path, write: Callable[[Path], None]) -> Path:
    """Call `write(temporary_path)` then rename it to `path`; a crash leaves only a hidden temporary."""
    path = Path(path)
    with disk_errors(path):
        path.parent.mkdir(parents=True, exist_ok=True)
        handle, temporary = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
        os.close(handle)
        try:
            write(Path(temporary))
            os.chmod(temporary, 0o666 & ~_umask())
            publish(temporary, path)
        except BaseException:
            Path(temporary).unlink(missing_ok=True)
            raise
    return path


def atomic_write_text(path: str | Path, text: str) -> Path:
    """`atomic_write` of UTF-8 text: the file appears complete under its name or not at all."""
    return atomic_write(path, lambda temporary: temporary.write_text(text, encoding="utf-8"))


@contextmanager
def atomic_directory(directory: str | Path) -> Iterator[Path]:
    """Yield a hidden staging directory that becomes `directory` when the block ends without an error.

    `directory` must not exist or be empty; on an error the staging directory is removed. Files in it get
    the permissions a plain `open()` would give (safetensors, for one, creates its files 0600).
    """
    directory = Path(directory)
    with disk_errors(directory):
        directory.parent.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=f".{directory.name}.", suffix=".tmp", dir=directory.parent))
        try:
            try:
                yield staging
            except DiskError as error:  # a file of the staging directory (`atomic_write` names it): the user's is
                raise error.naming(directory) from None
            mask = _umask()
            for path in staging.rglob("*"):
                os.chmod(path, (0o777 if path.is_dir() else 0o666) & ~mask)
            os.chmod(staging, 0o777 & ~mask)
            try:
                if directory.exists():
                    directory.rmdir()
                os.rename(staging, directory)
            except OSError as error:
                if error.errno not in (errno.ENOTEMPTY, errno.EEXIST):
                    raise
                # another program filled it meanwhile; it is left as it is
                raise InputError(f"{directory} was filled by another program while this run was writing it; it was "
                                 f"left as it is ({error.strerror}): choose a new directory") from None
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)
            raise


class _PythonWrites:
    """A binary file as numpy sees a file-like object that is not a real file: it writes through `write`."""

    def __init__(self, handle: IO[bytes]):
        self.write = handle.write


def save_array(handle: IO[bytes], array: np.ndarray) -> None:
    """`np.save(handle, array)` through Python's writes: numpy's fast path for a real file (`ndarray.tofile`) reports
    a full disk as "N requested and M written", an OSError without the errno that says why (`disk_error` could not
    tell it from a bug), where Python's write raises the system's own (ENOSPC)."""
    np.save(_PythonWrites(handle), array, allow_pickle=False)


def close_quietly(handles: Iterable[IO]) -> None:
    """Close work files whose content is being thrown away, every one: a last flush that fails (the disk that filled
    up, stopping the write) loses nothing, and must neither hide that error nor keep the others open."""
    for handle in handles:
        try:
            handle.close()
        except OSError:
            pass
