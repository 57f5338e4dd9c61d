"""The reader: Datasets in the in-memory leaf shape, and loud refusals of what it can't read."""

from __future__ import annotations

import json
import shutil

import dask.array as da
import mortie
import numpy as np
import pytest
import test_hive_builders as builders
import xarray as xr
from test_hive_builders import (
    ATTRS,
    FIELDS,
    NORTH,
    OCCUPIED,
    SOUTH,
    grid_block,
    law,
    shard_arrays,
    write_shard,
)

from zagg.hive import leaf_path, update_root_coverage
from zagg.kernels import tdigest
from zagg.read import decode_digest, open_hive, open_leaf, quantile

pytestmark = pytest.mark.filterwarnings("ignore::zarr.errors.UnstableSpecificationWarning")


def new_store(tmp_path) -> str:
    return builders.new_store(tmp_path, "ATL06", "006")


def in_memory(shards: dict[str, dict], grid_kw=None) -> xr.Dataset:
    """What the aggregation engine would hand over for these shards (the leaf contract)."""
    ids = sorted(shards, key=lambda s: int(law(s)[0]))
    data_vars = {
        name: (
            ("cells",),
            da.concatenate([da.from_array(shards[s][name], chunks=16) for s in ids]),
            ATTRS[name],
        )
        for name in FIELDS
    }
    morton = np.concatenate([law(s) for s in ids])
    ds = xr.Dataset(data_vars, coords={"morton": (("cells",), morton)})
    ds.attrs["zagg"] = {
        "grid": grid_block(**(grid_kw or {})),
        "shards": ids,
        "fields": FIELDS,
        "dataset": {"short_name": "ATL06", "version": "006"},
    }
    return ds


@pytest.fixture(scope="module")
def two_shards(tmp_path_factory):
    root = new_store(tmp_path_factory.mktemp("read"))
    _, north = write_shard(root, NORTH)
    _, south = write_shard(root, SOUTH, occupied=(2, 5, 9, 15), seed=4, g2=False)
    update_root_coverage(root, [NORTH, SOUTH], 4)
    return root, {NORTH: north, SOUTH: south}


def test_dense_view_matches_the_in_memory_contract(two_shards):
    root, shards = two_shards
    expected = in_memory(shards)
    for discover in ("auto", "moc", "walk"):
        got = open_hive(root, discover=discover, dense=True)
        assert got.sizes == {"cells": 32}
        assert list(got.data_vars) == sorted(FIELDS)
        assert got["morton"].dims == ("cells",) and got["morton"].dtype == np.uint64
        np.testing.assert_array_equal(got["morton"].values, expected["morton"].values)
        for name in FIELDS:
            var = got[name]
            assert isinstance(var.data, da.Array) and var.data.chunks == ((16, 16),)
            assert var.dtype == expected[name].dtype and var.attrs == ATTRS[name]
            xr.testing.assert_equal(
                var.reset_coords(drop=True), expected[name].reset_coords(drop=True)
            )
        zagg_attrs = got.attrs["zagg"]
        assert zagg_attrs["grid"] == grid_block()
        assert zagg_attrs["shards"] == [NORTH, SOUTH]
        assert zagg_attrs["dataset"] == {"short_name": "ATL06", "version": "006"}
        fields = zagg_attrs["fields"]
        assert fields["count"] == {"kind": "dense", "dtype": "int64", "fill_value": 0}
        assert fields["quality"]["fill_value"] == 255 and np.isnan(fields["h_mean"]["fill_value"])
        assert fields["h_tdigest"] == {"kind": "ragged", "dtype": "object", "fill_value": b""}
        assert got.attrs["dggs"]["latitude"] == "authalic-wgs84"


def test_sparse_view_holds_exactly_the_occupied_cells(two_shards):
    """The default open: the cells the leaves' bitmaps list, one chunk per leaf, values as
    stored, morton ascending from the cell law, cell_ids its NESTED view."""
    root, shards = two_shards
    occupied = {NORTH: [0, 3, 4, 13], SOUTH: [2, 5, 9, 15]}
    for discover in ("auto", "walk"):
        ds = open_hive(root, discover=discover)
        assert ds.sizes == {"cells": 8} and list(ds.data_vars) == sorted(FIELDS)
        words = np.concatenate([law(s)[occupied[s]] for s in (NORTH, SOUTH)])
        np.testing.assert_array_equal(ds["morton"].values, words)
        assert (np.diff(ds["morton"].values.astype(np.float64)) > 0).all()
        nested, order = mortie.mort2healpix(words)
        assert order == 6
        np.testing.assert_array_equal(ds["cell_ids"].values, nested)
        assert ds["cell_ids"].attrs == {
            "grid_name": "healpix",
            "level": 6,
            "indexing_scheme": "nested",
            "ellipsoid": "WGS84",
        }
        for name in FIELDS:
            assert ds[name].data.chunks == ((4, 4),) and ds[name].attrs == ATTRS[name]
            want = np.concatenate([shards[s][name][occupied[s]] for s in (NORTH, SOUTH)])
            got = ds[name].values
            assert got.dtype == want.dtype
            if got.dtype == object:
                assert list(got) == list(want)
            else:
                np.testing.assert_array_equal(got, want)
        assert ds.attrs["zagg"]["shards"] == [NORTH, SOUTH]
        assert ds.attrs["zagg"]["shard_cells"] == [4, 4]


def test_elements_are_reached_without_loading(two_shards):
    root, shards = two_shards
    ds = open_hive(root)
    word = law(SOUTH)[9]
    cell = ds.sel(morton=word)
    assert int(cell["count"]) == shards[SOUTH]["count"][9]
    assert cell["h_tdigest"].values[()] == shards[SOUTH]["h_tdigest"][9]
    assert ds["h_tdigest"][1].values[()] == shards[NORTH]["h_tdigest"][3]
    assert float(ds["h_mean"].isel(cells=4)) == shards[SOUTH]["h_mean"][2]
    assert isinstance(ds["count"].data, da.Array)  # nothing was loaded into the Dataset


def test_open_leaf(two_shards):
    root, shards = two_shards
    ds = open_leaf(root, SOUTH, dense=True)
    assert ds.sizes == {"cells": 16} and ds.attrs["zagg"]["shards"] == [SOUTH]
    np.testing.assert_array_equal(ds["morton"].values, law(SOUTH))
    assert int(ds["morton"].values[0]) >> 63 == 1
    np.testing.assert_array_equal(ds["count"].values, shards[SOUTH]["count"])
    assert (
        ds["h_tdigest"].values[0] == b""
        and ds["h_tdigest"].values[2] == shards[SOUTH]["h_tdigest"][2]
    )
    sparse = open_leaf(root, SOUTH)
    np.testing.assert_array_equal(sparse["morton"].values, law(SOUTH)[[2, 5, 9, 15]])
    np.testing.assert_array_equal(sparse["count"].values, shards[SOUTH]["count"][[2, 5, 9, 15]])
    with pytest.raises(ValueError, match="order 5"):
        open_leaf(root, "112131")


def test_unsharded_and_single_chunk_geometries_read_back(tmp_path):
    for kw, sub in (({"sharded": False}, "a"), ({"k": 4}, "b"), ({"k": 6}, "c")):
        root = new_store(tmp_path / sub)
        _, arrays = write_shard(root, NORTH, grid_kw=kw)
        ds = open_hive(root, dense=True)
        assert ds.attrs["zagg"]["grid"] == grid_block(**kw) | (
            {"sharded": True} if "k" in kw else {}
        )
        sparse = open_hive(root)
        for name in FIELDS:
            np.testing.assert_array_equal(ds[name].values, arrays[name])
            np.testing.assert_array_equal(sparse[name].values, arrays[name][list(OCCUPIED)])


def test_decode_digest():
    rows = np.array([[2, 3], [5, 1]], dtype="<f4")
    out = decode_digest(rows.tobytes())
    assert out.dtype == np.float32 and out.shape == (2, 2)
    np.testing.assert_array_equal(out, rows)
    assert decode_digest(b"").shape == (0, 2) and decode_digest(None).shape == (0, 2)
    with pytest.raises(ValueError, match="12 bytes"):
        decode_digest(b"\x00" * 12)


def test_quantile_of_the_stored_digests(two_shards):
    """Per cell, the G2 golden digests' hazen quantiles; NaN where a dense cell is empty;
    lazy until computed; the same in the sparse and the dense view."""
    root, shards = two_shards
    ds = open_hive(root)
    median = quantile(ds, "h_tdigest", 0.5)
    assert isinstance(median.data, da.Array) and median.data.chunks == ((4, 4),)
    assert median.dims == ("cells",) and float(median["quantile"]) == 0.5
    np.testing.assert_array_equal(median["morton"].values, ds["morton"].values)
    values = median.values
    # G2 cell 0 holds one value 1.0. Cell 3's centroids (2, weight 3) and (5, weight 1) sit
    # at ranks 1 and 3 of 4: the median rank 1.5 lies a quarter of the way, 2 + 3/4.
    assert values[0] == 1.0 and values[1] == 2.75
    both = quantile(ds, "h_tdigest", [0.25, 0.9])
    assert both.dims == ("cells", "quantile") and both.shape == (8, 2)
    assert list(both.values[1]) == [2.0, 5.0]  # rank 0.5 under the first centroid, 3.1 past
    for payload, got in zip(ds["h_tdigest"].values, both.values, strict=True):
        np.testing.assert_array_equal(got, tdigest.quantile(payload, [0.25, 0.9]))
    dense = quantile(open_hive(root, dense=True), "h_tdigest", 0.5).values
    payloads = np.concatenate([shards[NORTH]["h_tdigest"], shards[SOUTH]["h_tdigest"]])
    empty = np.array([len(p) == 0 for p in payloads])
    assert np.isnan(dense[empty]).all()
    np.testing.assert_array_equal(dense[~empty], values)


# -- refusals ----------------------------------------------------------------------------
# -- refusals ----------------------------------------------------------------------------
def test_quantile_refusals_name_the_problem_and_the_digest_fields(two_shards):
    root, _ = two_shards
    ds = open_hive(root)
    with pytest.raises(
        TypeError,
        match=r"needs an xarray Dataset, got str '.*'; open the store "
        r"with zagg.open_hive",
    ):
        quantile(str(root), "h_tdigest", 0.5)
    with pytest.raises(TypeError, match=r"DataArray 'h_tdigest': pass the Dataset"):
        quantile(ds["h_tdigest"], "h_tdigest", 0.5)
    with pytest.raises(KeyError, match=r"'nope' is not a variable.*t-digest fields: h_tdigest"):
        quantile(ds, "nope", 0.5)
    with pytest.raises(ValueError, match=r"'count' is not a t-digest field.*fields: h_tdigest"):
        quantile(ds, "count", 0.5)
    with pytest.raises(ValueError, match=r"flat list of numbers, got shape \(1, 1\)"):
        quantile(ds, "h_tdigest", [[0.1]])
    with pytest.raises(ValueError, match=r"a number or a list of numbers in \[0, 1\], got 'a'"):
        quantile(ds, "h_tdigest", "a")


def edit_json(path, edit):
    doc = json.loads(path.read_text())
    edit(doc)
    path.write_text(json.dumps(doc))


@pytest.fixture
def one_leaf(tmp_path):
    root = new_store(tmp_path)
    write_shard(root, NORTH)
    return tmp_path, tmp_path / leaf_path(NORTH)


def test_vlen_array_without_ragged_block_is_refused(one_leaf):
    root, leaf = one_leaf
    edit_json(leaf / "6" / "h_tdigest" / "zarr.json", lambda d: d["attributes"].pop("ragged"))
    with pytest.raises(ValueError, match="6/h_tdigest.*no 'ragged' attrs block"):
        open_hive(str(root))


def test_unknown_ragged_spec_and_weights_are_refused(one_leaf):
    root, leaf = one_leaf
    meta = leaf / "6" / "h_tdigest" / "zarr.json"
    edit_json(meta, lambda d: d["attributes"]["ragged"].update(spec="zagg-ragged/7"))
    with pytest.raises(ValueError, match="6/h_tdigest.*'zagg-ragged/7'"):
        open_leaf(str(root), NORTH)
    edit_json(meta, lambda d: d["attributes"]["ragged"].update(spec="zagg-ragged/1"))
    edit_json(meta, lambda d: d["attributes"].update(weights="photons"))
    with pytest.raises(ValueError, match="weights 'photons'"):
        open_leaf(str(root), NORTH)


def test_unknown_stamp_and_declaration_specs_are_refused(one_leaf):
    root, leaf = one_leaf
    edit_json(
        leaf / "zarr.json",
        lambda d: d["attributes"]["morton_hive_commit"].update(spec="morton-hive/5"),
    )
    with pytest.raises(ValueError, match="morton-hive/5"):
        open_hive(str(root))
    edit_json(
        leaf / "zarr.json",
        lambda d: d["attributes"]["morton_hive_commit"].update(spec="morton-hive/1"),
    )
    edit_json(
        leaf / "6" / "quality" / "zarr.json",
        lambda d: d["attributes"].update(composition={"spec": "zagg-composition/2"}),
    )
    with pytest.raises(
        ValueError, match="6/quality declares composition spec 'zagg-composition/2'"
    ):
        open_hive(str(root))


def test_missing_or_corrupt_morton_is_refused(one_leaf):
    root, leaf = one_leaf
    chunk = leaf / "6" / "morton" / "c" / "0"
    blob = bytearray(chunk.read_bytes())
    blob[8:16] = (12345).to_bytes(8, "little")  # cell 1 of inner chunk 0
    chunk.write_bytes(bytes(blob))
    with pytest.raises(ValueError, match=r"morton\[1\] = 12345 breaks the cell law"):
        open_hive(str(root), dense=True)["morton"].load()
    # the sparse view derives its coordinate from the coverage; verifying reads the array
    with pytest.raises(ValueError, match=r"6/morton does not match its content hash"):
        open_hive(str(root), verify=True)
    shutil.rmtree(leaf / "6" / "morton")
    with pytest.raises(ValueError, match="no 6/morton array"):
        open_hive(str(root))


def test_not_a_store_and_empty_store(tmp_path):
    with pytest.raises(ValueError, match="not a hive store root"):
        open_hive(str(tmp_path))
    root = new_store(tmp_path)
    with pytest.raises(ValueError, match="no commit-stamped leaf"):
        open_hive(root)
    with pytest.raises(ValueError, match="discover"):
        open_hive(root, discover="guess")


def test_versioned_leaf_pointer_is_followed(one_leaf):
    """A stamp naming ``current`` puts the arrays under ``{leaf}/{current}/`` (spec §1.5)."""
    root, leaf = one_leaf
    version = leaf / "run-0123abcd-89abcdef"
    version.mkdir()
    shutil.move(leaf / "6", version / "6")
    shutil.move(leaf / "coverage.moc", version / "coverage.moc")
    shutil.copy(leaf / "zarr.json", version / "zarr.json")
    edit_json(
        leaf / "zarr.json",
        lambda d: d["attributes"]["morton_hive_commit"].update(current=version.name),
    )
    ds = open_leaf(str(root), NORTH, dense=True)
    np.testing.assert_array_equal(ds["count"].values, shard_arrays()["count"])
    np.testing.assert_array_equal(ds["morton"].values, law(NORTH))
    edit_json(
        leaf / "zarr.json",
        lambda d: d["attributes"]["morton_hive_commit"].update(current="../elsewhere"),
    )
    with pytest.raises(ValueError, match="invalid version"):
        open_leaf(str(root), NORTH)


def test_a_box_only_leaf_takes_its_occupancy_from_its_arrays(two_shards, tmp_path):
    root, shards = two_shards
    copy = tmp_path / "s"
    shutil.copytree(root, copy)
    meta = copy / leaf_path(NORTH) / "zarr.json"
    edit_json(
        meta,
        lambda d: [
            d["attributes"]["morton_hive_commit"]["coverage"].pop(k)
            for k in ("encoding", "sidecar", "nbytes", "raw_nbytes")
        ],
    )
    (copy / leaf_path(NORTH) / "coverage.moc").unlink()
    got, want = open_hive(str(copy)), open_hive(root)
    np.testing.assert_array_equal(got["morton"].values, want["morton"].values)
    assert list(got["h_tdigest"].values) == list(want["h_tdigest"].values)
