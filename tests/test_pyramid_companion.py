"""The multiscales companion group (spec §4.10): written beside a /2 pyramid, opened by
stock zarr with no zagg code, read back by ``open_pyramid`` / ``open_store``."""

from __future__ import annotations

import json
import os
import shutil

import numpy as np
import pytest
import zarr
from test_pyramid_store import config

import zagg
from zagg.hive import StoreRoot, artifact
from zagg.pyramid.companion import write_companion
from zagg.pyramid.sweep import sweep
from zagg.sources.synthetic import synthetic_photons

P = 6  # ladder orders 5 .. 0, cells k + 2


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    points = synthetic_photons(8_000, (-104, -77, -96, -73), seed=3, chunk_size=2_000)
    path = str(tmp_path_factory.mktemp("ms") / "s")
    zagg.to_hive(zagg.aggregate(points, zagg.load_config(config())), path)
    return path


def shards(path):
    return [sid for _rel, sid in zagg.hive.walk_leaves(path)]


def test_stock_zarr_walks_the_ladder_from_one_consolidated_read(store):
    group = zarr.open_group(os.path.join(store, "multiscales"), mode="r", use_consolidated=True)
    attrs = group.attrs.asdict()
    manifest = zagg.hive.read_manifest(store)
    assert attrs["multiscales"] == manifest["multiscales"]  # the §4.9 list, derived fresh
    stamp = attrs["zagg_multiscales"]
    assert stamp["spec"] == "zagg-multiscales/1" and stamp["window"] == "all"
    assert stamp["members_source"] == "coverage.moc"
    moc = json.loads(open(os.path.join(store, "coverage.moc")).read())
    assert stamp["members_generated_at"] == moc["generated_at"]
    assert sorted(int(k) for k, _ in group.groups()) == list(range(P))
    for k in range(P):
        level = group[str(k)].attrs["zagg_multiscales_level"]
        assert (level["order"], level["cells"], level["artifact"]) == (k, [k + 2], "overview")
        want = sorted({s[: len(s) - (P - k)] for s in shards(store)})
        assert sorted(level["members"]) == want
        for node, rel in level["members"].items():
            assert rel == f"{artifact.overview_path(node)}/{k + 2}"
    # no arrays and no data bytes: group documents only
    files = [f for _d, _s, fs in os.walk(os.path.join(store, "multiscales")) for f in fs]
    assert set(files) == {"zarr.json"} and len(files) == P + 1


def test_members_claim_ownership_and_resolve_once_swept(store, tmp_path):
    path = str(tmp_path / "s")
    shutil.copytree(store, path)
    level = zarr.open_group(os.path.join(path, "multiscales", "3"), mode="r").attrs[
        "zagg_multiscales_level"
    ]
    assert not any(os.path.exists(os.path.join(path, m)) for m in level["members"].values())
    sweep(path)
    for rel in level["members"].values():
        g = zarr.open_group(os.path.join(path, rel), mode="r")  # stock zarr opens the level
        assert int(np.asarray(g["count"][:]).sum()) > 0
    tree = zagg.open_pyramid(path)
    companion = tree.attrs["zagg_multiscales"]
    assert sorted(companion["levels"]) == list(range(P))
    assert companion["levels"][3]["members"] == level["members"]
    node = zagg.open_store(path)
    assert next(iter(node.children.values())).attrs["zagg_multiscales"]["stamp"]["spec"] == (
        "zagg-multiscales/1"
    )


def test_a_rewrite_that_changes_nothing_writes_nothing(store, tmp_path):
    path = str(tmp_path / "s")
    shutil.copytree(store, path)
    root = StoreRoot(path)
    assert write_companion(root, zagg.hive.read_manifest(path)) == 0


def test_no_companion_without_a_ladder_and_a_stale_one_is_ignored(store, tmp_path):
    points = synthetic_photons(2_000, (-104, -77, -96, -73), seed=3, chunk_size=2_000)
    off = str(tmp_path / "off")
    zagg.to_hive(zagg.aggregate(points, zagg.load_config(config(pyramid=False))), off)
    assert not os.path.exists(os.path.join(off, "multiscales"))
    shutil.copytree(os.path.join(store, "multiscales"), os.path.join(off, "multiscales"))
    with pytest.warns(UserWarning, match="companion is stale"):
        tree = zagg.open_pyramid(off)
    assert "zagg_multiscales" not in tree.attrs


def test_an_unknown_companion_revision_fails_loudly(store, tmp_path):
    path = str(tmp_path / "s")
    shutil.copytree(store, path)
    key = os.path.join(path, "multiscales", "zarr.json")
    doc = json.loads(open(key).read())
    doc["attributes"]["zagg_multiscales"]["spec"] = "zagg-multiscales/9"
    open(key, "w").write(json.dumps(doc))
    with pytest.raises(ValueError, match="zagg-multiscales/9"):
        zagg.open_pyramid(path)
