"""A function run in a forked copy of the test process (imported as `forked_process`), for the tests of what a
process does when it is killed, stopped by a signal or locked out by another: the child is a real process (its own
pid, signal handlers, file locks and exit status, SIGKILL ends it with nothing cleaned up), but it starts with
torch, Lightning and Hydra already imported instead of importing them again (seconds of CPU per process on a
2-core machine). Tests about the interpreter itself (what `python train.py` prints, which modules a fresh
`biotf` imports) still start one."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from typing import Callable


def one_thread() -> None:
    """Every thread pool of the child at one thread, as OMP_NUM_THREADS=1 gives a fresh test process: a fork copies
    only the forking thread, and an OpenMP pool the parent had started (torch's, faiss's) would hang the child's
    first parallel region."""
    os.environ["OMP_NUM_THREADS"] = "1"
    if "torch" in sys.modules:
        sys.modules["torch"].set_num_threads(1)
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:
        return
    threadpool_limits(1)


class Forked:
    """`function(*args)` in a child process, with `env` added to its environment; its return value (an int, or
    None for 0) or SystemExit code is the exit status. Waited for like a `subprocess.Popen`: poll, wait, kill,
    send_signal, communicate (stdout and stderr as text)."""

    def __init__(self, function: Callable[..., int | None], *args, env: dict[str, str] | None = None):
        self._stdout, self._stderr = tempfile.TemporaryFile(), tempfile.TemporaryFile()
        self.args = (function, args)
        self.returncode: int | None = None
        sys.stdout.flush()
        sys.stderr.flush()
        self.pid = os.fork()
        if self.pid == 0:
            self._child(function, args, env or {})

    def _child(self, function, args, env) -> None:
        status = 1
        try:
            os.dup2(self._stdout.fileno(), 1)
            os.dup2(self._stderr.fileno(), 2)
            sys.stdout = open(1, "w", encoding="utf-8", closefd=False, buffering=1)
            sys.stderr = open(2, "w", encoding="utf-8", closefd=False, buffering=1)
            # A command's own dispositions, not the test runner's: SIGINT raises KeyboardInterrupt, SIGTERM ends.
            signal.signal(signal.SIGINT, signal.default_int_handler)
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            one_thread()
            os.environ.update(env)
            result = function(*args)
            status = 0 if result is None else result
        except SystemExit as exit_:
            status = 0 if exit_.code is None else exit_.code if isinstance(exit_.code, int) else 1
        except BaseException:  # noqa: BLE001 - reported as a process reports it, then status 1
            traceback.print_exc()
        finally:
            for stream in (sys.stdout, sys.stderr):
                try:
                    stream.flush()
                except Exception:  # noqa: BLE001 - nothing left to report it to
                    pass
            os._exit(status)  # no atexit handlers, no pytest teardown in the copy

    def poll(self) -> int | None:
        if self.returncode is None:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            if deadline is not None and time.monotonic() > deadline:
                raise subprocess.TimeoutExpired(str(self.args[0]), timeout)
            time.sleep(0.01)  # polls the child's exit: the outcome never depends on this delay
        return self.returncode

    def send_signal(self, number: int) -> None:
        if self.poll() is None:
            os.kill(self.pid, number)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    def stderr_so_far(self) -> str:
        """What the child has written to stderr until now."""
        return os.pread(self._stderr.fileno(), 1 << 24, 0).decode("utf-8", "replace")

    def communicate(self, timeout: float | None = None) -> tuple[str, str]:
        """Wait for the child's exit; its stdout and stderr."""
        try:
            self.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            self.wait()
            raise
        out, err = (os.pread(f.fileno(), 1 << 26, 0).decode("utf-8", "replace") for f in (self._stdout, self._stderr))
        self._stdout.close()
        self._stderr.close()
        return out, err


def run_forked(function: Callable[..., int | None], *args, timeout: float = 300,
               env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """`function(*args)` in a forked child, waited for: like `subprocess.run(..., capture_output=True, text=True)`."""
    child = Forked(function, *args, env=env)
    out, err = child.communicate(timeout)
    return subprocess.CompletedProcess(child.args, child.returncode, out, err)
