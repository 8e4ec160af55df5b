"""Every name a package exports lazily (`biotf.lazy.lazy_exports`) resolves: a module renamed without its entry in
the package's table would fail only when a user first reads the name."""

from __future__ import annotations

import importlib
import pkgutil

import pytest

import biotf


def packages_with_lazy_exports() -> list[str]:
    names = ["biotf"] + [info.name for info in pkgutil.walk_packages(biotf.__path__, "biotf.") if info.ispkg]
    return [name for name in names if "_EXPORTS" in vars(importlib.import_module(name))]


def test_lazy_packages_are_found():
    assert {"biotf.export", "biotf.scoring", "biotf.structure"} <= set(packages_with_lazy_exports())


@pytest.mark.parametrize("package", packages_with_lazy_exports())
def test_every_lazy_export_resolves(package):
    module = importlib.import_module(package)
    assert [name for name in module._EXPORTS if getattr(module, name, None) is None] == []


def test_an_unknown_name_is_an_attribute_error():
    with pytest.raises(AttributeError, match="has no attribute 'no_such_name'"):
        biotf.export.no_such_name  # noqa: B018
