"""The one rule for the array names of every .npz biotf writes (`biotf embed`, `biotf contacts`)."""

from __future__ import annotations

from biotf.errors import InputError


class NpzNames:
    """The array names of one .npz, refused in one line when `np.load` could not tell two owners' apart: numpy
    stores array `x` as member `x.npy`, and `np.load(path)[key]` gives member `key` when there is one, else
    `key.npy`, so equal names, or a name that is another plus ".npy" (`a` and `a.npy`), read one array under both.
    Every .npz writer of biotf (embed, contacts) claims its names here before it writes."""

    def __init__(self, fix: str):
        self.fix = fix  # how the user avoids a clash, ending the message
        self.owners: dict[str, str] = {}  # every name and its ".npy" form -> who claimed it

    def add(self, owner: str, *names: str) -> None:
        """Claim `names` for `owner` ("record 'a' (record 1)"), or refuse the first that clashes, naming both owners."""
        for name in names:
            for alias in (name, f"{name}.npy"):
                if self.owners.setdefault(alias, owner) != owner:
                    raise InputError(f"{self.owners[alias]} and {owner} cannot share one .npz: both would be read as "
                                     f"np.load(path)[{alias!r}] (numpy stores array x as member x.npy); {self.fix}")
