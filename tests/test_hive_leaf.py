"""The leaf writer: validation before any write, stamp last, crash → debris → heal, sidecars."""

from __future__ import annotations

import json
import threading

import moczarr
import numpy as np
import pytest
import zarr
from test_hive_builders import (
    ATTRS,
    FIELDS,
    NORTH,
    OCCUPIED,
    SOUTH,
    grid_block,
    new_store,
    shard_arrays,
    spy_listings,
    write_shard,
)

from zagg.hive import (
    content_hashes,
    leaf_path,
    read_stamp,
    read_stats,
    update_root_coverage,
    write_leaf,
)
from zagg.hive import leaf as leaf_module
from zagg.hive.stamp import COMMIT_ATTR
from zagg.hive.stats import granules_sha256
from zagg.hive.storage import StoreRoot
from zagg.read import open_hive, open_leaf

pytestmark = pytest.mark.filterwarnings("ignore::zarr.errors.UnstableSpecificationWarning")


def decoded(root: str, shard_id: str) -> dict[str, np.ndarray]:
    group = zarr.open_group(f"{root}/{leaf_path(shard_id)}/6", mode="r")
    return {name: arr[...] for name, arr in group.arrays()}


def files_under(path) -> list[str]:
    return sorted(str(p.relative_to(path)) for p in path.rglob("*") if p.is_file())


def test_record_and_stamp(tmp_path):
    root = new_store(tmp_path)
    record, arrays = write_shard(
        root, NORTH, granule_ids=["s3://b/p/G1.h5", "https://h/x/G2.h5", "G1.h5"]
    )
    assert record["shard_id"] == NORTH and record["path"] == "1/1/2/1/3/11213.zarr"
    assert record["cells_with_data"] == 4 and record["granule_count"] == 2
    stamp = read_stamp(StoreRoot(root), record["path"])
    assert stamp["content_hashes"] == record["content_hashes"]
    assert stamp["coverage"] == record["coverage"]
    assert record["coverage"]["box"] == ["112131", "1121321", "1121342", None]
    assert record["coverage"]["raw_nbytes"] == 2 and record["coverage"]["sidecar"] == "coverage.moc"
    leaf_dir = tmp_path.joinpath(*record["path"].split("/"))
    assert record["bytes_written"] == sum(
        p.stat().st_size for p in leaf_dir.rglob("*") if p.is_file()
    )
    assert set(record["timings"]) >= {"arrays_s", "upload_s", "stamp_s", "total_s"}
    values = decoded(root, NORTH)
    for name in ("count", "h_mean", "quality"):
        np.testing.assert_array_equal(values[name], arrays[name])
    assert list(values["h_tdigest"]) == list(arrays["h_tdigest"])
    assert content_hashes({f"6/{k}": v for k, v in values.items()}) == record["content_hashes"]
    # the sidecars: same hashes as the stamp, granule sha agrees with the sibling
    sidecar = read_stats(root, NORTH)
    assert sidecar["content_hashes"] == stamp["content_hashes"]
    assert sidecar["cells_with_data"] == 4 and sidecar["shard_key"] == NORTH
    sibling = json.loads((leaf_dir.parent / "granules.json").read_text())
    assert sibling["ids"] == ["G1.h5", "G2.h5"]
    assert (
        sibling["granules_sha256"]
        == sidecar["granules_sha256"]
        == granules_sha256(["G2.h5", "G1.h5"])
    )


def test_stamped_root_metadata_is_what_zarr_itself_writes(tmp_path):
    root = new_store(tmp_path)
    record, _ = write_shard(root, NORTH)
    leaf_dir = tmp_path.joinpath(*record["path"].split("/"))
    written = (leaf_dir / "zarr.json").read_bytes()
    seal = read_stamp(StoreRoot(root), record["path"])
    # zarr's own path: the unstamped root group, then attrs.update with the same stamp
    store = zarr.storage.MemoryStore()
    zarr.open_group(store, mode="w", zarr_format=3)
    zarr.open_group(store, mode="r+", zarr_format=3).attrs.update({COMMIT_ATTR: seal})
    assert written == bytes(store._store_dict["zarr.json"].to_bytes())
    assert moczarr.read_commit(root, record["path"])["content_hashes"] == record["content_hashes"]


def test_rewrite_is_idempotent_on_decoded_values(tmp_path):
    root = new_store(tmp_path)
    first, _ = write_shard(root, NORTH)
    leaf_dir = tmp_path.joinpath(*first["path"].split("/"))
    (leaf_dir / "6" / "stray").mkdir()  # debris inside the prefix is cleared by the rewrite
    (leaf_dir / "6" / "stray" / "zarr.json").write_text("{}")
    second, _ = write_shard(root, NORTH)
    assert second["content_hashes"] == first["content_hashes"]
    assert "6/stray/zarr.json" not in files_under(leaf_dir)


def test_empty_shard_writes_nothing(tmp_path):
    root = new_store(tmp_path)
    before = files_under(tmp_path)
    record, _ = write_shard(root, NORTH, occupied=())
    assert record is None
    assert files_under(tmp_path) == before


@pytest.mark.parametrize(
    ("shard_id", "arrays_edit", "match"),
    [
        ("1121x", None, "not a morton decimal area id"),
        ("112134", None, "parent_order is 4"),
        (NORTH, lambda a: a.update(count=a["count"][:8]), "expected \\(16,\\)"),
        (NORTH, lambda a: a.pop("quality"), "missing \\['quality'\\]"),
        (NORTH, lambda a: a.update(extra=a["count"]), "undeclared \\['extra'\\]"),
        (NORTH, lambda a: a.update(count=a["count"].astype(float)), "cannot be stored as int64"),
        (NORTH, lambda a: a["h_tdigest"].__setitem__(4, b"12345"), "whole number"),
        (NORTH, lambda a: a.update(morton=np.arange(16, dtype=np.uint64)), "cell law"),
    ],
)
def test_validation_happens_before_any_write(tmp_path, shard_id, arrays_edit, match):
    root = new_store(tmp_path)
    before = files_under(tmp_path)
    arrays = shard_arrays()
    if arrays_edit:
        arrays_edit(arrays)
    with pytest.raises(ValueError, match=match):
        write_leaf(root, shard_id, arrays, FIELDS, grid_block(), attrs=ATTRS)
    assert files_under(tmp_path) == before


def test_ragged_field_without_declaration_is_refused(tmp_path):
    root = new_store(tmp_path)
    bad = dict(ATTRS, h_tdigest={"weights": "counts"})
    with pytest.raises(ValueError, match="no 'ragged' attrs block"):
        write_leaf(root, NORTH, shard_arrays(), FIELDS, grid_block(), attrs=bad)
    bad = dict(ATTRS, h_tdigest=dict(ATTRS["h_tdigest"], weights="photons"))
    with pytest.raises(ValueError, match="weights 'photons'"):
        write_leaf(root, NORTH, shard_arrays(), FIELDS, grid_block(), attrs=bad)


def test_crash_before_stamp_leaves_debris_that_readers_skip_and_a_rewrite_heals(
    tmp_path, monkeypatch
):
    root = new_store(tmp_path)
    write_shard(root, SOUTH, seed=3)
    update_root_coverage(root, [SOUTH], 4)

    def crash(*args):
        raise RuntimeError("worker killed")

    monkeypatch.setattr(leaf_module.stamp, "write_stamp", crash)
    with pytest.raises(RuntimeError, match="worker killed"):
        write_shard(root, NORTH)
    monkeypatch.undo()
    rel = leaf_path(NORTH)
    assert (tmp_path / rel / "6" / "count" / "c" / "0").exists()  # arrays landed ...
    assert (tmp_path / rel / "coverage.moc").exists()
    assert read_stamp(StoreRoot(root), rel) is None  # ... but no stamp: debris
    assert moczarr.read_commit(root, rel) is None
    assert sorted(moczarr.walk_leaves(root)) == sorted([rel, leaf_path(SOUTH)])
    # moczarr (root-MOC candidates) and our reader only see the stamped leaf
    assert moczarr.open_hive(root).sizes["cells"] == 16
    with pytest.warns(UserWarning, match=f"skipping .*{NORTH}.zarr: no commit stamp"):
        ds = open_hive(root, discover="walk")
    assert ds.attrs["zagg"]["shards"] == [SOUTH]
    with pytest.raises(ValueError, match="no commit stamp"):
        open_leaf(root, NORTH)
    # a retry heals it
    record, arrays = write_shard(root, NORTH)
    assert moczarr.read_commit(root, rel)["content_hashes"] == record["content_hashes"]
    ds = open_hive(root, discover="walk", dense=True)
    assert ds.attrs["zagg"]["shards"] == [NORTH, SOUTH]
    np.testing.assert_array_equal(ds["count"].values[:16], arrays["count"])


def test_versioned_leaf_is_never_cleared(tmp_path):
    root = new_store(tmp_path)
    record, _ = write_shard(root, NORTH)
    meta_path = tmp_path / record["path"] / "zarr.json"
    meta = json.loads(meta_path.read_text())
    meta["attributes"]["morton_hive_commit"]["current"] = "run-abc-12345678"
    meta_path.write_text(json.dumps(meta))
    with pytest.raises(ValueError, match="versioned leaf"):
        write_shard(root, NORTH)
    assert (tmp_path / record["path"] / "6" / "count" / "c" / "0").exists()


def test_nan_payload_bits_do_not_change_the_hash(tmp_path):
    root = new_store(tmp_path)
    arrays = shard_arrays()
    weird = arrays["h_mean"].copy()
    weird[np.isnan(weird)] = np.float32(-np.nan)  # a NaN with the sign bit set
    a = write_leaf(root, NORTH, arrays, FIELDS, grid_block(), attrs=ATTRS)
    b = write_leaf(root, NORTH, dict(arrays, h_mean=weird), FIELDS, grid_block(), attrs=ATTRS)
    assert a["content_hashes"] == b["content_hashes"]
    assert moczarr.stats.hash_arrays(root, a["path"]) == b["content_hashes"]["arrays"]


def test_fsspec_backend_round_trip():
    """The same leaf written through an fsspec filesystem (memory://) reads back identically."""
    import fsspec

    root = "memory://zagg-hive-test"
    fs = fsspec.filesystem("memory")
    if fs.exists("/zagg-hive-test"):
        fs.rm("/zagg-hive-test", recursive=True)
    new_store(root, "T", "1")
    record, arrays = write_shard(root, SOUTH, grid_kw={"sharded": False})
    assert record["cells_with_data"] == len(OCCUPIED)
    update_root_coverage(root, [SOUTH], 4)
    keys = {k.split("zagg-hive-test/", 1)[1] for k in fs.find("/zagg-hive-test")}
    assert f"{record['path']}/6/count/c/0" in keys and f"{record['path']}/6/count/c/2" not in keys
    ds = open_hive(root, dense=True)
    np.testing.assert_array_equal(ds["count"].values, arrays["count"])
    assert list(ds["h_tdigest"].values) == list(arrays["h_tdigest"])
    fs.rm("/zagg-hive-test", recursive=True)


def test_stamp_is_the_last_write_under_the_leaf_prefix(tmp_path, monkeypatch):
    root = new_store(tmp_path)
    log: list[tuple[str, bytes]] = []
    original_write = StoreRoot.write_bytes

    def logging_write(self, key, data):
        log.append((key, bytes(data)))
        return original_write(self, key, data)

    monkeypatch.setattr(StoreRoot, "write_bytes", logging_write)
    record, _ = write_shard(root, NORTH, granule_ids=["G1.h5"])
    prefix = record["path"]
    node = prefix.rsplit("/", 1)[0]
    keys = [key for key, _ in log]
    stamps = [
        i
        for i, (k, v) in enumerate(log)
        if k == f"{prefix}/zarr.json" and b"morton_hive_commit" in v
    ]
    assert len(stamps) == 1
    stamp_at = stamps[0]
    assert [i for i, k in enumerate(keys) if k.startswith(f"{prefix}/")][-1] == stamp_at
    assert keys.index(f"{prefix}/6/count/c/0") < stamp_at
    assert keys.index(f"{prefix}/coverage.moc") < stamp_at
    assert keys.index(f"{node}/granules.json") > stamp_at
    assert keys.index(f"{node}/stats.json") > stamp_at


def test_field_declarations_are_validated(tmp_path):
    root = new_store(tmp_path)
    arrays = shard_arrays()
    bad_fill = dict(FIELDS, quality=dict(FIELDS["quality"], fill_value=300))
    with pytest.raises(ValueError, match="300 is not representable as uint8"):
        write_leaf(root, NORTH, arrays, bad_fill, grid_block(), attrs=ATTRS)
    with pytest.raises(ValueError, match="'morton' cannot name a field"):
        write_leaf(
            root, NORTH, arrays, dict(FIELDS, morton=FIELDS["count"]), grid_block(), attrs=ATTRS
        )
    with pytest.raises(ValueError, match="kind 'sparse'"):
        write_leaf(root, NORTH, arrays, dict(FIELDS, count={"kind": "sparse"}), grid_block())
    with pytest.raises(ValueError, match="parent_order \\(4\\) <= chunk_inner \\(3\\)"):
        write_leaf(root, NORTH, arrays, FIELDS, grid_block(k=3), attrs=ATTRS)
    assert not (tmp_path / "1").exists()


def test_an_object_store_leaf_goes_up_in_one_batch_before_its_stamp(tmp_path, moto_s3, monkeypatch):
    """On an object store a leaf's objects are sent together (concurrent PUTs), and its
    stamp only after all of them: the same objects as a local write, in two steps."""
    options, fs = moto_s3
    fs.mkdir("leafbatch")
    root = StoreRoot("s3://leafbatch/store", options)
    calls = []
    real_pipe, real_pipe_file = root.fs.pipe, root.fs.pipe_file

    def pipe(objects, *args, **kwargs):
        calls.append(("batch", sorted(k.split("/store/", 1)[1] for k in objects)))
        return real_pipe(objects, *args, **kwargs)

    def pipe_file(path, *args, **kwargs):
        calls.append(("one", path.split("/store/", 1)[1]))
        return real_pipe_file(path, *args, **kwargs)

    def spied(name):
        real = getattr(root.fs, name)

        def call(path, *args, **kwargs):
            calls.append((name, path.split("/store/", 1)[1]))
            return real(path, *args, **kwargs)

        return call

    monkeypatch.setattr(root.fs, "pipe", pipe)
    monkeypatch.setattr(root.fs, "pipe_file", pipe_file)
    for name in ("cat_file", "rm"):
        monkeypatch.setattr(root.fs, name, spied(name))
    remote_record, _ = write_shard(root, NORTH)
    local_record, _ = write_shard(str(tmp_path / "local"), NORTH)
    assert remote_record["content_hashes"] == local_record["content_hashes"]

    leaf = remote_record["path"]
    local = {
        str(p.relative_to(tmp_path / "local")): p.read_bytes()
        for p in (tmp_path / "local").rglob("*")
        if p.is_file()
    }
    remote = {p.split("/store/", 1)[1]: fs.cat_file(p) for p in fs.find("leafbatch/store")}
    assert sorted(remote) == sorted(local)
    node = leaf.rsplit("/", 1)[0]
    stamped = {f"{leaf}/zarr.json", f"{node}/stats.json"}
    for key in set(local) - stamped:  # written_at and timings aside, the same bytes
        assert remote[key] == local[key], key
    # the batch counts what it sends: the record's bytes are the leaf's objects' sizes
    assert remote_record["bytes_written"] == sum(
        len(v) for k, v in remote.items() if k.startswith(leaf + "/")
    )
    assert remote_record["timings"]["upload_s"] > 0
    batches = [c for c in calls if c[0] == "batch"]
    assert len(batches) == 2  # the leaf's objects, then its sidecars after the stamp
    sent = batches[0][1]
    assert sorted(k for k in local if "/c/" in k) == [k for k in sent if "/c/" in k]
    assert f"{leaf}/zarr.json" in sent  # the unstamped template, overwritten by the stamp
    assert batches[1][1] == [f"{node}/stats.json"]
    before, after = calls[: calls.index(batches[0])], calls[calls.index(batches[0]) + 1 :]
    # a fresh leaf: nothing to read or clear, only the writer's claim taken first
    assert before == [("one", f"{leaf}.claim.json")]
    assert after[0] == ("one", f"{leaf}/zarr.json")  # the stamp follows the batch
    assert after[1] == batches[1]  # then the sidecars
    assert not fs.exists(f"leafbatch/store/{leaf}.claim.json")  # given up once written
    assert json.loads(remote[f"{leaf}/zarr.json"])["attributes"][COMMIT_ATTR]["complete"]
    # writing it again reads the old stamp and clears the leaf first, then the same bytes
    calls.clear()
    again, _ = write_shard(root, NORTH)
    assert again["content_hashes"] == local_record["content_hashes"]
    first_batch = next(i for i, c in enumerate(calls) if c[0] == "batch")
    assert ("cat_file", f"{leaf}/zarr.json") in calls[:first_batch]
    assert ("rm", leaf) in calls[:first_batch]
    assert {p.split("/store/", 1)[1] for p in fs.find("leafbatch/store")} == set(local)


def test_an_object_store_rewrite_clears_the_previous_attempt_while_it_encodes(moto_s3, monkeypatch):
    """A leaf written again on an object store lists its prefix in a background thread
    while it encodes, and clears what an earlier attempt left before its first object."""
    options, fs = moto_s3
    fs.mkdir("leafclear")
    root = StoreRoot("s3://leafclear/store", options)
    first, _ = write_shard(root, NORTH)
    leaf = first["path"]
    fs.pipe_file(f"leafclear/store/{leaf}/6/stale/c/0", b"debris of an older attempt")
    listed = spy_listings(monkeypatch)
    again, _ = write_shard(root, NORTH, seed=1)
    assert [p for p, _ in listed] == [leaf]
    assert listed[0][1] != threading.current_thread().name  # listed beside the encoding
    keys = {k.split("/store/", 1)[1] for k in fs.find("leafclear/store")}
    assert f"{leaf}/6/stale/c/0" not in keys
    stamp = read_stamp(StoreRoot("s3://leafclear/store", options), leaf)
    assert stamp["content_hashes"] == again["content_hashes"] != first["content_hashes"]


def test_a_versioned_leaf_on_an_object_store_is_refused_with_nothing_written(moto_s3):
    options, fs = moto_s3
    fs.mkdir("leafversioned")
    root = StoreRoot("s3://leafversioned/store", options)
    record, _ = write_shard(root, NORTH)
    key = f"leafversioned/store/{record['path']}/zarr.json"
    meta = json.loads(fs.cat_file(key))
    meta["attributes"]["morton_hive_commit"]["current"] = "run-abc-12345678"
    fs.pipe_file(key, json.dumps(meta).encode())
    before = {k: fs.cat_file(k) for k in fs.find("leafversioned/store")}
    with pytest.raises(ValueError, match="versioned leaf"):
        write_shard(root, NORTH, seed=1)
    fs.invalidate_cache()
    assert {k: fs.cat_file(k) for k in fs.find("leafversioned/store")} == before


def test_a_leaf_known_fresh_is_not_listed(tmp_path, monkeypatch):
    root = new_store(tmp_path)
    listed = spy_listings(monkeypatch)
    record, arrays = write_shard(root, NORTH, fresh=True)
    assert listed == []
    write_shard(root, SOUTH)
    assert [p for p, _ in listed] == [leaf_path(SOUTH)]
    np.testing.assert_array_equal(decoded(root, NORTH)["count"], arrays["count"])


def test_object_store_reads_take_one_request(moto_s3, monkeypatch):
    """A read is one ranged GET: present, empty (no range to read, so read again whole)
    and missing objects each come back as they are."""
    options, fs = moto_s3
    fs.mkdir("storeread")
    fs.pipe_file("storeread/r/full.json", b'{"a": 1}')
    fs.pipe_file("storeread/r/empty", b"")
    root = StoreRoot("s3://storeread/r", options)
    calls = []
    real_call = root.fs._call_s3

    async def call_s3(method, *args, **kwargs):
        calls.append(method)
        return await real_call(method, *args, **kwargs)

    monkeypatch.setattr(root.fs, "_call_s3", call_s3)
    assert root.read_bytes("full.json") == b'{"a": 1}'
    assert calls == ["get_object"]
    calls.clear()
    assert root.read_bytes("missing.json") is None
    assert calls == ["get_object"]
    calls.clear()
    assert root.read_bytes("empty") == b""
    assert calls[0] == "get_object" and len(calls) <= 3
