"""Downstream analysis of embedding files: linear probes against classical baselines, 2-D maps, similarity search
(`biotf.analysis.search`), and what a model's token embeddings learnt (`tokens`, with the amino-acid scales of
`scales`)."""

from biotf.lazy import lazy_exports

# name -> submodule; each is imported when first used (see biotf/lazy.py).
_EXPORTS = {
    "BASELINES": "feature_baselines", "kmer_frequencies": "feature_baselines", "morgan_fingerprints": "feature_baselines",
    "labels": "probe_labels", "plot_file": "plot", "plot_map": "plot", "project": "plot", "ProbeReport": "probe",
    "run_probe": "probe", "AMINO_ACID_SCALES": "scales", "analyse_tokens": "tokens", "loo_ridge_r2": "tokens",
    "read_property_table": "tokens",
}
__getattr__ = lazy_exports(__name__, _EXPORTS)
__all__ = sorted(_EXPORTS)
