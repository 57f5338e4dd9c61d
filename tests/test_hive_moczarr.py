"""The independent reader (moczarr 0.10) opens what we write and agrees with it."""

from __future__ import annotations

import moczarr
import numpy as np
import pytest
from moczarr import ragged as mragged
from moczarr import stats as mstats
from test_hive_builders import NORTH, OCCUPIED, SOUTH, law, new_store, write_shard

from zagg import grid
from zagg.hive import leaf_path, read_manifest, update_root_coverage
from zagg.hive.paths import STATS_NAME
from zagg.read import decode_digest, open_hive

pytestmark = pytest.mark.filterwarnings("ignore::zarr.errors.UnstableSpecificationWarning")
SOUTH_OCCUPIED = (1, 2, 6, 15)  # inner chunks 0, 1, 3 written; chunk 2 empty


@pytest.fixture(scope="module", params=[True, False], ids=["sharded", "unsharded"])
def store(request, tmp_path_factory):
    root = str(tmp_path_factory.mktemp("moczarr"))
    new_store(root, "T", "1")
    kw = {"sharded": request.param}
    north, north_arrays = write_shard(root, NORTH, grid_kw=kw, granule_ids=["G1.h5"])
    south, south_arrays = write_shard(
        root, SOUTH, grid_kw=kw, occupied=SOUTH_OCCUPIED, seed=5, g2=False
    )
    update_root_coverage(root, [NORTH, SOUTH], 4)
    return root, {NORTH: (north, north_arrays), SOUTH: (south, south_arrays)}


def test_manifest_walk_and_stamps(store):
    root, shards = store
    assert moczarr.read_manifest(root) == read_manifest(root)
    assert sorted(moczarr.walk_leaves(root)) == sorted(leaf_path(s) for s in shards)
    for sid, (record, _) in shards.items():
        stamp = moczarr.read_commit(root, record["path"])
        assert stamp["content_hashes"] == record["content_hashes"]
        assert stamp["cells_with_data"] == record["cells_with_data"]
        envelope = moczarr.parse_leaf_coverage(stamp)
        assert envelope == record["coverage"]
        members = [m for m in envelope["box"] if m is not None]
        occupied_words = law(sid)[list(OCCUPIED if sid == NORTH else SOUTH_OCCUPIED)]
        assert moczarr.box_and(envelope, occupied_words).size > 0
        bitmap = moczarr.read_coverage_bitmap(root, record["path"])
        np.testing.assert_array_equal(bitmap, np.sort(occupied_words))
        assert all(m.startswith(sid) for m in members)
    root_env = moczarr.load_root_coverage(root)
    assert root_env["ranges"] == [[NORTH, NORTH], [SOUTH, SOUTH]]
    np.testing.assert_array_equal(
        moczarr.coverage.ranges_words(root_env), np.sort(grid.from_decimal([NORTH, SOUTH]))
    )


def test_content_hashes_and_stats_sidecar(store):
    root, shards = store
    for sid, (record, _) in shards.items():
        computed = mstats.hash_arrays(root, record["path"])
        assert computed == record["content_hashes"]["arrays"]
        assert mstats.combined_hash(computed) == record["content_hashes"]["combined"]
        assert mstats.stats_sidecar_key(f"{sid}.zarr", "morton-hive/1") == STATS_NAME
        assert mstats.stats_sidecar_path(record["path"], "morton-hive/1") == (
            record["path"].rsplit("/", 1)[0] + "/stats.json"
        )
        verdict = mstats.verify_arrays(root, sid)
        assert verdict["match"] is True and verdict["combined_match"] is True
        assert verdict["mismatched"] == []
        assert mstats.read_stats(root, sid)["content_hashes"] == record["content_hashes"]


def test_ragged_values_agree(store):
    root, shards = store
    for sid, (_, arrays) in shards.items():
        leaf_store = moczarr.open_leaf(root, sid)
        _arr, element = mragged.open_ragged(leaf_store, "6/h_tdigest")
        assert element.weights == "counts"
        got = {int(w): v for w, v in mragged.read_ragged(leaf_store, "6/h_tdigest")}
        words = law(sid)
        expected = {
            int(words[i]): decode_digest(p) for i, p in enumerate(arrays["h_tdigest"]) if len(p)
        }
        assert got.keys() == expected.keys()
        for word, values in got.items():
            np.testing.assert_array_equal(values, expected[word])
            assert values.dtype == np.float32 and values.shape[1] == 2


def test_open_hive_agrees_with_ours(store):
    root, shards = store
    theirs = moczarr.open_hive(root)
    ours = open_hive(root, dense=True)
    assert theirs.sizes["cells"] == ours.sizes["cells"] == 32
    np.testing.assert_array_equal(np.asarray(theirs["morton"].values), ours["morton"].values)
    np.testing.assert_array_equal(ours["morton"].values, np.concatenate([law(NORTH), law(SOUTH)]))
    words = np.asarray(theirs["morton"].values, dtype=np.uint64)
    assert (words[:16] >> np.uint64(63) == 0).all() and (words[16:] >> np.uint64(63) == 1).all()
    for name in ("count", "h_mean", "quality"):
        np.testing.assert_array_equal(theirs[name].values, ours[name].values)
        expected = np.concatenate([shards[NORTH][1][name], shards[SOUTH][1][name]])
        np.testing.assert_array_equal(ours[name].values, expected)
    assert list(theirs["h_tdigest"].values) == list(ours["h_tdigest"].values)
    assert theirs.attrs["dggs"]["refinement_level"] == 6
    # the sparse view is theirs at the occupied cells, and its NESTED view is theirs too
    sparse = open_hive(root)
    at = np.flatnonzero(np.isin(words, sparse["morton"].values))
    assert at.size == sparse.sizes["cells"] == len(OCCUPIED) + len(SOUTH_OCCUPIED)
    for name in ("count", "h_mean", "quality", "h_tdigest"):
        assert list(theirs[name].values[at]) == list(sparse[name].values), name
    np.testing.assert_array_equal(
        np.asarray(theirs["cell_ids"].values)[at], sparse["cell_ids"].values
    )
