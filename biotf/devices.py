"""The one check of a torch device a user names (`--device` of every command, `biotf.Model.load(device=...)`): a
device string torch cannot parse (`tpu9`), or one this machine does not have (`cuda` without CUDA, `cuda:3` on a
machine with one GPU), is one line listing the devices it has, before any model is read."""

from __future__ import annotations

from typing import Any

from biotf.errors import ConfigError


def available_devices() -> list[str]:
    """The devices this machine runs torch on: cpu, then cuda, cuda:0.. (CUDA), mps (Apple)."""
    import torch

    found = ["cpu"]
    if torch.cuda.is_available():
        found += ["cuda", *(f"cuda:{index}" for index in range(torch.cuda.device_count()))]
    if torch.backends.mps.is_available():
        found.append("mps")
    return found


def check_device(key: str, value: Any) -> Any:
    """`value` (a device string or `torch.device`) if this machine has that device; else a ConfigError naming `key`
    (`--device`, `device`) and the devices it has."""
    import torch

    try:
        device = value if isinstance(value, torch.device) else torch.device(value)
    except (RuntimeError, TypeError, ValueError):
        device = None
    if device is not None:
        name = device.type if device.index is None else f"{device.type}:{device.index}"
        if name in available_devices():
            return value
    raise ConfigError(key, value if isinstance(value, str) else str(value), " | ".join(available_devices()),
                      reason=None if device is None else "this machine has no such device")
