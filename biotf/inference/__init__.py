"""Inference: loading trained models (biotf runs, checkpoints, exported directories) with their tokenizers."""

from biotf.inference.loading import Pretrained, load_pretrained, save_pretrained

__all__ = ["Pretrained", "load_pretrained", "save_pretrained"]
