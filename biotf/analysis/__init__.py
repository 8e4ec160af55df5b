"""Downstream analysis of embedding files: linear probes against classical baselines, 2-D maps, similarity search
(`biotf.analysis.search`)."""

from biotf.lazy import lazy_exports

# name -> submodule; each is imported when first used (see biotf/lazy.py).
_EXPORTS = {
    "BASELINES": "feature_baselines", "kmer_frequencies": "feature_baselines", "morgan_fingerprints": "feature_baselines",
    "labels": "probe_labels", "plot_file": "plot", "plot_map": "plot", "project": "plot", "ProbeReport": "probe",
    "run_probe": "probe",
}
__getattr__ = lazy_exports(__name__, _EXPORTS)
__all__ = sorted(_EXPORTS)
