"""Downstream analysis of embedding files: linear probes against classical baselines, and 2-D maps."""

from biotf.analysis.baselines import BASELINES, kmer_frequencies, morgan_fingerprints
from biotf.analysis.labels import labels
from biotf.analysis.plot import plot_file, plot_map, project
from biotf.analysis.probe import ProbeReport, run_probe

__all__ = ["BASELINES", "ProbeReport", "kmer_frequencies", "labels", "morgan_fingerprints", "plot_file", "plot_map",
           "project", "run_probe"]
