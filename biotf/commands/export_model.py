"""`biotf export-model <run | .ckpt> <dir>`: model.safetensors + config.json + tokenizer.json, loadable anywhere."""

from __future__ import annotations

import argparse


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "export-model", help="export a trained model to a directory (safetensors, config, tokenizer)",
        description="Write model.safetensors, config.json and tokenizer.json for a run directory (its best "
                    "checkpoint), a .ckpt file or an exported directory. Load it with biotf.load_pretrained(dir).")
    parser.add_argument("source", help="run directory, .ckpt file or exported directory")
    parser.add_argument("directory", help="new output directory (must not exist or be empty)")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from biotf.checkpoint import save_pretrained
    from biotf.checkpoint.loading import load_pretrained

    model, tokenizer = load_pretrained(args.source)
    path = save_pretrained(model, tokenizer, args.directory)
    print(f"exported {args.source} to {path} ({model.num_parameters():,} parameters, "
          f"tokenizer {tokenizer.kind} {tokenizer.fingerprint})")
    return 0
