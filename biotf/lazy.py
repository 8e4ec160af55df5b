"""Package attributes imported on first use (PEP 562), so that `import biotf.data` (as the `biotf` command's
parsers do) does not pay for torch, Biopython or pandas until something actually needs them."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any


def lazy_exports(package: str, exports: dict[str, str]) -> Callable[[str], Any]:
    """A module `__getattr__` for `package` that imports each name of `exports` (name -> submodule) when first read."""

    def __getattr__(name: str) -> Any:
        if name not in exports:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(f"{package}.{exports[name]}"), name)
        setattr(importlib.import_module(package), name, value)  # later reads skip this function
        return value

    return __getattr__
