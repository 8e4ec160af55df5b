"""Launching test processes as torchrun does on one machine (imported as `torchrun_helpers`): a free port for the
rendezvous and the launcher's command line, for the tests of sharded commands and of multi-node training."""

from __future__ import annotations

import socket
import sys


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now (the master port of one launch)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def torchrun(*launch: str) -> list[str]:
    """`python -m torch.distributed.run --master-addr 127.0.0.1 *launch`: the launcher's options (nodes, node rank,
    processes, port), then the program and its arguments."""
    return [sys.executable, "-m", "torch.distributed.run", "--master-addr", "127.0.0.1", *launch]
