"""`biotf probe`: k-fold linear probe on embeddings vs a classical baseline, side by side in one table.

    biotf probe --embeddings deeploc.h5ad --label description --label-pattern '^(\\S+?)-[MSU]\\b'
    biotf probe --embeddings splice.parquet --label label --deduplicate
    biotf probe --embeddings esol.npz --label 'measured log solubility in mols per litre' --task regression

Classification reports accuracy (logistic regression), regression RMSE (ridge); each line is the mean ±
standard deviation over the same folds. The baseline follows the tokenizer the embeddings were made with:
amino-acid composition + dipeptides (protein), k-mer frequencies (dna), Morgan fingerprints (smiles, RDKit).
"""

from __future__ import annotations

import argparse
from pathlib import Path


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    from biotf.analysis.feature_baselines import BASELINES
    from biotf.analysis.probe import TASKS
    from biotf.chemistry import INVALID_SMILES

    parser = subparsers.add_parser("probe", help="linear probe of embeddings vs a classical baseline",
                                   description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--embeddings", required=True, type=Path, metavar="OUT",
                        help="a pooled .npz, .parquet or .h5ad written by biotf embed")
    parser.add_argument("--label", required=True, metavar="COLUMN", help="metadata column holding the label")
    parser.add_argument("--label-pattern", metavar="REGEX",
                        help="take the label from the column with this regex (its first group)")
    parser.add_argument("--task", choices=TASKS, default="auto",
                        help="auto: regression for numeric labels with > 10 distinct values, else classification")
    parser.add_argument("--folds", type=int, default=5, help="cross-validation folds (default 5)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the fold split (default 0)")
    parser.add_argument("--deduplicate", action="store_true",
                        help="one record per distinct sequence (copies with conflicting labels are all dropped)")
    parser.add_argument("--split", type=Path, metavar="SPLIT_TSV",
                        help="score on this one split instead of folds: a fine-tuning run's split.tsv (id, split); "
                             "fitted on train + validation, scored on test")
    parser.add_argument("--baseline", choices=["auto", *BASELINES, "none"], default="auto",
                        help="classical features to compare with (default: from the embeddings' tokenizer)")
    parser.add_argument("--invalid-smiles", choices=INVALID_SMILES, default="error",
                        help="a SMILES RDKit cannot parse (no Morgan fingerprint): refused (error, default) or left "
                             "out of every row, counted and listed (skip)")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from biotf.analysis.probe import probe_embeddings

    print("\n".join(probe_embeddings(args.embeddings, args.label, args.label_pattern, args.task, args.folds,
                                      args.seed, args.deduplicate, None if args.baseline == "none" else args.baseline,
                                      args.split, args.invalid_smiles)))
    return 0
