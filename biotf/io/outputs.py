"""Where a command may write a user-named file: the one overwrite rule, and the leftovers of killed runs.

The rule (every command that writes a file the user names: `embed --output/--plot`, `plot --output`,
`compare --out`, `predict --output`, `score --output`, `contacts --output`, `generate --output`, `generate
evaluate --output`, `search query --output`, `tokens --output/--plot`), checked before any work is done:
- an output that is one of the command's inputs (the same file, `os.path.samefile`) is refused, always;
- an output that is a directory, or whose parent is a file, is refused;
- an existing output is refused unless `overwrite` (`--overwrite`); the new file still replaces it
  only when complete (temporary name, then rename), so a failed run keeps the old one;
- a picture (`image=True`) must be named `.png` and never replaces a file that is not a PNG, even
  with `--overwrite`;
- a symbolic link as the output: biotf never writes through a link, it puts its new file under the name itself (the
  rename of a finished output replaces a link, never its target). So a link to an existing file is an existing
  output (the rule above; `--overwrite` replaces the link, its target is left as it is), and a link that resolves
  to nothing (its target missing, or a loop of links) is refused: its owner meant something by it.
A new output directory (`search build --output`, `export-model`, `contacts fit --output`: `check_new_directory`)
must not exist or be an empty directory, and must not be a symbolic link at all: the finished directory is renamed
into place, which would replace the link.

For the whole run the command holds its outputs (`claim_output`): an exclusive advisory `flock` on the empty
`.<name>.lock` beside each, so a second biotf run over the same output is refused at once in one line (or, where
it must, as `search add` on one index, waits its turn: `hold`); and the final rename of an output claimed without
`overwrite` never replaces a file another program put there meanwhile (`biotf.io.atomic.keep_existing`). The kernel
drops a killed run's lock with its process; the lock file it leaves is removed by the next run over the name.

Writers put their work beside the output under hidden names `.<name>.<8 random chars>.tmp` (the file
being assembled, `atomic_write`) and `.<name>.<8 random chars>.spool` (the embedding spools). A run
killed outright (SIGKILL, out of memory, power) leaves them behind; `remove_leftovers` deletes exactly
those of one output name, and nothing while a live run over the same name holds its spool (an advisory
`flock`, released by the kernel when that process dies).
"""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import ExitStack, contextmanager, nullcontext
from pathlib import Path
from typing import IO

from biotf.io.atomic import keep_existing
from biotf.errors import InputError
from biotf.naming import parameter

try:  # POSIX; elsewhere a live run's work is not told apart from a killed run's
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
LOCK_SUFFIX = "lock"
SPOOL_SUFFIX = ".spool"
TEMPORARY_SUFFIX = ".tmp"
# tempfile.mkstemp / mkdtemp names: prefix + 8 characters of "abcdefghijklmnopqrstuvwxyz0123456789_" + suffix
_RANDOM_PART = r"[a-z0-9_]{8}"
LOCK_FILE = "text.jsonl"  # the spool file an `EmbeddingWriter` keeps open (and locked) for its whole life


def work_prefix(path: Path) -> str:
    """The prefix of every hidden work file of output `path` (pass to mkstemp / mkdtemp with `dir=path.parent`)."""
    return f".{path.name}."


def lock_path(path: Path) -> Path:
    """The lock file of output `path` (a file or a directory): `.<name>.lock` beside it, the one name that every
    run over `path` locks."""
    return path.parent / f"{work_prefix(path)}{LOCK_SUFFIX}"


def _exists(path: Path) -> bool:
    return path.exists() or path.is_symlink()


def output_format(path: str | Path, allowed: Sequence[str], flag: str = "output") -> str:
    """The extension of output `path` (lower case), one of `allowed`; else an InputError naming `flag` and them,
    raised before any work is done (every writer chooses its format by the extension)."""
    suffix = Path(path).suffix.lower()
    if suffix not in allowed:
        raise InputError(f"{flag} {path}: unsupported extension {suffix or '(none)'!r} (allowed: {', '.join(allowed)})")
    return suffix


def _check_link(path: Path, flag: str) -> None:
    """Refuse `path` where it is a symbolic link that resolves to nothing: a missing target, or a loop of links."""
    if not path.is_symlink():
        return
    try:
        path.resolve(strict=True)
    except FileNotFoundError:
        raise InputError(f"{flag} {path} is a symbolic link to {os.readlink(path)}, which does not exist; biotf never "
                         "writes through a link: remove the link, or choose another name") from None
    except (OSError, RuntimeError):  # ELOOP; Python < 3.13 raises RuntimeError for a loop
        raise InputError(f"{flag} {path} is a symbolic link that never resolves (a loop of links); remove it, or "
                         "choose another name") from None


def check_new_directory(path: str | Path, flag: str | None = None) -> Path:
    """`path` if a command may create its output directory there (the rule above): it does not exist, or is an empty
    directory that is no symbolic link; else an InputError naming `flag` (default: the parameter `output`) and the
    fix."""
    path, flag = Path(path), flag or parameter("output")
    _check_link(path, flag)
    if path.is_symlink():
        raise InputError(f"{flag} {path} is a symbolic link; the finished directory would replace the link: give "
                         "the directory it points to, or a new name")
    if _exists(path) and (not path.is_dir() or any(path.iterdir())):
        raise InputError(f"{flag} {path} already exists and is not empty; choose a new one")
    return path


def check_output(path: str | Path, inputs: Sequence[str | Path] = (), overwrite: bool = False,
                 image: bool = False, flag: str | None = None) -> Path:
    """`path` if the rule above lets a command write it; else an InputError naming `flag` (default: the parameter
    `output`) and the fix."""
    path, flag = Path(path), flag or parameter("output")
    _check_link(path, flag)
    if image and path.suffix.lower() != ".png":
        raise InputError(f"{flag} {path}: a map is a PNG picture, so its name must end in .png")
    for source in inputs:
        if _exists(path) and Path(source).exists() and os.path.samefile(path, source):
            raise InputError(f"{flag} {path} is the input {source}: writing it would destroy the input; "
                             "choose another output name")
    parent = next((p for p in path.parents if _exists(p)), Path("."))
    if not parent.is_dir():
        raise InputError(f"{flag} {path}: {parent} is a file, not a directory")
    if path.is_dir():
        raise InputError(f"{flag} {path} is an existing directory; give a file name inside it")
    if not _exists(path):
        return path
    if image and not is_png(path):
        raise InputError(f"{flag} {path} exists and is not a PNG picture; a map never replaces another kind "
                         f"of file (even with {parameter('overwrite')}): choose another name")
    if not overwrite:
        raise InputError(f"{flag} {path} already exists; pass {parameter('overwrite')} to replace it (or choose "
                         "another name)")
    return path


def check_distinct(paths: dict[str, Path]) -> None:
    """Refuse two outputs of one command naming the same file (e.g. `--output e.npz --plot e.npz`)."""
    seen: dict[str, str] = {}
    for flag, path in paths.items():
        key = os.path.normcase(os.path.abspath(path))
        if key in seen:
            raise InputError(f"{flag} {path} is also {seen[key]}: one would overwrite the other")
        seen[key] = flag


def is_png(path: Path) -> bool:
    try:
        with open(path, "rb") as handle:
            return handle.read(len(PNG_MAGIC)) == PNG_MAGIC
    except OSError:
        return False


def _held(spool: Path) -> bool:
    """Whether a live process holds the lock of spool directory `spool` (on its `LOCK_FILE`)."""
    if fcntl is None:
        return False
    try:
        with open(spool / LOCK_FILE, "rb") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    except OSError:
        return False
    return False


def lock(handle: IO) -> None:
    """Mark an open work file as held by this live process (released when the handle closes or the process dies)."""
    if fcntl is not None:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)


def leftovers(path: str | Path) -> list[Path]:
    """Hidden work files of output `path` left by killed runs: only names of exactly its pattern. While a live
    run holds a spool of the same output, none of its spools nor any temporary counts (the temporary an
    embedding run assembles is written while its spool is held; h5py locks that file itself)."""
    path = Path(path)
    pattern = re.compile(re.escape(work_prefix(path)) + _RANDOM_PART
                         + f"({re.escape(TEMPORARY_SUFFIX)}|{re.escape(SPOOL_SUFFIX)})")
    if not path.parent.is_dir():
        return []
    found = []
    for entry in sorted(path.parent.iterdir()):
        if not pattern.fullmatch(entry.name) or entry.is_symlink():
            continue
        if entry.name.endswith(SPOOL_SUFFIX) != entry.is_dir():
            continue  # a .spool is always a directory, a .tmp always a file: anything else is not ours
        found.append(entry)
    live = [entry for entry in found if entry.is_dir() and _held(entry)]
    return [] if live else found


def remove_leftovers(path: str | Path) -> list[Path]:
    """Delete `leftovers(path)`; returns what was removed (for the command to say so)."""
    removed = leftovers(path)
    for entry in removed:
        if entry.is_dir():
            shutil.rmtree(entry, ignore_errors=True)
        else:
            entry.unlink(missing_ok=True)
    return removed


def _lock(descriptor: int, path: Path, flag: str, waiting: Callable[[], None] | None) -> None:
    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        if waiting is None:
            raise InputError(f"{flag} {path}: another biotf run is writing it now; wait until it ends, or choose "
                             "another name") from None
        waiting()
        fcntl.flock(descriptor, fcntl.LOCK_EX)


def _same_file(descriptor: int, name: Path) -> bool:
    try:
        on_disk = os.stat(name, follow_symlinks=False)
    except FileNotFoundError:
        return False
    held = os.fstat(descriptor)
    return (on_disk.st_dev, on_disk.st_ino) == (held.st_dev, held.st_ino)


@contextmanager
def hold(path: str | Path, flag: str | None = None, waiting: Callable[[], None] | None = None) -> Iterator[list[Path]]:
    """Hold the exclusive lock of output `path` for the block: another run holding it is an InputError at once, or,
    with `waiting`, is waited for (`waiting()` is called first, to say so). Yields the lock files of killed runs it
    removed, for the command to report.

    The lock file is removed while still locked when the block ends, so a run that was waiting on it finds its file
    gone and takes a new one; a lock file that exists but is held by no one is a killed run's (the kernel released
    its lock): it is removed the same way and a new one taken."""
    path, flag = Path(path), flag or parameter("output")
    if fcntl is None:  # pragma: no cover - Windows: no lock, the check under `claim_output` still runs
        yield []
        return
    lock = lock_path(Path(os.path.abspath(path)))  # "." and "out/" have a name too
    lock.parent.mkdir(parents=True, exist_ok=True)
    removed: list[Path] = []
    while True:
        created = True
        try:
            try:
                descriptor = os.open(lock, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o666)
            except FileExistsError:
                created = False
                descriptor = os.open(lock, os.O_RDWR | os.O_NOFOLLOW)
        except FileNotFoundError:
            continue  # the run that held it ended between the two opens
        except OSError as error:
            raise InputError(f"{flag} {path}: cannot create its lock file {lock} ({error.strerror}); choose a "
                             "directory you can write in") from None
        try:
            _lock(descriptor, path, flag, waiting)
        except BaseException:
            os.close(descriptor)
            raise
        ours = _same_file(descriptor, lock)
        if ours and created:
            break
        if ours:  # it was there, and locked by no one: left by a killed run
            os.unlink(lock)
            removed.append(lock)
        os.close(descriptor)  # else the run that held it ended and removed it meanwhile: take a new one
    try:
        yield removed
    finally:
        if _same_file(descriptor, lock):  # never another run's, should someone have deleted ours
            os.unlink(lock)
        os.close(descriptor)


@contextmanager
def claim_output(path: str | Path, inputs: Sequence[str | Path] = (), overwrite: bool = False, image: bool = False,
                 flag: str | None = None) -> Iterator[list[Path]]:
    """Hold output `path` for the block (`hold`), checked by the rule (`check_output`) before the lock is taken,
    so a refused run makes nothing, and again under it, so an output that a run over the same name finished
    meanwhile is seen. Without `overwrite`, publishing `path` in the block never replaces a file that appeared
    there meanwhile (another program's). Yields the lock files of killed runs removed."""
    path, flag = check_output(path, inputs, overwrite, image, flag), flag or parameter("output")
    with hold(path, flag) as removed:
        check_output(path, inputs, overwrite, image, flag)
        refusal = (f"{flag} {path} appeared while this run was writing it (another program made it); it was left "
                   f"as it is: pass {parameter('overwrite')} to replace it, or choose another name")
        with nullcontext() if overwrite else keep_existing(path, refusal):
            yield removed


@contextmanager
def claim_outputs(outputs: Mapping[str, str | Path | None], inputs: Sequence[str | Path], overwrite: bool = False,
                  images: Sequence[str] = (), say: Callable[[str], None] = lambda line: None,
                  writes: bool = True) -> Iterator[None]:
    """Check every named output (flag -> path; None = not asked for) against the rule, hold them all while the
    block runs (`claim_output`: a second run over one of them is refused), then remove the leftovers of killed runs
    over the same names, telling `say` a line about each output that had some. `images` are the flags whose file is
    a PNG map.

    `writes` False (the ranks other than 0 of a torchrun launch, which write none of the outputs): the rule is
    checked and nothing held."""
    named = {flag: Path(path) for flag, path in outputs.items() if path is not None}
    check_distinct(named)
    for flag, path in named.items():  # every output checked before the first is held
        check_output(path, inputs, overwrite, image=flag in images, flag=flag)
    if not writes:
        yield
        return
    with ExitStack() as held:
        removed = {flag: held.enter_context(claim_output(path, inputs, overwrite, image=flag in images, flag=flag))
                   for flag, path in named.items()}
        for flag, path in named.items():
            removed[flag] += remove_leftovers(path)
            if removed[flag]:
                say(f"removed {len(removed[flag])} leftover work file(s) of an interrupted run over {path}: "
                    f"{', '.join(entry.name for entry in removed[flag])}")
        yield
