"""Reading files a user hands biotf (a model's config.json, a tokenizer.json, a torch pickle of weights): whatever
they hold, the result is either plain values of the expected shape or one line naming the file.

- `read_json_object(path, what)` / `parse_json_object(text, source, what)`: a JSON object, or the error class
  given (InputError by default) for a file that cannot be read, is not UTF-8 (`read_text`), is not JSON, nests
  deeper than Python's parser goes (200k `[` raise RecursionError inside `json`), or is not an object. `types`
  and `required` check the fields the caller relies on (`{"model": dict}`) before anything reads them:
  `"model": null` is refused here, not as a TypeError three calls later.
- `load_tensors(path, what)`: `torch.load(weights_only=True)`; a pickle that holds anything but tensors and plain
  values is refused as a CheckpointError that says what it held, without torch's advice to load it unsafely.
- `open_safetensors(path, what)` / `read_safetensors(path, what)`: a safetensors file's handle or all its tensors;
  a damaged one (a header length past the file, a header that is no JSON, offsets beyond a truncated end) is the
  error class given (CheckpointError by default) naming it, not safetensors' own `SafetensorError`.
- `check_finite(tensors, source)`: refuses weights holding a NaN or an infinity, naming the file and the first such
  tensor: a model built from them computes NaN everywhere, and generation would "succeed" with empty samples.
- `contained(directory, name, source, what)`: the file a manifest (modules.json, a search index's index.json, a
  weights index) names inside its directory, refused where the name leaves it (absolute, or through `..`).
- `file_crc32(path)`: the CRC-32 of a file's bytes, which writers record so that damaged bytes are refused on read.
"""

from __future__ import annotations

import json
import pickle
import re
import warnings
import zlib
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from biotf.errors import BiotfError, CheckpointError, InputError

JSON_KINDS = {dict: "an object", list: "an array", str: "a string", bool: "true or false", int: "a number",
              float: "a number", type(None): "null"}
# torch's own reason after its advice, e.g. "Unsupported global: GLOBAL getattr" or "Unsupported operand 149".
UNPICKLER_REASON = re.compile(r"WeightsUnpickler error:\s*(.+?)(?: was not an allowed global|\. |\n|$)")


def json_kind(value: Any) -> str:
    """The JSON name of a parsed value's type ("an array", "null"), for messages."""
    return JSON_KINDS.get(type(value), type(value).__name__)


def _expected(types: tuple[type, ...]) -> str:
    """The JSON names of `types`; int alone (no float) is "an integer", as a count or a size must be."""
    names = dict.fromkeys("an integer" if t is int and float not in types else JSON_KINDS.get(t, t.__name__)
                          for t in types)
    return " or ".join(names)


def wrong_types(data: Mapping[str, Any], types: Mapping[str, type | tuple[type, ...]]) -> str | None:
    """Why the first field of `data` named in `types` does not hold one of its Python type(s) (int excludes bool; a
    field that may be null lists `type(None)`), or None when all do."""
    for key, allowed in types.items():
        if key in data:
            value = data[key]
            allowed = allowed if isinstance(allowed, tuple) else (allowed,)
            if (isinstance(value, bool) and bool not in allowed) or not isinstance(value, allowed):
                if isinstance(value, float) and int in allowed:  # 32.5, or 32.0: a count is written as an integer
                    return f"'{key}' is {value!r}, expected {_expected(allowed)}"
                return f"'{key}' is {json_kind(value)}, expected {_expected(allowed)}"
    return None


def parse_json_object(text: str, source: str, what: str, error: type[BiotfError] = InputError,
                      types: Mapping[str, type | tuple[type, ...]] | None = None,
                      required: Iterable[str] = ()) -> dict[str, Any]:
    """The JSON object `text` holds; `error("cannot read <what> <source>: <reason>")` for anything else.

    `types` maps keys to the Python type(s) their values must have where present (int excludes bool; a key that
    may be null lists `type(None)`); the keys of `required` must be present."""
    def refuse(reason: str) -> BiotfError:
        return error(f"cannot read {what} {source}: {reason}")

    try:
        data = json.loads(text)
    except RecursionError:
        raise refuse("nested too deeply to be JSON biotf reads") from None
    except ValueError as cause:  # json.JSONDecodeError, and int() of a number longer than 4300 digits
        raise refuse(f"not valid JSON ({cause})") from None
    if not isinstance(data, dict):
        raise refuse(f"expected a JSON object, found {json_kind(data)}")
    missing = [key for key in required if key not in data]
    if missing:
        raise refuse(f"no {', '.join(repr(key) for key in missing)}")
    reason = wrong_types(data, types or {})
    if reason is not None:
        raise refuse(reason)
    return data


def contained(directory: Path, name: str, source: str | Path, what: str,
              error: type[BiotfError] = InputError) -> Path:
    """`directory / name` for a file that the manifest `source` names as part of `directory`; `error` naming `source`
    where `name` is absolute or climbs out through `..` (a manifest lists its own files, and reading one elsewhere
    would read a file the user never handed biotf, its CRC-32 recorded beside it by whoever wrote the manifest)."""
    if Path(name).is_absolute() or ".." in Path(name).parts:
        raise error(f"{source}: {what} {name!r} leaves the directory {directory}; the files it lists lie inside it")
    return directory / name


def read_text(path: str | Path, what: str, error: type[BiotfError] = InputError) -> str:
    """The UTF-8 text of the file `path`; `error` naming it (as `what`) when it cannot be read or is not UTF-8."""
    try:
        return Path(path).read_bytes().decode("utf-8")
    except OSError as cause:
        raise error(f"cannot read {what} {path}: {cause.strerror or cause}") from None
    except UnicodeDecodeError as cause:
        raise error(f"cannot read {what} {path}: not UTF-8 text ({cause.reason} at byte {cause.start})") from None


def read_json_object(path: str | Path, what: str, error: type[BiotfError] = InputError,
                     types: Mapping[str, type | tuple[type, ...]] | None = None,
                     required: Iterable[str] = ()) -> dict[str, Any]:
    """The JSON object in the file `path` (`what` names it in messages: "tokenizer file", "model config"); see
    `parse_json_object` for `error`, `types` and `required`."""
    return parse_json_object(read_text(path, what, error), str(path), what, error, types, required)


def load_tensors(path: str | Path, what: str, plain_classes: tuple[type, ...] = (), **options: Any) -> Any:
    """`torch.load(path, weights_only=True, **options)`: tensors and plain values only, never code; a file that
    holds anything else, or is no torch file, is a CheckpointError naming it (`what`: "checkpoint", ...).
    `plain_classes` are classes whose unpickling only sets attributes (`argparse.Namespace`, which fair-esm's
    checkpoints hold), allowed besides; what they hold is restricted as the rest."""
    import torch

    try:
        with warnings.catch_warnings(), torch.serialization.safe_globals(list(plain_classes)):
            # an old pickle protocol: the refusal below says all there is to say
            warnings.filterwarnings("ignore", message="Detected pickle protocol")
            return torch.load(path, weights_only=True, **options)
    except pickle.UnpicklingError as cause:
        found = UNPICKLER_REASON.search(str(cause))
        reason = f" (torch: {found.group(1).strip()})" if found and found.group(1).strip() else ""
        raise CheckpointError(f"cannot read {what} {path} as plain tensors and values{reason}: refused, since "
                              "unpickling anything else could run code") from None
    except Exception as cause:  # torch raises RuntimeError, EOFError, KeyError... for a damaged or foreign file
        lines = str(cause).strip().splitlines()
        raise CheckpointError(f"cannot read {what} {path}: {lines[0] if lines else type(cause).__name__}") from None


def _safetensors_refusal(path: str | Path, what: str, error: type[BiotfError], cause: Exception) -> BiotfError:
    lines = str(cause).strip().splitlines()
    return error(f"cannot read {what} {path}: not a readable safetensors file "
                 f"({lines[0] if lines else type(cause).__name__})")


def open_safetensors(path: str | Path, what: str = "weights", error: type[BiotfError] = CheckpointError) -> Any:
    """safetensors' `safe_open(path, framework="pt")` (use it as a context manager); a file it cannot parse is
    `error` naming it (`what`: "weights", "LoRA adapter", ...)."""
    from safetensors import safe_open

    try:
        return safe_open(str(path), framework="pt")
    except Exception as cause:  # SafetensorError, and OSError for a file that vanished or cannot be read
        raise _safetensors_refusal(path, what, error, cause) from None


def read_safetensors(path: str | Path, what: str = "weights",
                     error: type[BiotfError] = CheckpointError) -> dict[str, Any]:
    """Every tensor of a safetensors file (`open_safetensors`'s refusals; a tensor that cannot be read too)."""
    with open_safetensors(path, what, error) as handle:
        try:
            return {name: handle.get_tensor(name) for name in handle.keys()}
        except Exception as cause:
            raise _safetensors_refusal(path, what, error, cause) from None


def check_finite(tensors: Iterable[tuple[str, Any]], source: str | Path) -> None:
    """CheckpointError naming `source` and the first of the (name, tensor) pairs whose floating-point tensor holds a
    NaN or an infinity. A tensor's sum is finite only if every element is (a NaN or an infinity carries through
    every addition), so one sum clears a tensor; only a non-finite sum (also reached by overflow) is checked element
    by element. The sum allocates nothing: `isfinite(tensor).all()` on every tensor, a mask as large as each, took
    20x as long (30 MB of ESM-2 8M weights: 0.5 s against 0.025 s on one thread). The sums run on one thread: a
    pass over memory gains little from more, and on busy cores each parallel region waits for a descheduled worker
    (the same sums took 2.5 s on two threads of a loaded 2-core machine)."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        for name, tensor in tensors:
            if isinstance(tensor, torch.Tensor) and tensor.is_floating_point() and not _finite(tensor):
                kind = "NaN" if bool(torch.isnan(tensor).any()) else "an infinity"
                raise CheckpointError(f"cannot load weights {source}: tensor {name} holds {kind} (the weights are "
                                      "damaged or come from a diverged training run; use an earlier checkpoint)")
    finally:
        torch.set_num_threads(threads)


def _finite(tensor: Any) -> bool:
    """Whether every element of a floating-point tensor is finite (`check_finite`: its sum first)."""
    import torch

    return bool(torch.isfinite(tensor.sum())) or bool(torch.isfinite(tensor).all())


def file_crc32(path: str | Path, chunk: int = 1 << 22) -> int:
    """CRC-32 of a file's bytes, read in chunks: every byte counts, headers and metadata included (the token cache's
    shards, a fine-tuned export's head and LoRA adapter)."""
    crc = 0
    with open(path, "rb") as handle:
        while block := handle.read(chunk):
            crc = zlib.crc32(block, crc)
    return crc
