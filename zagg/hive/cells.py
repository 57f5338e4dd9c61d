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

from dataclasses import dataclass

import numpy as np


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
        """Each cell's payload as a ``bytes`` object, in an object array (what a user sees
        in a Dataset; the writer never needs them)."""
        return _sliced(self.data, self.offsets)


def _sliced(data: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    """The byte strings ``data[offsets[i]:offsets[i+1]]`` as an object array."""
    n = len(offsets) - 1
    if not n:
        return np.empty(0, dtype=object)
    buf = np.ascontiguousarray(data).tobytes()
    bounds = (np.asarray(offsets, np.int64) - int(offsets[0])).tolist()
    return np.fromiter(
        map(buf.__getitem__, map(slice, bounds[:-1], bounds[1:])), dtype=object, count=n
    )


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
    cell that is not plain ``bytes`` into bytes (or raises). ``None`` is an empty cell."""
    items = np.asarray(cells, dtype=object).reshape(-1).tolist()
    plain = [c if type(c) is bytes else payload(i, c) for i, c in enumerate(items)]
    lengths = np.fromiter(map(len, plain), dtype=np.int64, count=len(plain))
    filled = np.flatnonzero(lengths)
    data = np.frombuffer(b"".join(plain[i] for i in filled.tolist()), dtype=np.uint8)
    offsets = np.concatenate(([0], np.cumsum(lengths[filled]))).astype(np.int64)
    return RaggedCells(filled.astype(np.int64), offsets, data)


def to_dense(cells: DenseCells, n: int, dtype: np.dtype, fill) -> np.ndarray:
    """The dense array of ``n`` cells (fill where no value)."""
    out = np.full(n, fill, dtype=dtype)
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
