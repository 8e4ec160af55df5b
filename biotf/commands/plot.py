"""`biotf plot OUT --color COLUMN`: a 2-D map of an embedding file as a PNG, UMAP or PCA, named in the picture and
the summary with why auto chose it (UMAP needs umap-learn, `pip install 'biotf[umap]'`, and more than 15 records).

    biotf plot deeploc.h5ad --color description --label-pattern '^(\\S+?)-[MSU]\\b' --output deeploc.png
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from biotf.commands.output_options import add_overwrite_argument, add_progress_argument, claim_outputs


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    from biotf.analysis.plot import METHODS

    parser = subparsers.add_parser("plot", help="2-D map of embeddings coloured by a metadata column",
                                   description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("embeddings", type=Path, metavar="OUT", help="a pooled .npz, .parquet or .h5ad from biotf embed")
    parser.add_argument("--color", metavar="COLUMN", help="metadata column colouring the points")
    parser.add_argument("--label-pattern", metavar="REGEX", help="colour by this regex's first group of the column")
    parser.add_argument("--output", type=Path, metavar="PNG", help="the picture (default: OUT with .png)")
    parser.add_argument("--method", choices=METHODS, default="auto",
                        help="auto: UMAP where umap-learn is installed and there are more than 15 records, else PCA")
    parser.add_argument("--array", default="embeddings", help="which array (embeddings or layer_<i>; default embeddings)")
    add_progress_argument(parser)
    add_overwrite_argument(parser)
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from biotf.analysis.plot import plot_file

    output = args.output or args.embeddings.with_suffix(".png")
    with claim_outputs(args, {"--output": output}, [args.embeddings], images=("--output",)):
        method = plot_file(args.embeddings, output, args.color, args.method, args.label_pattern, args.array,
                           overwrite=args.overwrite, progress=not args.no_progress)
        print(f"map ({method}) of {args.embeddings} -> {output}", file=sys.stderr)
        return 0
