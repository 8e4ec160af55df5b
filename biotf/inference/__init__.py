"""Inference: loading trained or Hugging Face checkpoints, and generating text with the KV cache."""

from biotf.inference.generation import generate

__all__ = ["generate"]
