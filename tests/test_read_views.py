"""The ecosystem's views of a read: xdggs on the NESTED ``cell_ids``, ``open_store``'s
DataTree (bare and multi-product roots), and ``plot_map``."""

from __future__ import annotations

import shutil

import mortie
import numpy as np
import pytest
from test_read_sparse import CONFIG

import zagg
from zagg.sources.synthetic import synthetic_photons

pytestmark = pytest.mark.filterwarnings("ignore::zarr.errors.UnstableSpecificationWarning")
BOX = (-100.1, -75.55, -99.9, -75.45)


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    root = str(tmp_path_factory.mktemp("views") / "s")
    photons = synthetic_photons(8_000, BOX, chunk_size=2_000, seed=2)
    zagg.to_hive(zagg.aggregate(photons, CONFIG), root)
    return root


def test_xdggs_reads_the_cell_ids_view(store):
    xdggs = pytest.importorskip("xdggs")
    ds = xdggs.decode(zagg.open_hive(store))
    assert ds.dggs.grid_info.level == 15 and ds.dggs.grid_info.indexing_scheme == "nested"
    centres = ds.dggs.cell_centers()
    lat, lon = mortie.mort2geo(ds["morton"].values)
    np.testing.assert_allclose(centres["latitude"].values, lat, atol=1e-8)
    np.testing.assert_allclose((centres["longitude"].values - lon + 180) % 360 - 180, 0, atol=1e-8)
    # xdggs finds the cell of a point the way mortie keys it
    i = ds.sizes["cells"] // 2
    picked = ds.dggs.sel_latlon(np.array([lat[i]]), np.array([lon[i]]))
    assert picked["morton"].values.tolist() == [ds["morton"].values[i]]
    assert int(picked["count"].values[0]) == int(ds["count"].values[i])
    parents = ds.dggs.zoom_to(10).values
    np.testing.assert_array_equal(
        parents, mortie.mort2healpix(zagg.grid.ancestor(ds["morton"].values, 10))[0]
    )


def test_open_store_of_a_bare_store_is_a_one_child_tree(store):
    tree = zagg.open_store(store)
    assert list(tree.children) == ["sparse"]
    attrs = tree.attrs["morton_hive_store"]
    assert attrs["products"] == [] and attrs["bare"] is True and attrs["node"] == "sparse"
    assert not tree.ds.data_vars
    node = tree["sparse"].to_dataset()
    direct = zagg.open_hive(store)
    np.testing.assert_array_equal(node["morton"].values, direct["morton"].values)
    np.testing.assert_array_equal(node["count"].values, direct["count"].values)
    assert node.attrs["semantic_hash"] == direct.attrs["morton_hive"]["semantic_hash"]
    with pytest.raises(ValueError, match="bare store with no named products"):
        zagg.open_store(store, products=["x"])


def test_open_store_of_a_multi_product_root(store, tmp_path):
    root = tmp_path / "products"
    root.mkdir()
    shutil.copytree(store, root / "heights")
    shutil.copytree(store, root / "copy-2")
    (root / "-5").mkdir()  # a base component is never a product
    tree = zagg.open_store(str(root), bbox=(-100.06, -75.52, -99.98, -75.47))
    assert sorted(tree.children) == ["copy-2", "heights"]
    assert tree.attrs["morton_hive_store"]["products"] == ["copy-2", "heights"]
    sub = zagg.open_hive(store, bbox=(-100.06, -75.52, -99.98, -75.47))
    np.testing.assert_array_equal(tree["heights"]["count"].values, sub["count"].values)
    only = zagg.open_store(str(root), products=["heights"])
    assert list(only.children) == ["heights"]
    with pytest.raises(ValueError, match="no product 'nope'; its products: copy-2, heights"):
        zagg.open_store(str(root), products=["nope"])
    with pytest.raises(ValueError, match="not a hive store root"):
        zagg.open_store(str(tmp_path / "empty"))


def test_plot_map_draws_fields_and_quantiles_with_readable_ticks(store):
    matplotlib = pytest.importorskip("matplotlib")
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ds = zagg.open_hive(store)
    words = ds["morton"].values
    ax = zagg.plot_map(ds, "h_tdigest", projection="lonlat")
    cells = next(c for c in ax.collections if c.get_array() is not None)
    median = zagg.quantile(ds, "h_tdigest", 0.5).values
    np.testing.assert_allclose(cells.get_array(), median)  # every cell, in store order
    # big enough to see at this extent: each cell drawn as its own HEALPix outline
    rings = np.asarray(mortie.mort2polygon(words)).reshape(len(words), -1, 2)
    drawn = np.stack([p.vertices[: rings.shape[1]] for p in cells.get_paths()])
    np.testing.assert_allclose(drawn[..., 1], rings[..., 0], atol=1e-9)
    np.testing.assert_allclose((drawn[..., 0] - rings[..., 1] + 180) % 360 - 180, 0, atol=1e-9)
    ax.figure.canvas.draw()
    xt = [t.get_text() for t in ax.get_xticklabels() if t.get_text()]
    yt = [t.get_text() for t in ax.get_yticklabels() if t.get_text()]
    assert xt and all(t.endswith("°W") for t in xt)
    assert yt and all(t.endswith("°S") for t in yt)
    bar = cells.colorbar
    label = bar.ax.get_xlabel() if bar.orientation == "horizontal" else bar.ax.get_ylabel()
    assert label == "photon height, median (m)"
    assert "order 15" in ax.get_title() and "45 cells" in ax.get_title()
    polar = zagg.plot_map(ds, "count")  # auto: every cell is poleward of 60°S
    cells = next(c for c in polar.collections if c.get_array() is not None)
    radii = np.stack([np.hypot(*p.vertices[: rings.shape[1]].T) for p in cells.get_paths()])
    np.testing.assert_allclose(
        radii, 2 * 6371.0088 * np.tan(np.radians(45 + rings[..., 0] / 2)), rtol=1e-9
    )
    assert "south pole" in polar.get_xlabel()
    with pytest.raises(ValueError, match="projection='mercator'"):
        zagg.plot_map(ds, "count", projection="mercator")
    plt.close("all")
