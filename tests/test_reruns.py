"""The identity gate: each shard's verdict against what its leaf records."""

import json
import os
import time

import numpy as np
import pytest
import xarray as xr

import zagg
from zagg import hive
from zagg.config.store import StoreSpec
from zagg.hive import paths
from zagg.pipeline import reruns


def points(granules=("G1.h5", "G2.h5", "G3.h5"), n=6_000, seed=3):
    """Points from a few 'granules' (a granule index per point, as open_granules makes)."""
    rng = np.random.default_rng(seed)
    lat = rng.uniform(-75.7, -75.3, n)
    lon = rng.uniform(-100.3, -99.5, n)
    granule = np.arange(n) % len(granules)
    ds = xr.Dataset(
        {
            "lat": ("obs", lat),
            "lon": ("obs", lon),
            "h": ("obs", rng.normal(1500, 30, n)),
            "granule": ("obs", granule),
        }
    )
    ds.attrs["granules"] = list(granules)
    return ds


def config(fields=None):
    return {
        "data_source": {"coordinates": {"latitude": "lat", "longitude": "lon"}, "variables": ["h"]},
        "aggregation": {
            "variables": fields
            or {"count": {"function": "count"}, "h_td": {"function": "tdigest", "source": "h"}}
        },
        "output": {
            "dataset": {"short_name": "RERUN", "version": "1"},
            "grid": {"parent_order": 8, "child_order": 13},
        },
    }


@pytest.fixture
def store(tmp_path):
    ds = points()
    res = zagg.aggregate(ds, config())
    zagg.to_hive(res, tmp_path / "s")
    return tmp_path / "s", res.attrs["zagg"]["shard_granules"]


def semantic(cfg=None):
    return StoreSpec.of(zagg.load_config(cfg or config())).semantic_hash


def test_an_unchanged_plan_is_current_everywhere(store):
    path, planned = store
    got = reruns.classify(hive.StoreRoot(path), planned, semantic())
    assert len(got) == len(planned) > 1
    assert {v.kind for v in got.values()} == {"current"}
    assert all(v.versioned for v in got.values())


def test_a_config_change_or_an_unknown_plan_rewrites(store):
    path, planned = store
    other = semantic(config({"count": {"function": "count"}}))
    got = reruns.classify(hive.StoreRoot(path), planned, other)
    assert {(v.kind, v.reason) for v in got.values()} == {("rewrite", "the config changed")}
    unknown = reruns.classify(hive.StoreRoot(path), dict.fromkeys(planned), semantic())
    assert {v.reason for v in unknown.values()} == {"the run does not know its granules"}


def test_dropping_a_granule_refuses_and_adding_one_rewrites(store):
    path, planned = store
    sid, ids = next((s, i) for s, i in planned.items() if len(i) >= 2)
    root = hive.StoreRoot(path)
    dropped = reruns.classify(root, {sid: ids[1:]}, semantic())[sid]
    assert (dropped.kind, dropped.reason, dropped.missing) == ("refused", "contraction", (ids[0],))
    mixed = reruns.classify(root, {sid: [*ids[1:], "G9.h5"]}, semantic())[sid]
    assert (mixed.kind, mixed.reason, mixed.added) == ("refused", "mixed", ("G9.h5",))
    allowed = reruns.classify(root, {sid: ids[1:]}, semantic(), allow_contraction=True)[sid]
    assert (allowed.kind, allowed.missing) == ("rewrite", (ids[0],))
    grown = reruns.classify(root, {sid: [*ids, "G9.h5"]}, semantic())[sid]
    assert (grown.kind, grown.reason) == ("rewrite", "new granules")
    # hrefs of the same granules are the same identity (bare ids)
    hrefs = [f"s3://bucket/ATL03/{i}" for i in ids]
    assert reruns.classify(root, {sid: hrefs}, semantic())[sid].kind == "current"


def test_damaged_records_rewrite(store):
    path, planned = store
    root = hive.StoreRoot(path)
    a, b, *rest = sorted(planned)
    (path / paths.stats_key(a)).unlink()
    leaf = paths.leaf_path(b)
    current = hive.read_stamp(root, leaf)["current"]
    import shutil

    shutil.rmtree(path / leaf / current)  # a pointer to a version removed out of band
    got = reruns.classify(root, planned, semantic())
    assert got[a].reason == "no stats sidecar" and got[a].kind == "rewrite"
    assert got[b].reason == "its current version is missing or unstamped"
    if rest:
        c = rest[0]
        sibling = path / paths.granules_key(c)
        body = json.loads(sibling.read_text())
        body["ids"] = body["ids"][:-1]  # a torn rewrite: the sibling disagrees with the sidecar
        sibling.write_text(json.dumps(body))
        changed = {c: planned[c][:-1] or ["other.h5"]}
        assert reruns.classify(root, changed, semantic())[c].reason == (
            "its granules are not recorded"
        )


def test_the_touch_moves_times_of_pointers_and_sidecars_never_of_versions(store):
    path, planned = store
    root = hive.StoreRoot(path)
    verdicts = list(reruns.classify(root, planned, semantic()).values())
    files = {p: (p.read_bytes(), p.stat().st_mtime) for p in path.rglob("*") if p.is_file()}
    time.sleep(1.1)
    touched, failed = reruns.touch_current(root, verdicts)
    assert failed == 0 and touched == 3 * len(verdicts)
    moved = {p for p, (_, t) in files.items() if p.stat().st_mtime > t}
    for p, (data, _) in files.items():
        assert p.read_bytes() == data
    expected = set()
    for v in verdicts:
        leaf = paths.leaf_path(v.shard_id)
        expected |= {
            path / leaf / "zarr.json",
            path / paths.stats_key(v.shard_id),
            path / paths.granules_key(v.shard_id),
        }
    assert moved == expected
    assert all("run-" not in str(p.relative_to(path)) for p in moved)


def test_a_refusal_manifest_lists_every_missing_id(store, tmp_path):
    path, planned = store
    root = hive.StoreRoot(path)
    refused = [
        v
        for v in reruns.classify(
            root, {s: i[1:] for s, i in planned.items() if len(i) > 1}, semantic()
        ).values()
    ]
    key = reruns.write_refusals(root, "a" * 32, semantic(), refused)
    assert key.startswith("refusals_") and key.endswith(f"Z_{'a' * 32}.json")
    body = json.loads((path / key).read_text())
    assert body["run_id"] == "a" * 32 and body["semantic_hash"] == semantic()
    assert {r["shard_key"]: r["missing_granules"] for r in body["refused"]} == {
        s: [i[0]] for s, i in planned.items() if len(i) > 1
    }
    assert reruns.write_refusals(root, "b" * 32, semantic(), []) is None
    assert not any(n.startswith("refusals_") and "b" * 32 in n for n in os.listdir(path))


def test_an_empty_unit_recorded_is_current_for_the_same_identity_only(store):
    """A shard the run computed and found empty keeps its identity without a leaf: the
    same granules and config are current (nothing to read again), others rewrite."""
    path, planned = store
    root = hive.StoreRoot(path)
    empty = "-5121124344"  # a shard no point of the store falls in
    assert empty not in planned
    assert reruns.write_empty(root, [empty], {empty: ["G1.h5", "G2.h5"]}, semantic(), "r1") == 1
    assert not (path / paths.leaf_path(empty)).exists()
    got = reruns.classify(root, {empty: ["G1.h5", "G2.h5"]}, semantic())
    assert (got[empty].kind, got[empty].reason, got[empty].empty) == ("current", "empty", True)
    assert reruns.touch_current(root, list(got.values())) == (2, 0)  # its two sidecars
    for ids, sem in (
        (["G1.h5", "G2.h5", "G9.h5"], semantic()),
        (["G1.h5", "G2.h5"], semantic(config({"count": {"function": "count"}}))),
    ):
        again = reruns.classify(root, {empty: ids}, sem)[empty]
        assert (again.kind, again.reason) == ("rewrite", "no stamped leaf")
    assert {sid for _, sid in hive.walk_leaves(path)} == set(planned)  # readers see no leaf
