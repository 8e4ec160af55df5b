"""The one argument check at the entry of every `biotf.Model` method (`checked_arguments`): each argument is checked
by its parameter's name (`ARGUMENT_CHECKS`) before the method runs, and a bad one is one `ArgumentError` naming it as
the caller wrote it (`sequences`, `sequences[2]`, `seed`), the line a command prints for the same bad input: no
TypeError from deep inside, no silent answer (`score([""])` is refused as `biotf score` refuses an empty record).

A check returns the value the method gets: `sequences` and `prompts`, any iterable (a generator too), are read once
here into a list."""

from __future__ import annotations

import functools
import inspect
import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, TypeVar

from biotf.devices import check_device
from biotf.errors import ArgumentError, ConfigError, check_int
from biotf.inference.generation import MAX_SEED
from biotf.io.readers import Record

F = TypeVar("F", bound=Callable[..., Any])
SEQUENCES = "a str, or an iterable of str or biotf.io.readers.Record"


def _path(name: str, value: Any) -> Any:
    if not isinstance(value, (str, os.PathLike)) or isinstance(value, bytes):
        raise ArgumentError(name, value, "a path: str or pathlib.Path")
    return value


def _items(name: str, value: Any, allowed: str) -> list[Any]:
    """`value`, an iterable that is no str / bytes, read into a list."""
    if isinstance(value, (bytes, bytearray)):
        raise ArgumentError(name, value, allowed, reason="bytes, not text: decode them first (.decode())")
    if isinstance(value, Mapping) or not isinstance(value, Iterable):
        raise ArgumentError(name, value, allowed)
    return list(value)


def _sequences(name: str, value: Any) -> str | list[str | Record]:
    """One sequence or many, each a non-empty str or a `Record` of one."""
    items = [value] if isinstance(value, str) else _items(name, value, SEQUENCES)
    for position, item in enumerate(items):
        key = name if isinstance(value, str) else f"{name}[{position}]"
        text = item.sequence if isinstance(item, Record) else item
        if not isinstance(text, str):
            raise ArgumentError(key, item, SEQUENCES)
        if not text:
            raise ArgumentError(key, item, reason="an empty sequence (as `biotf` refuses an empty record): it has "
                                                  "no token to embed, score or predict")
    return value if isinstance(value, str) else items


def _prompts(name: str, value: Any) -> str | list[str]:
    """One prompt or a non-empty list of them, each a str."""
    if isinstance(value, str):
        return value
    items = _items(name, value, "a str, or a sequence of str")
    if not items:
        raise ArgumentError(name, value, "a str, or a sequence of str", reason="no prompt to complete")
    for position, item in enumerate(items):
        if not isinstance(item, str):
            raise ArgumentError(f"{name}[{position}]", item, "str")
    return items


def _ids(name: str, value: Any) -> Any:
    if value is not None and (isinstance(value, (str, bytes)) or not isinstance(value, Sequence)
                              and not (hasattr(value, "__len__") and hasattr(value, "__getitem__"))):  # numpy's too
        raise ArgumentError(name, value, "None, or a sequence of ids, one per sequence")
    return value


def _integer(minimum: int, optional: bool = False, maximum: int | None = None) -> Callable[[str, Any], Any]:
    def check(name: str, value: Any) -> Any:
        try:
            check_int(name, value, minimum, optional, maximum)
        except ConfigError as error:
            raise ArgumentError(name, value, error.allowed.replace("null", "None")) from None
        return value

    return check


def _kind(kinds: type | tuple[type, ...], allowed: str) -> Callable[[str, Any], Any]:
    def check(name: str, value: Any) -> Any:
        if not isinstance(value, kinds):
            raise ArgumentError(name, value, allowed)
        return value

    return check


def _device(name: str, value: Any) -> Any:
    try:
        return check_device(name, value)
    except ConfigError as error:
        raise ArgumentError(name, value, error.allowed, error.reason) from None


# Parameter name -> its check, for every `biotf.Model` method that has one of these parameters.
ARGUMENT_CHECKS: dict[str, Callable[[str, Any], Any]] = {
    "source": _path, "directory": _path, "reference_file": _path, "sequences": _sequences, "prompts": _prompts, "ids": _ids,
    "device": _device, "seed": _integer(0, optional=True, maximum=MAX_SEED),
    **dict.fromkeys(("batch_tokens", "batch_size", "batch_pairs"), _integer(1)),
    **dict.fromkeys(("max_length", "max_new_tokens"), _integer(1, optional=True)),
    "overlap": _integer(0, optional=True),
    **dict.fromkeys(("packing", "chat", "truncate_prompt", "for_generation"), _kind(bool, "True or False")),
    **dict.fromkeys(("system", "hf"), _kind((str, type(None)), "a str, or None")),
    "tokenizer_options": _kind((Mapping, type(None)), "a mapping of option names to values, or None"),
}


def checked_arguments(method: F) -> F:
    """`method` with every argument the caller gave checked by `ARGUMENT_CHECKS` first (the defaults are valid)."""
    signature = inspect.signature(method)

    @functools.wraps(method)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        bound = signature.bind(*args, **kwargs)  # a missing or unknown argument: Python's own TypeError
        for name, value in bound.arguments.items():
            if name in ARGUMENT_CHECKS:
                bound.arguments[name] = ARGUMENT_CHECKS[name](name, value)
        return method(*bound.args, **bound.kwargs)

    return wrapper  # type: ignore[return-value]
