"""``zagg.open_column``: every group a leaf column holds (declared members and the
within-footprint intermediates below them), checked against a direct aggregation at each
group's order, against moczarr, and by ``verify``."""

from __future__ import annotations

import os
import shutil

import moczarr
import numpy as np
import pytest
import zarr
from test_pyramid_store import config

import zagg
from zagg.hive import artifact
from zagg.read import IntegrityError
from zagg.sources.synthetic import synthetic_photons

P, CI, C = 6, 8, 11  # declared resolution 8: the column holds groups 8, 7 and 6


@pytest.fixture(scope="module")
def points():
    ds = synthetic_photons(20_000, (-104, -77, -96, -73), seed=3, chunk_size=2_000)
    return ds.assign(h_ph=(np.round(ds.h_ph * 64) / 64).astype("float32")).persist()


@pytest.fixture(scope="module")
def store(points, tmp_path_factory):
    path = str(tmp_path_factory.mktemp("col") / "s")
    zagg.to_hive(zagg.aggregate(points, zagg.load_config(config())), path)
    return path


def shards(store):
    return [sid for _rel, sid in zagg.hive.walk_leaves(store)]


def direct(points, r):
    cfg = zagg.load_config(config(p=min(P, r), ci=r, c=r, pyramid=False))
    return zagg.aggregate(points, cfg).compute()


def test_a_column_opens_with_every_group_down_to_the_shard_order(store, points):
    sid = shards(store)[0]
    tree = zagg.open_column(store, sid)
    assert list(tree.children) == ["o8", "o7", "o6"]
    record = tree.attrs["zagg_column"]
    assert record["spec"] == "zagg-column/1" and record["node"] == sid
    assert {r: tree[f"o{r}"].attrs["zagg_column_group"]["declared"] for r in (8, 7, 6)} == {
        8: True,
        7: False,
        6: False,
    }
    assert tree["o6"].attrs["zagg_column_group"]["n_cells"] == 1
    leaf = zagg.open_leaf(store, sid).compute()
    for r in (8, 7, 6):
        ds = tree[f"o{r}"].to_dataset().compute()
        # each group is the direct aggregation of the shard's points at that order
        want = direct(points, r)
        want = want.sel(cells=np.isin(want["morton"].values, ds["morton"].values))
        np.testing.assert_array_equal(ds["morton"].values, want["morton"].values)
        for name in ("count", "h_sum", "h_min", "h_max"):
            np.testing.assert_array_equal(ds[name].values, want[name].values)
        assert int(ds["count"].sum()) == int(leaf["count"].sum())
    # an intermediate's order is the ladder's (an overview above the shard), never the column's
    from zagg.read.levels import levels

    table = levels(zagg.hive.read_manifest(store))
    assert table[8]["artifact"] == "column" and table[7]["artifact"] == "overview"


def test_moczarr_reads_the_same_groups_and_provenance(store):
    sid = shards(store)[0]
    tree = zagg.open_column(store, sid)
    assert moczarr.read_column_record(store, sid) == tree.attrs["zagg_column"]
    col = moczarr.open_column(store, sid)
    for r in (8, 7, 6):
        ds = tree[f"o{r}"].to_dataset().compute()
        stored = zarr.open_array(col, path=f"{r}/count", mode="r")[:]
        rank = np.flatnonzero(stored)
        np.testing.assert_array_equal(stored[rank], ds["count"].values)
    rel = artifact.column_path(sid)
    assert (
        moczarr.hash_arrays(store, rel)
        == tree.attrs["morton_hive_commit"]["content_hashes"]["arrays"]
    )


def test_verify_checks_every_group_of_the_column(store, tmp_path):
    sid = shards(store)[0]
    assert zagg.open_column(store, sid, verify=True)
    copy = str(tmp_path / "s")
    shutil.copytree(store, copy)
    rel = artifact.column_path(sid)
    chunk = os.path.join(copy, rel, "6", "count", "c", "0")
    raw = bytearray(open(chunk, "rb").read())
    raw[0] ^= 1  # one bit of the intermediate group's only cell
    open(chunk, "wb").write(bytes(raw))
    zagg.open_column(copy, sid)  # opening alone does not hash
    with pytest.raises(IntegrityError, match="6/count does not match its content hash"):
        zagg.open_column(copy, sid, verify=True)


def test_a_shard_without_a_column_is_refused_by_name(store, tmp_path):
    sid = shards(store)[0]
    copy = str(tmp_path / "s")
    shutil.copytree(store, copy)
    shutil.rmtree(os.path.join(copy, artifact.column_path(sid)))
    with pytest.raises(ValueError, match="holds no committed column"):
        zagg.open_column(copy, sid)
    with pytest.raises(ValueError, match="order-5 id"):
        zagg.open_column(copy, sid[:-1])
