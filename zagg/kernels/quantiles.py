"""Quantiles and CDFs of many t-digests at once, straight from their payload bytes.

A block's payloads (spec §2.1: float32 ``[mean, weight]`` rows, ascending by mean) are
joined into one buffer and evaluated by :mod:`zagg.kernels.tdigest`'s compiled passes on
float32 views of it: no per-cell Python, no float64 copy of the rows. The interpolation:
centroid ``i`` sits at 0-based rank ``C_i + w_i/2 − 1/2``; ranks between centroids are
interpolated linearly and clamped to the extreme means, which on a loss-free digest is numpy's
``quantile(..., method="hazen")``. The CDF is its inverse. An empty cell gives NaN.
"""

from __future__ import annotations

import numpy as np

from zagg.kernels.tdigest import segment_cdfs, segment_quantiles

ROW_BYTES = 8  # one float32 mean and one float32 weight


def rows_of(payloads: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(rows (k, 2) float32, offsets (m + 1,) int64)`` of a flat object array of
    payloads (``bytes``; ``None`` or ``b""`` is an empty digest)."""
    items = [b"" if p is None else p for p in payloads.tolist()]
    lengths = np.fromiter(map(len, items), dtype=np.int64, count=len(items))
    if np.any(lengths % ROW_BYTES):
        bad = int(np.flatnonzero(lengths % ROW_BYTES)[0])
        raise ValueError(
            f"t-digest payload {bad} holds {lengths[bad]} bytes, not whole "
            "(mean, weight) float32 rows"
        )
    offsets = np.zeros(len(items) + 1, dtype=np.int64)
    np.cumsum(lengths // ROW_BYTES, out=offsets[1:])
    rows = np.frombuffer(b"".join(items), dtype="<f4").reshape(-1, 2)
    return rows, offsets


def quantiles(payloads: np.ndarray, qs: np.ndarray) -> np.ndarray:
    """``(m, len(qs))`` float64 quantiles of ``m`` payloads; NaN for empty digests."""
    rows, offsets = rows_of(payloads)
    out = np.empty((offsets.size - 1, qs.size), dtype=np.float64)
    segment_quantiles(rows[:, 0], rows[:, 1], offsets, np.asarray(qs, np.float64), out)
    return out


def cdfs(payloads: np.ndarray, xs: np.ndarray) -> np.ndarray:
    """``(m, len(xs))`` float64 cumulative fractions at ``xs``; NaN for empty digests."""
    rows, offsets = rows_of(payloads)
    out = np.empty((offsets.size - 1, xs.size), dtype=np.float64)
    segment_cdfs(rows[:, 0], rows[:, 1], offsets, np.asarray(xs, np.float64), out)
    return out
