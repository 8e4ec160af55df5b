"""`biotf export-model <source> <dir>`: model.safetensors + config.json + tokenizer.json, loadable anywhere; with
`--hf [MODEL_TYPE]` a Hugging Face checkpoint of that family (`transformers`' Auto classes load it)."""

from __future__ import annotations

import argparse
from pathlib import Path


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "export-model", help="export a trained model to a directory (safetensors, config, tokenizer)",
        description="Write model.safetensors, config.json and tokenizer.json for a run directory (its best "
                    "checkpoint), a .ckpt file or an exported directory. Load it with biotf.Model.load(dir).")
    parser.add_argument("source", help="run directory, .ckpt file, exported or Hugging Face directory")
    parser.add_argument("directory", help="new output directory (must not exist or be empty)")
    parser.add_argument("--hf", nargs="?", const="auto", metavar="MODEL_TYPE",
                        help="write a Hugging Face checkpoint (config.json, model.safetensors, the tokenizer's "
                             "transformers files) of family MODEL_TYPE (config.json's model_type: qwen2, llama, "
                             "gpt2, bert, esm, ...; without one: the first family that holds the model)")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from biotf.api import Model
    from biotf.errors import ConfigError
    from biotf.io.outputs import hold
    from biotf.model.hf.families import WRITABLE_FAMILIES

    writers = list(WRITABLE_FAMILIES)
    if args.hf not in (None, "auto", *writers):  # before the model is read
        raise ConfigError("--hf", args.hf, allowed=" | ".join(writers))
    with hold(Path(args.directory), "directory"):  # a second export into it meanwhile is refused at once
        model = Model.load(args.source)
        path = model.save(args.directory, args.hf)
    print(f"exported {args.source} to {path} ({model.network.num_parameters():,} parameters, "
          f"tokenizer {model.tokenizer.kind} {model.tokenizer.fingerprint})")
    return 0
