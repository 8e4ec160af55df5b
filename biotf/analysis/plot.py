"""Every picture biotf draws, and the one way it writes a PNG (`save_figure`: a temporary name, then renamed; never
over the file it shows nor any file that is not a PNG).

A 2-D map of embeddings coloured by a metadata column (`biotf plot`, `biotf embed --plot`): the picture a
single-cell biologist expects. "auto" draws UMAP (McInnes et al. 2018) where `umap-learn` is installed and there
are more records than UMAP's neighbourhood, else PCA, and always says which and why (`choose_projection`): the same
command gives another picture where another library is installed, so the picture's title and the command's summary
name the projection. "pca" or "umap" can be forced. Categorical labels get one colour each (the 19 most frequent,
the rest as "other"); numeric labels with many distinct values get a colour bar.

Contact maps (`biotf contacts --plot DIR`, `biotf contacts evaluate --plot DIR`): one PNG a protein. The predicted
map is drawn as probabilities (0 white to the map's highest at separation >= 6 black, as its colour bar says;
residues numbered from 1); with a structure, the true map is drawn beside it, on the same axes, so the eye can lay
one over the other.
"""

from __future__ import annotations

import re
import warnings
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from biotf.analysis.probe_labels import labels
from biotf.data.labels import numeric, parse_labels
from biotf.errors import BiotfError, ConfigError, InputError
from biotf.io.atomic import atomic_write
from biotf.io.outputs import check_output
from biotf.naming import given, parameter

if TYPE_CHECKING:
    from biotf.io.readers import ReaderOptions

METHODS = ("auto", "pca", "umap")
UMAP_NEIGHBORS = 15  # umap-learn's default n_neighbors; "auto" draws UMAP only over more records than this
MAX_CATEGORIES = 20
NUMERIC_MIN_DISTINCT = 10
SCALE_SEPARATION = 6  # the shortest separation `biotf.structure.contact_precision` scores


def choose_projection(method: str, records: int) -> tuple[str, str]:
    """The projection that `method` draws `records` vectors with, and why where "auto" chose ("" where it was asked
    for); a forced UMAP that cannot be drawn is refused in one line before any work."""
    if method not in METHODS:
        raise ConfigError(parameter("method"), method, allowed=", ".join(METHODS))
    if records < 1:
        raise InputError("a map needs at least 1 record, got 0")
    if method == "pca":
        return "pca", ""
    if records <= UMAP_NEIGHBORS:
        if method == "umap":
            raise InputError(f"{given('method', 'umap')} needs more than {UMAP_NEIGHBORS} records (its "
                             f"neighbourhood), got {records}; use {given('method', 'pca')}")
        return "pca", f"{records} record{'s' if records != 1 else ''}, too few for UMAP's {UMAP_NEIGHBORS} neighbours"
    installed = umap_installed()
    if method == "umap":
        if not installed:
            raise BiotfError(f"{given('method', 'umap')} needs umap-learn: pip install umap-learn (or use "
                             f"{given('method', 'pca')})")
        return "umap", ""
    return ("umap", "umap-learn is installed") if installed else ("pca", "umap-learn is not installed")


def umap_installed() -> bool:
    try:
        import umap  # noqa: F401  (umap-learn)
    except ImportError:
        return False
    return True


def project(vectors: np.ndarray, method: str = "auto", seed: int = 0) -> tuple[np.ndarray, str]:
    """(N, 2) coordinates and the projection used (`choose_projection`). PCA of N records has at most N - 1 axes
    that vary: those missing (one record: both; two: the second) are drawn at 0."""
    used, _ = choose_projection(method, len(vectors))
    return projected(vectors, used, seed), used


def projected(vectors: np.ndarray, used: str, seed: int = 0) -> np.ndarray:
    """(N, 2) coordinates by the projection `choose_projection` chose ("pca" or "umap")."""
    if used == "umap":
        import umap

        with warnings.catch_warnings():  # "n_jobs value 1 overridden to 1 by setting random_state": by design
            warnings.filterwarnings("ignore", message="n_jobs value", category=UserWarning)
            return umap.UMAP(n_components=2, n_neighbors=UMAP_NEIGHBORS, random_state=seed).fit_transform(vectors)
    from sklearn.decomposition import PCA

    coordinates = np.zeros((len(vectors), 2), dtype=np.float64)
    axes = min(2, len(vectors) - 1, vectors.shape[1])
    if axes > 0:
        coordinates[:, :axes] = PCA(n_components=axes, random_state=seed).fit_transform(vectors)
    return coordinates


def pyplot():
    """matplotlib.pyplot on the file-only Agg backend (commands draw PNGs, never windows)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def save_figure(figure, path: str | Path, dpi: int = 150) -> Path:
    """Write `figure` as a PNG under a temporary name, then rename (all or nothing), and free it."""
    try:
        return atomic_write(path, lambda temporary: figure.savefig(temporary, format="png", dpi=dpi))
    finally:
        pyplot().close(figure)


def picture_paths(directory: str | Path, names: list[str], inputs: Sequence[str | Path] = (), overwrite: bool = False,
                  flag: str | None = None) -> list[Path]:
    """One PNG path per name under `directory` (`<name>.png`, characters other than letters, digits, `.`, `_`, `-`
    as `_`), each checked by the output rule (`check_output`) before any work; a directory that is a file, and two
    names that give one file name, are refused in one line (named by `flag`, default: the parameter `plot`). The
    directory is made with the first picture."""
    directory, flag = Path(directory), flag or parameter("plot")
    if directory.exists() and not directory.is_dir():
        raise InputError(f"{flag} {directory} is a file; give a directory for the pictures")
    paths: list[Path] = []
    taken: dict[str, str] = {}
    for name in names:
        file_name = re.sub(r"[^A-Za-z0-9._-]", "_", name).lstrip(".") + ".png"
        if file_name in taken:
            raise InputError(f"{flag}: {name!r} and {taken[file_name]!r} would both be drawn as "
                             f"{directory / file_name}; make their ids differ in letters or digits")
        taken[file_name] = name
        paths.append(check_output(directory / file_name, inputs, overwrite, image=True, flag=flag))
    return paths


def plot_map(coordinates: np.ndarray, colors: np.ndarray | None, path: str | Path, title: str,
             color_name: str | None = None, method: str = "pca") -> Path:
    plt = pyplot()
    figure, axes = plt.subplots(figsize=(7, 6))
    size = float(np.clip(20000 / len(coordinates), 4, 30))  # marker area: smaller as points crowd
    values = numeric(colors) if colors is not None else None
    if colors is None:
        axes.scatter(coordinates[:, 0], coordinates[:, 1], s=size, linewidths=0)
    elif values is not None and len(np.unique(values)) > NUMERIC_MIN_DISTINCT:
        points = axes.scatter(coordinates[:, 0], coordinates[:, 1], c=values, s=size, cmap="viridis", linewidths=0)
        figure.colorbar(points, ax=axes, label=color_name)
    else:
        ranked = [label for label, _ in Counter(colors.tolist()).most_common()]
        shown = ranked if len(ranked) <= MAX_CATEGORIES else ranked[:MAX_CATEGORIES - 1]
        palette = plt.get_cmap("tab20")
        for number, label in enumerate(shown):
            at = colors == label
            axes.scatter(coordinates[at, 0], coordinates[at, 1], s=size, color=palette(number), label=label,
                         linewidths=0)
        rest = ~np.isin(colors, shown)
        if rest.any():
            axes.scatter(coordinates[rest, 0], coordinates[rest, 1], s=size, color="lightgrey",
                         label=f"other ({len(ranked) - len(shown)} labels)", linewidths=0)
        axes.legend(title=color_name, fontsize="small", markerscale=max(1.0, 12 / size), loc="best", frameon=False)
    axes.set_xlabel(f"{method.upper()} 1")
    axes.set_ylabel(f"{method.upper()} 2")
    axes.set_title(title)
    figure.tight_layout()
    return save_figure(figure, path)


def _top(probabilities: np.ndarray) -> float:
    """The colour scale's black: the highest probability at separation >= SCALE_SEPARATION (the pairs next to the
    diagonal, near-certain for any model, would leave a weak model's map white; the whole map for a protein too
    short to have any), at least a tiny positive number."""
    far = np.triu(probabilities, k=SCALE_SEPARATION) if len(probabilities) > SCALE_SEPARATION else probabilities
    return float(max(far.max(), 1e-6))


def plot_contacts(path: str | Path, name: str, probabilities: np.ndarray,
                  truth: tuple[np.ndarray, str] | None = None, note: str = "") -> Path:
    """Draw one protein's (L, L) `probabilities` into PNG `path`, and beside them `truth`, the true map and its title
    (`biotf.structure.chains.Chain.drawn_contacts`: contacts black, pairs with an unobserved residue grey)."""
    plt = pyplot()
    panels = 1 if truth is None else 2
    figure, axes = plt.subplots(1, panels, figsize=(5.2 * panels, 4.8), squeeze=False)
    length = len(probabilities)
    extent = (0.5, length + 0.5, length + 0.5, 0.5)  # residue i's cell centred on i
    image = axes[0, 0].imshow(probabilities, cmap="Greys", vmin=0.0, vmax=_top(probabilities), extent=extent,
                              interpolation="nearest")
    figure.colorbar(image, ax=axes[0, 0], fraction=0.046, pad=0.04, label="contact probability")
    axes[0, 0].set_title(f"{name}: predicted ({length} residues)")
    if truth is not None:
        axes[0, 1].imshow(truth[0], cmap="Greys", vmin=0.0, vmax=1.0, extent=extent, interpolation="nearest")
        axes[0, 1].set_title(truth[1])
    for panel in axes[0]:
        panel.set_xlabel("residue j")
        panel.set_ylabel("residue i")
    if note:
        figure.suptitle(note, fontsize="small")
    figure.tight_layout()
    return save_figure(figure, path)


def check_map_colour(input_path: str | Path, reader_options: ReaderOptions, color: str | None,
                     label_pattern: str | None) -> None:
    """`embed --plot --color COLUMN [--label-pattern REGEX]`, checked before anything is embedded (the map is drawn
    after): the column must be one of the input's record columns (its first record's), the pattern a regex."""
    from biotf.io.readers import read_records

    if label_pattern is not None:
        parse_labels([], np.array([], dtype=str), label_pattern, color or "id")  # refuses a regex that is not one
    if color is None or color == "id":
        return
    first = next(read_records(input_path, reader_options), None)
    if first is not None and color not in first.metadata:
        raise InputError(f"{parameter('color')}: label column {color!r} not found in {input_path} "
                         f"(columns: {', '.join(['id', *first.metadata])})")


def plot_file(embeddings: str | Path, output: str | Path, color: str | None = None, method: str = "auto",
              label_pattern: str | None = None, array: str = "embeddings", overwrite: bool = False,
              progress: bool = False) -> str:
    """Draw the map of an embedding file into `output` (PNG); returns the projection used, with why where "auto"
    chose (`pca: umap-learn is not installed`), as the picture's title names it. With `progress`, a projection
    longer than the progress interval (UMAP of thousands of records; its first use compiles) says so on stderr.
    `output` follows `biotf.io.outputs.check_output`: never the input, never a file that is not a PNG."""
    from biotf.io.embeddings import read_embeddings
    from biotf.progress import waiting

    check_output(output, [embeddings], overwrite, image=True)
    table = read_embeddings(embeddings)
    if array not in table.arrays:
        raise ConfigError(parameter("array"), array, allowed=", ".join(table.arrays))
    colors = labels(table, color, label_pattern) if color is not None else None
    vectors = table.arrays[array]
    used, reason = choose_projection(method, len(vectors))
    count = f"{len(vectors)} record{'s' if len(vectors) != 1 else ''}"
    with waiting(progress, f"projecting {count} of {Path(embeddings).name}"):
        coordinates = projected(vectors, used)
    title = f"{Path(embeddings).name}: {count}, {array}\n{used.upper()}" + (f" ({reason})" if reason else "")
    plot_map(coordinates, colors, output, title, color, used)
    return f"{used}: {reason}" if reason else used
