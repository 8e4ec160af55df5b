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
`biotf.inference.moses`): validity over every row (an empty one is invalid), unique@1k/@10k, novelty against
--train, IntDiv1/2, Filters, and FCD, SNN, Frag and Scaf against --test (".../Test") and --test-scaffolds
(".../TestSF"). A reference file's statistics are computed once (the full MOSES test set: ChemNet over 176k
molecules, tens of minutes on 2 cores) and cached under --cache-dir by the file's CRC-32. The table goes to stdout,
and to --output (.tsv or .json) when given.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from pathlib import Path

from biotf.commands.input_options import add_input_arguments, add_tokenizer_options, load_model, reader_options
from biotf.commands.output_options import add_overwrite_argument, claim_outputs
from biotf.errors import CheckpointError, ConfigError, check_int
from biotf.conventions import counted


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
    samples.add_argument("--no-progress", action="store_true",
                         help="no progress bar (on a terminal) or progress lines (elsewhere) on stderr")
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
    parser.add_argument("--verbose", action="store_true",
                        help="say on stderr which decoding paths this machine takes and the timings they rest on")
    parser.add_argument("--truncate-prompt", action="store_true",
                        help="cut too long prompts from the left (with a warning) instead of refusing them")
    add_tokenizer_options(parser, "change a policy of the model's tokenizer, e.g. stop=strip_terminal, "
                                  "unknown=to_unk (repeatable; its vocabulary must stay the same)")
    parser.set_defaults(run=run, generate_parser=parser)
    forms = parser.add_subparsers(dest="form", metavar="{evaluate}")
    evaluate = forms.add_parser("evaluate", help="MOSES metrics of generated SMILES against reference sets",
                                description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_input_arguments(evaluate)
    references = evaluate.add_argument_group("reference sets (MOSES: test.csv.gz, test_scaffolds.csv.gz, "
                                             "train.csv.gz)")
    references.add_argument("--test", type=Path, metavar="FILE", help="FCD, SNN, Frag and Scaf .../Test against it")
    references.add_argument("--test-scaffolds", type=Path, metavar="FILE", help=".../TestSF against it")
    references.add_argument("--train", type=Path, metavar="FILE", help="novelty against it")
    references.add_argument("--reference-column", metavar="NAME",
                            help="the SMILES column of the reference CSVs (default: sequence, seq, smiles, ...)")
    references.add_argument("--cache-dir", type=Path, metavar="DIR",
                            help="where the reference statistics are cached (default .cache/biotf/moses)")
    evaluate.add_argument("--output", type=Path, metavar="FILE", help="the metrics as .tsv or .json")
    evaluate.add_argument("--batch-size", type=int, default=1024, metavar="B",
                          help="molecules through ChemNet at once (default 1024)")
    evaluate.add_argument("--device", default="cpu", help="torch device of ChemNet (default cpu)")
    add_overwrite_argument(evaluate)
    evaluate.set_defaults(run=run_evaluate)


def read_prompts(path: Path) -> list[str]:
    """The non-blank lines of `path`, read by biotf's text reader: gzip and Windows line endings read
    transparently, a non-UTF-8 byte or an empty file is one InputError naming the file and line."""
    from biotf.io.readers import ReaderOptions, read_records

    return [record.sequence for record in read_records(path, ReaderOptions(format="text"))]


def option(value, default):
    return default if value is None else value


# The flag of each `Sampling` field: a value refused is named as the user gave it.
SAMPLING_FLAGS = {"temperature": "--temperature", "top_k": "--top-k", "top_p": "--top-p",
                  "repetition_penalty": "--repetition-penalty"}


def sampling_settings(args: argparse.Namespace, defaults, temperature: float):
    """The sampling the flags ask for, each one that is not given taken from the checkpoint's `defaults`
    (`temperature`: the default temperature, which differs between prompts and drawn samples). A value refused is
    named by its flag, or as the checkpoint's (its generation_config.json) where it came from there."""
    from biotf.inference.generation import Sampling

    try:
        return Sampling(temperature=option(args.temperature, temperature), top_k=option(args.top_k, defaults.top_k),
                        top_p=option(args.top_p, defaults.top_p),
                        repetition_penalty=option(args.repetition_penalty, defaults.repetition_penalty))
    except ConfigError as error:
        if getattr(args, error.key) is not None:
            raise ConfigError(SAMPLING_FLAGS[error.key], error.value, error.allowed) from None
        raise CheckpointError(f"the generation settings of {args.model} set {error.key}={error.value!r}, which biotf "
                              f"cannot sample with (allowed: {error.allowed}); override it with "
                              f"{SAMPLING_FLAGS[error.key]}") from None


def check_sample_arguments(args: argparse.Namespace) -> None:
    """Refuse a bad count, a sampling value out of range or a flag of the other mode (prompts vs --num-samples)
    before anything is loaded."""
    from biotf.inference.generation import Sampling

    for flag, value, minimum in (("--seed", args.seed, 0), ("--batch-size", args.batch_size, 1),
                                 ("--num-samples", args.num_samples, 1), ("--max-draws", args.max_draws, 1),
                                 ("--max-new-tokens", args.max_new_tokens, 1)):
        if value is not None:
            check_int(flag, value, minimum)
    sampling_settings(args, Sampling(), 0.0)  # the flags alone: those not given take valid defaults here
    sample_flags = {"--output": None if args.output is None else str(args.output),
                    "--valid-only": args.valid_only or None, "--max-draws": args.max_draws}
    if args.num_samples is None:
        for flag, value in sample_flags.items():
            if value is not None:
                raise ConfigError(flag, value, reason="it belongs to drawing samples: give --num-samples N")
        if args.prompt is None and args.prompt_file is None:
            raise ConfigError("--prompt", None, reason="give --prompt, --prompt-file, or --num-samples N --output FILE")
        return
    if args.output is None:
        raise ConfigError("--output", None, required_with="--num-samples")
    for flag, value in {"--prompt-file": args.prompt_file, "--chat": args.chat or None}.items():
        if value is not None:
            raise ConfigError(flag, str(value) if flag == "--prompt-file" else value,
                              reason="--num-samples draws from one start (--prompt at most)")
    if args.max_draws is not None and not args.valid_only:
        raise ConfigError("--max-draws", args.max_draws, reason="only --valid-only draws more than --num-samples")


def run(args: argparse.Namespace) -> int:
    from biotf.inference.generation import TextStreamer
    from biotf.inference.pretrained import complete
    from biotf.tokenizers.base import PolicyStats

    if args.model is None:
        args.generate_parser.error("the following arguments are required: --model (or use `biotf generate evaluate`)")
    check_sample_arguments(args)
    if args.system is not None and not args.chat:
        raise ConfigError("--system", args.system, reason="a system prompt needs --chat")
    if args.num_samples is not None:
        from biotf.inference.sampling import SAMPLE_FORMATS
        from biotf.io.outputs import output_format

        output_format(args.output, SAMPLE_FORMATS, "--output")
        with claim_outputs(args, {"--output": args.output}, [args.model]):
            return run_samples(args, *load_generator(args))
    prompts = read_prompts(args.prompt_file) if args.prompt_file else [args.prompt]
    decoder, tokenizer, defaults = load_generator(args)
    policies = PolicyStats()
    sampling = sampling_settings(args, defaults, defaults.temperature)
    streamer = None
    if len(prompts) == 1:
        streamer = TextStreamer(tokenizer, lambda text: (sys.stdout.write(text), sys.stdout.flush()))
    # Library warnings (a truncated prompt) as one "biotf generate: warning: ..." line on stderr.
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter(f"biotf {args.command}: warning: %(message)s"))
    logger = logging.getLogger("biotf.inference")
    logger.addHandler(handler)
    start = time.perf_counter()
    try:
        ids, new = complete(decoder, tokenizer, defaults, prompts, chat=args.chat, system=args.system,
                            max_new_tokens=args.max_new_tokens, sampling=sampling, seed=args.seed,
                            truncate_prompt=args.truncate_prompt, on_token=streamer, stats=policies)
    finally:
        logger.removeHandler(handler)
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


def load_generator(args: argparse.Namespace) -> tuple:
    """--model's decoder (`biotf.Model.decoding`), tokenizer (with --option's policies) and generation defaults; with
    --verbose, the decoding plan (which paths, measured how) on stderr."""
    model = load_model(args, dtype=args.dtype, for_generation=True)
    decoder, defaults = model.decoding()
    if args.verbose:
        print(decoder.plan.describe(), file=sys.stderr)
    return decoder, model.tokenizer, defaults


def run_samples(args: argparse.Namespace, decoder, tokenizer, defaults) -> int:
    """`--num-samples N --output FILE`: draw, write all or nothing, and say what was drawn on stderr."""
    from biotf.inference.sampling import sample_sequences, write_samples
    from biotf.progress import reporting

    valid = None
    if args.valid_only:
        if tokenizer.kind != "smiles":
            raise ConfigError("--valid-only", True, reason=f"it checks SMILES with RDKit, and this model's tokenizer "
                                                           f"is {tokenizer.kind!r}, not 'smiles'")
        from biotf.chemistry import is_valid

        is_valid("C")  # RDKit missing: its install line now, before any sampling
        valid = is_valid
    sampling = sampling_settings(args, defaults, defaults.temperature or 1.0)  # drawing samples: never greedy
    start = time.perf_counter()
    with reporting(not args.no_progress, f"sampling {args.output.name}", "samples", total=args.num_samples) as shown:
        drawn = sample_sequences(decoder, tokenizer, defaults, args.num_samples,
                                 prompt=args.prompt, sampling=sampling, seed=args.seed, batch_size=args.batch_size,
                                 max_new_tokens=args.max_new_tokens, valid=valid, max_draws=args.max_draws,
                                 progress=shown)
    seconds = time.perf_counter() - start
    write_samples(args.output, drawn.samples)
    mode = "greedy" if sampling.greedy else f"temperature {sampling.temperature}, top-k {sampling.top_k or 'none'}, " \
                                           f"top-p {sampling.top_p}"
    tokens = sum(sample.tokens for sample in drawn.samples + drawn.rejected)
    print(f"wrote {counted(len(drawn.samples), 'sample')} to {args.output} from {counted(drawn.draws, 'draw')} "
          f"({tokens} tokens in {seconds:.2f} s; seed {drawn.seed}; {mode})", file=sys.stderr)
    if valid is not None:
        cut = sum(not sample.finished for sample in drawn.rejected)
        print(f"invalid SMILES drawn: {len(drawn.rejected)} ({len(drawn.rejected) - cut} not parsed by RDKit, "
              f"{cut} cut at --max-new-tokens before <eos>); not written", file=sys.stderr)
        if len(drawn.samples) < args.num_samples:
            print(f"biotf {args.command}: warning: only {len(drawn.samples)} valid of the {args.num_samples} asked "
                  f"within {counted(drawn.draws, 'draw')} (raise --max-draws)", file=sys.stderr)
    elif drawn.unfinished:
        print(f"{counted(drawn.unfinished, 'sample')} cut at --max-new-tokens before <eos> (kept; the CSV's "
              "finished column marks them)", file=sys.stderr)
    if drawn.policies:
        print(f"tokenizer policies: {drawn.policies.summary()}", file=sys.stderr)
    return 0


def run_evaluate(args: argparse.Namespace) -> int:
    """`generate evaluate`: the metrics table on stdout (and --output), where each reference came from on stderr."""
    from biotf.io.readers import ReaderOptions
    from biotf.inference.moses.benchmark import COLUMNS, METRIC_FORMATS, evaluate_file, format_value, write_metrics
    from biotf.io.outputs import output_format
    from biotf.inference.moses.reference import DEFAULT_CACHE_DIR

    check_int("--batch-size", args.batch_size, 1)
    cache_dir = Path(args.cache_dir or DEFAULT_CACHE_DIR)
    blocking = next((path for path in (cache_dir, *cache_dir.parents) if path.exists()), None)
    if blocking is not None and not blocking.is_dir():
        raise ConfigError("--cache-dir", str(cache_dir), reason=f"{blocking} is a file, not a directory",
                          allowed="a directory, made if missing")
    tests = {name: path for name, path in (("Test", args.test), ("TestSF", args.test_scaffolds)) if path is not None}
    inputs = [args.input, *tests.values(), *([args.train] if args.train else [])]
    if args.output is not None:
        output_format(args.output, METRIC_FORMATS, "--output")
    with claim_outputs(args, {"--output": args.output}, inputs):
        evaluation = evaluate_file(args.input, reader_options(args), tests, args.train,
                                   ReaderOptions(column=args.reference_column), cache_dir,
                                   args.batch_size, args.device)
        for name, loaded in evaluation.references.items():
            how = (f"read from {loaded.path}" if loaded.how == "cache" else
                   f"computed in {loaded.seconds:.1f} s and cached in {loaded.path}"
                   + (f" (the entry there was not used: {loaded.replaced})" if loaded.replaced else ""))
            left_out = loaded.statistics.rows - loaded.statistics.molecules
            invalid = f"; {counted(left_out, 'invalid row')} left out" if left_out else ""
            print(f"reference {name}: {counted(loaded.statistics.molecules, 'molecule')}{invalid}, statistics {how}",
                  file=sys.stderr)
        if args.output is not None:
            write_metrics(args.output, evaluation)
        print("\t".join(COLUMNS))
        for row in evaluation.rows:
            print("\t".join((row.metric, format_value(row), str(row.molecules), row.note)))
        if evaluation.input_policies:
            print(f"reading {args.input}: {evaluation.input_policies.summary()}", file=sys.stderr)
        return 0
