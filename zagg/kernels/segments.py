"""Segmented kernels over cell-sorted runs: grouping points by cell, dense per-cell states,
and merging states of the same cell from several partial aggregates.

Grouping exploits what along-track data looks like: consecutive points usually share a
cell, so points are first cut into runs of equal cell word and only the runs are sorted.
Sums are kept in double-double (hi, lo) form: every partial sum is an exact error-free
transformation, so ``hi + lo`` rounds to the same float64 however the input was chunked
(exactly so while a cell's values and sums span fewer than 106 − log2(points in the cell)
binary orders of magnitude, ~85 for a chunk of 2^20 points).
"""

from __future__ import annotations

from dataclasses import dataclass

import numba as nb
import numpy as np

_U64 = np.uint64
_WORDS = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}


@nb.njit(cache=True, nogil=True)
def _runs(words, shift, starts, keys):
    """Cut ``words`` into runs of equal ``words >> shift`` (the cell rank) in one pass:
    each run's first index into ``starts`` and its rank into ``keys``; returns the count."""
    r = 0
    prev = np.uint64(0)
    for i in range(words.shape[0]):
        k = words[i] >> shift
        if i == 0 or k != prev:
            starts[r] = i
            keys[r] = k
            r += 1
            prev = k
    return r


@nb.njit(cache=True, nogil=True)
def _order_from_runs(run_keys, run_start, run_len, run_order, order, cells, offsets):
    """Concatenate runs in sorted order into ``order`` (point permutation); fills the cell
    keys and CSR offsets and returns the number of cells. Outputs are allocated by numpy,
    whose huge-page-aware allocator makes their first touch far cheaper."""
    pos = 0
    m = 0
    for k in range(run_order.shape[0]):
        r = run_order[k]
        s = run_start[r]
        key = run_keys[r]
        if m == 0 or key != cells[m - 1]:
            cells[m] = key
            offsets[m] = pos
            m += 1
        for i in range(s, s + run_len[r]):
            order[pos] = i
            pos += 1
    offsets[m] = pos
    return m


def _sort_runs(run_keys: np.ndarray, key_bits: int) -> np.ndarray:
    """Indices that sort run keys ascending, ties in input order.

    When the key's significant bits and the run index fit one uint64 together, the pair is
    packed and sorted with a plain (SIMD) ``np.sort``, several times faster than argsort.
    """
    m = run_keys.shape[0]
    idx_bits = max(int(m - 1).bit_length(), 1)
    if key_bits + idx_bits <= 64:
        packed = (run_keys << _U64(idx_bits)) | np.arange(m, dtype=_U64)
        packed.sort()
        return (packed & _U64((1 << idx_bits) - 1)).astype(np.int64)
    return np.argsort(run_keys, kind="stable")


@dataclass
class Grouping:
    """Points grouped by cell.

    ``cells`` are the sorted unique cell words and ``offsets`` their CSR bounds in cell
    order. Kernels address cell j's points as ``x[starts[j]:starts[j] + size_j]`` of
    ``addressed(x)``: when every cell's points form one contiguous run of the input (usual
    for along-track data) that is the input itself, with no permutation built or applied;
    otherwise ``order`` lists the points cell by cell (input order kept inside a cell) and
    arrays are gathered through it. ``runs`` and ``run_cells`` list the runs of equal cell
    word in input order (first point, cell word), what the grouping was made of.
    """

    cells: np.ndarray
    offsets: np.ndarray
    starts: np.ndarray
    order: np.ndarray | None
    #: the runs of equal cell in input order: each one's first point and its cell word
    runs: np.ndarray = None
    run_cells: np.ndarray = None

    @property
    def sizes(self) -> np.ndarray:
        return np.diff(self.offsets)

    def addressed(self, x: np.ndarray) -> np.ndarray:
        """``x`` (one entry per input point) as the kernels address it with ``starts``."""
        return x if self.order is None else x[self.order]

    def contiguous(self, x: np.ndarray) -> np.ndarray:
        """``x`` in cell order, each cell's points contiguous (``offsets`` bounds)."""
        if self.order is None:
            return gather_runs(x, self.starts, self.sizes)
        return x[self.order]

    def permutation(self) -> np.ndarray:
        """The point permutation that lists points cell by cell."""
        return self.contiguous(np.arange(int(self.offsets[-1]), dtype=np.int64))


def group_cells(cell_words: np.ndarray, cell_order: int) -> Grouping:
    """Group points by cell word (see :class:`Grouping`)."""
    cell_words = np.ascontiguousarray(cell_words, dtype=_U64)
    if cell_words.size == 0:
        empty, words = np.zeros(0, np.int64), np.zeros(0, _U64)
        return Grouping(words, np.zeros(1, np.int64), empty, None, empty, words)
    shift = 60 - 2 * cell_order  # word >> shift: the cell's rank, monotone in the word
    n = cell_words.shape[0]
    starts, keys = np.empty(n, np.int64), np.empty(n, _U64)  # only the first r get touched
    r = _runs(cell_words, _U64(shift), starts, keys)
    run_start, run_keys = starts[:r].copy(), keys[:r].copy()
    del starts, keys
    run_len = np.diff(np.append(run_start, n))
    run_cells = (run_keys << _U64(shift)) | _U64(cell_order)
    run_order = _sort_runs(run_keys, 4 + 2 * cell_order)
    ranks = run_keys[run_order]
    if ranks.size < 2 or bool(np.all(ranks[1:] != ranks[:-1])):  # one run per cell
        starts = run_start[run_order]
        offsets = np.zeros(ranks.size + 1, np.int64)
        np.cumsum(run_len[run_order], out=offsets[1:])
        return Grouping(run_cells[run_order], offsets, starts, None, run_start, run_cells)
    order = np.empty(n, dtype=np.int64)
    ranks = np.empty(run_order.shape[0], dtype=_U64)
    offsets = np.empty(run_order.shape[0] + 1, dtype=np.int64)
    m = _order_from_runs(run_keys, run_start, run_len, run_order, order, ranks, offsets)
    offsets = offsets[: m + 1]
    cells = (ranks[:m] << _U64(shift)) | _U64(cell_order)
    return Grouping(cells, offsets, offsets[:-1], order, run_start, run_cells)


@nb.njit(cache=True, inline="always")
def _two_sum(a, b):
    s = a + b
    bb = s - a
    return s, (a - (s - bb)) + (b - bb)


@nb.njit(cache=True, inline="always")
def _fast_two_sum(a, b):
    s = a + b
    return s, b - (s - a)


@nb.njit(cache=True, inline="always")
def _split(a):
    c = 134217729.0 * a  # Dekker split, 2**27 + 1
    hi = c - (c - a)
    return hi, a - hi


@nb.njit(cache=True, inline="always")
def _two_prod(a, b):
    p = a * b
    ah, al = _split(a)
    bh, bl = _split(b)
    return p, ((ah * bh - p) + ah * bl + al * bh) + al * bl


@nb.njit(cache=True, inline="always")
def _dd_add(hi, lo, x_hi, x_lo):
    s, e = _two_sum(hi, x_hi)
    e += lo + x_lo
    return _fast_two_sum(s, e)


@nb.njit(cache=True, inline="always")
def _accumulate(hi, lo, x, x_lo):
    """Add ``x + x_lo`` to an unnormalised (hi, lo) running sum: ``hi`` takes the rounded
    sum and ``lo`` collects the exact rounding errors, so the only dependency from one
    point to the next is one add per word (a renormalising :func:`_dd_add` chains seven).
    ``_two_sum(hi, lo)`` normalises the pair once the cell is done; the result is the exact
    sum while ``lo``'s own additions stay exact (see the module docstring)."""
    s = hi + x
    bb = s - hi
    return s, lo + (((hi - (s - bb)) + (x - bb)) + x_lo)


@nb.njit(cache=True, nogil=True)
def _count_finite(values, starts, offsets, out):
    for j in range(offsets.shape[0] - 1):
        c = 0
        a = starts[j]
        for i in range(a, a + offsets[j + 1] - offsets[j]):
            c += np.isfinite(np.float64(values[i]))
        out[j] = c


@nb.njit(cache=True, nogil=True)
def _dd_sums(values, starts, offsets, squares, out):
    for j in range(offsets.shape[0] - 1):
        h = 0.0
        lo = 0.0
        a = starts[j]
        for i in range(a, a + offsets[j + 1] - offsets[j]):
            x = np.float64(values[i])
            if not np.isfinite(x):
                continue
            if squares:
                p, e = _two_prod(x, x)
                h, lo = _accumulate(h, lo, p, e)
            else:
                h, lo = _accumulate(h, lo, x, 0.0)
        out[j, 0], out[j, 1] = _two_sum(h, lo)


@nb.njit(cache=True, nogil=True)
def _extremes(values, starts, offsets, take_max, out):
    for j in range(offsets.shape[0] - 1):
        c = 0
        best = -np.inf if take_max else np.inf
        a = starts[j]
        for i in range(a, a + offsets[j + 1] - offsets[j]):
            x = np.float64(values[i])
            if not np.isfinite(x):
                continue
            c += 1
            z = x + 0.0  # -0.0 → 0.0, so which zero is kept never depends on the order
            # branch-free: a running extreme's updates are unpredictable
            best = max(best, z) if take_max else min(best, z)
        out[j] = best if c > 0 else np.nan


@nb.njit(cache=True, nogil=True)
def _gather_runs(src, starts, sizes, out):
    pos = 0
    for k in range(starts.shape[0]):
        a = starts[k]
        for j in range(sizes[k]):
            out[pos + j] = src[a + j]
        pos += sizes[k]


def gather_runs(src: np.ndarray, starts: np.ndarray, sizes: np.ndarray) -> np.ndarray:
    """Concatenation of ``src[starts[k]:starts[k] + sizes[k]]`` over k, without an index
    array (the output is allocated by numpy)."""
    src = np.ascontiguousarray(src)
    out = np.empty(int(sizes.sum()), dtype=src.dtype)
    # moved as unsigned words of the element's width: one compiled copy per width, not
    # per dtype (float64, int64 and uint64 rows share one)
    unit = _WORDS.get(src.dtype.itemsize) if src.ndim == 1 else None
    a, b = (src, out) if unit is None else (src.view(unit), out.view(unit))
    _gather_runs(a, np.asarray(starts, np.int64), np.asarray(sizes, np.int64), b)
    return out


def segment_sums(x: np.ndarray, offsets: np.ndarray, starts=None) -> np.ndarray:
    """Sum of segment j of integer ``x`` per segment (empty segments sum to 0): segment j
    is ``x[starts[j]:starts[j] + offsets[j+1] - offsets[j]]`` (``starts`` defaults to
    ``offsets[:-1]``, contiguous segments)."""
    starts = offsets[:-1] if starts is None else starts
    csum = np.concatenate(([0], np.cumsum(x, dtype=np.int64)))
    return csum[starts + np.diff(offsets)] - csum[starts]


def _checked(values, starts, offsets):
    values = np.ascontiguousarray(values)
    if values.dtype.kind not in "fiub" or values.dtype.itemsize > 8:
        raise TypeError(f"cannot aggregate values of dtype {values.dtype}")
    starts = offsets[:-1] if starts is None else np.asarray(starts, np.int64)
    return values, starts


def count_finite(values, starts, offsets) -> np.ndarray:
    """Per cell, how many of its values are finite. Cell j's values are
    ``values[starts[j]:starts[j] + offsets[j+1] - offsets[j]]`` (see :class:`Grouping`);
    ``starts=None`` means contiguous segments, ``offsets[:-1]``."""
    values, starts = _checked(values, starts, offsets)
    out = np.empty(offsets.shape[0] - 1, np.int64)
    _count_finite(values, starts, offsets, out)
    return out


def dd_sums(values, starts, offsets, squares: bool = False) -> np.ndarray:
    """Per cell, the double-double sum ``[hi, lo]`` of its finite values (of their squares
    with ``squares``), addressed as :func:`count_finite`."""
    values, starts = _checked(values, starts, offsets)
    out = np.empty((offsets.shape[0] - 1, 2))
    _dd_sums(values, starts, offsets, bool(squares), out)
    return out


def extremes(values, starts, offsets, take_max: bool) -> np.ndarray:
    """Per cell, the max (or min) of its finite values, NaN where there is none; -0.0
    counts as 0.0. Addressed as :func:`count_finite`."""
    values, starts = _checked(values, starts, offsets)
    out = np.empty(offsets.shape[0] - 1)
    _extremes(values, starts, offsets, bool(take_max), out)
    return out


@nb.njit(cache=True, nogil=True)
def _combine_sum_int(x, perm, offsets):
    m = offsets.shape[0] - 1
    out = np.zeros(m, x.dtype)
    for j in range(m):
        acc = x[perm[offsets[j]]] * 0
        for i in range(offsets[j], offsets[j + 1]):
            acc += x[perm[i]]
        out[j] = acc
    return out


@nb.njit(cache=True, nogil=True)
def _combine_dd(dd, perm, offsets):
    m = offsets.shape[0] - 1
    out = np.zeros((m, 2))
    for j in range(m):
        h = 0.0
        low = 0.0
        for i in range(offsets[j], offsets[j + 1]):
            k = perm[i]
            h, low = _dd_add(h, low, dd[k, 0], dd[k, 1])
        out[j, 0] = h
        out[j, 1] = low
    return out


@nb.njit(cache=True, nogil=True)
def _combine_extreme(x, perm, offsets, take_max):
    """NaN-skipping max (or min) of the rows of each cell; NaN where every row is NaN.
    Branch-free: which row holds a running extreme is unpredictable."""
    m = offsets.shape[0] - 1
    out = np.empty(m)
    worst = -np.inf if take_max else np.inf
    for j in range(m):
        best = worst
        seen = False
        for i in range(offsets[j], offsets[j + 1]):
            v = np.float64(x[perm[i]])
            ok = v == v
            seen |= ok
            v = v if ok else worst
            best = max(best, v) if take_max else min(best, v)
        out[j] = best if seen else np.nan
    return out


def combine_sum(rows: np.ndarray, perm, offsets) -> np.ndarray:
    """Integer sums of the rows of each cell (rows ``perm[offsets[j]:offsets[j+1]]``); rows
    may be vectors (composition lane counts)."""
    if rows.ndim == 1:
        return _combine_sum_int(rows, perm, offsets)
    if offsets.shape[0] < 2:
        return np.zeros((0, *rows.shape[1:]), rows.dtype)
    return np.add.reduceat(rows[perm], offsets[:-1], axis=0)


def combine_dd(dd: np.ndarray, perm, offsets) -> np.ndarray:
    """Double-double sums ``(m, 2)`` of the ``[hi, lo]`` rows of each cell."""
    return _combine_dd(np.ascontiguousarray(dd, np.float64), perm, offsets)


def combine_extreme(rows: np.ndarray, perm, offsets, take_max: bool) -> np.ndarray:
    """NaN-skipping max (or min) of the rows of each cell; NaN where all are NaN."""
    return _combine_extreme(rows, perm, offsets, bool(take_max))


@nb.njit(cache=True, nogil=True)
def _dd_variance(n, s_hi, s_lo, q_hi, q_lo, ddof):
    m = n.shape[0]
    out = np.full(m, np.nan)
    for j in range(m):
        c = n[j]
        if c - ddof <= 0:
            continue
        # n*Q - S*S in double-double, then one rounding division
        nq_hi, nq_lo = _two_prod(q_hi[j], np.float64(c))
        nq_lo += q_lo[j] * c
        ss_hi, ss_lo = _two_prod(s_hi[j], s_hi[j])
        ss_lo += 2.0 * s_hi[j] * s_lo[j]
        d_hi, d_lo = _dd_add(nq_hi, nq_lo, -ss_hi, -ss_lo)
        v = (d_hi + d_lo) / (np.float64(c) * np.float64(c - ddof))
        out[j] = v if v > 0.0 else 0.0
    return out


def dd_variance(count, s_hi, s_lo, q_hi, q_lo, ddof=0) -> np.ndarray:
    """Variance from double-double sums (NaN where count <= ddof)."""
    return _dd_variance(np.asarray(count, np.int64), s_hi, s_lo, q_hi, q_lo, int(ddof))


def group_sorted(keys: np.ndarray):
    """Stable grouping of possibly repeated keys: ``(perm, unique_keys, offsets)``."""
    keys = np.asarray(keys)
    perm = np.argsort(keys, kind="stable")
    sk = keys[perm]
    if sk.size == 0:
        return perm, sk, np.zeros(1, np.int64)
    starts = np.flatnonzero(np.concatenate(([True], sk[1:] != sk[:-1])))
    offsets = np.append(starts, sk.size).astype(np.int64)
    return perm, sk[starts], offsets
