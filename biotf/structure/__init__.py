"""Structure from a sequence model: residue-residue contact maps from attention (`biotf contacts`).

The head's math (symmetrised, APC-corrected attention maps into a logistic regression) is the model's
(`biotf.model.heads`); this package runs it over files (`contact_files`): records read and checked,
batched, and written as .npz, .tsv or CASP RR (`formats`); it reads PDB / mmCIF chains with their true contacts
(`chains`), fits a head on them for any model (`fit`) and measures a head's precision (`contact_precision`); its pictures
are drawn by `biotf.analysis.plot.plot_contacts`.
"""

from biotf.lazy import lazy_exports

# name -> submodule; each is imported when first used (see biotf/lazy.py).
_EXPORTS = {
    "CONTACT_FORMATS": "formats", "ContactOptions": "contact_files",
    "ContactStats": "contact_files", "contact_maps": "contact_files", "predict_file": "contact_files",
    "proteins": "contact_files",
    "Chain": "chains", "read_chain": "chains", "fit_file": "fit", "evaluate_structures": "contact_precision",
}
__getattr__ = lazy_exports(__name__, _EXPORTS)
__all__ = sorted(_EXPORTS)
