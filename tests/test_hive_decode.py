"""The direct leaf decoder equals zarr-python on every array zagg writes (whole arrays and
chosen cells), declines layouts it does not know, and refuses corrupt chunk objects by name."""

from __future__ import annotations

import copy
import json
import struct
from pathlib import Path

import moczarr
import numpy as np
import pytest
import zarr
from test_strata import REGION, strata_config

import zagg
from zagg import hive
from zagg.hive import decode
from zagg.hive import stamp as hive_stamp
from zagg.sources.synthetic import synthetic_photons


@pytest.fixture(scope="module", params=[True, False], ids=["sharded", "unsharded"])
def store(request, tmp_path_factory):
    """A strata store (count, t-digests with located siblings, composition) plus dense
    float fields, over a few order-9 shards."""
    cfg = strata_config(located=True)
    cfg["aggregation"]["variables"].update(
        {
            "h_mean": {"function": "mean", "source": "h_ph", "dtype": "float64"},
            "h_min": {"function": "min", "source": "h_ph"},
        }
    )
    cfg["output"]["grid"].update(chunk_inner=12, sharded=request.param)
    photons = synthetic_photons(40_000, REGION, chunk_size=20_000, seed=3)
    root = str(tmp_path_factory.mktemp("decode") / "s")
    zagg.to_hive(zagg.aggregate(photons, cfg), root)
    return root


def _arrays(root: str):
    """``(array key, the leaf's data prefix, the array's path in it)`` of every array."""
    for leaf, _ in hive.walk_leaves(root):
        data = hive_stamp.data_prefix(leaf, hive.read_stamp(hive.StoreRoot(root), leaf))
        for meta in sorted((Path(root) / data).glob("*/*/zarr.json")):
            key = str(meta.parent.relative_to(root))
            yield key, data, key[len(data) + 1 :]


def test_every_array_decodes_like_zarr(store):
    root = hive.StoreRoot(store)
    seen = set()
    for key, leaf, path in _arrays(store):
        got = decode.read_array(root, key)
        want = zarr.open_array(root.zarr_store(leaf, read_only=True), path=path, mode="r")[...]
        assert got is not None, key
        if want.dtype == object:
            want = [b"" if v is None else bytes(v) for v in want]
            assert got.dtype == object and all(type(g) is bytes for g in got)
            assert list(got) == want, key
        else:
            assert got.dtype == want.dtype and got.shape == want.shape
            np.testing.assert_array_equal(got, want)
        seen.add(path.split("/")[1])
    # dense int/float fields, the morton coordinate, t-digests and their location words
    assert {
        "count",
        "h_mean",
        "h_min",
        "morton",
        "h_tdigest",
        "composition",
        "h_tdigest_signal",
        "h_tdigest_signal_locations",
    } <= seen


def test_chosen_cells_decode_like_zarr(store):
    """read_cells (the shard index plus only the covering inner chunks) gives zarr-python's
    values at any set of cells: single cells, a chunk's worth, scattered ones, none."""
    root = hive.StoreRoot(store)
    rng = np.random.default_rng(5)
    for key, leaf, path in _arrays(store):
        found = decode.layout(json.loads((Path(store) / key / "zarr.json").read_text()))
        want = zarr.open_array(root.zarr_store(leaf, read_only=True), path=path, mode="r")[...]
        n = want.shape[0]
        for ranks in ([0], [n - 1], np.arange(4096, 2 * 4096), rng.choice(n, 300), []):
            ranks = np.unique(np.asarray(ranks, dtype=np.int64))
            ranks = ranks[ranks < n]  # pyramid column groups hold fewer cells than a leaf
            got = decode.read_cells(root, key, found, ranks)
            if want.dtype == object:
                assert list(got) == [b"" if v is None else bytes(v) for v in want[ranks]], key
            else:
                assert got.dtype == want.dtype
                np.testing.assert_array_equal(got, want[ranks])


def test_open_hive_values_are_zarrs(store):
    """Every field of the dense and the sparse view equals zarr-python's reading of the
    leaves (the sparse one at the cells the coverage bitmaps list)."""
    root = hive.StoreRoot(store)
    dense = zagg.open_hive(store, dense=True).compute()
    sparse = zagg.open_hive(store).compute()
    group = str(dense.attrs["morton_hive"]["cell_order"])
    per_leaf = dense.sizes["cells"] // len(dense.attrs["zagg"]["shards"])
    for i, sid in enumerate(dense.attrs["zagg"]["shards"]):
        leaf = hive.leaf_path(sid)
        data = hive_stamp.data_prefix(leaf, hive.read_stamp(root, leaf))
        rows = slice(i * per_leaf, (i + 1) * per_leaf)
        bitmap = moczarr.read_coverage_bitmap(store, leaf)
        in_sparse = np.isin(sparse["morton"].values, bitmap)
        np.testing.assert_array_equal(sparse["morton"].values[in_sparse], bitmap)
        at = np.flatnonzero(np.isin(dense["morton"].values[rows], bitmap))
        for name in dense.data_vars:
            want = zarr.open_array(
                root.zarr_store(data, read_only=True), path=f"{group}/{name}", mode="r"
            )[...]
            got_dense, got_sparse = dense[name].values[rows], sparse[name].values[in_sparse]
            if want.dtype == object:
                want = [b"" if v is None else bytes(v) for v in want]
                if name.endswith(("_locations", "_times")):  # word siblings: uint64 per cell
                    want = [np.frombuffer(v, "<u8") for v in want]
                    assert all(np.array_equal(a, b) for a, b in zip(got_dense, want, strict=True))
                    assert all(np.array_equal(got_sparse[j], want[k]) for j, k in enumerate(at))
                else:
                    assert list(got_dense) == want
                    assert list(got_sparse) == [want[k] for k in at]
            else:
                np.testing.assert_array_equal(got_dense, want)
                np.testing.assert_array_equal(got_sparse, want[at])


def _one(store, name):
    return next((k, leaf, p) for k, leaf, p in _arrays(store) if p.endswith("/" + name))


def test_unknown_layouts_are_left_to_zarr(store, tmp_path):
    root = hive.StoreRoot(store)
    key, _, _ = _one(store, "h_mean")
    meta = json.loads((Path(store) / key / "zarr.json").read_text())
    assert decode.layout(meta) is not None
    changes = [
        ("two dimensions", lambda m: m.update(shape=[2, m["shape"][0] // 2])),
        (
            "a compressor on a dense chain",
            lambda m: _inner(m).append(
                {"name": "zstd", "configuration": {"level": 3, "checksum": False}}
            ),
        ),
        ("big-endian bytes", lambda m: _inner(m)[0]["configuration"].update(endian="big")),
        ("a hex-encoded NaN fill", lambda m: m.update(fill_value="0x7fc00000")),
        (
            "dotted chunk keys",
            lambda m: m["chunk_key_encoding"]["configuration"].update(separator="."),
        ),
        ("a storage transformer", lambda m: m.update(storage_transformers=[{"name": "x"}])),
    ]
    for what, change in changes:
        m = copy.deepcopy(meta)
        change(m)
        assert decode.layout(m) is None, what
    # and read_array says so for a real array whose metadata was changed that way
    target = tmp_path / "x"
    target.mkdir()
    m = copy.deepcopy(meta)
    m["chunk_key_encoding"]["configuration"]["separator"] = "."
    (target / "zarr.json").write_text(json.dumps(m))
    assert decode.read_array(hive.StoreRoot(str(tmp_path)), "x") is None
    assert decode.read_array(root, "no/such/array") is None


def _inner(meta):
    codecs = meta["codecs"]
    if codecs[0]["name"] == "sharding_indexed":
        return codecs[0]["configuration"]["codecs"]
    return codecs


def test_corrupt_chunks_are_refused_by_name(store, tmp_path):
    key, _, _ = _one(store, "h_tdigest")
    src = Path(store) / key
    meta = json.loads((src / "zarr.json").read_text())
    sharded = meta["codecs"][0]["name"] == "sharding_indexed"
    chunk = min((p for p in (src / "c").rglob("*") if p.is_file()), key=lambda p: p.stat().st_size)
    data = chunk.read_bytes()
    rel = chunk.relative_to(src)
    cases = {}
    if sharded:
        cases["the shard index fails its crc32c"] = data[:-1] + bytes([data[-1] ^ 1])
        cases["cannot hold the index"] = data[:10]
    else:
        cases["is not a zstd frame"] = b"\x00" * len(data)
    import zstandard

    frame = zstandard.ZstdCompressor(level=3).compress(struct.pack("<I", 7) + b"\x00" * 4)
    if not sharded:
        cases["is not a vlen frame"] = frame
    for message, bad in cases.items():
        target = tmp_path / message.replace(" ", "_")
        (target / rel).parent.mkdir(parents=True, exist_ok=True)
        (target / "zarr.json").write_text(json.dumps(meta))
        (target / rel).write_bytes(bad)
        with pytest.raises(decode.CorruptChunkError, match=message):
            decode.read_array(hive.StoreRoot(str(tmp_path)), target.name)
