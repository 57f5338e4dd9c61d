"""Chunk objects and content digests of a leaf array, from its occupied cells.

zarr-python's sharding codec schedules one asyncio task per inner chunk, which costs far
more than the bytes themselves on a mostly-empty leaf. The leaf template (array metadata)
still comes from zarr; the chunk objects are produced here, in O(occupied inner chunks):

- dense inner chunk: the values as little-endian C-order bytes (chain ``[bytes]``);
- ragged inner chunk: the vlen framing (u32 cell count, then u32 length ‖ payload per
  cell) compressed by zstd level 3 without checksum;
- shard object: occupied chunks back to back, then the index of K (offset, nbytes) u64
  pairs (2^64 − 1 twice for an absent chunk) and its crc32c, little-endian.

Inner chunks holding only the fill are never encoded. The §5.2 digest of the array's full
decoded contents is streamed alongside, chunk by chunk: a run of fill-only chunks hashes a
slice of a cached fill template (a leading run resumes a cached hash state), so no dense
array of the whole leaf is ever built.
Readers (zarr, moczarr) decode these objects exactly like zarr's own; the tests check both.
"""

from __future__ import annotations

import functools
import hashlib
import struct
import threading
from dataclasses import dataclass

import google_crc32c
import numba
import numpy as np
import zstandard

from zagg.hive.parts import Parts

ABSENT = 0xFFFFFFFFFFFFFFFF
ZSTD_LEVEL = 3


@dataclass
class EncodedArray:
    """The chunk objects of one array (``(chunk index, bytes-like)``) and its §5.2 digest."""

    objects: list[tuple[int, bytes]]
    digest: str
    seconds: float = 0.0  # how long encoding it took, where it was timed


class _Fill:
    """``n`` fill values of one dtype as bytes, and the sha256 states after each whole
    number of fill chunks (built on first use and shared by every leaf of this process:
    an array's leading run of fill-only chunks is then never hashed again)."""

    def __init__(self, dtype: np.dtype, fill, n: int, chunk_bytes: int):
        arr = np.full(n, fill, dtype=dtype)
        arr.flags.writeable = False
        self.bytes = memoryview(arr.view(np.uint8))
        self.chunk_bytes = chunk_bytes
        self.n_chunks = len(self.bytes) // chunk_bytes
        self._states = [hashlib.sha256()]
        self._lock = threading.Lock()

    def hasher_after(self, k: int):
        """A sha256 object that has consumed ``k`` fill chunks."""
        with self._lock:
            while len(self._states) <= k:
                h = self._states[-1].copy()
                h.update(self.bytes[: self.chunk_bytes])
                self._states.append(h)
            return self._states[k].copy()


@functools.lru_cache(maxsize=32)
def _fill(dtype_str: str, fill_repr: str, n: int, per: int) -> _Fill:
    dtype = np.dtype(dtype_str)
    fill = float(fill_repr) if dtype.kind == "f" else int(fill_repr)
    return _Fill(dtype, fill, n, per * dtype.itemsize)


def fill_of(dtype: np.dtype, fill, n: int, per: int) -> _Fill:
    """The shared :class:`_Fill` of ``n`` cells in chunks of ``per``."""
    value = float(fill) if dtype.kind == "f" else int(fill)
    return _fill(dtype.str, repr(value), n, per)


def _chunk_runs(ranks: np.ndarray, cells_per_chunk: int):
    """Touched chunk indices of ascending ``ranks`` and each chunk's bounds in ``ranks``."""
    k_of = ranks // cells_per_chunk
    starts = (
        np.flatnonzero(np.concatenate(([True], k_of[1:] != k_of[:-1])))
        if ranks.size
        else np.zeros(0, np.int64)
    )
    return k_of[starts], np.append(starts, ranks.size).astype(np.int64)


class _ChunkDigest:
    """sha256 of an array fed chunk by chunk in ascending order: touched chunks give their
    bytes, every chunk skipped in between hashes as fill (a leading run resumes a cached
    state)."""

    def __init__(self, fill: _Fill, first: int):
        self.fill = fill
        self.prev = first
        self.h = fill.hasher_after(first)

    def _fill_to(self, k: int) -> None:
        if k > self.prev:
            self.h.update(self.fill.bytes[: (k - self.prev) * self.fill.chunk_bytes])

    def add(self, k: int, piece) -> None:
        self._fill_to(k)
        self.h.update(piece)
        self.prev = k + 1

    def hexdigest(self) -> str:
        self._fill_to(self.fill.n_chunks)
        self.prev = self.fill.n_chunks
        return self.h.hexdigest()


def _stream_digest(touched, pieces, fill: _Fill) -> str:
    """sha256 over every chunk in order: a touched chunk's piece, else a chunk of fill."""
    touched = touched.tolist()
    digest = _ChunkDigest(fill, touched[0] if touched else fill.n_chunks)
    for k, piece in zip(touched, pieces, strict=True):
        digest.add(k, piece)
    return digest.hexdigest()


def encode_dense(
    ranks: np.ndarray, values: np.ndarray, fill, n: int, n_inner: int, sharded: bool
) -> EncodedArray:
    """Chunk objects and digest of a fixed-width array of ``n`` cells holding ``values``
    (little-endian, declared dtype) at ascending ``ranks`` and the fill elsewhere."""
    dtype = values.dtype
    per = n // n_inner
    touched, bounds = _chunk_runs(ranks, per)
    buf, block = _dense_block(touched.size, per, dtype, n_inner, sharded)
    block.fill(fill)
    if ranks.size:
        row = np.repeat(np.arange(touched.size), np.diff(bounds))
        block[row, ranks % per] = values
    return _dense_objects(buf, block, touched, fill, n, n_inner, sharded)


def encode_dense_chunks(
    touched: np.ndarray, fill_rows, dtype: np.dtype, fill, n: int, n_inner: int, sharded: bool
) -> EncodedArray:
    """:func:`encode_dense` of an array whose ``touched`` inner chunks (ascending) are
    written whole: ``fill_rows(block)`` writes chunk ``touched[t]``'s values into row t of
    ``block`` (``(touched.size, n // n_inner)`` of ``dtype``), in the object's own buffer,
    so values made chunk by chunk (the cell law's words) are never gathered from ranks."""
    buf, block = _dense_block(touched.size, n // n_inner, np.dtype(dtype), n_inner, sharded)
    fill_rows(block)
    return _dense_objects(buf, block, touched, fill, n, n_inner, sharded)


def _dense_block(count: int, per: int, dtype: np.dtype, n_inner: int, sharded: bool):
    """The buffer of a dense array's object(s) and the view of its ``count`` chunks as
    rows: the chunks are filled in place, in the shard object's own buffer when sharded
    (chunks, then the index and its crc), so the leaf's bytes are never copied again."""
    nbytes = per * dtype.itemsize  # one inner chunk
    buf = np.empty(count * nbytes + (16 * n_inner + 4 if sharded else 0), np.uint8)
    return buf, buf[: count * nbytes].view(dtype).reshape(count, per)


def _dense_objects(buf, block, touched, fill, n: int, n_inner: int, sharded: bool):
    """The objects and digest of a dense array whose ``touched`` chunks are ``block``'s
    rows (filled), in ``buf`` (see :func:`_dense_block`)."""
    dtype = block.dtype
    per = n // n_inner
    nbytes = per * dtype.itemsize
    digest = _stream_digest(touched, list(block), fill_of(dtype, fill, n, per))
    if not touched.size:
        return EncodedArray([], digest)
    if sharded:
        index = np.full((n_inner, 2), ABSENT, dtype="<u8")
        index[touched, 0] = np.arange(touched.size, dtype=np.uint64) * np.uint64(nbytes)
        index[touched, 1] = nbytes
        tail = buf[touched.size * nbytes :]
        tail[:-4] = index.reshape(-1).view(np.uint8)
        tail[-4:] = np.frombuffer(_crc(tail[:-4]), np.uint8)
        return EncodedArray([(0, buf)], digest)
    return EncodedArray(
        [(int(k), buf[t * nbytes : (t + 1) * nbytes]) for t, k in enumerate(touched)], digest
    )


@numba.njit(cache=True, nogil=True)
def _put(buf, at, value, width):
    """``value`` little-endian over ``width`` items of ``buf`` (bytes or u32 words)."""
    bits = 8 * buf.itemsize
    for b in range(width):
        buf[at + b] = (value >> (bits * b)) & ((1 << bits) - 1)


@numba.njit(cache=True, nogil=True)
def _vlen_buffers(
    ranks,
    offsets,
    data,
    per,
    touched,
    bounds,
    frame_at,
    hash_at,
    frames,
    stream,
    want_frames,
    want_stream,
):
    """Per touched chunk t: its §1.4 framing at ``frames[frame_at[t]:]`` (u32 cell count,
    u32 length ‖ payload per cell) and its §5.2 hash stream at ``stream[hash_at[t]:]``
    (u64 length ‖ payload per cell), each only when wanted. Both buffers arrive zeroed:
    empty cells are skipped. Buffers, positions and payload lengths are in units of
    ``data``'s item size (1 or 4 bytes: every length then is a multiple of 4 bytes and
    copies move whole words)."""
    w = max(frames.itemsize, stream.itemsize)
    for t in range(touched.size):
        first = touched[t] * per
        f = frame_at[t]
        if want_frames:
            _put(frames, f, per, 4 // w)
        f += 4 // w
        h = hash_at[t]
        prev = first
        for i in range(bounds[t], bounds[t + 1]):
            r = ranks[i]
            f += (4 // w) * (r - prev)
            h += (8 // w) * (r - prev)
            a = offsets[i]
            length = offsets[i + 1] - a
            if want_frames:
                _put(frames, f, length * w, 4 // w)
                for j in range(length):
                    frames[f + 4 // w + j] = data[a + j]
            if want_stream:
                _put(stream, h, length * w, 8 // w)
                for j in range(length):
                    stream[h + 8 // w + j] = data[a + j]
            f += 4 // w + length
            h += 8 // w + length
            prev = r + 1


@numba.njit(cache=True, nogil=True)
def _row_words(means, weights, data, row_at):
    """``data.size // 2`` t-digest rows from ``row_at`` on, interleaved from their float32
    columns into ``[mean, weight]`` words of the payload (weights None: all 1)."""
    mw = means.view(np.uint32)
    ww = weights.view(np.uint32) if weights is not None else mw
    one = np.array([1.0], dtype=np.float32).view(np.uint32)[0]
    for r in range(data.size // 2):
        data[2 * r] = mw[row_at + r]
        data[2 * r + 1] = one if weights is None else ww[row_at + r]


BATCH_BYTES = 16 * 2**20  # payload bytes framed and hashed per kernel call


def _ragged_batches(ranks, offsets, data, n: int, n_inner: int, rows, frames: bool, stream: bool):
    """Per touched inner chunk of a vlen array (see :func:`encode_ragged`), in ascending
    order: ``(chunk index, framing or None, hash stream or None)``, built a batch of
    about :data:`BATCH_BYTES` at a time."""
    per = n // n_inner
    touched, bounds = _chunk_runs(ranks, per)
    payload = offsets[bounds[1:]] - offsets[bounds[:-1]]
    frame_size = 4 + 4 * per + payload
    hash_size = 8 * per + payload
    # whole 4-byte words when every payload is (t-digest rows always are)
    words = rows is not None or (
        not np.any(offsets % 4) and data.size % 4 == 0 and data.view(np.uint32).flags.aligned
    )
    w = 4 if words else 1
    unit = np.uint32 if words else np.uint8
    t = 0
    while t < touched.size:
        end = t + 1  # one batch: chunks t:end, at least one whatever its size
        while end < touched.size and hash_size[t : end + 1].sum() <= BATCH_BYTES:
            end += 1
        frame_at = np.concatenate(([0], np.cumsum(frame_size[t:end]))).astype(np.int64)
        hash_at = np.concatenate(([0], np.cumsum(hash_size[t:end]))).astype(np.int64)
        fbuf = np.zeros(int(frame_at[-1]) if frames else 0, np.uint8)
        hbuf = np.zeros(int(hash_at[-1]) if stream else 0, np.uint8)
        b0, b1 = int(bounds[t]), int(bounds[end])
        if rows is None:
            src, at = data, offsets
        else:  # interleave this batch's digest rows only
            lo = int(offsets[b0])
            src = np.empty(int(offsets[b1]) - lo, np.uint8)
            _row_words(rows[0], rows[1], src.view(np.uint32), lo // 8)
            at = offsets - lo
        src = src.view(unit)
        src.flags.writeable = False  # read-only like stored data: one compiled copy
        _vlen_buffers(
            ranks,
            at // w,
            src,
            per,
            touched[t:end],
            bounds[t : end + 1],
            frame_at // w,
            hash_at // w,
            fbuf.view(unit),
            hbuf.view(unit),
            frames,
            stream,
        )
        for i in range(end - t):
            yield (
                int(touched[t + i]),
                fbuf[frame_at[i] : frame_at[i + 1]] if frames else None,
                hbuf[hash_at[i] : hash_at[i + 1]] if stream else None,
            )
        t = end


def encode_ragged(
    ranks: np.ndarray,
    offsets: np.ndarray,
    data: np.ndarray | None,
    n: int,
    n_inner: int,
    level: int = ZSTD_LEVEL,
    rows=None,
) -> EncodedArray:
    """Chunk objects and digest of a vlen array of ``n`` cells: cell ``ranks[i]`` holds
    ``data[offsets[i]:offsets[i+1]]``, every other cell is empty. ``rows = (means,
    weights)`` (float32 columns, weights None for all ones) replaces ``data`` by t-digest
    rows ``[mean, weight]``, interleaved a batch at a time. Sharded when the leaf has more
    than one inner chunk. Chunks are framed, hashed and compressed a batch at a time, so
    the working memory stays near :data:`BATCH_BYTES` however full the leaf."""
    per = n // n_inner
    fill = fill_of(np.dtype("<u8"), 0, n, per)
    digest = _ChunkDigest(fill, int(ranks[0]) // per if ranks.size else fill.n_chunks)
    zstd = zstandard.ZstdCompressor(level=level, write_checksum=False, write_content_size=True)
    chunks = []
    for k, frame, stream in _ragged_batches(ranks, offsets, data, n, n_inner, rows, True, True):
        digest.add(k, stream)
        chunks.append((k, zstd.compress(frame)))
    return EncodedArray(ragged_objects(chunks, n_inner), digest.hexdigest())


def encode_ragged_cells(cells, n: int, n_inner: int) -> EncodedArray:
    """:func:`encode_ragged` of :class:`~zagg.hive.cells.RaggedCells` (raw payloads) or
    :class:`~zagg.hive.cells.DigestRows` (t-digest columns)."""
    if hasattr(cells, "means"):
        return encode_ragged(
            cells.ranks, cells.offsets, None, n, n_inner, rows=(cells.means, cells.weights)
        )
    return encode_ragged(cells.ranks, cells.offsets, cells.data, n, n_inner)


def ragged_objects(chunks: list[tuple[int, bytes]], n_inner: int) -> list[tuple[int, bytes]]:
    """The stored objects of a vlen array from its compressed inner chunks (ascending): the
    chunk itself for a one-chunk leaf, else one shard object with its index."""
    if not chunks:
        return []
    if n_inner == 1:
        return [(0, chunks[0][1])]
    touched = np.fromiter((k for k, _ in chunks), dtype=np.int64, count=len(chunks))
    sizes = np.fromiter((len(c) for _, c in chunks), dtype=np.uint64, count=len(chunks))
    index = np.full((n_inner, 2), ABSENT, dtype="<u8")
    index[touched, 0] = np.concatenate(([0], np.cumsum(sizes)[:-1])).astype(np.uint64)
    index[touched, 1] = sizes
    return [(0, _shard_bytes([c for _, c in chunks], index))]


def _shard_bytes(chunks: list[bytes], index: np.ndarray) -> Parts:
    """The shard object: its chunks, then the index and the index's crc32c, as parts."""
    index_bytes = index.tobytes()
    return Parts([*chunks, index_bytes, _crc(index_bytes)])


def _crc(index_bytes) -> bytes:
    """The shard index's crc32c, little-endian."""
    return struct.pack("<I", google_crc32c.value(bytes(index_bytes)))
