"""Launching test processes as torchrun does on one machine (imported as `torchrun_helpers`): a free port for the
rendezvous and the launcher's command line, for the tests of sharded commands and of multi-node training; and the
mark of every test that starts processes which work together."""

from __future__ import annotations

import os
import socket
import sys
from contextlib import contextmanager
from pathlib import Path

import pytest
from filelock import FileLock  # torch's own dependency

# A test that starts two or more processes which work together (DDP, FSDP, torchrun, two nodes). Under `pytest -n 2`
# (pytest-xdist) such tests run one at a time (`one_at_a_time`): two of them on 2 cores at once would each wait on
# descheduled ranks at every collective.
SEVERAL_PROCESSES = pytest.mark.usefixtures("several_processes")


@contextmanager
def one_at_a_time(tmp_path_factory):
    """Hold the lock of this test session's workers for a launch of several processes (a fixture that starts them
    holds it too); outside pytest-xdist, nothing else runs beside it and there is nothing to wait for."""
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        yield
        return
    # each worker's base temporary directory lies in the session's own
    with FileLock(Path(tmp_path_factory.getbasetemp()).parent / "several-processes.lock"):
        yield


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now (the master port of one launch)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def torchrun(*launch: str) -> list[str]:
    """`python -m torch.distributed.run --master-addr 127.0.0.1 *launch`: the launcher's options (nodes, node rank,
    processes, port), then the program and its arguments."""
    return [sys.executable, "-m", "torch.distributed.run", "--master-addr", "127.0.0.1", *launch]
