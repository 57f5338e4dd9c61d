"""``verify=True``: a damaged leaf raises naming the leaf and the array, where the plain read
returns the damage silently as values."""

from __future__ import annotations

import json

import numpy as np
import pytest
from test_hive_builders import NORTH, OCCUPIED, SOUTH, new_store, write_shard

from zagg.hive import leaf_path, update_root_coverage
from zagg.hive.coverage import encode_bitmap_ranks
from zagg.read import IntegrityError, open_hive

pytestmark = pytest.mark.filterwarnings("ignore::zarr.errors.UnstableSpecificationWarning")


@pytest.fixture
def store(tmp_path):
    root = new_store(tmp_path)
    _, north = write_shard(root, NORTH)
    _, south = write_shard(root, SOUTH, occupied=(2, 5, 9, 15), seed=4, g2=False)
    update_root_coverage(root, [NORTH, SOUTH], 4)
    return tmp_path, {NORTH: north, SOUTH: south}


def test_an_intact_store_verifies(store):
    root, shards = store
    for dense in (False, True):
        plain = open_hive(str(root), dense=dense).compute()
        checked = open_hive(str(root), dense=dense, verify=True).compute()
        for name in plain.data_vars:
            if plain[name].dtype == object:
                assert list(plain[name].values) == list(checked[name].values)
            else:
                np.testing.assert_array_equal(plain[name].values, checked[name].values)


def test_a_flipped_byte_in_a_dense_chunk_raises_under_verify(store):
    root, shards = store
    chunk = root / leaf_path(SOUTH) / "6" / "count" / "c" / "0"
    blob = bytearray(chunk.read_bytes())
    blob[16] ^= 0x01  # inner chunk 0 (cells 0-3, int64) is first: occupied cell 2's low byte
    chunk.write_bytes(bytes(blob))
    silent = open_hive(str(root))["count"].values
    assert silent[4] == shards[SOUTH]["count"][2] ^ 1  # a wrong value, and no error
    lazy = open_hive(str(root), verify=True)  # nothing is read at open
    with pytest.raises(
        IntegrityError,
        match=rf"{SOUTH}\.zarr: array 6/count does not match its "
        r"content hash.*rewrite it",
    ):
        lazy["count"].load()
    with pytest.raises(IntegrityError, match=r"array 6/count does not match"):
        open_hive(str(root), dense=True, verify=True)["count"].load()
    # the other arrays and the other leaf still verify
    ok = open_hive(str(root), verify=True)
    assert list(ok["h_tdigest"].values) == list(open_hive(str(root))["h_tdigest"].values)
    assert (
        ok.isel(cells=slice(0, 4))["count"].values == shards[NORTH]["count"][list(OCCUPIED)]
    ).all()


def test_a_bitmap_that_drops_a_cell_is_caught(store):
    root, shards = store
    leaf = root / leaf_path(NORTH)
    payload, _ = encode_bitmap_ranks(np.array([0, 3, 4]), 2)  # cell 13 left out
    (leaf / "coverage.moc").write_bytes(payload)
    assert open_hive(str(root)).sizes["cells"] == 7  # the plain read trusts the index
    with pytest.raises(
        IntegrityError,
        match=rf"{NORTH}\.zarr: array 6/\w+ holds data in cell 13, "
        "which its coverage bitmap does not list",
    ):
        open_hive(str(root), verify=True).compute()


def test_foreign_missing_and_unrecorded_arrays(store):
    root, _ = store
    leaf = root / leaf_path(NORTH)
    meta = leaf / "zarr.json"
    doc = json.loads(meta.read_text())
    hashes = doc["attributes"]["morton_hive_commit"]["content_hashes"]
    del hashes["arrays"]["6/quality"]
    meta.write_text(json.dumps(doc))
    with pytest.raises(
        IntegrityError, match="array 6/quality is present but its stamp records no hash"
    ):
        open_hive(str(root), verify=True)
    hashes["arrays"]["6/quality"] = "0" * 64
    hashes["arrays"]["6/gone"] = "0" * 64
    meta.write_text(json.dumps(doc))
    with pytest.raises(IntegrityError, match="array 6/gone is recorded in its stamp but missing"):
        open_hive(str(root), verify=True)
    del doc["attributes"]["morton_hive_commit"]["content_hashes"]
    meta.write_text(json.dumps(doc))
    with pytest.raises(IntegrityError, match="records no content hashes.*verify=False"):
        open_hive(str(root), verify=True)
    assert open_hive(str(root)).sizes["cells"] == 8  # unverifiable is not damaged
