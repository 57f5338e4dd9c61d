"""Chunk objects of a leaf array, encoded directly to the bytes zarr v3 would write.

zarr-python's sharding codec schedules one asyncio task per inner chunk, which costs far
more than the bytes themselves on a mostly-empty leaf. The leaf template (array metadata)
still comes from zarr; the chunk objects are produced here, in O(occupied inner chunks):

- dense inner chunk: the values as little-endian C-order bytes (chain ``[bytes]``);
- ragged inner chunk: the vlen framing (u32 cell count, then u32 length ‖ payload per
  cell) compressed by zstd level 3 without checksum;
- shard object: occupied chunks back to back, then the index of K (offset, nbytes) u64
  pairs (2^64 − 1 twice for an absent chunk) and its crc32c, little-endian.
Inner chunks holding only the fill are never encoded. Readers (zarr, moczarr) decode these
objects exactly like zarr's own; the test suite checks both.
"""

from __future__ import annotations

import ctypes
import struct

import google_crc32c
import numpy as np
import zstandard

ABSENT = 0xFFFFFFFFFFFFFFFF
EMPTY_BYTES_ID = id(b"")  # CPython shares one empty bytes object


def object_pointers(cells: np.ndarray) -> np.ndarray:
    """The object pointers of a contiguous 1-D object array, as uint64 (a read-only view)."""
    n = cells.shape[0]
    if n == 0:
        return np.zeros(0, dtype=np.uint64)
    if cells.dtype != object or not cells.flags.c_contiguous or cells.ndim != 1:
        raise ValueError("object_pointers needs a contiguous 1-D object array")
    return np.ctypeslib.as_array((ctypes.c_uint64 * n).from_address(cells.ctypes.data))


def ragged_lengths(cells: np.ndarray) -> np.ndarray:
    """Payload length of every cell of an object array (None and b"" are 0).

    Cells that are the interpreter's shared ``b""`` object are recognised from their
    pointers in one vectorised pass; only the remaining cells are inspected in Python, so
    the cost follows the number of occupied cells, not the leaf size.
    """
    cells = np.ascontiguousarray(cells, dtype=object)
    lengths = np.zeros(cells.shape[0], dtype=np.int64)
    for i in np.flatnonzero(object_pointers(cells) != EMPTY_BYTES_ID):
        cell = cells[i]
        lengths[i] = 0 if cell is None else len(cell)
    return lengths


def dense_chunk_empty(values: np.ndarray, fill) -> np.ndarray:
    """Per inner chunk (rows of ``values``, shape (K, cells)) whether it holds only fill."""
    if values.dtype.kind == "f" and isinstance(fill, float) and np.isnan(fill):
        return np.isnan(values).all(axis=1)
    return (values == values.dtype.type(fill)).all(axis=1)


def vlen_frame(cells: np.ndarray, lengths: np.ndarray) -> bytes:
    """The §1.4 framing of one inner chunk: u32 count, then u32 length ‖ payload per cell."""
    n = cells.shape[0]
    total = 4 + 4 * n + int(lengths.sum())
    buf = np.zeros(total, dtype=np.uint8)
    buf[:4] = np.frombuffer(struct.pack("<I", n), dtype=np.uint8)
    heads = 4 + 4 * np.arange(n, dtype=np.int64)
    heads[1:] += np.cumsum(lengths[:-1])
    head_pos = (heads[:, None] + np.arange(4, dtype=np.int64)).ravel()
    buf[head_pos] = lengths.astype("<u4").view(np.uint8)
    filled = np.flatnonzero(lengths)
    if filled.size:
        payload = np.frombuffer(b"".join(cells[filled].tolist()), dtype=np.uint8)
        body = np.ones(total, dtype=bool)
        body[:4] = False
        body[head_pos] = False
        buf[body] = payload
    return buf.tobytes()


class ChunkEncoder:
    """Encodes the chunk objects of one leaf array (one instance per array)."""

    def __init__(self, level: int = 3):
        self._zstd = zstandard.ZstdCompressor(level=level, write_checksum=False,
                                              write_content_size=True)

    def dense_chunks(self, values: np.ndarray, dtype: np.dtype, fill, n_inner: int):
        """``[bytes or None] * n_inner``: None for an all-fill inner chunk."""
        rows = values.astype(dtype.newbyteorder("<"), copy=False).reshape(n_inner, -1)
        empty = dense_chunk_empty(rows, fill)
        return [None if empty[k] else rows[k].tobytes() for k in range(n_inner)]

    def ragged_chunks(self, cells: np.ndarray, lengths: np.ndarray, n_inner: int):
        """``[bytes or None] * n_inner``: zstd-compressed framed chunks, None when empty."""
        per = cells.shape[0] // n_inner
        out = []
        for k in range(n_inner):
            ln = lengths[k * per:(k + 1) * per]
            if not ln.any():
                out.append(None)
                continue
            out.append(self._zstd.compress(vlen_frame(cells[k * per:(k + 1) * per], ln)))
        return out


def shard_object(chunks: list) -> bytes | None:
    """One sharding_indexed object from its inner chunks (None = absent); None if all absent."""
    if all(c is None for c in chunks):
        return None
    index = np.full((len(chunks), 2), ABSENT, dtype="<u8")
    offset = 0
    for k, chunk in enumerate(chunks):
        if chunk is not None:
            index[k] = (offset, len(chunk))
            offset += len(chunk)
    index_bytes = index.tobytes()
    crc = struct.pack("<I", google_crc32c.value(index_bytes))
    return b"".join([c for c in chunks if c is not None] + [index_bytes, crc])
