"""Byte-level checks of leaves our writer produced, decoded with struct + zstandard only.

No zarr here: the shard index suffix, the absent-chunk sentinel, the vlen framing (G2),
the bytes-only dense chain, and the metadata documents are read as plain files.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path

import google_crc32c
import numpy as np
import pytest
import zstandard
from test_hive_builders import G2_HEX, NORTH, OCCUPIED, SOUTH, crc32c, law, write_shard

pytestmark = pytest.mark.filterwarnings("ignore::zarr.errors.UnstableSpecificationWarning")
SENTINEL = 2**64 - 1
ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"


def read_index(blob: bytes, k: int) -> list[tuple[int, int]]:
    """Parse and crc-check the 16·K + 4 byte index suffix of a shard object."""
    suffix = blob[-(16 * k + 4) :]
    body, (crc,) = suffix[:-4], struct.unpack("<I", suffix[-4:])
    assert crc == crc32c(body) == google_crc32c.value(body)
    words = struct.unpack(f"<{2 * k}Q", body)
    return list(zip(words[0::2], words[1::2], strict=True))


def leaf_dir(root: Path, shard_id: str) -> Path:
    sign = "-" if shard_id.startswith("-") else ""
    body = shard_id.lstrip("-")
    return root.joinpath(sign + body[0], *body[1:], f"{shard_id}.zarr")


def decode_vlen_frame(raw: bytes) -> list[bytes]:
    (n,) = struct.unpack_from("<I", raw, 0)
    pos, cells = 4, []
    for _ in range(n):
        (size,) = struct.unpack_from("<I", raw, pos)
        cells.append(raw[pos + 4 : pos + 4 + size])
        pos += 4 + size
    assert pos == len(raw)
    return cells


@pytest.fixture(scope="module")
def sharded(tmp_path_factory):
    root = tmp_path_factory.mktemp("sharded")
    _, north = write_shard(str(root), NORTH)
    _, south = write_shard(str(root), SOUTH, seed=1)
    return root, {NORTH: north, SOUTH: south}


def test_dense_shard_index_layout_and_sentinel(sharded):
    root, arrays = sharded
    for shard_id, values in arrays.items():
        blob = (leaf_dir(root, shard_id) / "6" / "count" / "c" / "0").read_bytes()
        index = read_index(blob, 4)
        assert len(blob) == 3 * 32 + 68  # three populated inner chunks of 4 × int64 + index
        assert index[2] == (SENTINEL, SENTINEL)  # inner chunk 2 holds only the fill
        offset = 0
        for j, (off, nbytes) in enumerate(index):
            if j == 2:
                continue
            assert (off, nbytes) == (offset, 32)
            offset += nbytes
            cells = struct.unpack("<4q", blob[off : off + nbytes])
            assert list(cells) == values["count"][4 * j : 4 * j + 4].tolist()


def test_morton_shard_stores_law_words_in_written_chunks_only(sharded):
    root, _ = sharded
    for shard_id in (NORTH, SOUTH):
        blob = (leaf_dir(root, shard_id) / "6" / "morton" / "c" / "0").read_bytes()
        index = read_index(blob, 4)
        words = law(shard_id)
        assert index[2] == (SENTINEL, SENTINEL)
        for j in (0, 1, 3):
            off, nbytes = index[j]
            assert (
                list(struct.unpack("<4Q", blob[off : off + nbytes]))
                == words[4 * j : 4 * j + 4].tolist()
            )
        assert (words[0] >> np.uint64(63)) == (1 if shard_id.startswith("-") else 0)
        assert words[1] - words[0] == 2 ** (60 - 12)  # stride 2^(60-2c) at c = 6


def test_float_dense_chunk_is_raw_little_endian(sharded):
    root, arrays = sharded
    blob = (leaf_dir(root, NORTH) / "6" / "h_mean" / "c" / "0").read_bytes()
    index = read_index(blob, 4)
    off, nbytes = index[0]
    assert nbytes == 16
    got = np.frombuffer(blob[off : off + nbytes], "<f4")
    np.testing.assert_array_equal(got, arrays[NORTH]["h_mean"][:4])
    assert np.isnan(got[1]) and got.view("<u4")[1] == 0x7FC00000  # the one canonical NaN


def test_vlen_framing_golden_g2(sharded):
    root, arrays = sharded
    blob = (leaf_dir(root, NORTH) / "6" / "h_tdigest" / "c" / "0").read_bytes()
    index = read_index(blob, 4)
    assert index[2] == (SENTINEL, SENTINEL)
    off, nbytes = index[0]
    frame = blob[off : off + nbytes]
    assert frame[:4] == ZSTD_MAGIC
    assert frame[4] & 0x04 == 0  # frame header descriptor: no content checksum
    raw = zstandard.ZstdDecompressor().decompressobj().decompress(frame)
    assert raw.hex() == G2_HEX and len(raw) == 44
    for j in (0, 1, 3):
        off, nbytes = index[j]
        raw = zstandard.ZstdDecompressor().decompressobj().decompress(blob[off : off + nbytes])
        assert decode_vlen_frame(raw) == list(arrays[NORTH]["h_tdigest"][4 * j : 4 * j + 4])


def test_metadata_documents(sharded):
    root, _ = sharded
    leaf = leaf_dir(root, NORTH)
    count = json.loads((leaf / "6" / "count" / "zarr.json").read_text())
    assert count["data_type"] == "int64" and count["fill_value"] == 0
    assert count["chunk_grid"]["configuration"]["chunk_shape"] == [16]
    assert count["dimension_names"] == ["cells"]
    (codec,) = count["codecs"]
    assert codec["name"] == "sharding_indexed"
    assert codec["configuration"] == {
        "chunk_shape": [4],
        "codecs": [{"name": "bytes", "configuration": {"endian": "little"}}],
        "index_codecs": [
            {"name": "bytes", "configuration": {"endian": "little"}},
            {"name": "crc32c"},
        ],
        "index_location": "end",
    }
    assert json.loads((leaf / "6" / "h_mean" / "zarr.json").read_text())["fill_value"] == "NaN"
    assert json.loads((leaf / "6" / "quality" / "zarr.json").read_text())["fill_value"] == 255
    ragged = json.loads((leaf / "6" / "h_tdigest" / "zarr.json").read_text())
    assert ragged["data_type"] == "variable_length_bytes" and ragged["fill_value"] == ""
    inner = ragged["codecs"][0]["configuration"]
    assert inner["codecs"] == [
        {"name": "vlen-bytes", "configuration": {}},
        {"name": "zstd", "configuration": {"level": 3, "checksum": False}},
    ]
    assert ragged["attributes"]["ragged"] == {
        "spec": "zagg-ragged/1",
        "element": {"dtype": "float32", "shape": [-1, 2]},
    }
    group = json.loads((leaf / "6" / "zarr.json").read_text())
    assert group["node_type"] == "group"
    assert group["attributes"]["dggs"] == {
        "name": "morton",
        "coordinate": "morton",
        "latitude": "authalic-wgs84",
        "ellipsoid": {
            "name": "WGS84",
            "semi_major_axis": 6378137.0,
            "inverse_flattening": 298.257223563,
        },
        "refinement_level": 6,
        "spatial_dimension": "cells",
    }
    (convention,) = group["attributes"]["zarr_conventions"]
    assert convention["uuid"] == "3e22156d-ea9e-4e01-95fe-e3809a4b41e7"
    assert convention["name"] == "morton-dggs"
    stamp = json.loads((leaf / "zarr.json").read_text())["attributes"]["morton_hive_commit"]
    assert list(stamp) == [
        "spec",
        "complete",
        "cells_with_data",
        "granule_count",
        "written_at",
        "coverage",
        "content_hashes",
    ]
    assert stamp["spec"] == "morton-hive/1" and stamp["complete"] is True
    assert stamp["cells_with_data"] == len(OCCUPIED)
    assert stamp["written_at"].endswith("+00:00")
    # nothing but zarr metadata and the bitmap sidecar inside the leaf; nothing above it
    names = sorted(str(p.relative_to(leaf)) for p in leaf.rglob("*") if p.is_file())
    assert names == sorted(
        ["zarr.json", "coverage.moc", "6/zarr.json"]
        + [
            f"6/{a}/{f}"
            for a in ("count", "h_mean", "quality", "h_tdigest", "morton")
            for f in ("zarr.json", "c/0")
        ]
    )
    node_files = sorted(p.name for p in leaf.parent.iterdir())
    assert node_files == ["11213.zarr", "stats.json"]


def test_unsharded_dense_arrays_are_one_raw_object_per_inner_chunk(tmp_path):
    _, arrays = write_shard(str(tmp_path), NORTH, grid_kw={"sharded": False})
    leaf = leaf_dir(tmp_path, NORTH)
    meta = json.loads((leaf / "6" / "count" / "zarr.json").read_text())
    assert meta["codecs"] == [{"name": "bytes", "configuration": {"endian": "little"}}]
    assert meta["chunk_grid"]["configuration"]["chunk_shape"] == [4]
    chunks = sorted(p.name for p in (leaf / "6" / "count" / "c").iterdir())
    assert chunks == ["0", "1", "3"]  # inner chunk 2 is absent
    for j in (0, 1, 3):
        blob = (leaf / "6" / "count" / "c" / str(j)).read_bytes()
        assert list(struct.unpack("<4q", blob)) == arrays["count"][4 * j : 4 * j + 4].tolist()
    # the ragged array stays one whole-leaf sharded object
    ragged = json.loads((leaf / "6" / "h_tdigest" / "zarr.json").read_text())
    assert ragged["codecs"][0]["name"] == "sharding_indexed"
    assert sorted(p.name for p in (leaf / "6" / "h_tdigest" / "c").iterdir()) == ["0"]
    blob = (leaf / "6" / "h_tdigest" / "c" / "0").read_bytes()
    assert read_index(blob, 4)[2] == (SENTINEL, SENTINEL)


def test_single_inner_chunk_leaf_has_no_sharding(tmp_path):
    write_shard(str(tmp_path), NORTH, grid_kw={"k": 4})
    leaf = leaf_dir(tmp_path, NORTH)
    for name in ("count", "morton", "h_tdigest"):
        meta = json.loads((leaf / "6" / name / "zarr.json").read_text())
        assert meta["chunk_grid"]["configuration"]["chunk_shape"] == [16]
        assert all(c["name"] != "sharding_indexed" for c in meta["codecs"])
    blob = (leaf / "6" / "count" / "c" / "0").read_bytes()
    assert len(blob) == 16 * 8


def test_index_suffix_size_at_k_256(tmp_path):
    """G3: K = 256 inner chunks gives a 4,100-byte suffix; absent chunks carry the sentinel."""
    occupied = (0, 77, 255)
    grid_kw = {"p": 4, "k": 8, "c": 8}
    write_shard(str(tmp_path), NORTH, grid_kw=grid_kw, occupied=occupied, g2=False)
    blob = (leaf_dir(tmp_path, NORTH) / "8" / "count" / "c" / "0").read_bytes()
    assert len(blob) == 3 * 8 + 4100
    index = read_index(blob, 256)
    present = [j for j, entry in enumerate(index) if entry != (SENTINEL, SENTINEL)]
    assert present == list(occupied)
    words = (leaf_dir(tmp_path, NORTH) / "8" / "morton" / "c" / "0").read_bytes()
    stored = [struct.unpack_from("<Q", words, index[j][0])[0] for j in occupied]
    assert stored == law(NORTH, 4, 8)[list(occupied)].tolist()


def test_coarse_shard_leaf_follows_the_cell_law(tmp_path):
    """A shard at order 2 (K = 256): every written morton word is the law word."""
    write_shard(str(tmp_path), "112", grid_kw={"p": 2, "k": 6, "c": 6}, occupied=(0, 255), g2=False)
    blob = (leaf_dir(tmp_path, "112") / "6" / "morton" / "c" / "0").read_bytes()
    index = read_index(blob, 256)
    first = struct.unpack_from("<Q", blob, index[0][0])[0]
    last = struct.unpack_from("<Q", blob, index[255][0])[0]
    assert last - first == 255 * 2 ** (60 - 12)


def test_one_store_root_takes_leaf_writes_from_many_threads(tmp_path):
    """Leaf-write tasks on one worker share the StoreRoot: clearing a prefix while other
    threads create directories must not trip over its set of known directories."""
    from concurrent.futures import ThreadPoolExecutor

    from zagg.hive.storage import StoreRoot

    root = StoreRoot(str(tmp_path / "store"))

    def writer(t):
        for i in range(200):
            leaf = f"t{t}/leaf{i}"
            root.delete_prefix(leaf)  # as a leaf write does first
            for k in range(4):
                root.write_bytes(f"{leaf}/a{k}/c/0", b"x")
        return t

    import sys

    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # switch threads often, as a busy worker may
    try:
        with ThreadPoolExecutor(6) as pool:
            assert sorted(pool.map(writer, range(6))) == list(range(6))
    finally:
        sys.setswitchinterval(interval)
    assert sum(1 for _ in (tmp_path / "store").rglob("0")) == 6 * 200 * 4
