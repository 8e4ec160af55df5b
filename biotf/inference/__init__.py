"""Inference: generation with the KV cache (and `fast/`: optimize_for_decoding), chat templates, a causal model
loaded for generation (`pretrained`), N new sequences and their files (`sampling`), and a fine-tuned model's
predictions (`predict`)."""

from biotf.inference.generation import generate

__all__ = ["generate"]
