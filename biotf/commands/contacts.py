"""`biotf contacts`: a residue-residue contact map per protein, from a model's contact head; `fit` gives a model a
head fitted on real structures, `evaluate` measures a head's precision on them.

    biotf contacts --model esm2_t6_8M_UR50D/ --input proteins.fasta --output contacts.npz
    biotf contacts predict --model exported/ --input proteins.fasta --output contacts.tsv   (the same)
    biotf contacts fit --model run_dir/ --structures structures/ --train-list train.txt --output with_head/
    biotf contacts evaluate --model with_head/ --structures structures/ --list test.txt --output metrics.tsv

Each protein's map is the probability that residues i and j are in contact (C-beta within 8 angstrom), from every
layer x head attention map, symmetrised and APC-corrected, through the model's logistic regression (Rao et al.
2020), as transformers' EsmForMaskedLM.predict_contacts computes it. .npz: one L x L float32 map per id under
contacts/<id>, with ids and sequences; .tsv: id, i, j, probability for every pair i < j (1-based); .rr: CASP RR, one
block per protein. A model without a contact head, a record longer than --max-length (default the model's
max_seq_len), a record whose
residues are not one token each, a repeated id and (.npz) two ids np.load would read as one map (`a`, `a.npy`)
are refused in one line. An existing output is replaced only
with --overwrite, and never when it is the input.

Predicting is the command's plain form (`biotf contacts --model ...`, what `biotf contacts` has always done) and
also `biotf contacts predict`. `fit` reads the structures' chains (PDB / mmCIF, optionally gzipped: observed
residues, missing ones as X so positions stay aligned), fits the L1 logistic regression on the pairs at
separation >= 6 and writes the model with its head into a new directory (never over an existing one, so never over
the input). `evaluate` writes precision at L, L/2, L/5 by range (short 6-11, medium 12-23, long >= 24) per chain
and the mean, for the model and a sequence-separation prior that uses no model.

`--plot DIR` (predict and evaluate) draws one PNG a protein, DIR/<id>.png (characters other than letters, digits,
`.`, `_`, `-` as `_`): the predicted map, and with evaluate the true map beside it. Every picture follows the output
rule, checked once the ids are read and before the model runs: an existing one is replaced only with --overwrite,
never a file that is not a PNG.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from biotf.commands import contacts_structures
from biotf.commands.contacts_structures import add_plot_argument
from biotf.commands.input_options import (add_input_arguments, add_precision_argument, add_tokenizer_options,
                                          load_model, reader_options)
from biotf.commands.output_options import add_overwrite_argument, add_progress_argument, claim_outputs


def _add_predict_arguments(parser: argparse.ArgumentParser, required: bool) -> None:
    """Predict's options: `required` False on the command itself, whose plain form is predict but whose fit and
    evaluate forms do not take them (`_run_predict` then asks for them)."""
    from biotf.structure import CONTACT_FORMATS

    parser.add_argument("--model", required=required, metavar="PATH",
                        help="a model with a contact head: an ESM-2 Hugging Face directory, its export, or a model "
                             "written by `biotf contacts fit`")
    add_input_arguments(parser, required=required)
    parser.add_argument("--output", required=required, type=Path, metavar="OUT",
                        help=f"one of {', '.join(CONTACT_FORMATS)}")
    parser.add_argument("--batch-pairs", type=int, default=1 << 20, metavar="N",
                        help="padded positions squared per forward, batch x T x T (default 1048576)")
    parser.add_argument("--max-length", type=int, metavar="N",
                        help="the most tokens of a protein, special tokens included (default: the model's "
                             "max_seq_len; more, with a warning, where its positions extend: rope, alibi)")
    parser.add_argument("--device", default="cpu", help="torch device (default cpu)")
    add_tokenizer_options(parser, contacts_structures.OPTION_HELP)
    add_precision_argument(parser)
    add_progress_argument(parser)
    add_plot_argument(parser)
    add_overwrite_argument(parser)


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("contacts", help="predict, fit and evaluate residue-residue contact maps",
                                   description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    _add_predict_arguments(parser, required=False)
    parser.set_defaults(run=_run_predict, contacts_parser=parser)
    forms = parser.add_subparsers(dest="form", metavar="{predict,fit,evaluate}")
    predict = forms.add_parser("predict", help="contact maps of the proteins of a file (the command's plain form)")
    _add_predict_arguments(predict, required=True)
    predict.set_defaults(run=_run_predict)
    contacts_structures.add_parsers(forms)


def _run_predict(args: argparse.Namespace) -> int:
    from biotf.io.outputs import output_format
    from biotf.structure import CONTACT_FORMATS, ContactOptions, predict_file

    if args.form is None:
        missing = [flag for flag in ("--model", "--input", "--output") if getattr(args, flag[2:]) is None]
        if missing:
            args.contacts_parser.error(f"the following arguments are required: {', '.join(missing)} (or use "
                                       "`biotf contacts fit` / `biotf contacts evaluate`)")
    output_format(args.output, CONTACT_FORMATS)
    with claim_outputs(args, {"--output": args.output}, [args.input]):
        model = load_model(args, args.device)
        stats = predict_file(model, args.input, args.output,
                             ContactOptions(batch_pairs=args.batch_pairs, max_length=args.max_length),
                             reader_options(args), plot=args.plot,
                             overwrite=args.overwrite, progress=not args.no_progress)
        print(f"{args.input} -> {args.output}: {stats.summary()}; {model.precision}", file=sys.stderr)
        return 0
