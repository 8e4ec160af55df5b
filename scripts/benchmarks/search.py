"""Similarity search benchmarks (issue 27): the approximate index against exact search, and exact search against a
plain numpy matrix product.

Data: random but clustered float32 vectors, the shape embedding sets have (many families, low intrinsic
dimension), not uniform noise, which is the worst case of every approximate method and unlike any embedding
file: 1,000 cluster centres ~ N(0, I) in a 32-d latent space, each point a centre plus N(0, 0.35^2 I) latent
noise, mapped to 256-d by one random Gaussian matrix (scaled 1/sqrt(32)), plus N(0, 0.1^2 I) noise in all 256
dimensions. Queries: 1,000 fresh points of the same generator (not in the index). Metric: cosine. Threads: all
the machine has (faiss / hnswlib / usearch and numpy's BLAS alike).

1. Libraries (`compare_libraries`, 200k x 256; quick: 20k): build time, index size, queries/s and recall@10
   against exact search for faiss HNSW, faiss IVF-Flat, hnswlib and usearch, each over its search-time knob
   (ef / nprobe / expansion); the choice of `biotf search` rests on this table (docs/benchmarks.md).
2. biotf's index at 1M x 256 (quick: 100k): `build_index` time and RSS growth, queries/s and recall@10 of the
   approximate index (target recall@10 >= 0.95 at >= 1,000 queries/s), and biotf's exact search (blocked,
   bounded memory, deterministic ties) against the plain product `q @ X.T` + `np.argpartition` top-10 (ratio).
"""

from __future__ import annotations

import os
import tempfile
import time
from pathlib import Path

import numpy as np

DIM, LATENT, CENTRES, K = 256, 32, 1000, 10


def clustered(n: int, seed: int, dim: int = DIM, chunk: int = 100_000) -> np.ndarray:
    """`n` vectors of the generator in the module docstring (the centres and the mixing matrix are the same for
    every seed: seed picks the points)."""
    shape_rng = np.random.default_rng(12345)
    centres = shape_rng.normal(size=(CENTRES, LATENT))
    mixing = shape_rng.normal(size=(LATENT, dim)) / np.sqrt(LATENT)
    rng = np.random.default_rng(seed)
    out = np.empty((n, dim), np.float32)
    for start in range(0, n, chunk):
        m = min(chunk, n - start)
        latent = centres[rng.integers(0, CENTRES, m)] + 0.35 * rng.normal(size=(m, LATENT))
        out[start:start + m] = latent @ mixing + 0.1 * rng.normal(size=(m, dim))
    return out


def unit(x: np.ndarray) -> np.ndarray:
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def recall(found: np.ndarray, truth: np.ndarray) -> float:
    return float(np.mean([len(set(a) & set(b)) / K for a, b in zip(found, truth)]))


def rss_mib(field: str = "VmRSS") -> float:
    """This process's resident memory (VmRSS) or its peak since the last `reset_peak` (VmHWM), MiB."""
    with open("/proc/self/status") as handle:
        return next(int(line.split()[1]) for line in handle if line.startswith(field + ":")) / 1024


def reset_peak() -> None:
    with open("/proc/self/clear_refs", "w") as handle:  # VmHWM := VmRSS (Linux)
        handle.write("5")


def _faiss_hnsw(base, m=32, ef_construction=100):
    import faiss

    index = faiss.IndexHNSWFlat(DIM, m, faiss.METRIC_INNER_PRODUCT)
    index.hnsw.efConstruction = ef_construction
    index.add(base)

    def search(queries, ef):
        index.hnsw.efSearch = ef
        return index.search(queries, K)[1]
    return index, search, (16, 32, 64, 128, 256), lambda path: faiss.write_index(index, path)


def _faiss_ivf(base):
    import faiss

    nlist = int(4 * np.sqrt(len(base)))
    quantizer = faiss.IndexFlatIP(DIM)
    index = faiss.IndexIVFFlat(quantizer, DIM, nlist, faiss.METRIC_INNER_PRODUCT)
    index.train(base[np.random.default_rng(0).permutation(len(base))[:max(nlist * 39, 50_000)]])
    index.add(base)

    def search(queries, nprobe):
        index.nprobe = nprobe
        return index.search(queries, K)[1]
    return index, search, (4, 8, 16, 32, 64), lambda path: faiss.write_index(index, path)


def _hnswlib(base, m=16, ef_construction=200):
    import hnswlib

    index = hnswlib.Index(space="ip", dim=DIM)
    index.init_index(max_elements=len(base), M=m, ef_construction=ef_construction)
    index.add_items(base, np.arange(len(base)), num_threads=os.cpu_count())

    def search(queries, ef):
        index.set_ef(ef)
        return index.knn_query(queries, k=K, num_threads=os.cpu_count())[0]
    return index, search, (16, 32, 64, 128, 256), lambda path: index.save_index(path)


def _usearch(base, connectivity=16, expansion_add=128):
    from usearch.index import Index

    index = Index(ndim=DIM, metric="ip", dtype="f32", connectivity=connectivity, expansion_add=expansion_add)
    index.add(np.arange(len(base)), base, threads=os.cpu_count())

    def search(queries, expansion):
        index.expansion_search = expansion
        return index.search(queries, K, threads=os.cpu_count()).keys
    return index, search, (16, 32, 64, 128, 256), lambda path: index.save(path)


LIBRARIES = {"faiss HNSW (M=32, efC=100)": _faiss_hnsw, "faiss IVF-Flat (nlist=4 sqrt N)": _faiss_ivf,
             "hnswlib (M=16, efC=200)": _hnswlib, "usearch (M=16, expansion_add=128)": _usearch}


def compare_libraries(bench, n: int) -> None:
    """Build each library's index over the same `n` clustered unit vectors; print its recall / speed curve."""
    from biotf.analysis.search.neighbours import exact_search

    base, queries = unit(clustered(n, seed=1)), unit(clustered(1000, seed=2))
    truth = exact_search(base, queries, K, "cosine")[1]
    for name, build in LIBRARIES.items():
        try:
            before, start = rss_mib(), time.perf_counter()
            index, search, knobs, save = build(base)
            seconds, grown = time.perf_counter() - start, rss_mib() - before
        except ImportError as error:
            print(f"{name}: skipped ({error})")
            continue
        with tempfile.TemporaryDirectory() as directory:
            save(f"{directory}/index")
            size = Path(f"{directory}/index").stat().st_size / 2**20
        bench.record(f"search libraries {n:,}: {name} build", seconds, "s",
                     note=f"index file {size:,.0f} MiB, RSS +{grown:,.0f} MiB")
        for knob in knobs:
            search(queries[:100], knob)  # warm-up
            start = time.perf_counter()
            found = search(queries, knob)
            per_second = len(queries) / (time.perf_counter() - start)
            bench.record(f"search libraries {n:,}: {name} @{knob}", recall(found, truth), "recall@10",
                         note=f"{per_second:,.0f} queries/s")
        del index, search, save


def index_at_scale(bench, n: int) -> None:
    """biotf's approximate index (build, open, query) and exact search at `n` x 256."""
    from biotf.analysis.search.index import SearchIndex, build_from_arrays
    from biotf.analysis.search.neighbours import exact_search, prepare

    base, queries = clustered(n, seed=1), clustered(1000, seed=2)
    ids = [f"r{i}" for i in range(n)]
    with tempfile.TemporaryDirectory() as directory:
        reset_peak()
        before, start = rss_mib(), time.perf_counter()
        build_from_arrays(f"{directory}/index", base, ids, {"dim": DIM}, "approx", "cosine")
        bench.record(f"search {n:,} x {DIM}: build approximate index (faiss HNSW, M=32, efC=100)",
                     time.perf_counter() - start, "s", note=f"peak RSS +{rss_mib('VmHWM') - before:,.0f} MiB "
                     f"above the vectors in memory ({base.nbytes / 2**20:,.0f} MiB)")
        size = sum(p.stat().st_size for p in Path(f"{directory}/index").iterdir()) / 2**20
        start = time.perf_counter()
        index = SearchIndex.open(f"{directory}/index")
        bench.record(f"search {n:,} x {DIM}: open index (CRC-32 of every file)", time.perf_counter() - start, "s",
                     note=f"{size:,.0f} MiB on disk")
        truth = exact_search(prepare(base, "cosine"), prepare(queries, "cosine"), K, "cosine")[1]
        index.search(queries[:100], K, "cosine")  # warm-up
        for ef in (32, 64, 128):
            index.meta["approx"]["ef_search"] = ef
            seconds = bench.time(lambda: index.search(queries, K, "cosine"), repeats=3)
            found = index.search(queries, K, "cosine")[1]
            per_second = len(queries) / float(np.median(seconds))
            target = "recall >= 0.95 at >= 1,000 queries/s"
            verdict = "PASS" if recall(found, truth) >= 0.95 and per_second >= 1000 else "MISS"
            bench.record(f"search {n:,} x {DIM}: approximate index efSearch={ef}", recall(found, truth), "recall@10",
                         target=target, note=f"{per_second:,.0f} queries/s, {verdict}")
        del index
    unit_base, few = prepare(base, "cosine"), prepare(queries[:250], "cosine")
    del base

    def plain():
        scores = few @ unit_base.T
        top = np.argpartition(-scores, K, axis=1)[:, :K]
        return np.take_along_axis(top, np.argsort(-np.take_along_axis(scores, top, 1), axis=1), 1)

    bench.compare(f"search {n:,} x {DIM}: exact top-10 of 250 queries", lambda: exact_search(unit_base, few, K, "cosine"),
                  plain, anchor_name="numpy q @ X.T + argpartition", unit="queries", work=len(few), repeats=3,
                  warmup=1)


def run(bench, quick: bool) -> None:
    compare_libraries(bench, 20_000 if quick else 200_000)
    index_at_scale(bench, 100_000 if quick else 1_000_000)
