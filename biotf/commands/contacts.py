"""`biotf contacts`: a residue-residue contact map per protein, from a model's contact head.

    biotf contacts --model esm2_t6_8M_UR50D/ --input proteins.fasta --output contacts.npz
    biotf contacts --model exported/ --input proteins.fasta --output contacts.tsv
    biotf contacts --model exported/ --input proteins.fasta --output contacts.rr

Each protein's map is the probability that residues i and j are in contact (C-beta within 8 angstrom), from every
layer x head attention map, symmetrised and APC-corrected, through the model's logistic regression (Rao et al.
2020), as transformers' EsmForMaskedLM.predict_contacts computes it. .npz: one L x L float32 map per id under
contacts/<id>, with ids and sequences; .tsv: id, i, j, probability for every pair i < j (1-based); .rr: CASP RR, one
block per protein. A model without a contact head, a record longer than the model's max_seq_len, a record whose
residues are not one token each and a repeated id are refused in one line. An existing output is replaced only
with --overwrite, and never when it is the input.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from biotf.commands.input_options import add_input_arguments, reader_options
from biotf.commands.output_options import add_overwrite_argument, prepare_outputs


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    from biotf.structure import CONTACT_FORMATS

    parser = subparsers.add_parser("contacts", help="predict residue-residue contact maps of proteins",
                                   description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", required=True, metavar="PATH",
                        help="a model with a contact head: an ESM-2 Hugging Face directory, or its export")
    add_input_arguments(parser)
    parser.add_argument("--output", required=True, type=Path, metavar="OUT",
                        help=f"one of {', '.join(CONTACT_FORMATS)}")
    parser.add_argument("--batch-pairs", type=int, default=1 << 20, metavar="N",
                        help="padded positions squared per forward, batch x T x T (default 1048576)")
    parser.add_argument("--device", default="cpu", help="torch device (default cpu)")
    add_overwrite_argument(parser)
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from biotf.structure import ContactOptions, contact_format, predict_file

    contact_format(args.output)
    prepare_outputs(args, {"--output": args.output}, [args.input])
    stats = predict_file(args.model, args.input, args.output, ContactOptions(batch_pairs=args.batch_pairs),
                         reader_options(args), device=args.device)
    print(f"{args.input} -> {args.output}: {stats.summary()}", file=sys.stderr)
    return 0
