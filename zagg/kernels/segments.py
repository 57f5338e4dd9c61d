"""Segmented kernels over cell-sorted runs: grouping points by cell, dense per-cell states,
and merging states of the same cell from several partial aggregates.

Grouping exploits what along-track data looks like: consecutive points usually share a
cell, so points are first cut into runs of equal cell word and only the runs are sorted.
Sums are kept in double-double (hi, lo) form: every partial sum is an exact error-free
transformation, so ``hi + lo`` rounds to the same float64 however the input was chunked
(exactly so while a cell's values span fewer than ~100 binary orders of magnitude).
"""

from __future__ import annotations

import numba as nb
import numpy as np

_U64 = np.uint64


@nb.njit(cache=True, nogil=True)
def _run_starts(keys):
    n = keys.shape[0]
    starts = np.empty(n, dtype=np.int64)
    r = 0
    for i in range(n):
        if i == 0 or keys[i] != keys[i - 1]:
            starts[r] = i
            r += 1
    return starts[:r]


@nb.njit(cache=True, nogil=True)
def _order_from_runs(keys, run_start, run_len, run_order, order, cells, offsets):
    """Concatenate runs in sorted order into ``order`` (point permutation); fills the cell
    keys and CSR offsets and returns the number of cells. Outputs are allocated by numpy,
    whose huge-page-aware allocator makes their first touch far cheaper."""
    pos = 0
    m = 0
    for k in range(run_order.shape[0]):
        r = run_order[k]
        s = run_start[r]
        key = keys[s]
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


def group_by_cell(cell_words: np.ndarray, cell_order: int):
    """Group points by cell word.

    Returns ``(order, cells, offsets)``: the permutation that lists points cell by cell
    (input order kept inside a cell), the sorted unique cell words and the CSR offsets of
    each cell's points in ``order``.
    """
    cell_words = np.ascontiguousarray(cell_words, dtype=_U64)
    if cell_words.size == 0:
        return (np.zeros(0, np.int64), np.zeros(0, _U64), np.zeros(1, np.int64))
    shift = 60 - 2 * cell_order
    keys = cell_words >> _U64(shift)  # rank: base prefix + tuples, monotone in the word
    run_start = _run_starts(keys)
    run_len = np.diff(np.append(run_start, keys.shape[0]))
    run_order = _sort_runs(keys[run_start], 4 + 2 * cell_order)
    order = np.empty(keys.shape[0], dtype=np.int64)
    ranks = np.empty(run_order.shape[0], dtype=keys.dtype)
    offsets = np.empty(run_order.shape[0] + 1, dtype=np.int64)
    m = _order_from_runs(keys, run_start, run_len, run_order, order, ranks, offsets)
    cells = (ranks[:m] << _U64(shift)) | _U64(cell_order)
    offsets = offsets[: m + 1]
    return order, cells, offsets


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


@nb.njit(cache=True, nogil=True)
def _dense_states(values, order, offsets, want_sum, want_sq, want_min, want_max,
                  count, s_hi, s_lo, q_hi, q_lo, vmin, vmax):
    m = offsets.shape[0] - 1
    for j in range(m):
        c = 0
        h = 0.0
        lo = 0.0
        qh = 0.0
        ql = 0.0
        mn = np.inf
        mx = -np.inf
        for i in range(offsets[j], offsets[j + 1]):
            # order None (values already cell-sorted) is resolved at compile time
            x = np.float64(values[i]) if order is None else np.float64(values[order[i]])
            if not np.isfinite(x):
                continue
            c += 1
            if want_sum:
                h, lo = _dd_add(h, lo, x, 0.0)
            if want_sq:
                p, e = _two_prod(x, x)
                qh, ql = _dd_add(qh, ql, p, e)
            if x < mn:
                mn = x
            if x > mx:
                mx = x
        count[j] = c
        if want_sum:
            s_hi[j] = h
            s_lo[j] = lo
        if want_sq:
            q_hi[j] = qh
            q_lo[j] = ql
        if want_min:
            vmin[j] = mn if c > 0 else np.nan
        if want_max:
            vmax[j] = mx if c > 0 else np.nan


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
    out = np.empty(int(sizes.sum()), dtype=src.dtype)
    _gather_runs(src, np.asarray(starts, np.int64), np.asarray(sizes, np.int64), out)
    return out


def segment_sums(x: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    """Sum of ``x[offsets[j]:offsets[j+1]]`` per segment (empty segments sum to 0)."""
    csum = np.concatenate(([0], np.cumsum(x, dtype=np.int64)))
    return csum[offsets[1:]] - csum[offsets[:-1]]


def dense_states(values, order, offsets, states) -> dict[str, np.ndarray]:
    """Per-cell states (a subset of count/sum/sumsq/min/max) of finite ``values``.

    ``values`` is in input order with ``order``/``offsets`` from :func:`group_by_cell`,
    or already in cell order (``values[order]``) with ``order=None``.
    """
    states = set(states)
    values = np.ascontiguousarray(values)
    if values.dtype.kind not in "fiu" or values.dtype.itemsize > 8:
        raise TypeError(f"cannot aggregate values of dtype {values.dtype}")
    m = offsets.shape[0] - 1

    def buf(name):
        return np.empty(m if name in states else 0)

    count = np.empty(m, np.int64)
    s_hi, s_lo, q_hi, q_lo = buf("sum"), buf("sum"), buf("sumsq"), buf("sumsq")
    vmin, vmax = buf("min"), buf("max")
    _dense_states(values, order, offsets, "sum" in states, "sumsq" in states, "min" in states,
                  "max" in states, count, s_hi, s_lo, q_hi, q_lo, vmin, vmax)
    out = {"count": count}
    if "sum" in states:
        out["sum_hi"], out["sum_lo"] = s_hi, s_lo
    if "sumsq" in states:
        out["sumsq_hi"], out["sumsq_lo"] = q_hi, q_lo
    if "min" in states:
        out["min"] = vmin
    if "max" in states:
        out["max"] = vmax
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
def _combine_dd(hi, lo, perm, offsets):
    m = offsets.shape[0] - 1
    out_hi = np.zeros(m)
    out_lo = np.zeros(m)
    for j in range(m):
        h = 0.0
        low = 0.0
        for i in range(offsets[j], offsets[j + 1]):
            k = perm[i]
            h, low = _dd_add(h, low, hi[k], lo[k])
        out_hi[j] = h
        out_lo[j] = low
    return out_hi, out_lo


@nb.njit(cache=True, nogil=True)
def _combine_extreme(x, perm, offsets, take_max):
    m = offsets.shape[0] - 1
    out = np.full(m, np.nan)
    for j in range(m):
        best = np.nan
        for i in range(offsets[j], offsets[j + 1]):
            v = x[perm[i]]
            if np.isnan(v):
                continue
            if np.isnan(best) or (v > best if take_max else v < best):
                best = v
        out[j] = best
    return out


def combine_states(states: dict[str, np.ndarray], perm, offsets) -> dict[str, np.ndarray]:
    """Merge state rows that belong to the same cell (rows ``perm[offsets[j]:offsets[j+1]]``)."""
    out = {}
    for name, x in states.items():
        if name.endswith("_lo"):
            continue
        if name.endswith("_hi"):
            base = name[:-3]
            out[name], out[base + "_lo"] = _combine_dd(x, states[base + "_lo"], perm, offsets)
        elif name in ("min", "max"):
            out[name] = _combine_extreme(x, perm, offsets, name == "max")
        elif x.ndim == 1:
            out[name] = _combine_sum_int(x, perm, offsets)
        else:  # per-cell vectors (composition lane counts)
            out[name] = np.add.reduceat(x[perm], offsets[:-1], axis=0)
    return out


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
