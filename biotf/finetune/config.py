"""The `finetune` node of the training schema moved to `biotf.training.finetune_config` (the one Hydra schema of
`python train.py` holds it, and `biotf.training` never imports this package); its names stay importable here."""

from biotf.training.finetune_config import MONITORS, FinetuneConfig, SplitConfig, check_finetune

__all__ = ["MONITORS", "FinetuneConfig", "SplitConfig", "check_finetune"]
