"""The MOSES metrics of generated molecules (Polykovskiy et al. 2020, "Molecular Sets (MOSES): a benchmarking
platform for molecular generation models", Front. Pharmacol. 11:565644; code: molecularsets/moses,
`moses/metrics/metrics.py` and `utils.py`), written again for biotf:

- `metrics`: validity, unique@k, novelty, internal diversity, SNN, Frag, Scaf (one function each);
- `filters`: MOSES's Filters (MCF + PAINS, atoms, charge, rings);
- `chemnet`: ChemNet on the `fcd` package's weights and the Fréchet distance (FCD);
- `reference`: a reference file's statistics, computed once and cached by CRC-32;
- `benchmark`: a generated file against the references, as the rows `biotf generate evaluate` writes.
"""
