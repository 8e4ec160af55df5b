"""The fine-tuning modes moved to `biotf.model.modes` (they decide which of a Transformer's weights train: model
code, which the training schema's `finetune.mode` check needs below this package); their names stay importable here."""

from biotf.model.modes import MODES, Frozen, Full, LoRA, Mode, build_mode, register_mode

__all__ = ["MODES", "Frozen", "Full", "LoRA", "Mode", "build_mode", "register_mode"]
