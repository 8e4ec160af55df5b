"""`biotf search`: nearest neighbours in embedding space: build an index, query it, extend it, evaluate it.

    biotf search build --embeddings proteins.h5ad --output proteins.index [--index-type approx] [--metric l2]
    biotf search query --index proteins.index --input new.fasta --model outputs/protein_mlm/<run> -k 10 --output hits.tsv
    biotf search query --index proteins.index --ids P12345 Q67890 --output hits.parquet
    biotf search query --index mols.index --expression "aspirin - acetyl + methyl" --output hits.tsv
    biotf search add --index proteins.index --embeddings more.h5ad
    biotf search evaluate --embeddings bbbp.npz --label p_np [--split split.tsv] -k 1 5 10

An index is a directory (vectors, ids, the model and tokenizer fingerprints, and for --index-type approx a faiss
HNSW graph). Exact search is a blocked matrix product (memory bounded, ties to the earlier record); the
approximate index answers large sets fast at recall@10 ~0.95+ (docs/benchmarks.md) and takes new records without
a rebuild (`add`). Sequence queries are embedded by the index's model exactly as `biotf embed` did (a different
model or tokenizer is refused); id and expression queries leave their own ids out of their neighbours. Hits:
query, rank, id, score (cosine similarity, or L2 distance), in query order, .tsv / .csv / .parquet by extension.
`evaluate` reports kNN label agreement (precision@k, majority-vote accuracy@k; leave-one-out, or test against
train + validation of a split file) beside the classical neighbour: Tanimoto of Morgan fingerprints (r=2, 2048
bits) for SMILES, Jaccard of 3-mer (protein) / 5-mer (DNA) sets.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from biotf.commands.input_options import add_input_arguments, add_precision_argument, load_model, reader_options
from biotf.commands.output_options import add_overwrite_argument, add_progress_argument, claim_outputs


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    from biotf.analysis.search import KINDS, METRICS
    from biotf.chemistry import INVALID_SMILES

    parser = subparsers.add_parser("search", help="nearest-neighbour search over embeddings, and its evaluation",
                                   description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    actions = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
    build = actions.add_parser("build", help="index an embedding file")
    build.add_argument("--embeddings", required=True, type=Path, help="a pooled .npz, .parquet or .h5ad of biotf embed")
    build.add_argument("--output", required=True, type=Path, metavar="INDEXDIR", help="a new (or empty) directory")
    build.add_argument("--index-type", choices=KINDS, default="exact",
                       help="exact (any size that fits in memory; any metric at query time) or approx (faiss HNSW)")
    build.add_argument("--metric", choices=METRICS, default="cosine", help="the approximate index's metric")
    build.add_argument("--array", default="embeddings", help="which array of the file (default embeddings; layer_<i>)")
    add_progress_argument(build)
    build.set_defaults(run=run_build, parameter_flags={"kind": "--index-type", "directory": "--output"})

    query = actions.add_parser("query", help="top-k neighbours of sequences, ids or id expressions")
    query.add_argument("--index", required=True, type=Path, metavar="INDEXDIR")
    query.add_argument("--ids", nargs="+", metavar="ID", help="ids of the index (each leaves itself out)")
    query.add_argument("--expression", action="append", metavar="EXPR",
                       help="'idA - idB + idC' (repeatable; operators spaced, its ids left out)")
    add_input_arguments(query, required=False)
    query.add_argument("--model", metavar="PATH", help="with --input: the model that embedded the index")
    query.add_argument("-k", type=int, default=10, help="neighbours per query (default 10)")
    query.add_argument("--metric", choices=METRICS, help="default: the index's")
    query.add_argument("--ef-search", type=int, metavar="N",
                       help="approximate index: HNSW search breadth (default 64); higher is slower and nearer exact")
    query.add_argument("--output", required=True, type=Path, metavar="OUT", help=".tsv, .csv or .parquet")
    query.add_argument("--device", default="cpu", help="torch device for --input (default cpu)")
    add_precision_argument(query)
    add_overwrite_argument(query)
    query.set_defaults(run=run_query, parameter_flags={"expressions": "--expression", "input_path": "--input",
                                                       "kind": "--index-type"})
    add = actions.add_parser("add", help="add the records of another embedding file to an index (no rebuild)")
    add.add_argument("--index", required=True, type=Path, metavar="INDEXDIR")
    add.add_argument("--embeddings", required=True, type=Path)
    add.set_defaults(run=run_add, parameter_flags={"directory": "--index", "kind": "--index-type"})
    evaluate = actions.add_parser("evaluate", help="kNN label agreement vs the classical neighbour")
    evaluate.add_argument("--embeddings", required=True, type=Path, help="a pooled .npz, .parquet or .h5ad")
    evaluate.add_argument("--label", required=True, metavar="COLUMN", help="metadata column holding the label")
    evaluate.add_argument("--label-pattern", metavar="REGEX", help="the label is this regex's first group")
    evaluate.add_argument("--split", type=Path, metavar="SPLIT_TSV", help="test records query train + validation "
                          "(a fine-tuning run's split.tsv); default leave-one-out")
    evaluate.add_argument("-k", type=int, nargs="+", default=[1, 5, 10], help="neighbour counts (default 1 5 10)")
    evaluate.add_argument("--metric", choices=METRICS, default="cosine")
    evaluate.add_argument("--array", default="embeddings", help="which array of the file (default embeddings)")
    evaluate.add_argument("--classical", default="auto", metavar="auto|smiles|protein|dna|none",
                          help="classical neighbour (default: from the embeddings' tokenizer)")
    evaluate.add_argument("--invalid-smiles", choices=INVALID_SMILES, default="skip",
                          help="a SMILES RDKit cannot parse (no Morgan fingerprint): left out of every row, listed "
                               "(skip, default) or refused (error)")
    evaluate.set_defaults(run=run_evaluate)


def run_build(args: argparse.Namespace) -> int:
    from biotf.analysis.search.index import build_index

    meta = build_index(args.embeddings, args.output, args.index_type, args.metric, args.array, not args.no_progress)
    print(f"{args.embeddings} -> {args.output}: {meta['records']:,} records x {meta['dim']}, {meta['kind']} "
          f"({meta['metric']})", file=sys.stderr)
    return 0


def run_query(args: argparse.Namespace) -> int:
    from biotf.analysis.search.query import check_query, query_file

    check_query(args.ids, args.expression, args.input, args.model, args.k, args.ef_search, args.output)
    with claim_outputs(args, {"--output": args.output}, [p for p in (args.input,) if p is not None]):
        print(query_file(args.index, args.output, args.k, args.metric, args.ef_search, args.ids, args.expression,
                         args.input, reader_options(args), lambda: load_model(args, args.device)), file=sys.stderr)
        return 0


def run_add(args: argparse.Namespace) -> int:
    from biotf.analysis.search.index import add_records

    meta, added = add_records(args.index, args.embeddings, waiting=lambda: print(
        f"biotf search add: another biotf run is writing {args.index}; waiting until it ends", file=sys.stderr))
    print(f"{args.embeddings} -> {args.index}: {added:,} records added, {meta['records']:,} in all ({meta['kind']})",
          file=sys.stderr)
    return 0


def run_evaluate(args: argparse.Namespace) -> int:
    from biotf.analysis.search.agreement import evaluate_embeddings

    print("\n".join(evaluate_embeddings(args.embeddings, args.label, args.label_pattern, args.split, args.k,
                                         args.metric, args.array, args.classical, args.invalid_smiles)))
    return 0
