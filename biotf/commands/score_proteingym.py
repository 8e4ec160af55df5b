"""`biotf score proteingym`: many ProteinGym assays scored into one table, one row per assay with ProteinGym's
metrics (`biotf.scoring.assays`); `biotf.commands.score` adds it as the form `proteingym` of its command.

    biotf score proteingym --model esm2_t6_8M_UR50D --assays DMS_ProteinGym_substitutions/ \\
        --reference-file DMS_substitutions.csv --output table.csv \\
        --reference-table DMS_substitutions_Spearman_DMS_level.csv --published "ESM2 (8M)" "ESM2 (650M)"

--assays: a directory or files in ProteinGym's layout (mutant, DMS_score, DMS_score_bin); --reference-file:
ProteinGym's reference file (DMS_id, target_seq; DMS_filename and start_idx where given). Each row: DMS_id,
variants, multi_mutants, method, precision, windows and window (how a target longer than the model was read), Spearman (vs
DMS_score), AUC and MCC (vs DMS_score_bin), NDCG and Top_recall (the top 10% by DMS_score), as ProteinGym's
performance_DMS_benchmarks.py computes them; with --reference-table each --published column C as `C (published)`
and `<metric> - C`. Masked models default to masked-marginal
(each mutated position masked on its own, ProteinGym's convention). Resumable: a killed run, rerun as it was,
keeps the assays it finished (<output>.parts/); under torchrun the assays are dealt to the processes.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from biotf.commands.input_options import (add_precision_argument, add_tokenizer_options, as_option_errors,
                                         load_model)
from biotf.commands.output_options import add_overwrite_argument, add_progress_argument, claim_outputs


def add_parser(forms: argparse._SubParsersAction, methods: tuple[str, ...]) -> None:
    from biotf.scoring.fitness_metrics import METRICS

    parser = forms.add_parser("proteingym", help="ProteinGym assays into one table of per-assay metrics",
                              description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", required=True, metavar="PATH", help="any source biotf.Model.load reads")
    parser.add_argument("--assays", required=True, nargs="+", type=Path, metavar="DIR|FILE",
                        help="a directory of assay CSVs, or assay files")
    parser.add_argument("--reference-file", required=True, type=Path, metavar="CSV",
                        help="ProteinGym's reference file: DMS_id, target_seq (DMS_filename, start_idx)")
    parser.add_argument("--output", required=True, type=Path, metavar="OUT", help="the table: .csv, .tsv or .parquet")
    parser.add_argument("--method", choices=methods, default="auto",
                        help="auto (default): masked-marginal for masked models, causal for decoders")
    parser.add_argument("--reference-table", type=Path, metavar="CSV",
                        help="a published per-assay table (ProteinGym's DMS_substitutions_<metric>_DMS_level.csv)")
    parser.add_argument("--published", nargs="+", default=[], metavar="COLUMN",
                        help="its columns to set beside biotf's, e.g. \"ESM2 (8M)\"")
    parser.add_argument("--reference-metric", choices=METRICS, default="Spearman",
                        help="the metric of --reference-table (default Spearman)")
    parser.add_argument("--batch-tokens", type=int, default=16384, metavar="N", help="padded tokens per forward")
    parser.add_argument("--max-length", type=int, metavar="N", help="tokens per window (default: the model's)")
    parser.add_argument("--overlap", type=int, metavar="N", help="tokens shared by consecutive windows")
    parser.add_argument("--packing", action="store_true", help="masked copies share rows (the same scores)")
    parser.add_argument("--window", choices=("centred", "owned"), default="centred",
                        help="a target longer than the model, for masked-marginal: centred (default; ProteinGym's "
                             "window around each masked position) or owned (biotf embed's windows)")
    parser.add_argument("--device", default="cpu", help="torch device (default cpu; under torchrun cuda is per rank)")
    add_tokenizer_options(parser, "change a policy of the model's tokenizer (repeatable)")
    add_precision_argument(parser)
    add_progress_argument(parser)
    add_overwrite_argument(parser)
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from biotf.commands.parts import launch
    from biotf.errors import ConfigError
    from biotf.scoring import ScoreOptions
    from biotf.scoring.assays import PublishedTable, score_assays

    if args.published and args.reference_table is None:
        raise ConfigError("--published", ", ".join(args.published), reason="it names columns of --reference-table",
                          required_with="--reference-table")
    published = None if args.reference_table is None else \
        PublishedTable(args.reference_table, tuple(args.published), args.reference_metric)
    options = ScoreOptions(args.batch_tokens, args.max_length, args.overlap, args.packing, args.window)
    inputs = [*args.assays, args.reference_file, *([args.reference_table] if args.reference_table else [])]
    with claim_outputs(args, {"--output": args.output}, inputs):
        launched = launch()
        model = load_model(args, args.device if launched is None else launched.device(args.device))
        with as_option_errors(model.tokenizer_options):
            assays = args.assays[0] if len(args.assays) == 1 and args.assays[0].is_dir() else args.assays
            done = score_assays(model, assays, args.reference_file, args.output, args.method, options, published,
                                progress=not args.no_progress, overwrite=args.overwrite, launch=launched)
        if done is None:
            return 0
        print("\n".join(done.lines()), file=sys.stderr)
        print(f"biotf score proteingym: -> {args.output}: {done.summary()}; {model.precision}", file=sys.stderr)
        return 0
