"""biotf: pluggable tokenizers feeding one configurable transformer for biological and text sequences."""

from biotf.errors import ArgumentError, BiotfError, CheckpointError, ConfigError, InputError, TokenizationError

__version__ = "0.1.0"

__all__ = ["ArgumentError", "BiotfError", "CheckpointError", "ConfigError", "InputError", "Model", "TokenizationError",
           "__version__", "load_pretrained"]


def __getattr__(name: str):
    # Imported on first use so that `import biotf` (and the CLI's startup) does not pay for torch.
    if name == "Model":
        from biotf.api import Model

        return Model
    if name == "load_pretrained":
        from biotf.checkpoint.loading import load_pretrained

        return load_pretrained
    raise AttributeError(f"module 'biotf' has no attribute {name!r}")
