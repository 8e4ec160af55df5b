"""`release_free_heap`: freed heap pages go back to the OS, so RSS follows live memory (glibc)."""

from __future__ import annotations

import ctypes
import sys

import pytest
import torch

from biotf.heap import release_free_heap

MiB = 2**20


def resident_bytes() -> int:
    with open("/proc/self/status") as handle:
        return next(int(line.split()[1]) * 1024 for line in handle if line.startswith("VmRSS:"))


@pytest.mark.skipif(not sys.platform.startswith("linux") or not hasattr(ctypes.CDLL(None), "malloc_trim"),
                    reason="glibc's malloc_trim")
def test_freed_heap_pages_leave_the_resident_set():
    large = torch.empty(24 * MiB // 4).fill_(1)
    del large  # a freed mapping raises glibc's mmap threshold: the 4 MiB tensors below come from the heap
    tensors = [torch.empty(4 * MiB // 4).fill_(1) for _ in range(40)]
    keep = tensors[-1]  # the top of the heap stays in use: only a trim returns the pages below it
    del tensors
    before = resident_bytes()
    release_free_heap()
    assert before - resident_bytes() > 80 * MiB
    assert float(keep[0]) == 1.0
