"""`biotf.io.npz`: two owners whose arrays `np.load` would read as one are refused, naming both, whatever order
they come in; an owner may claim its own names again, and names numpy tells apart are kept."""

from __future__ import annotations

import numpy as np
import pytest

from biotf.errors import InputError
from biotf.io.npz import NpzNames


@pytest.mark.parametrize("first, second", [("a", "a"), ("a", "a.npy"), ("a.npy", "a")])
def test_names_np_load_reads_as_one_array_are_refused_naming_both_owners(first, second):
    names = NpzNames("rename one of them")
    names.add("record 'x' (record 1)", first)
    with pytest.raises(InputError, match=r"record 'x' \(record 1\) and record 'y' \(record 2\) cannot share one "
                                         r"\.npz: .*; rename one of them$"):
        names.add("record 'y' (record 2)", second)


def test_an_owner_claims_its_names_again_and_distinct_names_are_kept():
    names = NpzNames("rename one of them")
    names.add("column 'x'", "metadata/x", "metadata/x.utf8")
    names.add("column 'x'", "metadata/x")  # the same owner, again
    names.add("column 'y'", "metadata/y", "metadata/x.utf8.gz")  # not x.utf8 + ".npy": numpy keeps them apart


def test_the_rule_is_numpys(tmp_path):
    """What NpzNames refuses is what numpy confuses: `a` and `a.npy` both answer `np.load(path)["a.npy"]`."""
    path = tmp_path / "two.npz"
    np.savez(path, **{"a": np.zeros(1), "a.npy": np.ones(1)})
    with np.load(path) as loaded:
        assert sorted(loaded.files) == ["a", "a.npy"]
        assert loaded["a"][0] == loaded["a.npy"][0]  # one of the two arrays is unreachable
