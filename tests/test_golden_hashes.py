"""Stores written from fixed inputs carry the content hashes recorded in tests/data."""

import json

import pytest
from golden_stores import HASHES, cases, leaf_hashes

import zagg

GOLDEN = json.loads(HASHES.read_text())


@pytest.mark.parametrize("name", sorted(GOLDEN))
def test_store_bytes_match_the_recorded_hashes(name, tmp_path):
    ds, cfg, chunk = cases()[name]
    zagg.to_hive(zagg.aggregate(ds, cfg, chunk_size=chunk), tmp_path / "store")
    got = leaf_hashes(tmp_path / "store")
    assert sorted(got) == sorted(GOLDEN[name])  # the same leaves
    for leaf, hashes in GOLDEN[name].items():
        assert got[leaf] == hashes, leaf
