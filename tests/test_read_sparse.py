"""The sparse read of an aggregated store: the dense view at every occupied cell, locally
and on S3, the same values as moczarr, and region subsets that are the full read masked to
the region (opening only the leaves, and reading only the inner chunks, they need)."""

from __future__ import annotations

import json
import shutil

import moczarr
import mortie
import numpy as np
import pytest
from builders import fields, grid_orders, pipeline_config, synthetic_source
from leaves import data_dir

import zagg
from zagg import hive
from zagg.hive.decode import CorruptChunkError
from zagg.read import RegionError
from zagg.sources.synthetic import synthetic_photons

pytestmark = pytest.mark.filterwarnings("ignore::zarr.errors.UnstableSpecificationWarning")

BOX = (-100.1, -75.55, -99.9, -75.45)  # ~5 x 11 km: a handful of order-10 shards
P, K, C = 10, 12, 15  # shard, inner chunk and cell orders
CONFIG = pipeline_config(
    synthetic_source(),
    fields("count", "h_mean", "h_tdigest"),
    grid_orders(P, C, inner=K),
    name="SPARSE",
)


@pytest.fixture(scope="module")
def photons():
    return synthetic_photons(30_000, BOX, chunk_size=3_000, seed=11).compute()


@pytest.fixture(scope="module")
def store(tmp_path_factory, photons):
    root = str(tmp_path_factory.mktemp("sparse") / "s")
    zagg.to_hive(zagg.aggregate(photons, CONFIG), root)
    return root


def assert_same(a, b):
    """Two read Datasets hold the same cells, coordinates and values."""
    assert list(a.data_vars) == list(b.data_vars)
    np.testing.assert_array_equal(a["morton"].values, b["morton"].values)
    for name in a.data_vars:
        x, y = a[name].values, b[name].values
        if x.dtype == object:
            assert list(x) == list(y), name
        else:
            np.testing.assert_array_equal(x, y)


def occupied_of(dense) -> np.ndarray:
    """Cells of a dense view that hold anything (what the leaves' bitmaps list)."""
    return (dense["count"].values > 0) | np.array([len(p) > 0 for p in dense["h_tdigest"].values])


def check_sparse_equals_dense(store, storage_options=None):
    sparse = zagg.open_hive(store, storage_options)
    dense = zagg.open_hive(store, storage_options, dense=True)
    at = occupied_of(dense)
    assert sparse.sizes["cells"] == int(at.sum()) > 0
    np.testing.assert_array_equal(sparse["morton"].values, dense["morton"].values[at])
    for name in sparse.data_vars:
        x, y = sparse[name].values, dense[name].values[at]
        assert x.dtype == y.dtype and sparse[name].attrs == dense[name].attrs
        if x.dtype == object:
            assert list(x) == list(y)
        else:
            np.testing.assert_array_equal(x, y)
    # one chunk per leaf, in ascending shard order, sized by its occupied cells
    shards = sparse.attrs["zagg"]["shards"]
    assert shards == sorted(shards, key=lambda s: int(zagg.grid.from_decimal([s])[0]))
    per_leaf = dense.sizes["cells"] // len(shards)
    sizes = tuple(int(at[i * per_leaf : (i + 1) * per_leaf].sum()) for i in range(len(shards)))
    assert sparse["count"].data.chunks == (sizes,)
    return sparse


def test_sparse_equals_dense_at_every_occupied_cell(store, photons):
    sparse = check_sparse_equals_dense(store)
    assert len(sparse.attrs["zagg"]["shards"]) > 2
    # and the counts are the photons': mortie's own keying of every keyable point
    lat, lon = photons["lat_ph"].values, photons["lon_ph"].values
    ok = np.isfinite(lat) & np.isfinite(lon)
    words, counts = np.unique(mortie.geo2mort(lat[ok], lon[ok], order=C), return_counts=True)
    np.testing.assert_array_equal(sparse["morton"].values, words)
    np.testing.assert_array_equal(sparse["count"].values, counts)


def test_sparse_equals_dense_on_s3(tmp_path, photons, moto_s3):
    options, fs = moto_s3
    fs.mkdir("zagg-read")
    zagg.to_hive(zagg.aggregate(photons, CONFIG), "s3://zagg-read/s", storage_options=options)
    local = str(tmp_path / "local")
    zagg.to_hive(zagg.aggregate(photons, CONFIG), local)
    remote = check_sparse_equals_dense("s3://zagg-read/s", options)
    assert_same(remote, zagg.open_hive(local))
    box = (-100.05, -75.53, -99.95, -75.47)
    assert_same(
        zagg.open_hive("s3://zagg-read/s", options, bbox=box), zagg.open_hive(local, bbox=box)
    )


def test_moczarr_gives_the_same_values_cell_for_cell(store):
    theirs = moczarr.open_hive(store)
    ours = zagg.open_hive(store)
    words = np.asarray(theirs["morton"].values, dtype=np.uint64)
    at = np.flatnonzero(np.isin(words, ours["morton"].values))
    assert at.size == ours.sizes["cells"]
    np.testing.assert_array_equal(words[at], ours["morton"].values)
    np.testing.assert_array_equal(
        np.asarray(theirs["cell_ids"].values)[at], ours["cell_ids"].values
    )
    np.testing.assert_array_equal(theirs["count"].values[at], ours["count"].values)
    np.testing.assert_array_equal(theirs["h_mean"].values[at], ours["h_mean"].values)
    assert list(theirs["h_tdigest"].values[at]) == list(ours["h_tdigest"].values)
    # every cell outside ours is empty in theirs
    rest = np.setdiff1d(np.arange(words.size), at)
    assert (theirs["count"].values[rest] == 0).all()


# -- regions -----------------------------------------------------------------------------
def masked(full, keep: np.ndarray):
    """The full sparse read restricted to the cells ``keep`` marks."""
    return full.isel(cells=np.flatnonzero(keep))


def ring(lon0, lat0, lon1, lat1, n=64):
    t = np.linspace(0.0, 1.0, n, endpoint=False)
    lons = np.concatenate(
        [lon0 + (lon1 - lon0) * t, np.full(n, lon1), lon1 - (lon1 - lon0) * t, np.full(n, lon0)]
    )
    lats = np.concatenate(
        [np.full(n, lat0), lat0 + (lat1 - lat0) * t, np.full(n, lat1), lat1 - (lat1 - lat0) * t]
    )
    return lats, lons


def test_bbox_subset_is_the_full_read_masked_to_mortie_cover(store):
    full = zagg.open_hive(store)
    box = (-100.06, -75.52, -99.98, -75.47)
    cover = mortie.morton_coverage(*ring(*box), order=C)  # densified edges, as documented
    sub = zagg.open_hive(store, bbox=box)
    expect = masked(full, np.isin(full["morton"].values, cover))
    assert 0 < sub.sizes["cells"] < full.sizes["cells"]
    assert_same(sub, expect)
    # only the leaves holding such cells, each one chunk
    assert sub.attrs["zagg"]["shards"] == sorted(
        {
            s
            for s in full.attrs["zagg"]["shards"]
            if np.isin(
                zagg.grid.ancestor(expect["morton"].values, P), zagg.grid.from_decimal([s])
            ).any()
        },
        key=lambda s: int(zagg.grid.from_decimal([s])[0]),
    )
    assert len(sub["count"].data.chunks[0]) == len(sub.attrs["zagg"]["shards"])


def test_geojson_subset_and_its_forms(store, tmp_path):
    full = zagg.open_hive(store)
    tri = [[-100.08, -75.54], [-99.92, -75.52], [-100.0, -75.46], [-100.08, -75.54]]
    geo = {
        "type": "Feature",
        "properties": {},
        "geometry": {"type": "Polygon", "coordinates": [tri]},
    }
    lats, lons = np.array([p[1] for p in tri]), np.array([p[0] for p in tri])
    cover = mortie.morton_coverage(lats, lons, order=C)
    expect = masked(full, np.isin(full["morton"].values, cover))
    assert 0 < expect.sizes["cells"] < full.sizes["cells"]
    path = tmp_path / "tri.geojson"
    path.write_text(json.dumps({"type": "FeatureCollection", "features": [geo]}))
    for form in (geo, json.dumps(geo), str(path), path):
        assert_same(zagg.open_hive(store, region=form), expect)


def test_cells_subset_matches_moczarrs_aoi(store):
    full = zagg.open_hive(store)
    words = full["morton"].values
    coarse = np.unique(zagg.grid.ancestor(words, 12))[:3]  # three order-12 cells with data
    point = mortie.geo2mort(np.array([-75.5]), np.array([-100.0]))[0]  # an order-29 point
    picks = [*zagg.grid.to_decimal(coarse), int(point)]
    keep = np.isin(zagg.grid.ancestor(words, 12), coarse) | (
        words == zagg.grid.ancestor(np.array([point], np.uint64), C)[0]
    )
    sub = zagg.open_hive(store, cells=picks)
    assert_same(sub, masked(full, keep))
    # moczarr's aoi= on the same cover keeps the same occupied rows
    aoi = np.concatenate([coarse, zagg.grid.ancestor(np.array([point], np.uint64), C)])
    theirs = moczarr.open_hive(store, aoi=aoi)
    had = theirs["count"].values > 0
    np.testing.assert_array_equal(
        np.asarray(theirs["morton"].values)[had], sub["morton"].values[sub["count"].values > 0]
    )


def test_a_region_without_data_gives_an_empty_dataset_of_the_schema(store):
    ds = zagg.open_hive(store, bbox=(10.0, 40.0, 11.0, 41.0))
    assert ds.sizes["cells"] == 0 and sorted(ds.data_vars) == ["count", "h_mean", "h_tdigest"]
    assert ds["count"].dtype == np.int64 and ds.attrs["zagg"]["shards"] == []
    assert zagg.quantile(ds, "h_tdigest", 0.5).values.shape == (0,)


def test_a_region_opens_only_the_leaves_and_inner_chunks_it_needs(store, tmp_path):
    """Damage outside the region does not reach a region read: a leaf whose stamp is
    unreadable, and an inner chunk of a needed leaf that holds no cell of the region."""
    root = tmp_path / "s"
    shutil.copytree(store, root)
    full = zagg.open_hive(str(root))
    shards = full.attrs["zagg"]["shards"]
    outside = shards[-1]
    (root / hive.leaf_path(outside) / "zarr.json").write_text("{ torn")
    with pytest.raises(ValueError, match="not valid JSON"):
        zagg.open_hive(str(root))
    n_inner = 4 ** (K - P)

    def stored_chunks(sid):
        blob = (data_dir(root, hive.leaf_path(sid)) / str(C) / "h_tdigest" / "c" / "0").read_bytes()
        index = np.frombuffer(blob[-16 * n_inner - 4 : -4], "<u8").reshape(-1, 2)
        return index, np.flatnonzero(index[:, 0] != np.iinfo(np.uint64).max)

    # inside a leaf with two stored digest chunks: keep the first one's cells, break the other
    inside = next(s for s in shards[:-1] if stored_chunks(s)[1].size >= 2)
    index, stored = stored_chunks(inside)
    chunk_obj = data_dir(root, hive.leaf_path(inside)) / str(C) / "h_tdigest" / "c" / "0"
    blob = bytearray(chunk_obj.read_bytes())
    keep_chunk, broken_chunk = int(stored[0]), int(stored[1])
    off, size = (int(v) for v in index[broken_chunk])
    blob[off : off + size] = b"\x00" * size  # no longer a zstd frame
    chunk_obj.write_bytes(bytes(blob))
    per = 4 ** (C - K)
    first = zagg.grid.shard_cell_words(zagg.grid.from_decimal([inside])[0], P, C)
    cells = first[keep_chunk * per : (keep_chunk + 1) * per]
    ids = zagg.grid.to_decimal(np.unique(zagg.grid.ancestor(cells, K)))
    sub = zagg.open_hive(str(root), cells=ids)
    assert sub.attrs["zagg"]["shards"] == [inside]
    assert np.isfinite(zagg.quantile(sub, "h_tdigest", 0.5).values).all()
    whole = zagg.open_leaf(str(root), inside)
    with pytest.raises(CorruptChunkError, match=f"inner chunk {broken_chunk} is not a zstd"):
        whole["h_tdigest"].load()


def test_bad_regions_are_refused_naming_the_fix(store):
    with pytest.raises(RegionError, match="one of region=, bbox= or cells=, not bbox and cells"):
        zagg.open_hive(store, bbox=(0, 0, 1, 1), cells=["11"])
    with pytest.raises(RegionError, match=r"-90 <= south < north <= 90"):
        zagg.open_hive(store, bbox=(0, 1, 1, 0))
    with pytest.raises(RegionError, match="four numbers"):
        zagg.open_hive(store, bbox=(1, 2, 3))
    with pytest.raises(RegionError, match="type 'Point' has no polygon"):
        zagg.open_hive(store, region={"type": "Point", "coordinates": [0, 0]})
    with pytest.raises(RegionError, match="neither a GeoJSON file nor a shipped region"):
        zagg.open_hive(store, region="no_such_place")
    with pytest.raises(RegionError, match="not a morton decimal area id"):
        zagg.open_hive(store, cells=["-5120"])
    with pytest.raises(RegionError, match="neither a morton word"):
        zagg.open_hive(store, cells=[-3])
    with pytest.raises(RegionError, match="at least 4"):
        zagg.open_hive(store, region={"type": "Polygon", "coordinates": [[[0, 0], [1, 1]]]})


def test_a_shipped_region_opens_by_name(store):
    full = zagg.open_hive(store)
    box = [[-100.2, -75.6], [-99.95, -75.6], [-99.95, -75.45], [-100.2, -75.45], [-100.2, -75.6]]
    cover = mortie.morton_coverage(
        np.array([p[1] for p in box]), np.array([p[0] for p in box]), order=C
    )
    expect = masked(full, np.isin(full["morton"].values, cover))
    assert 0 < expect.sizes["cells"] < full.sizes["cells"]
    assert_same(zagg.open_hive(store, region="test_box"), expect)
