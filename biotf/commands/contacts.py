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

from biotf.commands.input_options import add_input_arguments, load_model, reader_options
from biotf.commands.output_options import add_overwrite_argument, claim_outputs


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
    parser.add_argument("--no-progress", action="store_true",
                        help="no progress bar (on a terminal) or progress lines (elsewhere) on stderr")
    _add_plot_argument(parser)
    add_overwrite_argument(parser)


def _add_plot_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--plot", type=Path, metavar="DIR",
                        help="also draw each protein's map into DIR/<id>.png (evaluate: the true map beside it)")


def _add_structures_arguments(parser: argparse.ArgumentParser, list_flag: str) -> None:
    parser.add_argument("--structures", required=True, type=Path, metavar="DIR",
                        help="a directory of PDB / mmCIF files (.pdb, .ent, .cif, .mmcif, optionally .gz), one chain "
                             "each")
    parser.add_argument(list_flag, type=Path, metavar="FILE",
                        help="the structures to use, one file name (or name without extension) a line; default all")
    parser.add_argument("--device", default="cpu", help="torch device (default cpu)")


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("contacts", help="predict, fit and evaluate residue-residue contact maps",
                                   description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    _add_predict_arguments(parser, required=False)
    parser.set_defaults(run=_run_predict, contacts_parser=parser)
    forms = parser.add_subparsers(dest="form", metavar="{predict,fit,evaluate}")
    predict = forms.add_parser("predict", help="contact maps of the proteins of a file (the command's plain form)")
    _add_predict_arguments(predict, required=True)
    predict.set_defaults(run=_run_predict)
    fit = forms.add_parser("fit", help="fit a contact head on structures and save the model with it")
    fit.add_argument("--model", required=True, metavar="PATH", help="any biotf-loadable model")
    _add_structures_arguments(fit, "--train-list")
    fit.add_argument("--output", required=True, type=Path, metavar="MODEL_DIR",
                     help="a new directory (or an empty one) for the model with its fitted head")
    fit.add_argument("--l1-c", type=float, metavar="C",  # its default is fit's (parsers import no torch)
                     help="inverse L1 strength of the logistic regression (sklearn's C; default 0.15)")
    fit.set_defaults(run=_run_fit)
    evaluate = forms.add_parser("evaluate", help="precision of a contact head on structures, beside a no-model prior")
    evaluate.add_argument("--model", required=True, metavar="PATH", help="a model with a contact head")
    _add_structures_arguments(evaluate, "--list")
    evaluate.add_argument("--output", type=Path, metavar="TSV", help="the per-chain table (default: means only)")
    _add_plot_argument(evaluate)
    add_overwrite_argument(evaluate)
    evaluate.set_defaults(run=_run_evaluate)


def _run_predict(args: argparse.Namespace) -> int:
    from biotf.structure import ContactOptions, contact_format, predict_file

    if args.form is None:
        missing = [flag for flag in ("--model", "--input", "--output") if getattr(args, flag[2:]) is None]
        if missing:
            args.contacts_parser.error(f"the following arguments are required: {', '.join(missing)} (or use "
                                       "`biotf contacts fit` / `biotf contacts evaluate`)")
    contact_format(args.output)
    with claim_outputs(args, {"--output": args.output}, [args.input]):
        stats = predict_file(load_model(args, args.device), args.input, args.output,
                             ContactOptions(batch_pairs=args.batch_pairs, max_length=args.max_length), reader_options(args), plot=args.plot,
                             overwrite=args.overwrite, progress=not args.no_progress)
        print(f"{args.input} -> {args.output}: {stats.summary()}", file=sys.stderr)
        return 0


def _names(path: Path | None) -> list[str] | None:
    from biotf.structure.chains import read_list

    return read_list(path) if path is not None else None


def _run_fit(args: argparse.Namespace) -> int:
    from biotf.export.outputs import hold
    from biotf.structure.fit import fit_file

    with hold(args.output):  # a second fit into the same directory meanwhile is refused at once
        stats = fit_file(args.model, args.structures, args.output, _names(args.train_list), args.train_list or "",
                         args.l1_c, device=args.device)
    print(f"{args.structures} -> {args.output}: fitted contact head; {stats.summary()}", file=sys.stderr)
    return 0


def _run_evaluate(args: argparse.Namespace) -> int:
    from biotf.structure.evaluate import COLUMNS, evaluate_structures, write_metrics

    with claim_outputs(args, {"--output": args.output}, []):
        evaluation = evaluate_structures(args.model, args.structures, _names(args.list), args.list or "",
                                         device=args.device, plot=args.plot, overwrite=args.overwrite)
        if args.output is not None:
            write_metrics(args.output, evaluation.rows)
        print("\t".join(("chains", *COLUMNS[2:])))
        for row in evaluation.means():
            print("\t".join((str(row.length), row.predictor, row.range, *(f"{v:.4f}" for v in row.values))))
        print(f"{args.structures}: {evaluation.structures.summary()}", file=sys.stderr)
        return 0
