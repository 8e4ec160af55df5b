"""`biotf generate`: continue a prompt, or draw N new sequences, with a causal model (a Hugging Face
Qwen2 / Llama / Mistral / GPT-2 / BLOOM directory or a causal biotf run: protein, DNA, SMILES, text).

    biotf generate --model Qwen2.5-0.5B-Instruct --chat --prompt "Name three amino acids."
    biotf generate --model Qwen2.5-0.5B --prompt "The ribosome" --max-new-tokens 40 --dtype bfloat16
    biotf generate --model DIR --prompt-file prompts.txt --temperature 0.7 --top-p 0.8 --seed 0
    biotf generate --model <a causal protein run> --prompt "MKT*" --option stop=strip_terminal

A single prompt streams its tokens to stdout as they come. `--prompt-file` holds one prompt per line
(blank lines skipped); they are generated as one left-padded batch and printed as JSON lines
{"prompt": ..., "completion": ...}. Sampling options default to the checkpoint's
generation_config.json (greedy when it says `do_sample: false`); `--temperature 0` is greedy.
Generation stops at any eos id of generation_config.json or the tokenizer. A biotf run's prompt follows an <eos>,
as its training saw every record (CLM packing). A summary goes to stderr.

    biotf generate --model <a causal SMILES run> --num-samples 1000 --output samples.csv --seed 0 --valid-only
    biotf generate --model <a causal protein run> --num-samples 50 --prompt M --output proteins.fasta

`--num-samples N --output FILE` draws N sequences (`biotf.inference.sampling`), each from the model's start token
(or --prompt after it) to its first eos, batched (--batch-size), never with another special token inside; the
same --seed gives the same samples at any batch size. FILE is .fasta, .csv (with tokens, log_prob, finished) or
.txt by its extension. Sampling is plain (temperature 1, no cut) unless --temperature/--top-k/--top-p or the
checkpoint's generation_config.json say otherwise. For SMILES, --valid-only draws until N molecules RDKit parses
(or --max-draws, default 10 N) and says how many invalid ones it drew. A masked-LM is refused.

    biotf generate evaluate --input samples.csv --test moses_test.csv.gz --test-scaffolds moses_test_scaffolds.csv.gz \
        --train moses_train.csv.gz --output metrics.tsv

`evaluate` computes the MOSES metrics of a file of generated SMILES (Polykovskiy et al. 2020; see
`biotf_recipes.moses`): validity over every row (an empty one is invalid), unique@1k/@10k, novelty against
--train, IntDiv1/2, Filters, and FCD, SNN, Frag and Scaf against --test (".../Test") and --test-scaffolds
(".../TestSF"). A reference file's statistics are computed once (the full MOSES test set: ChemNet over 176k
molecules, tens of minutes on 2 cores) and cached under --cache-dir by the file's CRC-32. The table goes to stdout,
and to --output (.tsv or .json) when given.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from biotf.added_commands import add_added_parsers
from biotf.commands.input_options import add_tokenizer_options, load_model
from biotf.commands.output_options import add_overwrite_argument, add_progress_argument, claim_outputs


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("generate", help="generate text from a prompt with a causal model",
                                   description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", type=Path, metavar="DIR",
                        help="a causal Hugging Face checkpoint directory (Qwen2, Llama, Mistral, GPT-2, BLOOM), or a "
                             "biotf run / exported directory")
    source = parser.add_mutually_exclusive_group()
    source.add_argument("--prompt", help="the prompt text (with --num-samples: the start of every sample)")
    source.add_argument("--prompt-file", type=Path, metavar="FILE", help="one prompt per line, run as one batch")
    samples = parser.add_argument_group("drawing new sequences")
    samples.add_argument("--num-samples", type=int, metavar="N", help="draw N sequences into --output")
    samples.add_argument("--output", type=Path, metavar="FILE", help="the samples: .fasta, .csv or .txt")
    samples.add_argument("--batch-size", type=int, default=64, metavar="B", help="samples drawn together (default 64)")
    samples.add_argument("--valid-only", action="store_true",
                         help="SMILES: keep drawing until N samples RDKit parses (invalid ones are counted)")
    samples.add_argument("--max-draws", type=int, metavar="M", help="with --valid-only: stop after M draws "
                                                                    "(default 10 N)")
    add_progress_argument(samples)
    add_overwrite_argument(samples)
    parser.add_argument("--chat", action="store_true", help="wrap each prompt as a user turn in the chat template")
    parser.add_argument("--system", metavar="TEXT", help="system turn for --chat (default: the template's own)")
    parser.add_argument("--max-new-tokens", type=int, metavar="N",
                        help="default: generation_config.json's (256 if silent), at most what the model's positions "
                             "leave; a biotf run: all they leave")
    parser.add_argument("--temperature", type=float, metavar="T", help="0 = greedy; default: generation_config.json")
    parser.add_argument("--top-k", type=int, metavar="K", help="sample among the K most likely tokens (0 = all)")
    parser.add_argument("--top-p", type=float, metavar="P", help="sample within the smallest set of probability P")
    parser.add_argument("--repetition-penalty", type=float, metavar="R", help="HF's repetition penalty (1 = none)")
    parser.add_argument("--seed", type=int, help="random seed for sampling (same seed, same text)")
    parser.add_argument("--dtype", default="float32",
                        help="weights and compute dtype: float32 (default) or bfloat16 (checked when loading)")
    parser.add_argument("--device", default="cpu", help="torch device (default cpu)")
    parser.add_argument("--verbose", action="store_true",
                        help="say on stderr which decoding paths this machine takes and the timings they rest on")
    parser.add_argument("--truncate-prompt", action="store_true",
                        help="cut too long prompts from the left (with a warning) instead of refusing them")
    add_tokenizer_options(parser, "change a policy of the model's tokenizer, e.g. stop=strip_terminal, "
                                  "unknown=to_unk (repeatable; its vocabulary must stay the same)")
    parser.set_defaults(run=run, generate_parser=parser)
    forms = parser.add_subparsers(dest="form", metavar="{evaluate}")
    add_added_parsers(forms, "generate", __doc__)  # `evaluate`: the MOSES recipe's (biotf_recipes)


def run(args: argparse.Namespace) -> int:
    from biotf.cli import request_of
    from biotf.inference.generate_job import GenerateRequest, complete_prompts, draw_samples

    if args.model is None:
        args.generate_parser.error("the following arguments are required: --model (or use `biotf generate evaluate`)")
    request = request_of(GenerateRequest, args, progress=not args.no_progress)
    request.check()
    if args.num_samples is not None:
        from biotf.inference.sampling import SAMPLE_FORMATS
        from biotf.io.outputs import output_format

        output_format(args.output, SAMPLE_FORMATS, "--output")
        with claim_outputs(args, {"--output": args.output}, [args.model]):
            print("\n".join(draw_samples(*load_generator(args), request, args.command)), file=sys.stderr)
            return 0
    prompts = request.prompts()
    summary = complete_prompts(*load_generator(args), request, prompts, sys.stdout, args.command)
    print("\n".join(summary), file=sys.stderr)
    return 0


def load_generator(args: argparse.Namespace) -> tuple:
    """--model's decoder, tokenizer (with --option's policies) and generation defaults; --verbose: the plan too."""
    model = load_model(args, args.device, dtype=args.dtype, for_generation=True)
    decoder, defaults = model.decoding()
    if args.verbose:
        print(decoder.plan.describe(), file=sys.stderr)
    return decoder, model.tokenizer, defaults
