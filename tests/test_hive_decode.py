"""The direct leaf decoder equals zarr-python on every array zagg writes, declines layouts
it does not know, and refuses corrupt chunk objects by name."""

from __future__ import annotations

import copy
import json
import struct
from pathlib import Path

import numpy as np
import pytest
import zarr
from test_strata import REGION, strata_config

import zagg
from zagg import hive
from zagg.hive import decode
from zagg.sources.synthetic import synthetic_photons


@pytest.fixture(scope="module", params=[True, False], ids=["sharded", "unsharded"])
def store(request, tmp_path_factory):
    """A strata store (count, t-digests with located siblings, composition) plus dense
    float fields, over a few order-9 shards."""
    cfg = strata_config(located=True)
    cfg["aggregation"]["variables"].update({
        "h_mean": {"function": "mean", "source": "h_ph", "dtype": "float64"},
        "h_min": {"function": "min", "source": "h_ph"},
    })
    cfg["output"]["grid"].update(chunk_inner=12, sharded=request.param)
    photons = synthetic_photons(40_000, REGION, chunk_size=20_000, seed=3)
    root = str(tmp_path_factory.mktemp("decode") / "s")
    zagg.to_hive(zagg.aggregate(photons, cfg), root)
    return root


def _arrays(root: str):
    for meta in sorted(Path(root).rglob("*.zarr/*/*/zarr.json")):
        key = str(meta.parent.relative_to(root))
        leaf = key.rsplit("/", 2)[0]
        yield key, leaf, key[len(leaf) + 1 :]


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
    assert {"count", "h_mean", "h_min", "morton", "h_tdigest", "composition",
            "h_tdigest_signal", "h_tdigest_signal_locations"} <= seen


def test_open_hive_reads_through_the_decoder(store, monkeypatch):
    """open_hive's metadata, attrs and values are the same whether the leaves' zarr.json
    and chunks are read directly or by zarr-python."""
    import zagg.read as read

    calls = []
    direct = read._direct_group
    monkeypatch.setattr(read, "_direct_group", lambda *a: calls.append(a) or direct(*a))
    lazy = zagg.open_hive(store)
    assert calls and all(direct(*a) is not None for a in calls)
    reads = []
    read_json = hive.StoreRoot.read_json
    monkeypatch.setattr(hive.StoreRoot, "read_json",
                        lambda self, key: reads.append(key) or read_json(self, key))
    fast = lazy.compute()
    assert reads == []  # the loaders reuse the layouts open_hive read
    monkeypatch.setattr(hive.StoreRoot, "read_json", read_json)
    monkeypatch.setattr(read, "_direct_group", lambda *a: None)
    monkeypatch.setattr(decode, "read_array", lambda *a: None)
    slow = zagg.open_hive(store).compute()
    def same(a, b):  # NaN fill values compare equal as JSON text
        return json.dumps(a, sort_keys=True, default=str) == json.dumps(b, sort_keys=True,
                                                                         default=str)

    assert same(fast.attrs, slow.attrs)
    assert same({n: fast[n].attrs for n in fast.variables},
                {n: slow[n].attrs for n in slow.variables})
    for name in fast.variables:
        a, b = fast[name].values, slow[name].values
        if a.dtype == object:
            assert list(a) == list(b), name
        else:
            np.testing.assert_array_equal(a, b)


def _one(store, name):
    return next((k, leaf, p) for k, leaf, p in _arrays(store) if p.endswith("/" + name))


def test_unknown_layouts_are_left_to_zarr(store, tmp_path):
    root = hive.StoreRoot(store)
    key, _, _ = _one(store, "h_mean")
    meta = json.loads((Path(store) / key / "zarr.json").read_text())
    assert decode.layout(meta) is not None
    changes = [
        ("two dimensions", lambda m: m.update(shape=[2, m["shape"][0] // 2])),
        ("a compressor on a dense chain", lambda m: _inner(m).append(
            {"name": "zstd", "configuration": {"level": 3, "checksum": False}})),
        ("big-endian bytes", lambda m: _inner(m)[0]["configuration"].update(endian="big")),
        ("a hex-encoded NaN fill", lambda m: m.update(fill_value="0x7fc00000")),
        ("dotted chunk keys", lambda m: m["chunk_key_encoding"]["configuration"].update(
            separator=".")),
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
