"""Hive paths (G10) and the manifest: key set, declared-off pyramid, frozen-key refusal."""

from __future__ import annotations

import json
import re

import pytest
from moczarr.convention import check_node_invariant
from moczarr.convention import leaf_path as moczarr_leaf_path
from test_hive_builders import NORTH, write_shard

from zagg import grid
from zagg.hive import (
    ManifestConflictError,
    build_manifest,
    check_manifest,
    leaf_path,
    read_manifest,
    write_manifest,
)
from zagg.hive.paths import check_leaf_path, shard_id_of, stats_key

pytestmark = pytest.mark.filterwarnings("ignore::zarr.errors.UnstableSpecificationWarning")
DATASET = {"short_name": "ATL06", "version": "006"}


def manifest(**kw):
    base = {"dataset": DATASET, "semantic_hash": "9f1c", "cell_order": 6, "shard_order": 4}
    return build_manifest(**(base | kw))


def test_paths_g10():
    assert leaf_path("-5112333") == "-5/1/1/2/3/3/3/-5112333.zarr"
    assert leaf_path("11213") == "1/1/2/1/3/11213.zarr"
    assert leaf_path("3") == "3/3.zarr"
    assert shard_id_of("-5/1/1/2/3/3/3/-5112333.zarr") == "-5112333"
    assert stats_key("-5112333") == "-5/1/1/2/3/3/3/stats.json"
    assert grid.parse_leaf_name("11213_2019.zarr") == ("11213", "2019")
    for sid in ("-5112333", "11213", "-31123", "6", "-14444444444"):
        assert leaf_path(sid) == moczarr_leaf_path(sid)
        check_node_invariant(leaf_path(sid))
    for bad in (
        "-5/1/1/2/3/3/-5112333.zarr",
        "5/1/1/-5112333.zarr",
        "-5/0/-50.zarr",
        "-5/12/-512.zarr",
    ):
        with pytest.raises(ValueError):
            check_leaf_path(bad)
    for bad_id in ("7", "-0", "1215", "12p", "", "../1"):
        with pytest.raises(ValueError):
            leaf_path(bad_id)


def test_manifest_key_set_and_values():
    m = manifest(cell_order=19, shard_order=9)
    assert list(m) == [
        "spec",
        "dataset",
        "semantic_hash",
        "cell_order",
        "shard_order",
        "split_schedule",
        "path_grouping",
        "pyramid",
        "generated_at",
    ]
    assert m["spec"] == "morton-hive/1"
    assert m["split_schedule"] == [1] * 9
    assert m["path_grouping"] == 1
    assert m["pyramid"] == {"spec": "zagg-pyramid/1", "overview": {"orders": []}}
    assert json.dumps(m["pyramid"], separators=(",", ":")) == (
        '{"spec":"zagg-pyramid/1","overview":{"orders":[]}}'
    )
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\+00:00", m["generated_at"])
    with pytest.raises(ValueError, match="short_name"):
        build_manifest(dataset={"name": "x"}, semantic_hash="h", cell_order=6, shard_order=4)
    with pytest.raises(ValueError, match="shard_order"):
        manifest(cell_order=3, shard_order=4)


def test_write_is_idempotent(tmp_path):
    root = str(tmp_path)
    assert check_manifest(root, manifest()) is None
    assert write_manifest(root, manifest()) is True
    key = tmp_path / "morton_hive.json"
    before = key.read_bytes()
    mtime = key.stat().st_mtime_ns
    later = manifest(generated_at="2030-01-01T00:00:00+00:00")
    assert write_manifest(root, later) is False  # frozen keys match: no second PUT
    assert key.read_bytes() == before and key.stat().st_mtime_ns == mtime
    assert read_manifest(root) == json.loads(before)


def test_frozen_key_change_refused_once_leaves_exist(tmp_path):
    root = str(tmp_path)
    write_manifest(root, manifest())
    write_shard(root, NORTH)
    changed = manifest(cell_order=7, semantic_hash="other")
    for call in (check_manifest, write_manifest):
        with pytest.raises(ManifestConflictError) as err:
            call(root, changed)
        message = str(err.value)
        assert "cell_order (existing 6, new 7)" in message
        assert "semantic_hash (existing '9f1c', new 'other')" in message
        assert "covers the config's data_source, aggregation, output.dataset" in message
        assert "shard_order" not in message and "['1']" in message
        assert "new one" in message
    assert read_manifest(root)["cell_order"] == 6
    # non-frozen keys (pyramid, generated_at) and a missing hash on one side are accepted
    relaxed = manifest()
    relaxed.pop("semantic_hash")
    relaxed["pyramid"] = {"spec": "zagg-pyramid/1", "overview": {"orders": [3]}}
    assert write_manifest(root, relaxed) is False


def test_mismatch_on_an_empty_root_rewrites(tmp_path):
    root = str(tmp_path)
    write_manifest(root, manifest())
    assert write_manifest(root, manifest(cell_order=8)) is True
    assert read_manifest(root)["cell_order"] == 8


def test_unknown_manifest_spec_is_refused(tmp_path):
    (tmp_path / "morton_hive.json").write_text(json.dumps(manifest() | {"spec": "morton-hive/9"}))
    with pytest.raises(ValueError, match="morton-hive/9"):
        read_manifest(str(tmp_path))
    pyramid = {"spec": "zagg-pyramid/3", "overview": {"orders": []}}
    (tmp_path / "morton_hive.json").write_text(json.dumps(manifest() | {"pyramid": pyramid}))
    with pytest.raises(ValueError, match="pyramid spec 'zagg-pyramid/3'"):
        read_manifest(str(tmp_path))
