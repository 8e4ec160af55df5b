"""`biotf embed`: one vector per record (or per token) from a trained model, into .npz, .parquet or .h5ad.

    biotf embed --model outputs/protein_mlm/<run> --input proteins.fasta --output proteins.h5ad
    biotf embed --model exported/ --input splice.csv --column sequence --id-column instance_name \\
        --output splice.parquet --pool max --layer all
    biotf embed --model run/ --input proteins.fasta --output tokens.npz --pool none --long truncate
    biotf embed --model run/ --input proteins.fasta --output p.npz --plot map.png --color description
    biotf embed --model run/ --input orfs.fasta --output orfs.npz --option stop=strip_terminal

Every input record appears in the output, in input order, with its id and metadata; the summary on
stderr counts tokens, windows, chunked and truncated records and tokenizer policy changes.
An existing output is replaced only with --overwrite, and never when it is the input (see --overwrite).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from biotf.commands.input_options import (add_input_arguments, add_precision_argument, add_tokenizer_options,
                                         as_option_errors, load_model, reader_options)
from biotf.commands.output_options import add_overwrite_argument, add_progress_argument, claim_outputs
from biotf.commands.parts import add_part_arguments, launch, run_file
from biotf.errors import ConfigError


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    from biotf.export import EMBED_LONG_POLICIES, POOLS
    from biotf.io.embeddings import EMBEDDING_FORMATS

    parser = subparsers.add_parser("embed", help="export embeddings of every record of a file",
                                   description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", required=True, metavar="PATH",
                        help="run directory, .ckpt, exported directory (biotf export-model) or any source "
                             "biotf.Model.load reads")
    add_input_arguments(parser)
    add_tokenizer_options(parser, "change a policy of the model's tokenizer, e.g. stop=strip_terminal, "
                                  "unknown=to_unk (repeatable; its vocabulary must stay the same)")
    parser.add_argument("--output", required=True, type=Path, metavar="OUT", help=f"one of {', '.join(EMBEDDING_FORMATS)}")
    parser.add_argument("--pool", choices=POOLS,
                        help="mean / max over content tokens, the <cls> token, or none: every token (default mean; "
                             "a sentence-transformers directory: its own pooling and normalization)")
    parser.add_argument("--layer", default="-1", metavar="-1|N|all",
                        help="hidden state to export: 0 = embedding output, -1 = last (default), all = every one")
    parser.add_argument("--batch-tokens", type=int, default=16384, metavar="N",
                        help="padded tokens per forward pass (default 16384)")
    parser.add_argument("--max-length", type=int, metavar="N",
                        help="tokens per window, special tokens included (default: the model's max_seq_len; more, with a "
                             "warning, where its positions extend: rope, alibi, sinusoidal, none)")
    parser.add_argument("--long", choices=EMBED_LONG_POLICIES,
                        help="records longer than --max-length: overlapping windows pooled across (default), "
                             "cut (a sentence-transformers directory's default, at its max_seq_length), or refuse")
    parser.add_argument("--overlap", type=int, metavar="N",
                        help="tokens shared by consecutive windows with --long chunk (default: a quarter window)")
    parser.add_argument("--packing", action="store_true",
                        help="several records share a row, each attending to itself alone: the same vectors "
                             "with fewer pad tokens (see README, Packing)")
    parser.add_argument("--device", default="cpu", help="torch device (default cpu)")
    add_precision_argument(parser)
    add_progress_argument(parser)
    parser.add_argument("--plot", type=Path, metavar="PNG",
                        help="also draw a 2-D map of the embeddings (biotf plot's --method auto: UMAP or PCA, the "
                             "summary says which and why)")
    parser.add_argument("--color", metavar="COLUMN", help="metadata column colouring the --plot map")
    parser.add_argument("--label-pattern", metavar="REGEX", help="colour by this regex's first group of --color")
    add_part_arguments(parser)
    add_overwrite_argument(parser)
    parser.set_defaults(run=run)


def parse_layer(text: str) -> int | str:
    if text == "all":
        return text
    try:
        return int(text)
    except ValueError:
        raise ConfigError("--layer", text, allowed="an integer (-1 = last) or 'all'") from None


def run(args: argparse.Namespace) -> int:
    from biotf.export import EmbedOptions, EmbedRun, embed_file
    from biotf.export.sentence_transformers import embed_defaults

    if args.plot is not None and args.pool == "none":
        raise ConfigError("--plot", str(args.plot), reason="a map needs pooled vectors", allowed="--pool mean, cls or max")
    with claim_outputs(args, {"--output": args.output, "--plot": args.plot}, [args.input], images=("--plot",)):
        _, pooling = embed_defaults(args.model, args.pool, args.max_length, args.long)
        options = EmbedOptions(**pooling, layer=parse_layer(args.layer), batch_tokens=args.batch_tokens,
                               overlap=args.overlap, packing=args.packing)
        reader = reader_options(args)
        if args.plot is not None:  # a colour column the input lacks: refused now, not after the embedding
            from biotf.analysis.plot import check_map_colour

            check_map_colour(args.input, reader, args.color, args.label_pattern)
        progress = not args.no_progress  # a bar on a terminal, plain lines elsewhere (biotf.progress)
        launched = launch()
        model = load_model(args, args.device if launched is None else launched.device(args.device))
        with as_option_errors(model.tokenizer_options):
            stats = run_file(args, launched, lambda: embed_file(model, args.input, args.output, options, reader,
                                                                progress=progress),
                             lambda: EmbedRun(model, args.input, args.output, options,
                                              progress=progress and launched.rank == 0))
        if stats is None:
            return 0
        print(f"{args.input} -> {args.output}: {stats.summary()}; {model.precision}", file=sys.stderr)
        if args.plot is not None:
            from biotf.analysis.plot import plot_file

            method = plot_file(args.output, args.plot, args.color, label_pattern=args.label_pattern,
                               overwrite=args.overwrite, progress=progress)
            print(f"map ({method}) -> {args.plot}", file=sys.stderr)
        return 0
