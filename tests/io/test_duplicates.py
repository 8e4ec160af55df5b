"""`biotf.io.duplicates`: repeated ids are counted in bounded memory, alike whether they stay in memory or spill to
bucket files, and the bucket files never outlive reading."""

from __future__ import annotations

import random

import pytest

from biotf.io import duplicates
from biotf.io.duplicates import DuplicateCounter


@pytest.mark.parametrize("buffer", [3, 1 << 20])
@pytest.mark.parametrize("bulk", [False, True])
def test_repeated_ids_are_counted_alike_in_memory_and_spilled_to_bucket_files(monkeypatch, buffer, bulk):
    monkeypatch.setattr(duplicates, "BUFFER_KEYS", buffer)
    rng = random.Random(0)
    ids = [f"id{rng.randint(0, 60)}" for _ in range(200)] + ["", "x", "x"]
    counter = DuplicateCounter()
    if bulk:  # in runs of 7: runs that fill the buffer partly, wholly and more than once
        for at in range(0, len(ids), 7):
            counter.add_ids(ids[at:at + 7])
    else:
        for identifier in ids:
            counter.add(hash(identifier))
    assert counter.added == len(ids)
    spilled = counter.spilled
    assert (spilled is not None) is (buffer == 3)
    assert counter.count() == len(ids) - len(set(ids))
    assert spilled is None or not spilled.exists()  # the bucket files are removed


def test_reading_stopped_early_leaves_no_spilled_files(monkeypatch, tmp_path):
    from biotf.io.readers import read_records

    monkeypatch.setattr(duplicates, "BUFFER_KEYS", 2)
    made = []
    monkeypatch.setattr(duplicates.tempfile, "mkdtemp", lambda prefix: made.append(tmp_path / "ids") or
                        str((tmp_path / "ids").mkdir() or tmp_path / "ids"))
    path = tmp_path / "x.fasta"
    path.write_text("".join(f">r{i}\nACGT\n" for i in range(10)))
    records = read_records(path)
    assert [next(records).id for _ in range(5)] == ["r0", "r1", "r2", "r3", "r4"]
    records.close()
    assert made and not made[0].exists()
