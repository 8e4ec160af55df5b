"""Pictures of contact maps (`biotf contacts --plot DIR`, `biotf contacts evaluate --plot DIR`): one PNG a protein.

The predicted map is drawn as probabilities (0 white to the map's highest at separation >= 6 black, as its colour
bar says; residues numbered from 1); with a structure, the true map is drawn beside it (contacts black, pairs with
an unobserved residue grey), on the same axes, so the eye can lay one over the other.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from biotf.analysis.plot import pyplot, save_figure
from biotf.structure.chains import CONTACT_ANGSTROM, Chain

SCALE_SEPARATION = 6  # the shortest separation `precision` scores


def _top(probabilities: np.ndarray) -> float:
    """The colour scale's black: the highest probability at separation >= SCALE_SEPARATION (the pairs next to the
    diagonal, near-certain for any model, would leave a weak model's map white; the whole map for a protein too
    short to have any), at least a tiny positive number."""
    far = np.triu(probabilities, k=SCALE_SEPARATION) if len(probabilities) > SCALE_SEPARATION else probabilities
    return float(max(far.max(), 1e-6))


def plot_contacts(path: str | Path, name: str, probabilities: np.ndarray, chain: Chain | None = None,
                  note: str = "") -> Path:
    """Draw one protein's (L, L) `probabilities` (and `chain`'s true contacts beside them) into PNG `path`."""
    plt = pyplot()
    panels = 1 if chain is None else 2
    figure, axes = plt.subplots(1, panels, figsize=(5.2 * panels, 4.8), squeeze=False)
    length = len(probabilities)
    extent = (0.5, length + 0.5, length + 0.5, 0.5)  # residue i's cell centred on i
    image = axes[0, 0].imshow(probabilities, cmap="Greys", vmin=0.0, vmax=_top(probabilities), extent=extent,
                              interpolation="nearest")
    figure.colorbar(image, ax=axes[0, 0], fraction=0.046, pad=0.04, label="contact probability")
    axes[0, 0].set_title(f"{name}: predicted ({length} residues)")
    if chain is not None:
        known = chain.known
        truth = np.where(known[:, None] & known[None], chain.contacts().astype(float), 0.5)
        axes[0, 1].imshow(truth, cmap="Greys", vmin=0.0, vmax=1.0, extent=extent, interpolation="nearest")
        axes[0, 1].set_title(f"true: C-beta < {CONTACT_ANGSTROM:g} A (grey: unobserved)")
    for panel in axes[0]:
        panel.set_xlabel("residue j")
        panel.set_ylabel("residue i")
    if note:
        figure.suptitle(note, fontsize="small")
    figure.tight_layout()
    return save_figure(figure, path)
