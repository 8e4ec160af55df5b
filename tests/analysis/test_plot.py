"""2-D maps: PCA projection, categorical and numeric colouring, a PNG written atomically."""

from __future__ import annotations

import sys

import numpy as np
import pytest

from biotf.analysis.plot import choose_projection, plot_map, project
from biotf.errors import BiotfError, ConfigError, InputError

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


def test_method_choices(monkeypatch):
    vectors = np.random.default_rng(0).normal(size=(20, 4))
    with pytest.raises(ConfigError, match="allowed: auto, pca, umap"):
        project(vectors, "tsne")
    monkeypatch.setitem(sys.modules, "umap", None)  # umap-learn not importable, wherever it is installed
    assert choose_projection("auto", 20) == ("pca", "umap-learn is not installed")
    assert project(vectors)[1] == "pca"
    with pytest.raises(BiotfError, match="umap-learn"):
        project(vectors, "umap")


@pytest.mark.parametrize("umap_importable", [False, True])
@pytest.mark.parametrize("records", [1, 2, 3, 15])
def test_few_records_are_drawn_with_pca_and_say_why(monkeypatch, records, umap_importable):
    """UMAP's spectral start fails on 3 records (scipy's eigh with k >= N): over UMAP's 15 neighbours or fewer, auto
    draws PCA whether or not umap-learn is there, and says so; a forced UMAP is refused in one line."""
    if umap_importable:
        pytest.importorskip("umap")
    else:
        monkeypatch.setitem(sys.modules, "umap", None)
    vectors = np.random.default_rng(0).normal(size=(records, 8))
    coordinates, method = project(vectors)
    assert method == "pca" and coordinates.shape == (records, 2) and np.isfinite(coordinates).all()
    assert choose_projection("auto", records)[1].startswith(f"{records} record")
    assert np.ptp(coordinates[:, 0]) > 0 if records > 1 else not coordinates.any()
    with pytest.raises(InputError, match=f"method=.umap. needs more than 15 records .* got {records}; use method="):
        project(vectors, "umap")


def test_two_records_lie_apart_on_the_first_axis():
    vectors = np.array([[0.0, 0.0, 1.0], [3.0, 4.0, 1.0]])
    coordinates, _ = project(vectors, "pca")
    assert abs(coordinates[0, 0] - coordinates[1, 0]) == pytest.approx(5.0) and not coordinates[:, 1].any()


@pytest.mark.slow  # umap-learn compiles its numba kernels on first use (about 20 s on a shared 2-core machine)
def test_auto_draws_umap_over_many_records_where_umap_learn_is_installed():
    pytest.importorskip("umap")
    vectors = np.random.default_rng(0).normal(size=(500, 8))
    assert choose_projection("auto", 500) == ("umap", "umap-learn is installed")
    coordinates, method = project(vectors)
    assert method == "umap" and coordinates.shape == (500, 2) and np.isfinite(coordinates).all()
