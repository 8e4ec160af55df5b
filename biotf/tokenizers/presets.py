"""A tokenizer by name or path, as `--tokenizer` takes it: a saved tokenizer, a preset of conf/tokenizer (what
`tokenizer=<name>` trains with) or a registered scheme."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from biotf.errors import ConfigError
from biotf.conventions import CONF_DIR
from biotf.tokenizers.base import Tokenizer, registered_tokenizers
from biotf.tokenizers.build import build_tokenizer, with_options
from biotf.naming import parameter


def presets() -> dict[str, Path]:
    """The tokenizer presets of training (`tokenizer=<name>`): every `<name>.yaml` of the config's tokenizer group."""
    return {path.stem: path for path in sorted((CONF_DIR / "tokenizer").glob("*.yaml"))}


def resolve_tokenizer(spec: str, options: dict[str, Any]) -> Tokenizer:
    """A saved tokenizer when `spec` is an existing path (`options` applied by `with_options`), else the preset
    `spec` (what `tokenizer=spec` trains with) or the registered scheme `spec`, built with `options`."""
    import biotf.tokenizers  # registers the built-in schemes

    path = Path(spec)
    if path.exists():
        return with_options(biotf.tokenizers.load_tokenizer(path.parent if path.is_file() else path), options)
    preset = presets().get(spec)
    if preset is not None:
        return build_tokenizer({**yaml.safe_load(preset.read_text(encoding="utf-8")), **options})
    if spec not in registered_tokenizers():
        names = sorted({*presets(), *registered_tokenizers()})
        raise ConfigError(parameter("tokenizer"), spec, allowed=f"{', '.join(names)} or a saved tokenizer path")
    return build_tokenizer({"kind": spec, **options})
