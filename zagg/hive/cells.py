"""A leaf's contents as its occupied cells only: the writer's working representation.

A leaf holds ``4**(c - p)`` cells, but a shard's data usually touches a small fraction of
them. The writer therefore works from, per array, the ascending ranks of the cells that
hold something other than the fill and those cells' values; everything else is the fill by
definition. Encoding, hashing and coverage are then O(occupied inner chunks) plus the
spec-mandated hash of the fill, never a pass over a materialised dense array.

- :class:`DenseCells`: ranks and values (declared dtype, little-endian, one NaN pattern);
- :class:`RaggedCells`: ranks and their payload bytes, CSR style (``offsets`` into ``data``);
  :class:`DigestRows` keeps t-digest payloads as their float32 mean/weight columns.

Dense numpy/object arrays convert to and from this form (:func:`dense_cells`,
:func:`ragged_cells`, :func:`to_dense`, :func:`to_objects`).
"""

from __future__ import annotations

import pickle
from dataclasses import dataclass

import numba
import numpy as np

from zagg.filled import filled
from zagg.hive import encode


@dataclass
class DenseCells:
    """Non-fill cells of a fixed-width array: ``values[i]`` sits at rank ``ranks[i]``."""

    ranks: np.ndarray  # int64, strictly ascending
    values: np.ndarray  # the declared dtype, little-endian

    def __len__(self) -> int:
        return int(self.ranks.size)


@dataclass
class RaggedCells:
    """Non-empty cells of a vlen array: cell ``ranks[i]`` holds ``data[offsets[i]:offsets[i+1]]``."""

    ranks: np.ndarray  # int64, strictly ascending
    offsets: np.ndarray  # int64 byte offsets, len(ranks) + 1, offsets[0] == 0
    data: np.ndarray  # uint8, the payloads back to back

    def __len__(self) -> int:
        return int(self.ranks.size)

    @property
    def lengths(self) -> np.ndarray:
        return np.diff(self.offsets)

    def payloads(self) -> np.ndarray:
        """Each cell's payload as a ``bytes`` object, in an object array.

        Making a Python object per cell is most of a shard's finalize and holds the GIL, so
        the objects are made in one C-level pass: the payloads are framed as a pickle of a
        tuple of byte strings (:func:`_pickled_payloads`) and unpickled, which takes about
        a quarter off a dense shard's finalize against slicing a ``bytes`` copy per cell.
        """
        n = len(self.offsets) - 1
        size = int(self.offsets[-1] - self.offsets[0]) if n else 0
        stream = np.empty(len(PICKLE_HEAD) + 5 * n + size + len(PICKLE_TAIL), np.uint8)
        return unpickled_items(stream, self._pickle_into(stream), n)

    def _pickle_into(self, stream: np.ndarray) -> int:
        return _pickled_payloads(self.data, self.offsets, stream)


PICKLE_HEAD = bytes([0x80, 4, 0x28])  # PROTO 4, MARK
PICKLE_TAIL = bytes([0x74, 0x2E])  # TUPLE, STOP
SHORT_BINBYTES, BINBYTES = 0x43, 0x42  # length in 1 byte / 4 little-endian bytes


@numba.njit(cache=True, nogil=True, inline="always")
def _item_header(out, o, n):
    """Opcode and length of one byte string of ``n`` bytes at ``out[o:]``; returns the
    position of its first byte."""
    if n < 256:
        out[o] = SHORT_BINBYTES
        out[o + 1] = n
        return o + 2
    out[o] = BINBYTES
    for b in range(4):
        out[o + 1 + b] = (n >> (8 * b)) & 0xFF
    return o + 5


def unpickled_items(stream: np.ndarray, end: int, n: int) -> np.ndarray:
    """The ``n`` byte strings of the pickle ``stream[:end]`` (framed by the kernels below),
    as an object array."""
    return np.fromiter(pickle.loads(stream[:end]), dtype=object, count=n)


@numba.njit(cache=True, nogil=True)
def empty_items(out, o, per):
    """Append ``per`` empty byte strings to the pickle stream ``out[o:]``."""
    for _ in range(per):
        o = _item_header(out, o, 0)
    return o


@numba.njit(cache=True, nogil=True)
def _pickled_payloads(data, offsets, out):
    """Write into ``out`` a protocol-4 pickle of the tuple of byte strings
    ``data[offsets[i]:offsets[i + 1]]`` (the opcodes are those of :mod:`pickletools`:
    PROTO, MARK, SHORT_BINBYTES or BINBYTES per item, TUPLE, STOP); returns its length.
    ``out`` holds at least 5 + 5 * items + payload bytes."""
    out[0:3] = np.frombuffer(PICKLE_HEAD, np.uint8)
    o = 3
    for i in range(offsets.size - 1):
        a = offsets[i]
        n = offsets[i + 1] - a
        o = _item_header(out, o, n)
        out[o : o + n] = data[a : a + n]
        o += n
    out[o : o + 2] = np.frombuffer(PICKLE_TAIL, np.uint8)
    return o + 2


@numba.njit(cache=True, nogil=True)
def _pickled_rows(mean_bytes, weight_bytes, unit, offsets, out):
    """:func:`_pickled_payloads` of t-digest rows interleaved on the fly from the float32
    columns' bytes (``unit``: every weight is 1 and ``weight_bytes`` holds one 1.0), so the
    interleaved payloads are never made as a whole."""
    out[0:3] = np.frombuffer(PICKLE_HEAD, np.uint8)
    o = 3
    for i in range(offsets.size - 1):
        a = offsets[i]
        o = _item_header(out, o, offsets[i + 1] - a)
        for r in range(a // 8, offsets[i + 1] // 8):
            w = 0 if unit else 4 * r
            for b in range(4):
                out[o + b] = mean_bytes[4 * r + b]
                out[o + 4 + b] = weight_bytes[w + b]
            o += 8
    out[o : o + 2] = np.frombuffer(PICKLE_TAIL, np.uint8)
    return o + 2


class DigestRows(RaggedCells):
    """t-digest cells kept as their centroid columns: cell ``ranks[i]`` holds rows
    ``offsets[i] // 8 : offsets[i + 1] // 8`` of little-endian float32 ``[mean, weight]``
    (``weights`` None: every weight is 1). The payload bytes are only interleaved chunk by
    chunk while writing, never for the whole leaf at once."""

    def __init__(self, ranks, row_offsets, means, weights=None):
        self.ranks = np.asarray(ranks, dtype=np.int64)
        self.offsets = np.asarray(row_offsets, dtype=np.int64) * 8
        self.means = np.ascontiguousarray(means, dtype="<f4")
        self.weights = None if weights is None else np.ascontiguousarray(weights, dtype="<f4")

    def _pickle_into(self, stream: np.ndarray) -> int:
        unit = self.weights is None
        weights = np.ones(1, "<f4") if unit else self.weights
        return _pickled_rows(self.means.view(np.uint8), weights.view(np.uint8), unit,
                             self.offsets, stream)

    @property
    def data(self) -> np.ndarray:
        rows = np.empty((self.means.size, 2), dtype="<f4")
        rows[:, 0] = self.means
        rows[:, 1] = 1.0 if self.weights is None else self.weights
        return rows.reshape(-1).view(np.uint8)


def digest_rows(ranks, offsets, means, weights=None) -> DigestRows:
    """The non-empty subset of CSR digests at ``ranks`` (ascending)."""
    offsets = np.asarray(offsets, dtype=np.int64)
    lo, hi = int(offsets[0]), int(offsets[-1])
    means = np.asarray(means)[lo:hi]
    weights = None if weights is None else np.asarray(weights)[lo:hi]
    offsets = offsets - lo
    keep = np.diff(offsets) > 0
    ranks = np.asarray(ranks, dtype=np.int64)
    if not keep.all():
        ranks = ranks[keep]
        offsets = np.concatenate(([0], np.cumsum(np.diff(offsets)[keep])))
    return DigestRows(ranks, offsets, means, weights)


def non_fill(values: np.ndarray, fill) -> np.ndarray:
    """Mask of the values that differ from the fill (NaN fill: the non-NaN values)."""
    if values.dtype.kind == "f" and isinstance(fill, float) and np.isnan(fill):
        return ~np.isnan(values)
    return values != values.dtype.type(fill)


def canonical(values: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """``values`` at the little-endian declared dtype with one NaN bit pattern (the one the
    NaN fill decodes to); copies only when needed."""
    values = np.ascontiguousarray(values).astype(dtype.newbyteorder("<"), copy=False)
    if values.dtype.kind == "f":
        nan = np.isnan(values)
        if nan.any():
            bits = values.view(f"u{values.itemsize}")
            pattern = np.array(np.nan, dtype=values.dtype).view(f"u{values.itemsize}")
            if (bits[nan] != pattern).any():
                values = values.copy()
                values[nan] = np.nan
    return values


def dense_cells(ranks: np.ndarray, values: np.ndarray, dtype: np.dtype, fill) -> DenseCells:
    """The non-fill subset of ``values`` at ``ranks`` (ascending), canonicalised."""
    values = canonical(values, dtype)
    keep = non_fill(values, fill)
    ranks = np.asarray(ranks, dtype=np.int64)
    if not keep.all():
        ranks, values = ranks[keep], values[keep]
    return DenseCells(ranks, values)


def dense_from_array(values: np.ndarray, dtype: np.dtype, fill) -> DenseCells:
    """The non-fill cells of a dense array of every cell."""
    values = canonical(values, dtype)
    ranks = np.flatnonzero(non_fill(values, fill))
    return DenseCells(ranks.astype(np.int64), values[ranks])


def ragged_cells(ranks: np.ndarray, offsets: np.ndarray, data: np.ndarray) -> RaggedCells:
    """The non-empty subset of CSR payloads at ``ranks`` (ascending)."""
    ranks = np.asarray(ranks, dtype=np.int64)
    offsets = np.asarray(offsets, dtype=np.int64)
    data = np.ascontiguousarray(data).reshape(-1).view(np.uint8)
    if offsets.size and offsets[0] != 0:
        data = data[offsets[0] : offsets[-1]]
        offsets = offsets - offsets[0]
    lengths = np.diff(offsets)
    keep = lengths > 0
    if not keep.all():
        ranks = ranks[keep]
        offsets = np.concatenate(([0], np.cumsum(lengths[keep]))).astype(np.int64)
    return RaggedCells(ranks, offsets, data)


def ragged_from_objects(cells: np.ndarray, payload) -> RaggedCells:
    """The non-empty cells of an object array of payloads; ``payload(i, cell)`` turns a
    cell that is not plain ``bytes`` into bytes (or raises)."""
    cells = np.ascontiguousarray(cells, dtype=object)
    filled = np.flatnonzero(encode.object_pointers(cells) != encode.EMPTY_BYTES_ID)
    items = cells[filled].tolist()
    if items and set(map(type, items)) != {bytes}:
        items = [payload(int(i), c) for i, c in zip(filled, items, strict=True)]
    lengths = np.fromiter(map(len, items), dtype=np.int64, count=len(items))
    keep = lengths > 0
    if not keep.all():
        filled, lengths = filled[keep], lengths[keep]
        items = [c for c, k in zip(items, keep, strict=True) if k]
    data = np.frombuffer(b"".join(items), dtype=np.uint8)
    offsets = np.concatenate(([0], np.cumsum(lengths))).astype(np.int64)
    return RaggedCells(filled.astype(np.int64), offsets, data)


def to_dense(cells: DenseCells, n: int, dtype: np.dtype, fill) -> np.ndarray:
    """The dense array of ``n`` cells (fill where no value)."""
    out = filled(n, dtype, fill)  # pages no cell writes cost no memory
    out[cells.ranks] = cells.values
    return out


def to_objects(cells: RaggedCells, n: int) -> np.ndarray:
    """The object array of ``n`` cells (``b""`` where empty)."""
    out = np.empty(n, dtype=object)
    out.fill(b"")  # several times faster than np.full for object arrays
    if len(cells):
        out[cells.ranks] = cells.payloads()
    return out


def occupied_ranks(arrays, n: int) -> np.ndarray:
    """Ascending ranks of the cells (of ``n``) any of ``arrays`` (Dense/RaggedCells)
    occupies."""
    parts = [a.ranks for a in arrays if len(a)]
    if not parts:
        return np.zeros(0, np.int64)
    if len(parts) == 1:
        return parts[0]
    if sum(p.size for p in parts) < n // 64:  # few cells: merging beats a pass over n
        return np.unique(np.concatenate(parts))
    mask = np.zeros(n, dtype=bool)
    for p in parts:
        mask[p] = True
    return np.flatnonzero(mask)


class BlockedRagged(RaggedCells):
    """A vlen array written from blocks (runs of whole inner chunks, ascending) whose chunk
    objects were compressed beforehand, one block per task: ``blocks`` are the blocks'
    cells (all :class:`RaggedCells` or all :class:`DigestRows`), ``chunks`` the compressed
    chunk objects ``(inner chunk index, bytes)`` of them all. The payloads stay in their
    blocks; ``ranks`` and ``offsets`` describe the whole array for checks and coverage."""

    def __init__(self, blocks: list, chunks: list):
        self.blocks = [b for b in blocks if len(b)]
        self.chunks = sorted(chunks, key=lambda kc: kc[0])
        self.ranks = (
            np.concatenate([b.ranks for b in self.blocks]) if self.blocks else np.zeros(0, np.int64)
        )
        lengths = [np.diff(b.offsets) for b in self.blocks]
        self.offsets = np.concatenate(
            ([0], np.cumsum(np.concatenate(lengths))) if lengths else ([0],)
        ).astype(np.int64)


def join_cells(blocks: list):
    """One array's cells from its blocks' (ascending, disjoint ranks), as one object of the
    blocks' own kind."""
    blocks = list(blocks)
    if len(blocks) == 1:
        return blocks[0]
    ranks = np.concatenate([b.ranks for b in blocks])
    if isinstance(blocks[0], DenseCells):
        return DenseCells(ranks, np.concatenate([b.values for b in blocks]))
    lengths = np.concatenate([np.diff(b.offsets) for b in blocks])
    if isinstance(blocks[0], DigestRows):
        rows = np.concatenate(([0], np.cumsum(lengths // 8))).astype(np.int64)
        means = np.concatenate([b.means[: b.offsets[-1] // 8] for b in blocks])
        unit = all(b.weights is None for b in blocks)
        weights = (
            None
            if unit
            else np.concatenate(
                [
                    np.ones(b.offsets[-1] // 8, "<f4")
                    if b.weights is None
                    else b.weights[: b.offsets[-1] // 8]
                    for b in blocks
                ]
            )
        )
        return DigestRows(ranks, rows, means, weights)
    offsets = np.concatenate(([0], np.cumsum(lengths))).astype(np.int64)
    return RaggedCells(ranks, offsets, np.concatenate([b.data[: b.offsets[-1]] for b in blocks]))
