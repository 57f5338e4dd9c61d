"""Small hand-built leaf inputs shared by the hive and reader tests (no aggregation engine).

The standard geometry is the spec's fixture geometry (G17): shard order 4, inner chunk
order 5, cell order 6, so a leaf holds 16 cells in K = 4 inner chunks of 4 cells. The
standard occupancy fills cells 0 and 3 (the G2 framing cells), 4 and 13, leaving inner chunk
2 empty and empty cells inside every populated chunk.
"""

from __future__ import annotations

import numpy as np

from zagg import grid
from zagg.hive import build_manifest, write_leaf, write_manifest

NORTH = "11213"  # order 4, northern (bit 63 clear)
SOUTH = "-31123"  # order 4, southern (bit 63 set)
OCCUPIED = (0, 3, 4, 13)
G2_HEX = "04000000080000000000803f0000803f00000000000000001000000000000040000040400000a0400000803f"
TDIGEST_ATTRS = {
    "ragged": {"spec": "zagg-ragged/1", "element": {"dtype": "float32", "shape": [-1, 2]}},
    "weights": "counts",
    "long_name": "height t-digest",
}
FIELDS = {
    "count": {"kind": "dense", "dtype": "int64", "fill_value": 0, "function": "count"},
    "h_mean": {"kind": "dense", "dtype": "float32", "fill_value": None, "function": "mean"},
    "quality": {"kind": "dense", "dtype": "uint8", "fill_value": 255, "function": "max"},
    "h_tdigest": {"kind": "ragged", "dtype": "object", "fill_value": b"", "function": "tdigest"},
}
ATTRS = {
    "count": {"long_name": "observations per cell"},
    "h_mean": {"units": "m"},
    "quality": {},
    "h_tdigest": TDIGEST_ATTRS,
}


def new_store(root, short_name: str = "T", version: str = "1") -> str:
    """A fresh store root holding only the manifest of the test geometry (p = 4, c = 6)."""
    root = str(root)
    write_manifest(
        root,
        build_manifest(
            dataset={"short_name": short_name, "version": version},
            semantic_hash="s",
            cell_order=6,
            shard_order=4,
        ),
    )
    return root


def chunk_objects(root) -> dict[str, bytes]:
    """Every chunk object under ``root`` (a store or a leaf), by relative path without its
    version: the bytes two ways of writing the same data must agree on (stamps and sidecars
    carry times)."""
    from pathlib import Path

    from leaves import without_versions

    root = Path(root)
    return {
        without_versions(str(p.relative_to(root))): p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file() and "/c/" in str(p.relative_to(root))
    }


def grid_block(p=4, k=5, c=6, sharded=True) -> dict:
    return {
        "type": "healpix",
        "parent_order": p,
        "chunk_inner": k,
        "child_order": c,
        "sharded": sharded,
    }


def digest(rows) -> bytes:
    """Raw t-digest payload bytes of ``rows`` ([[mean, weight], ...]) sorted by mean."""
    arr = np.asarray(rows, dtype="<f4").reshape(-1, 2)
    return arr[np.argsort(arr[:, 0], kind="stable")].tobytes()


def shard_arrays(n_cells=16, occupied=OCCUPIED, seed=0, g2=True) -> dict[str, np.ndarray]:
    """Arrays of one shard: counts, means, a uint8 flag and t-digests on ``occupied`` cells.

    With ``g2`` the first two occupied cells (0 and 3) carry the G2 digests.
    """
    rng = np.random.default_rng(seed)
    count = np.zeros(n_cells, np.int64)
    mean = np.full(n_cells, np.nan, np.float32)
    quality = np.full(n_cells, 255, np.uint8)
    tdig = np.empty(n_cells, dtype=object)
    tdig[:] = b""
    for i in occupied:
        if g2 and i == 0:
            rows = [[1.0, 1.0]]
        elif g2 and i == 3:
            rows = [[2.0, 3.0], [5.0, 1.0]]
        else:
            k = int(rng.integers(1, 5))
            rows = np.column_stack([rng.normal(size=k), rng.integers(1, 6, size=k)])
        payload = digest(rows)
        tdig[i] = payload
        weights = np.frombuffer(payload, "<f4").reshape(-1, 2)[:, 1]
        count[i] = int(weights.sum())
        mean[i] = np.float32(np.frombuffer(payload, "<f4").reshape(-1, 2)[:, 0].mean())
        quality[i] = int(rng.integers(0, 4))
    return {"count": count, "h_mean": mean, "quality": quality, "h_tdigest": tdig}


def write_shard(root, shard_id=NORTH, *, grid_kw=None, occupied=OCCUPIED, seed=0, g2=True, **kw):
    """Write one standard leaf and return (record, arrays)."""
    g = grid_block(**(grid_kw or {}))
    n = 4 ** (g["child_order"] - g["parent_order"])
    arrays = shard_arrays(n, occupied, seed, g2)
    record = write_leaf(root, shard_id, arrays, FIELDS, g, attrs=ATTRS, **kw)
    return record, arrays


def spy_listings(monkeypatch) -> list[tuple[str, str]]:
    """Record every ``StoreRoot.list_dir`` call from now on as (prefix, thread name)."""
    import threading

    from zagg.hive.storage import StoreRoot

    calls: list[tuple[str, str]] = []
    real = StoreRoot.list_dir

    def list_dir(self, prefix=""):
        calls.append((prefix, threading.current_thread().name))
        return real(self, prefix)

    monkeypatch.setattr(StoreRoot, "list_dir", list_dir)
    return calls


def law(shard_id: str, p=4, c=6) -> np.ndarray:
    return grid.shard_cell_words(grid.from_decimal(shard_id)[0], p, c)


def crc32c(data: bytes) -> int:
    """CRC-32C (Castagnoli, reflected polynomial 0x82F63B78), table-driven."""
    table = []
    for i in range(256):
        crc = i
        for _ in range(8):
            crc = (crc >> 1) ^ 0x82F63B78 if crc & 1 else crc >> 1
        table.append(crc)
    crc = 0xFFFFFFFF
    for byte in data:
        crc = table[(crc ^ byte) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


def test_builders_are_consistent():
    arrays = shard_arrays()
    assert arrays["h_tdigest"][0] == bytes.fromhex(G2_HEX)[8:16]
    assert arrays["count"].tolist() == [1, 0, 0, 4] + arrays["count"][4:].tolist()
    assert crc32c(b"123456789") == 0xE3069283  # the standard CRC-32C check value
