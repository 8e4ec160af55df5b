"""`biotf contacts fit` and `biotf contacts evaluate`: a contact head fitted on protein structures, and measured
against them (`biotf.structure.fit`, `biotf.structure.contact_precision`); `biotf.commands.contacts` adds them as forms of its
command, with `--plot` (predict and evaluate) from here."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from biotf.commands.input_options import add_precision_argument, add_tokenizer_options, load_model
from biotf.commands.output_options import add_overwrite_argument, add_progress_argument, claim_outputs

OPTION_HELP = ("change a policy of the model's tokenizer, e.g. unknown=to_unk (repeatable; its vocabulary must stay "
               "the same)")


def add_plot_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--plot", type=Path, metavar="DIR",
                        help="also draw each protein's map into DIR/<id>.png (evaluate: the true map beside it)")


def _add_structures_arguments(parser: argparse.ArgumentParser, list_flag: str) -> None:
    parser.add_argument("--structures", required=True, type=Path, metavar="DIR",
                        help="a directory of PDB / mmCIF files (.pdb, .ent, .cif, .mmcif, optionally .gz), one chain "
                             "each")
    parser.add_argument(list_flag, type=Path, metavar="FILE",
                        help="the structures to use, one file name (or name without extension) a line; default all")
    parser.add_argument("--device", default="cpu", help="torch device (default cpu)")
    add_progress_argument(parser)


def add_parsers(forms: argparse._SubParsersAction) -> None:
    """The forms `fit` and `evaluate`, after `predict`."""
    fit = forms.add_parser("fit", help="fit a contact head on structures and save the model with it")
    fit.add_argument("--model", required=True, metavar="PATH", help="any biotf-loadable model")
    _add_structures_arguments(fit, "--train-list")
    fit.add_argument("--output", required=True, type=Path, metavar="MODEL_DIR",
                     help="a new directory (or an empty one) for the model with its fitted head")
    fit.add_argument("--l1-c", type=float, metavar="C",  # its default is fit's (parsers import no torch)
                     help="inverse L1 strength of the logistic regression (sklearn's C; default 0.15)")
    add_tokenizer_options(fit, OPTION_HELP)
    fit.set_defaults(run=_run_fit)
    evaluate = forms.add_parser("evaluate", help="precision of a contact head on structures, beside a no-model prior")
    evaluate.add_argument("--model", required=True, metavar="PATH", help="a model with a contact head")
    _add_structures_arguments(evaluate, "--list")
    evaluate.add_argument("--output", type=Path, metavar="TSV", help="the per-chain table (default: means only)")
    add_plot_argument(evaluate)
    add_overwrite_argument(evaluate)
    add_tokenizer_options(evaluate, OPTION_HELP)
    add_precision_argument(evaluate)
    evaluate.set_defaults(run=_run_evaluate)


def _names(path: Path | None) -> list[str] | None:
    from biotf.structure.chains import read_list

    return read_list(path) if path is not None else None


def _run_fit(args: argparse.Namespace) -> int:
    from biotf.io.outputs import hold
    from biotf.structure.fit import fit_file

    with hold(args.output):  # a second fit into the same directory meanwhile is refused at once
        stats = fit_file(lambda: load_model(args, args.device), args.structures, args.output,
                         _names(args.train_list), args.train_list or "", args.l1_c, device=args.device,
                         progress=not args.no_progress)
    print(f"{args.structures} -> {args.output}: fitted contact head; {stats.summary()}", file=sys.stderr)
    return 0


def _run_evaluate(args: argparse.Namespace) -> int:
    from biotf.structure.contact_precision import evaluate_structures, write_metrics

    with claim_outputs(args, {"--output": args.output}, []):
        evaluation = evaluate_structures(lambda: load_model(args, args.device), args.structures, _names(args.list),
                                         args.list or "", device=args.device, plot=args.plot, overwrite=args.overwrite,
                                         progress=not args.no_progress)
        if args.output is not None:
            write_metrics(args.output, evaluation.rows)
        sys.stdout.write(evaluation.means_table())
        print(f"{args.structures}: {evaluation.structures.summary()}", file=sys.stderr)
        return 0
