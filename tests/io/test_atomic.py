"""`biotf.io.atomic`: a write is all or nothing; a write that fails midway leaves the old file as it was."""

from __future__ import annotations

import pytest

from biotf.io.atomic import atomic_write


def test_atomic_write_keeps_the_old_file_when_writing_fails(tmp_path):
    target = tmp_path / "last.ckpt"
    atomic_write(target, lambda path: path.write_bytes(b"complete"))

    def torn(path):
        path.write_bytes(b"half")
        raise KeyboardInterrupt  # as a kill mid-write would

    with pytest.raises(KeyboardInterrupt):
        atomic_write(target, torn)
    assert target.read_bytes() == b"complete"
    assert [p.name for p in tmp_path.iterdir()] == ["last.ckpt"]
