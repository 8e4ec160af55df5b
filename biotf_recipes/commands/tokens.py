"""`biotf tokens`: what the model's token embeddings learnt: a 2-D map of them and how well each property of a
table is predicted from them, against the same architecture at initialisation.

    biotf tokens --model outputs/protein_mlm/<run> --output tokens.tsv --plot tokens.png
    biotf tokens --model dna_run/ --property-table gc_content.tsv --output tokens.tsv

Properties: the shipped amino-acid scales (Kyte-Doolittle hydrophobicity, charge at pH 7, residue volume; sources
in biotf_recipes/scales.py), or --property-table: a CSV/TSV with a `token` column (--token-column) and one column
per property (numbers; empty = no value), e.g. GC content of DNA k-mers or atom properties of SMILES tokens.

Outputs: --output, one row per token of the model (token, id, trained_pc1, trained_pc2, init_pc1, init_pc2, then
each property, empty where the table has none); beside it <output stem>.r2.tsv, one row per property (property,
tokens_scored, tokens_without_value, r2_trained, r2_init, ridge_alpha, init_seed), also printed; --plot, a PNG of
the maps coloured by each property. R^2: leave-one-out ridge regression (sklearn Ridge, --ridge-alpha on embeddings
centred and scaled to unit RMS norm); initialisation: biotf's initialisation of the model's config after
torch.manual_seed(--init-seed). Every output follows the output rule (never an input, never an existing file
without --overwrite), checked before any work.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from biotf.commands.input_options import load_model
from biotf.commands.output_options import add_overwrite_argument, claim_outputs


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("tokens", help="map the token embeddings and score how they predict token properties",
                                   description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", required=True, metavar="PATH", help="any biotf-loadable model")
    parser.add_argument("--output", required=True, type=Path, metavar="TSV",
                        help="the token table; the R^2 table goes beside it as <stem>.r2.tsv")
    parser.add_argument("--plot", type=Path, metavar="PNG", help="also draw the maps, one panel per property and model")
    parser.add_argument("--property-table", type=Path, metavar="FILE",
                        help="CSV/TSV: token -> one or more numeric properties (default: the shipped amino-acid scales)")
    parser.add_argument("--token-column", default="token", help="the table's token column (default token)")
    parser.add_argument("--ridge-alpha", type=float, default=1.0, metavar="A",
                        help="ridge penalty on the scaled embeddings (default 1.0)")
    parser.add_argument("--init-seed", type=int, default=0, metavar="N",
                        help="torch seed of the model at initialisation (default 0)")
    parser.add_argument("--device", default="cpu", help="torch device (default cpu)")
    add_overwrite_argument(parser)
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from biotf_recipes.tokens import read_property_table, score_table, scores_path, tokens_file

    inputs = [Path(args.model), *([args.property_table] if args.property_table is not None else [])]
    with claim_outputs(args, {"--output": args.output, "--output's R^2 table": scores_path(args.output),
                              "--plot": args.plot}, inputs, images=("--plot",)):
        table = read_property_table(args.property_table, args.token_column) if args.property_table is not None else None
        report = tokens_file(lambda: load_model(args, args.device), args.output, args.plot, table, args.ridge_alpha,
                             args.init_seed, args.device)
        print(score_table(report))
        written = ", ".join(str(p) for p in (args.output, scores_path(args.output), args.plot) if p is not None)
        print(f"{args.model} -> {written}: {report.summary()}", file=sys.stderr)
        return 0
