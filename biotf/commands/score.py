"""`biotf score`: sequence log-likelihoods, or variant effects against a reference, from a trained model.

    biotf score --model outputs/protein_mlm/<run> --input proteins.fasta --output scores.csv
    biotf score --model run/ --variants dms.csv --reference wt.fasta --offset 24 --output effects.parquet
    biotf score --model dna_run/ --variants snvs.tsv --reference locus.fa --both-strands --output snvs.csv
    biotf score proteingym --model esm2_t6_8M_UR50D --assays DIR --reference-file ref.csv --output t.csv  # --help

--input: per record, the log-likelihood (exact for causal models; the pseudo-log-likelihood, each token
masked once, for masked models), its means per token and per residue, and the perplexity.
--variants: one score per variant (log-likelihood ratio of variant vs reference, nats): codes like A42G or
A42G:K50R (a CSV column `mutant`, ProteinGym / fair-esm layout, or one per line), `pos ref alt` rows (DNA
SNVs and indels), or whole variant sequences (FASTA). Positions count from --offset (the number of the
reference's first residue, default 1). A mutation whose reference residue does not match is refused.
With ProteinGym's DMS_score (and DMS_score_bin) columns the summary gives its five metrics.
--reference: a file with one record, or the sequence itself (an argument with a '/' or an extension is a file).
Methods (biotf.scoring.scorer): auto, causal, pll, masked-marginal (each mutated position masked on its own,
ProteinGym's convention), masked-marginal-joint (all of a variant's positions masked together), wt-marginal.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from biotf.commands.input_options import (add_input_arguments, add_precision_argument, add_tokenizer_options,
                                         as_option_errors, load_model, reader_options)
from biotf.commands.output_options import add_overwrite_argument, add_progress_argument, claim_outputs
from biotf.commands.parts import add_part_arguments, launch, run_file
from biotf.commands import score_proteingym
from biotf.errors import ConfigError


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    from biotf.io.tables import TABLE_FORMATS
    from biotf.scoring import METHODS

    parser = subparsers.add_parser("score", help="sequence likelihoods and variant effects (zero-shot)",
                                   description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", metavar="PATH",
                        help="run directory, .ckpt, exported directory or any source biotf.Model.load reads")
    add_input_arguments(parser, required=False)
    add_tokenizer_options(parser, "change a policy of the model's tokenizer, e.g. stop=strip_terminal, "
                                  "unknown=to_unk (repeatable; its vocabulary must stay the same)")
    parser.add_argument("--variants", type=Path, metavar="FILE",
                        help="score variants of --reference instead of the records of --input")
    parser.add_argument("--reference", metavar="SEQ|FILE", help="the reference sequence, or a file with one record")
    parser.add_argument("--offset", type=int, default=1, metavar="N",
                        help="number of the reference's first residue in the variants' positions (default 1)")
    parser.add_argument("--mutation-column", metavar="NAME", help="CSV/TSV column of mutation codes "
                        "(default: mutant, mutation, mutations or variant)")
    parser.add_argument("--both-strands", action="store_true",
                        help="DNA: average each variant's score with its score on the reverse complement")
    parser.add_argument("--output", type=Path, metavar="OUT", help=f"one of {', '.join(TABLE_FORMATS)}")
    add_overwrite_argument(parser)
    parser.add_argument("--method", choices=METHODS, default="auto",
                        help="auto (default): causal for decoders; masked-marginal for masked models with one token "
                             "per residue and substitutions; pll otherwise")
    parser.add_argument("--batch-tokens", type=int, default=16384, metavar="N",
                        help="padded tokens per forward pass (default 16384)")
    parser.add_argument("--max-length", type=int, metavar="N",
                        help="tokens per window, special tokens included (default: the model's max_seq_len; more, with a "
                             "warning, where its positions extend: rope, alibi, sinusoidal, none)")
    parser.add_argument("--overlap", type=int, metavar="N",
                        help="tokens shared by consecutive windows of long inputs (default: a quarter window)")
    parser.add_argument("--packing", action="store_true",
                        help="several masked copies / windows share a row, each attending to itself alone: the same "
                             "scores with fewer pad tokens (see README, Packing)")
    parser.add_argument("--device", default="cpu", help="torch device (default cpu)")
    add_precision_argument(parser)
    add_progress_argument(parser)
    add_part_arguments(parser)
    parser.set_defaults(run=run, score_parser=parser)
    score_proteingym.add_parser(parser.add_subparsers(dest="form", metavar="{proteingym}"), METHODS)


def run(args: argparse.Namespace) -> int:
    from biotf.scoring import ScoreOptions, ScoreRun, score_file, score_variants_file
    from biotf.io.outputs import output_format
    from biotf.io.tables import TABLE_FORMATS

    missing = [flag for flag, value in {"--model": args.model, "--output": args.output}.items() if value is None]
    if missing:
        args.score_parser.error(f"the following arguments are required: {', '.join(missing)}")
    if args.input is None and args.variants is None:
        raise ConfigError("--input or --variants", None, allowed="exactly one of them")
    if args.input is not None and args.variants is not None:
        raise ConfigError("--variants", str(args.variants), reason="--input is given too",
                          allowed="exactly one of them")
    if args.input is not None:
        for flag in ("reference", "mutation_column", "both_strands"):
            if getattr(args, flag) not in (None, False):
                raise ConfigError(f"--{flag.replace('_', '-')}", getattr(args, flag), reason="it needs --variants")
    elif args.reference is None:
        raise ConfigError("--reference", None, reason="the variants are scored against a reference",
                          allowed="a file with one record, or a sequence", required_with="--variants")
    options = ScoreOptions(args.batch_tokens, args.max_length, args.overlap, args.packing)
    output_format(args.output, TABLE_FORMATS)
    inputs = [Path(path) for path in (args.input, args.variants, args.reference) if path is not None]
    with claim_outputs(args, {"--output": args.output}, inputs):
        progress = not args.no_progress  # a bar on a terminal, plain lines elsewhere (biotf.progress)
        launched = launch()
        if launched is not None and args.variants is not None:
            raise ConfigError("--variants", str(args.variants), reason="a run under torchrun scores the records of "
                              "--input in parts; variants of one reference run in one process", allowed="--input")
        model = load_model(args, args.device if launched is None else launched.device(args.device))
        with as_option_errors(model.tokenizer_options):
            if args.input is None:
                summary = score_variants_file(model, args.variants, args.reference, args.output, args.method,
                                              args.offset, args.both_strands, options, reader_options(args),
                                              args.mutation_column, progress=progress)
            else:
                summary = run_file(args, launched, lambda: score_file(model, args.input, args.output, args.method,
                                                                      options, reader_options(args), progress=progress),
                                   lambda: ScoreRun(model, args.input, args.output, args.method, options,
                                                    progress=progress and launched.rank == 0))
        if summary is None:
            return 0
        print(f"{args.input or args.variants} -> {args.output}: {summary.summary()}; {model.precision}", file=sys.stderr)
        return 0
