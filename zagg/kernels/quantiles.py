"""Quantiles and CDFs of many t-digests at once, straight from their payload bytes.

A block's payloads (spec §2.1: float32 ``[mean, weight]`` rows, ascending by mean) are
joined into one buffer and evaluated by one compiled pass: no per-cell Python, no float64
copy of the rows. The interpolation is :mod:`zagg.kernels.tdigest`'s: centroid ``i`` sits
at 0-based rank ``C_i + w_i/2 − 1/2``; ranks between centroids are interpolated linearly
and clamped to the extreme means, which on a loss-free digest is numpy's
``quantile(..., method="hazen")``. The CDF is its inverse. An empty cell gives NaN.
"""

from __future__ import annotations

import math

import numba
import numpy as np

ROW_BYTES = 8  # one float32 mean and one float32 weight


def rows_of(payloads: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(rows (k, 2) float32, offsets (m + 1,) int64)`` of a flat object array of
    payloads (``bytes``; ``None`` or ``b""`` is an empty digest)."""
    items = [b"" if p is None else p for p in payloads.tolist()]
    lengths = np.fromiter(map(len, items), dtype=np.int64, count=len(items))
    if np.any(lengths % ROW_BYTES):
        bad = int(np.flatnonzero(lengths % ROW_BYTES)[0])
        raise ValueError(f"t-digest payload {bad} holds {lengths[bad]} bytes, not whole "
                         "(mean, weight) float32 rows")
    offsets = np.zeros(len(items) + 1, dtype=np.int64)
    np.cumsum(lengths // ROW_BYTES, out=offsets[1:])
    rows = np.frombuffer(b"".join(items), dtype="<f4").reshape(-1, 2)
    return rows, offsets


def quantiles(payloads: np.ndarray, qs: np.ndarray) -> np.ndarray:
    """``(m, len(qs))`` float64 quantiles of ``m`` payloads; NaN for empty digests."""
    rows, offsets = rows_of(payloads)
    out = np.empty((offsets.size - 1, qs.size), dtype=np.float64)
    _quantiles(rows, offsets, np.asarray(qs, np.float64), out)
    return out


def cdfs(payloads: np.ndarray, xs: np.ndarray) -> np.ndarray:
    """``(m, len(xs))`` float64 cumulative fractions at ``xs``; NaN for empty digests."""
    rows, offsets = rows_of(payloads)
    out = np.empty((offsets.size - 1, xs.size), dtype=np.float64)
    _cdfs(rows, offsets, np.asarray(xs, np.float64), out)
    return out


@numba.njit(cache=True, nogil=True)
def _positions(rows, a, k, pos):
    """Centroid positions in 0-based rank space; returns the total weight."""
    c = 0.0
    for i in range(k):
        w = np.float64(rows[a + i, 1])
        pos[i] = c + 0.5 * w - 0.5
        c += w
    return c


@numba.njit(cache=True, nogil=True)
def _longest(offsets):
    best = 0
    for s in range(offsets.size - 1):
        best = max(best, offsets[s + 1] - offsets[s])
    return best


@numba.njit(cache=True, nogil=True)
def _quantiles(rows, offsets, q, out):
    pos = np.empty(max(_longest(offsets), 1), np.float64)
    for s in range(offsets.size - 1):
        a = offsets[s]
        k = offsets[s + 1] - a
        if k == 0:
            out[s, :] = np.nan
            continue
        total = _positions(rows, a, k, pos)
        for j in range(q.size):
            r = (total * q[j] + 0.5) - 1.0
            if math.isnan(r):
                out[s, j] = np.nan
            elif r <= pos[0]:
                out[s, j] = rows[a, 0]
            elif r >= pos[k - 1]:
                out[s, j] = rows[a + k - 1, 0]
            else:
                i = np.searchsorted(pos[:k], r, side="right") - 1
                g = (r - pos[i]) / (pos[i + 1] - pos[i])
                lo = np.float64(rows[a + i, 0])
                hi = np.float64(rows[a + i + 1, 0])
                d = hi - lo
                out[s, j] = hi - d * (1.0 - g) if g >= 0.5 else lo + d * g


@numba.njit(cache=True, nogil=True)
def _cdfs(rows, offsets, x, out):
    n = max(_longest(offsets), 1)
    pos = np.empty(n, np.float64)
    seg = np.empty(n, np.float64)
    for s in range(offsets.size - 1):
        a = offsets[s]
        k = offsets[s + 1] - a
        if k == 0:
            out[s, :] = np.nan
            continue
        total = _positions(rows, a, k, pos)
        for i in range(k):
            seg[i] = rows[a + i, 0]
        for j in range(x.size):
            v = x[j]
            if math.isnan(v):
                out[s, j] = np.nan
            elif v < seg[0]:
                out[s, j] = 0.0
            elif v > seg[k - 1]:
                out[s, j] = 1.0
            else:
                lo = np.searchsorted(seg[:k], v, side="left")
                hi = np.searchsorted(seg[:k], v, side="right")
                if hi > lo:  # v equals one or more centroid means: middle of the tie group
                    p = 0.5 * (pos[lo] + pos[hi - 1])
                else:
                    i = lo - 1
                    p = pos[i] + (v - seg[i]) / (seg[i + 1] - seg[i]) * (pos[i + 1] - pos[i])
                out[s, j] = (p + 0.5) / total
