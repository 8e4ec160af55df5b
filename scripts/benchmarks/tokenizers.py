r"""Tokenizer section: biotf's encode_batch against its anchor, on the real data in ../shared/data.

| scheme                 | data                                        | anchor                                      | target              |
|------------------------|---------------------------------------------|---------------------------------------------|---------------------|
| amino acid             | FLIP ss3 + DeepLoc test/val/setHARD (5.5 MB)| HF `tokenizers` WordLevel (the `to_hf()` pipeline) | biotf >= 100 MB/s |
|                        |                                             | + a Python dict loop (single figure)        |                     |
| 6-mer, non-overlapping | the three GenBank genomes in 10 kb pieces, x30 (5.1 MB) | HF `tokenizers` (`to_hf()`: Split `[ACGT]{6}\|.` + WordLevel) | biotf >= 30 MB/s |
| 6-mer, overlapping     | same                                        | plain Python (windows + dict), there is no HF pipeline | biotf >= 10 MB/s |
| SMILES                 | MOSES test set (176k SMILES, 6.3 MB)        | HF `tokenizers` Split(regex) + WordLevel (`to_hf()`) | >= 5x the anchor |
| BPE                    | tinyshakespeare + NSMC + constitution, Qwen2.5 | HF `tokenizers` `encode_batch` (same engine) | ~1x the anchor |

Every anchor returns the same ids as biotf (checked before timing). `--quick` uses a fifth of the data.
"""

from __future__ import annotations

import statistics
import tempfile
from pathlib import Path

SHARED = Path(__file__).resolve().parents[3] / "shared"


def _megabytes(texts: list[str]) -> float:
    return sum(map(len, texts)) / 1e6


def _hf_ids(backend, texts: list[str]) -> list[list[int]]:
    return [e.ids for e in backend.encode_batch(texts)]


def _check_same(name: str, ours, theirs) -> None:
    if [list(map(int, ids)) for ids in ours] != [list(ids) for ids in theirs]:
        raise SystemExit(f"{name}: biotf and its anchor disagree on the ids; not timing a wrong answer")


def _throughput(bench, name: str, comparison, target_mb_s: float) -> None:
    value = comparison.work / statistics.median(comparison.biotf_seconds)
    verdict = "PASS" if value >= target_mb_s else "MISS"
    bench.record(f"{name}: biotf throughput", value, "MB/s", target=f">= {target_mb_s:g} MB/s", note=verdict)


def amino_acids(bench, quick: bool) -> None:
    from biotf.io.readers import read_records
    from biotf.tokenizers import AminoAcidTokenizer

    files = ["flip_ss3_sequences.fasta.gz", "deeploc_test_set.fasta", "deeploc_our_val_set.fasta",
             "deeploc_setHARD.fasta"]
    texts = [r.sequence for f in files for r in read_records(SHARED / "data/proteins" / f)]
    texts = texts[::5] if quick else texts
    tokenizer = AminoAcidTokenizer()
    backend = tokenizer.to_hf().backend_tokenizer
    vocab = tokenizer.get_vocab()
    _check_same("amino acid", tokenizer.encode_batch(texts), _hf_ids(backend, texts))

    def python_loop():
        return [[0, *[vocab[c] for c in text], 2] for text in texts]

    mb = _megabytes(texts)
    comparison = bench.compare(f"amino acid encode_batch ({len(texts)} proteins, {mb:.1f} MB)",
                               lambda: tokenizer.encode_batch(texts), lambda: _hf_ids(backend, texts),
                               anchor_name="HF tokenizers WordLevel", unit="MB", work=mb)
    _throughput(bench, "amino acid", comparison, 100)
    seconds = statistics.median(bench.time(python_loop, repeats=3))
    bench.record("amino acid: Python dict loop (second anchor)", mb / seconds, "MB/s")


def _genome_pieces(quick: bool) -> list[str]:
    from biotf.io.readers import read_records

    genomes = [r.sequence for path in sorted((SHARED / "data/dna").glob("biopython_*.gb*")) for r in read_records(path)]
    pieces = [g[i:i + 10_000] for g in genomes for i in range(0, len(g), 10_000)]
    return pieces * (6 if quick else 30)


def kmers(bench, quick: bool) -> None:
    from biotf.tokenizers import KmerTokenizer

    texts = _genome_pieces(quick)
    mb = _megabytes(texts)
    tokenizer = KmerTokenizer(k=6, stride=6)
    backend = tokenizer.to_hf().backend_tokenizer
    _check_same("6-mer", tokenizer.encode_batch(texts[:20]), _hf_ids(backend, texts[:20]))
    comparison = bench.compare(f"6-mer non-overlapping encode_batch ({len(texts)} x 10 kb genome pieces, {mb:.1f} MB)",
                               lambda: tokenizer.encode_batch(texts), lambda: _hf_ids(backend, texts),
                               anchor_name="HF tokenizers Split+WordLevel", unit="MB", work=mb, repeats=5)
    _throughput(bench, "6-mer non-overlapping", comparison, 30)

    overlapping = KmerTokenizer(k=6, stride=1)
    vocab = overlapping.get_vocab()

    def python_windows(batch):
        return [[2, *[vocab[text[i:i + 6]] for i in range(len(text) - 5)], 3] for text in batch]

    _check_same("overlapping 6-mer", overlapping.encode_batch(texts[:20]), python_windows(texts[:20]))
    comparison = bench.compare(f"6-mer overlapping (stride 1) encode_batch ({mb:.1f} MB)",
                               lambda: overlapping.encode_batch(texts), lambda: python_windows(texts),
                               anchor_name="plain Python windows + dict", unit="MB", work=mb, repeats=3)
    _throughput(bench, "6-mer overlapping", comparison, 10)


def smiles(bench, quick: bool) -> None:
    from biotf.io.readers import ReaderOptions, read_records
    from biotf.tokenizers import SmilesTokenizer

    texts = [r.sequence for r in read_records(SHARED / "data/smiles/moses_test.csv.gz", ReaderOptions(column="SMILES"))]
    texts = texts[::5] if quick else texts
    tokenizer = SmilesTokenizer.train(texts)
    backend = tokenizer.to_hf().backend_tokenizer
    _check_same("SMILES", tokenizer.encode_batch(texts[:20000]), _hf_ids(backend, texts[:20000]))
    mb = _megabytes(texts)
    bench.compare(f"SMILES encode_batch (MOSES, {len(texts)} SMILES, {mb:.1f} MB)",
                  lambda: tokenizer.encode_batch(texts), lambda: _hf_ids(backend, texts),
                  anchor_name="HF tokenizers Split(regex)+WordLevel", unit="MB", work=mb, repeats=3, target=5)


def bpe(bench, quick: bool) -> None:
    from biotf.tokenizers import load_tokenizer
    from biotf.tokenizers.build import unpacked_copy

    with tempfile.TemporaryDirectory() as directory:
        tokenizer = load_tokenizer(unpacked_copy(SHARED / "qwen2.5-tokenizer", directory))
    text = SHARED / "data/text"
    texts = (text / "tinyshakespeare_input.txt").read_text(encoding="utf-8").split("\n\n")
    texts += (text / "nsmc_raw_subset_10k.tsv").read_text(encoding="utf-8").splitlines()[1:]
    texts += (text / "ko_constitution_kolaw.txt").read_text(encoding="utf-8").split("\n\n")
    texts = texts[::5] if quick else texts
    backend = tokenizer.backend
    _check_same("BPE", tokenizer.encode_batch(texts), _hf_ids(backend, texts))
    mb = sum(len(t.encode("utf-8")) for t in texts) / 1e6
    bench.compare(f"BPE encode_batch (Qwen2.5, English + Korean, {len(texts)} texts, {mb:.1f} MB UTF-8)",
                  lambda: tokenizer.encode_batch(texts), lambda: _hf_ids(backend, texts),
                  anchor_name="HF tokenizers encode_batch", unit="MB", work=mb, repeats=5, target=0.9)


def run(bench, quick: bool) -> None:
    if not (SHARED / "data").is_dir():
        print(f"skipped: {SHARED / 'data'} is not present")
        return
    amino_acids(bench, quick)
    kmers(bench, quick)
    smiles(bench, quick)
    bpe(bench, quick)
