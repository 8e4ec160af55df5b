"""biotf: pluggable tokenizers feeding one configurable transformer for biological and text sequences."""

from biotf.errors import BiotfError, CheckpointError, ConfigError, InputError, TokenizationError

__version__ = "0.1.0"

__all__ = ["BiotfError", "CheckpointError", "ConfigError", "InputError", "TokenizationError", "__version__"]
