"""Labels of records: parsed out of a text column by a regex, read as numbers, and written back as text."""

from __future__ import annotations

import re
from typing import Any

import numpy as np

from biotf.conventions import IGNORE_INDEX
from biotf.errors import ConfigError, InputError
from biotf.naming import parameter


def parse_labels(ids, values: np.ndarray, pattern: str | None, column: str, key: str | None = None) -> np.ndarray:
    """`values` as they are, or with `pattern` its first group (or whole match) in each; `key` names the option
    in errors (default: the parameter `label_pattern`)."""
    if pattern is None:
        return values
    key = key or parameter("label_pattern")
    try:
        regex = re.compile(pattern)
    except re.error as error:
        raise ConfigError(key, pattern, reason=str(error)) from None
    parsed = []
    for record, value in zip(ids, values):
        match = regex.search(value)
        if match is None:
            raise InputError(f"record {str(record)!r}: {column} {str(value)!r} does not match {key} {pattern!r}")
        parsed.append(match.group(1) if regex.groups else match.group(0))
    return np.array(parsed, dtype=str)


def numeric(values: np.ndarray) -> np.ndarray | None:
    """The values as floats when every one parses as a number, else None."""
    try:
        return values.astype(np.float64)
    except ValueError:
        return None


def label_text(value: Any, classes: list[str] | None, task: str) -> str:
    """A label or a prediction as text: the value (regression), the class name, or one class character per labelled
    position (token; -100 positions left out)."""
    if task == "regression":
        return f"{float(np.ravel(value)[0]):.6g}"
    if task == "token":
        return "".join(classes[int(v)] for v in np.ravel(value) if int(v) != IGNORE_INDEX)
    return classes[int(value)]
