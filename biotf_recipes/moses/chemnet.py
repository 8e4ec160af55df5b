"""ChemNet (Preuer et al. 2018, "Fréchet ChemNet Distance: a metric for generative models for molecules in drug
discovery", J. Chem. Inf. Model.) and the Fréchet distance between two sets of its activations.

The network is written here and takes its weights from the file the `fcd` package ships
(`fcd/ChemNet_v0.13_pretrained.pt`, the Keras model of Preuer et al. converted to torch), read with
`torch.load(weights_only=True)`: a list of (layer kind, (state_dict, constructor arguments, options)), plain tensors
and values. No download at run time, nothing unpickled but tensors. The architecture and the input encoding follow
`fcd` 1.2.2 (`fcd/utils.py`) and `fcd_torch` (which MOSES uses):

- a SMILES plus an end token "." is tokenized over a 35-symbol vocabulary (two-letter Cl, Br, Si first; anything
  else is the unknown "X"), one-hot encoded, padded to 350 positions with zero rows and divided by 35;
- two 1-D convolutions (kernel 4, stride 2, TensorFlow "same" padding, no bias, SELU), then an LSTM of 128 and an
  LSTM of 512, each reading its input backwards (Keras `go_backwards`, whose output stays in the reversed order);
  the activation is the last LSTM's output at its last step (512 values).

FCD canonicalizes with RDKit before the network, as fcd_torch's dataset does (MOSES's FCD/Test and FCD/TestSF).
"""

from __future__ import annotations

import re
from functools import lru_cache
from pathlib import Path

import numpy as np

from biotf.errors import BiotfError
from biotf.progress import Progress

VOCABULARY = ("C", "N", "O", "H", "F", "Cl", "P", "B", "Br", "S", "I", "Si", "#", "(", ")", "+", "-", "1", "2", "3",
              "4", "5", "6", "7", "8", "=", "[", "]", "@", "c", "n", "o", "s", "X", ".")
UNKNOWN = VOCABULARY.index("X")
END = VOCABULARY.index(".")
PAD_LENGTH = 350
# Longer symbols first, then any single character (unknown ones become "X"), as fcd's FULL_REGEX.
SYMBOL = re.compile("|".join(re.escape(s) for s in sorted(VOCABULARY, key=lambda s: (-len(s), s))) + "|.", re.DOTALL)
INDEX = {symbol: i for i, symbol in enumerate(VOCABULARY)}
WEIGHTS_FILE = "ChemNet_v0.13_pretrained.pt"


def symbol_indices(smiles: str) -> list[int]:
    """The vocabulary index of each symbol of `smiles` and of the end token."""
    return [INDEX.get(symbol, UNKNOWN) for symbol in SYMBOL.findall(smiles)] + [END]


def one_hot(smiles: list[str]) -> np.ndarray:
    """(n, 350, 35) float32 input of ChemNet: one-hot rows divided by 35, zero rows after the end token. A SMILES
    longer than 349 symbols is refused (fcd refuses it; fcd_torch cuts it, which changes the molecule)."""
    encoded = np.zeros((len(smiles), PAD_LENGTH, len(VOCABULARY)), dtype=np.float32)
    for row, text in enumerate(smiles):
        indices = symbol_indices(text)
        if len(indices) > PAD_LENGTH:
            raise BiotfError(f"SMILES {text[:40]!r}... has {len(indices) - 1} symbols; ChemNet reads at most "
                             f"{PAD_LENGTH - 1}")
        encoded[row, np.arange(len(indices)), indices] = 1.0 / len(VOCABULARY)
    return encoded


def weights_path() -> Path:
    """The ChemNet weights inside the installed `fcd` package (the `chem` extra)."""
    try:
        import fcd
    except ImportError:
        raise BiotfError("the fcd package (ChemNet's weights for FCD) is not installed: pip install 'biotf[chem]'") \
            from None
    return Path(fcd.__file__).resolve().parent / WEIGHTS_FILE


def build_chemnet(layers: list):
    """ChemNet as a torch module from the weight file's layer list (see the module docstring)."""
    import torch
    from torch import nn

    class SamePadConv(nn.Module):
        """Conv1d with TensorFlow's "same" padding (extra zero on the right when odd) and SELU."""

        def __init__(self, conv: nn.Conv1d):
            super().__init__()
            self.conv = conv

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            kernel, stride = self.conv.kernel_size[0], self.conv.stride[0]
            pad = max(kernel - (stride if x.shape[2] % stride == 0 else x.shape[2] % stride), 0)
            return nn.functional.selu(self.conv(nn.functional.pad(x, (pad // 2, pad - pad // 2))))

    class ChemNet(nn.Module):
        def __init__(self):
            super().__init__()
            self.convs = nn.ModuleList()
            self.lstms = nn.ModuleList()
            for kind, (state, arguments, options) in layers:
                if kind == "Conv1d" and options == {"activation": "selu", "padding": "same"} and not self.lstms:
                    conv = nn.Conv1d(**arguments)
                    conv.load_state_dict(state)
                    self.convs.append(SamePadConv(conv))
                elif kind == "LSTM" and options.get("reverse") is True:
                    lstm = nn.LSTM(**arguments)
                    lstm.load_state_dict(state)
                    self.lstms.append(lstm)
                else:
                    raise BiotfError(f"ChemNet weights {weights_path()}: unexpected layer {kind} {options}")

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            x = x.transpose(1, 2)          # (batch, symbols, positions) for the convolutions
            for conv in self.convs:
                x = conv(x)
            x = x.transpose(1, 2)          # (batch, positions, channels) for the LSTMs
            for lstm in self.lstms:
                x = lstm(torch.flip(x, [1]))[0]
            return x[:, -1]

    return ChemNet().eval()


@lru_cache(maxsize=1)
def chemnet():
    """The packaged ChemNet, loaded once (tensors and plain values only)."""
    from biotf.untrusted import load_tensors

    return build_chemnet(load_tensors(weights_path(), "ChemNet weights"))


def activations(smiles: list[str], batch_size: int = 256, device: str = "cpu",
                progress: Progress | None = None) -> np.ndarray:
    """(n, 512) float32 ChemNet activations of `smiles` (as given: canonicalize first for FCD), each batch counted in
    `progress`."""
    import torch

    model = chemnet().to(device)
    out = np.zeros((len(smiles), 512), dtype=np.float32)
    with torch.inference_mode():
        for start in range(0, len(smiles), batch_size):
            batch = torch.from_numpy(one_hot(smiles[start:start + batch_size])).to(device)
            out[start:start + len(batch)] = model(batch).float().cpu().numpy()
            if progress is not None:
                progress.update(len(batch))
    model.to("cpu")
    return out


def frechet_distance(mean1: np.ndarray, cov1: np.ndarray, mean2: np.ndarray, cov2: np.ndarray,
                     eps: float = 1e-6) -> float:
    """d^2 = |m1 - m2|^2 + Tr(C1 + C2 - 2 (C1 C2)^(1/2)), the Fréchet distance of two Gaussians (Dowson & Landau
    1982), as FCD computes it (fcd / fcd_torch `calculate_frechet_distance`, after Heusel et al.'s FID code): when
    the product is near singular (a non-finite square root, or one with a diagonal imaginary part over 1e-3), `eps`
    is added to both diagonals; a small imaginary remainder is dropped."""
    import warnings

    from scipy import linalg

    mean1, mean2 = np.atleast_1d(mean1), np.atleast_1d(mean2)
    cov1, cov2 = np.atleast_2d(cov1), np.atleast_2d(cov2)
    with warnings.catch_warnings():  # "matrix is singular": fewer molecules than 512 dimensions; handled below
        warnings.simplefilter("ignore", linalg.LinAlgWarning)
        root = linalg.sqrtm(cov1 @ cov2)
        if not np.isfinite(root).all() or not np.allclose(np.diagonal(root).imag, 0, atol=1e-3):
            offset = np.eye(cov1.shape[0]) * eps
            root = linalg.sqrtm((cov1 + offset) @ (cov2 + offset))
    if np.iscomplexobj(root):
        if not np.allclose(np.diagonal(root).imag, 0, atol=1e-3):
            raise BiotfError(f"Fréchet distance: the covariance product's square root has an imaginary part "
                             f"{np.max(np.abs(root.imag)):.3g}")
        root = root.real
    diff = mean1 - mean2
    return float(diff @ diff + np.trace(cov1) + np.trace(cov2) - 2 * np.trace(root))
