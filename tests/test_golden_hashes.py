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


@pytest.mark.parametrize("name", sorted(GOLDEN))
def test_leaves_encoded_array_by_array_carry_the_same_hashes(name, tmp_path, monkeypatch):
    """Every leaf's arrays encoded in tasks of their own, beside each other, before the
    task that writes the leaf (what a big leaf gets): the same leaves, the same hashes."""
    import zagg.engine.write

    monkeypatch.setattr(zagg.engine.write, "SPLIT_BYTES", 0)
    ds, cfg, chunk = cases()[name]
    summary = zagg.to_hive(zagg.aggregate(ds, cfg, chunk_size=chunk), tmp_path / "store")
    assert all(r["timings"]["encoded_s"] > 0 for r in summary.records)  # encoded apart
    got = leaf_hashes(tmp_path / "store")
    assert got == GOLDEN[name]
