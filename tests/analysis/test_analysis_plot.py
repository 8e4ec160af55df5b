"""2-D maps: PCA projection, categorical and numeric colouring, a PNG written atomically."""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest

from biotf.analysis.plot import plot_map, project
from biotf.errors import BiotfError, ConfigError

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def test_pca_keeps_the_main_axis():
    rng = np.random.default_rng(0)
    vectors = np.outer(np.linspace(-5, 5, 50), rng.normal(size=8)) + 0.01 * rng.normal(size=(50, 8))
    coordinates, method = project(vectors, "pca")
    assert method == "pca" and coordinates.shape == (50, 2)
    assert abs(np.corrcoef(coordinates[:, 0], np.linspace(-5, 5, 50))[0, 1]) > 0.99


@pytest.mark.parametrize("colors", [None, np.array(["a", "b"] * 15), np.array([str(i / 7) for i in range(30)]),
                                    np.array([f"class{i}" for i in range(30)])])
def test_png_for_every_kind_of_colour(tmp_path, colors):
    coordinates = np.random.default_rng(0).normal(size=(30, 2))
    path = plot_map(coordinates, colors, tmp_path / "map.png", "test", "label")
    assert path.read_bytes()[:8] == PNG_MAGIC
    assert [p.name for p in tmp_path.iterdir()] == ["map.png"]


def test_method_choices():
    vectors = np.random.default_rng(0).normal(size=(10, 4))
    with pytest.raises(ConfigError, match="allowed: auto, pca, umap"):
        project(vectors, "tsne")
    if importlib.util.find_spec("umap") is None:
        assert project(vectors)[1] == "pca"  # auto falls back to PCA
        with pytest.raises(BiotfError, match="umap-learn"):
            project(vectors, "umap")
