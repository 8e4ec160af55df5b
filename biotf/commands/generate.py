"""`biotf generate`: continue a prompt with a causal model (a Hugging Face Qwen2 directory or a biotf run).

    biotf generate --model Qwen2.5-0.5B-Instruct --chat --prompt "Name three amino acids."
    biotf generate --model Qwen2.5-0.5B --prompt "The ribosome" --max-new-tokens 40 --dtype bfloat16
    biotf generate --model DIR --prompt-file prompts.txt --temperature 0.7 --top-p 0.8 --seed 0
    biotf generate --model <a causal protein run> --prompt "MKT*" --option stop=strip_terminal

A single prompt streams its tokens to stdout as they come. `--prompt-file` holds one prompt per line
(blank lines skipped); they are generated as one left-padded batch and printed as JSON lines
{"prompt": ..., "completion": ...}. Sampling options default to the checkpoint's
generation_config.json (greedy when it says `do_sample: false`); `--temperature 0` is greedy.
Generation stops at any eos id of generation_config.json or the tokenizer. A summary goes to stderr.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from pathlib import Path

from biotf.commands.input_options import add_tokenizer_options, as_option_errors, parse_options
from biotf.errors import ConfigError


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("generate", help="generate text from a prompt with a causal model",
                                   description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", required=True, type=Path, metavar="DIR",
                        help="a Hugging Face Qwen2 checkpoint directory, or a biotf run / exported directory")
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--prompt", help="the prompt text")
    source.add_argument("--prompt-file", type=Path, metavar="FILE", help="one prompt per line, run as one batch")
    parser.add_argument("--chat", action="store_true", help="wrap each prompt as a user turn in the chat template")
    parser.add_argument("--system", metavar="TEXT", help="system turn for --chat (default: the template's own)")
    parser.add_argument("--max-new-tokens", type=int, metavar="N", help="default: generation_config.json, else 256")
    parser.add_argument("--temperature", type=float, metavar="T", help="0 = greedy; default: generation_config.json")
    parser.add_argument("--top-k", type=int, metavar="K", help="sample among the K most likely tokens (0 = all)")
    parser.add_argument("--top-p", type=float, metavar="P", help="sample within the smallest set of probability P")
    parser.add_argument("--repetition-penalty", type=float, metavar="R", help="HF's repetition penalty (1 = none)")
    parser.add_argument("--seed", type=int, help="random seed for sampling (same seed, same text)")
    parser.add_argument("--dtype", default="float32",
                        help="weights and compute dtype: float32 (default) or bfloat16 (checked when loading)")
    parser.add_argument("--truncate-prompt", action="store_true",
                        help="cut too long prompts from the left (with a warning) instead of refusing them")
    add_tokenizer_options(parser, "change a policy of the model's tokenizer, e.g. stop=strip_terminal, "
                                  "unknown=to_unk (repeatable; its vocabulary must stay the same)")
    parser.set_defaults(run=run)


def read_prompts(path: Path) -> list[str]:
    """The non-blank lines of `path`, read by biotf's text reader: gzip and Windows line endings read
    transparently, a non-UTF-8 byte or an empty file is one InputError naming the file and line."""
    from biotf.data.readers import ReaderOptions, read_records

    return [record.sequence for record in read_records(path, ReaderOptions(format="text"))]


def run(args: argparse.Namespace) -> int:
    from biotf.inference.fast import optimize_for_decoding
    from biotf.inference.generation import Sampling, TextStreamer, encode_prompts, fit_prompts, generate_ids
    from biotf.inference.pretrained import load_for_generation
    from biotf.tokenizers.base import PolicyStats
    from biotf.tokenizers.loading import with_options

    prompts = read_prompts(args.prompt_file) if args.prompt_file else [args.prompt]
    if args.system is not None and not args.chat:
        raise ConfigError("--system", args.system, reason="a system prompt needs --chat")
    model, tokenizer, defaults = load_for_generation(args.model, args.dtype)
    tokenizer_options = parse_options(args.option)
    with as_option_errors(tokenizer_options):
        tokenizer = with_options(tokenizer, tokenizer_options)
    policies = PolicyStats()

    def option(value, default):
        return default if value is None else value

    sampling = Sampling(temperature=option(args.temperature, defaults.temperature),
                        top_k=option(args.top_k, defaults.top_k), top_p=option(args.top_p, defaults.top_p),
                        repetition_penalty=option(args.repetition_penalty, defaults.repetition_penalty))
    max_new_tokens = option(args.max_new_tokens, defaults.max_new_tokens)
    # Library warnings (a truncated prompt) as one "biotf generate: warning: ..." line on stderr.
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter(f"biotf {args.command}: warning: %(message)s"))
    logger = logging.getLogger("biotf.inference")
    logger.addHandler(handler)
    try:
        ids = fit_prompts(encode_prompts(tokenizer, prompts, args.chat, args.system, policies), max_new_tokens,
                          model.config.max_seq_len, args.truncate_prompt)
    finally:
        logger.removeHandler(handler)
    decoder = optimize_for_decoding(model)
    streamer = None
    if len(prompts) == 1:
        streamer = TextStreamer(tokenizer, lambda text: (sys.stdout.write(text), sys.stdout.flush()))
    start = time.perf_counter()
    new = generate_ids(decoder, ids, max_new_tokens=max_new_tokens, sampling=sampling, seed=args.seed,
                       eos_token_ids=defaults.eos_token_ids, pad_token_id=defaults.pad_token_id, on_token=streamer)
    seconds = time.perf_counter() - start
    if streamer is not None:
        sys.stdout.write("\n")
    else:
        for prompt, row in zip(prompts, new):
            completion = tokenizer.decode(row, skip_special_tokens=True)
            sys.stdout.write(json.dumps({"prompt": prompt, "completion": completion}, ensure_ascii=False) + "\n")
    sys.stdout.flush()
    produced = sum(len(row) for row in new)
    mode = "greedy" if sampling.greedy else f"sampling (temperature {sampling.temperature}, top-k {sampling.top_k}, " \
                                           f"top-p {sampling.top_p})"
    print(f"{len(prompts)} prompt(s), {sum(map(len, ids))} prompt tokens, {produced} new tokens in {seconds:.2f} s "
          f"({produced / seconds:.1f} tokens/s), {mode}", file=sys.stderr)
    if policies:
        print(f"tokenizer policies: {policies.summary()}", file=sys.stderr)
    return 0
