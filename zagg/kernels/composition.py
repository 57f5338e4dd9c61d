"""zagg-composition/1 words: packing photons into per-cell composition words, and merging.

A composition word is one uint64 per cell holding eight 8-bit lanes, LSB byte first (lane
``i`` at bits ``8i .. 8i+7``), each a quantized fraction of the cell's signal stratum: five
per-surface marginals (signal photons whose confidence for that surface clears the
threshold) and three absolute level lanes (strongest confidence exactly 2 / 3 / 4).

Quantization is ``round_half_even(255 * c / N)`` clipped to 0..255 with a presence floor
(any nonzero count gives at least 1), so ``lane > 0`` means "occurred" exactly at every N
and through every merge. All rounding here is done in integer arithmetic, which makes the
results exact and the k-way merge byte-identical under any permutation of its parts.

Weights ``n`` are integer photon counts; a float weight (a digest's float32 total) is
rounded half-even to the nearest integer, as the spec prescribes for the fold's divisor.
"""

from __future__ import annotations

import numba as nb
import numpy as np

COMPOSITION_SPEC = "zagg-composition/1"
LANES = ("land", "ocean", "sea_ice", "land_ice", "inland_water", "low", "med", "high")
N_LANES = len(LANES)
N_SURFACES = 5
# Absolute confidence levels counted by lanes 5, 6, 7 (never renumbered by the threshold).
LEVELS = (2, 3, 4)

_U8 = np.uint64(8)
_MASK = np.uint64(0xFF)


def composition_attrs(of: str, threshold: int) -> dict:
    """The §3.3 ``composition`` attrs block; ``spec`` and ``lanes`` are writer constants."""
    if not isinstance(of, str) or not of:
        raise ValueError(f"composition 'of' must name the signal digest field, got {of!r}")
    if not isinstance(threshold, int) or isinstance(threshold, bool):
        raise ValueError(f"composition threshold must be an int, got {threshold!r}")
    return {"spec": COMPOSITION_SPEC, "lanes": list(LANES), "of": of, "threshold": threshold}


# ----------------------------------------------------------------------- numba core


@nb.njit(cache=True, nogil=True)
def _lane(num, den):
    """round_half_even(num / den) clipped to 0..255, floored to 1 when num > 0 (den > 0)."""
    if num <= 0:
        return 0
    if num >= 255 * den:
        return 255
    q = num // den
    r2 = 2 * (num - q * den)
    if r2 > den or (r2 == den and (q & 1) == 1):
        q += 1
    return q if q > 0 else 1


@nb.njit(cache=True, nogil=True)
def _quantize(count, n):
    out = np.empty(count.shape[0], dtype=np.uint8)
    for i in range(count.shape[0]):
        out[i] = _lane(255 * count[i], n[i]) if n[i] > 0 else 0
    return out


@nb.njit(cache=True, nogil=True)
def _pack_counts(cnt, n):
    """Word from eight lane counts over a stratum of ``n`` photons (0 when n <= 0)."""
    w = np.uint64(0)
    if n <= 0:
        return w
    for i in range(8):
        w |= np.uint64(_lane(255 * cnt[i], n)) << np.uint64(8 * i)
    return w


@nb.njit(cache=True, nogil=True)
def _pack_cells(conf, offsets, threshold, mask, use_mask):
    # Branch-free counting: a surface clearing the threshold implies the photon is signal,
    # so only n and the level lanes need the signal test.
    m = offsets.shape[0] - 1
    words = np.zeros(m, dtype=np.uint64)
    n_signal = np.zeros(m, dtype=np.int64)
    cnt = np.zeros(8, dtype=np.int64)
    for c in range(m):
        n = c0 = c1 = c2 = c3 = c4 = low = med = high = 0
        for j in range(offsets[c], offsets[c + 1]):
            if use_mask and not mask[j]:
                continue
            a, b, d, e, f = conf[j, 0], conf[j, 1], conf[j, 2], conf[j, 3], conf[j, 4]
            top = max(max(max(a, b), max(d, e)), f)
            sig = top >= threshold
            n += sig
            c0 += a >= threshold
            c1 += b >= threshold
            c2 += d >= threshold
            c3 += e >= threshold
            c4 += f >= threshold
            low += sig & (top == 2)
            med += sig & (top == 3)
            high += sig & (top == 4)
        cnt[0], cnt[1], cnt[2], cnt[3] = c0, c1, c2, c3
        cnt[4], cnt[5], cnt[6], cnt[7] = c4, low, med, high
        n_signal[c] = n
        words[c] = _pack_counts(cnt, n)
    return words, n_signal


@nb.njit(cache=True, nogil=True)
def _lane_counts(conf, order, offsets, threshold, rows):
    m = offsets.shape[0] - 1
    counts = np.zeros((m, 8), dtype=np.int64)
    n_rows = np.zeros(m, dtype=np.int64)
    for c in range(m):
        for j in range(offsets[c], offsets[c + 1]):
            k = order[j]
            if not rows[k]:
                continue
            n_rows[c] += 1
            top = conf[k, 0]
            for s in range(5):
                v = conf[k, s]
                if v > top:
                    top = v
                if v >= threshold:
                    counts[c, s] += 1
            if top >= threshold and 2 <= top <= 4:
                counts[c, 3 + top] += 1
    return counts, n_rows


def lane_counts(conf, order, offsets, threshold: int, rows):
    """Exact per-cell lane counts and stratum size from photon rows.

    ``conf`` is the ``(n, 5)`` confidence rows in input order, ``order``/``offsets`` group
    them by cell, ``rows`` (bool, input order) selects the stratum the word describes. The
    stratum size — the second result — is every selected row, so it equals the weight of a
    digest built over the same rows; lanes 0–4 count rows whose surface confidence clears
    ``threshold``, lanes 5–7 signal rows whose strongest confidence is 2 / 3 / 4. Counts
    are summed across partials and quantized once by :func:`compose`.
    """
    conf = np.ascontiguousarray(conf)
    if conf.ndim != 2 or conf.shape[1] != N_SURFACES or conf.dtype.kind not in "iu":
        raise ValueError(f"conf must be an (n, 5) integer array, got {conf.dtype} {conf.shape}")
    return _lane_counts(
        conf,
        np.asarray(order, np.int64),
        np.asarray(offsets, np.int64),
        np.int64(threshold),
        np.ascontiguousarray(rows, dtype=np.bool_),
    )


@nb.njit(cache=True, nogil=True)
def _compose(counts, n):
    out = np.empty(counts.shape[0], dtype=np.uint64)
    for c in range(counts.shape[0]):
        out[c] = _pack_counts(counts[c], n[c])
    return out


@nb.njit(cache=True, nogil=True)
def _fold(words, n, start, stop):
    """k-way §3.4 fold of parts ``start..stop``: quantize(Σ nᵢ·laneᵢ / Σ nᵢ) per lane."""
    total = 0
    acc = np.zeros(8, dtype=np.int64)
    for j in range(start, stop):
        if n[j] <= 0:
            continue
        total += n[j]
        w = words[j]
        for i in range(8):
            acc[i] += n[j] * np.int64((w >> np.uint64(8 * i)) & _MASK)
    w = np.uint64(0)
    if total > 0:
        for i in range(8):
            w |= np.uint64(_lane(acc[i], total)) << np.uint64(8 * i)
    return w, total


@nb.njit(cache=True, nogil=True)
def _merge_kway(words, n, offsets):
    m = offsets.shape[0] - 1
    out = np.empty(m, dtype=np.uint64)
    n_total = np.empty(m, dtype=np.int64)
    for c in range(m):
        out[c], n_total[c] = _fold(words, n, offsets[c], offsets[c + 1])
    return out, n_total


@nb.njit(cache=True, nogil=True)
def _merge2(wa, na, wb, nb_):
    out = np.empty(wa.shape[0], dtype=np.uint64)
    n_out = np.empty(wa.shape[0], dtype=np.int64)
    pair_w = np.empty(2, dtype=np.uint64)
    pair_n = np.empty(2, dtype=np.int64)
    for k in range(wa.shape[0]):
        if na[k] <= 0:
            out[k], n_out[k] = wb[k], nb_[k]
        elif nb_[k] <= 0:
            out[k], n_out[k] = wa[k], na[k]
        else:
            pair_w[0], pair_w[1] = wa[k], wb[k]
            pair_n[0], pair_n[1] = na[k], nb_[k]
            out[k], n_out[k] = _fold(pair_w, pair_n, 0, 2)
    return out, n_out


# --------------------------------------------------------------------- public API


def _as_counts(x, name: str) -> np.ndarray:
    """Integer counts as int64; a float array is accepted only when integral."""
    a = np.asarray(x)
    if a.dtype.kind in "iub":
        return a.astype(np.int64)
    if a.dtype.kind == "f":
        if not np.all(np.isfinite(a)) or not np.all(a == np.rint(a)):
            raise ValueError(f"{name} must hold integer counts, got non-integral floats")
        return a.astype(np.int64)
    raise ValueError(f"{name} must be an integer array, got dtype {a.dtype}")


def _as_weights(x, name: str) -> np.ndarray:
    """Stratum weights as int64; float weights are rounded half-even (non-finite refused)."""
    a = np.asarray(x)
    if a.dtype.kind in "iub":
        return a.astype(np.int64)
    if a.dtype.kind == "f":
        if not np.all(np.isfinite(a)):
            raise ValueError(f"{name} must be finite")
        return np.rint(a).astype(np.int64)
    raise ValueError(f"{name} must be numeric, got dtype {a.dtype}")


def _as_words(x, name: str = "words") -> np.ndarray:
    a = np.asarray(x)
    if a.dtype.kind == "u" or (a.dtype.kind == "i" and (a.size == 0 or a.min() >= 0)):
        return a.astype(np.uint64)
    raise ValueError(f"{name} must be non-negative integers (uint64 words), got {a.dtype}")


def _as_offsets(offsets, n_rows: int) -> np.ndarray:
    off = np.ascontiguousarray(offsets, dtype=np.int64)
    if off.ndim != 1 or off.size < 1:
        raise ValueError("offsets must be a 1-D CSR offsets array of length m + 1")
    if off[0] != 0 or off[-1] != n_rows or np.any(np.diff(off) < 0):
        raise ValueError(f"offsets must rise from 0 to {n_rows} without decreasing")
    return off


def quantize(count, n):
    """Lane value(s) ``round_half_even(255·count/n)`` clipped to 0..255, presence-floored.

    Any ``count > 0`` gives at least 1; ``n <= 0`` (empty stratum) gives 0. Broadcasts;
    returns uint8 (a scalar for scalar inputs).
    """
    c, w = np.broadcast_arrays(_as_counts(count, "count"), _as_weights(n, "n"))
    out = _quantize(np.ascontiguousarray(c).ravel(), np.ascontiguousarray(w).ravel())
    return out.reshape(c.shape) if c.ndim else out[0]


def pack_cells(conf, offsets, threshold: int, select=None):
    """Composition words from photons grouped by cell — ``(words uint64[m], n_signal int64[m])``.

    ``conf`` is the ``(n, 5)`` signal_conf_ph rows (land, ocean, sea_ice, land_ice,
    inland_water) grouped by cell with CSR ``offsets`` (length m + 1). A photon is signal
    when its strongest confidence is ``>= threshold``; ``n_signal`` counts those. ``select``
    is an optional boolean row mask (e.g. a where-predicate's result): unselected rows are
    treated as absent. A cell without signal photons packs to 0.
    """
    conf = np.ascontiguousarray(conf)
    if conf.ndim != 2 or conf.shape[1] != N_SURFACES or conf.dtype.kind not in "iu":
        raise ValueError(f"conf must be an (n, 5) integer array, got {conf.dtype} {conf.shape}")
    if isinstance(threshold, bool) or not isinstance(threshold, int | np.integer):
        raise ValueError(f"threshold must be an int, got {threshold!r}")
    off = _as_offsets(offsets, conf.shape[0])
    if select is None:
        mask, use_mask = np.ones(0, dtype=np.bool_), False
    else:
        mask = np.ascontiguousarray(select)
        if mask.dtype != np.bool_ or mask.shape != (conf.shape[0],):
            raise ValueError(f"select must be a bool mask of length {conf.shape[0]}")
        use_mask = True
    return _pack_cells(conf, off, np.int64(threshold), mask, use_mask)


def compose(counts, n_signal) -> np.ndarray:
    """Words from per-lane counts ``(m, 8)`` over strata of ``n_signal`` ``(m,)`` photons."""
    c = np.ascontiguousarray(_as_counts(counts, "counts"))
    if c.ndim != 2 or c.shape[1] != N_LANES:
        raise ValueError(f"counts must be (m, 8), got {c.shape}")
    n = np.ascontiguousarray(np.broadcast_to(_as_weights(n_signal, "n_signal"), c.shape[:1]))
    return _compose(c, n)


def pack(lanes) -> np.ndarray:
    """Words from already-quantized lanes ``(m, 8) uint8`` — the inverse of :func:`unpack`."""
    a = np.asarray(lanes)
    if a.ndim != 2 or a.shape[1] != N_LANES or a.dtype != np.uint8:
        raise ValueError(f"lanes must be an (m, 8) uint8 array, got {a.dtype} {a.shape}")
    shifts = np.arange(N_LANES, dtype=np.uint64) * _U8
    return np.bitwise_or.reduce(a.astype(np.uint64) << shifts, axis=1)


def unpack(words) -> np.ndarray:
    """Lanes ``(m, 8) uint8`` of words ``(m,)``; lane i is bits 8i..8i+7."""
    w = np.atleast_1d(_as_words(words)).ravel()
    shifts = np.arange(N_LANES, dtype=np.uint64) * _U8
    return ((w[:, None] >> shifts) & _MASK).astype(np.uint8)


def counts(words, n_signal) -> np.ndarray:
    """Recovered lane counts ``round(k·N/255)`` as ``(m, 8) int64`` (exact for N <= 254).

    ``k·N/255`` is never a tie (255 is odd), so the rounding mode cannot matter; the
    division is done in integers. ``N <= 0`` recovers zeros.
    """
    k = unpack(words).astype(np.int64)
    n = np.maximum(np.broadcast_to(_as_weights(n_signal, "n_signal"), k.shape[:1]), 0)
    return (2 * k * n[:, None] + 255) // 510


def merge(word_a, n_a, word_b, n_b):
    """Binary §3.4 merge of ``(word, n)`` pairs — ``(word, n)``; broadcasts over arrays.

    Each lane is quantize((n_a·a + n_b·b) / (n_a + n_b)), floored to 1 where either lane is
    nonzero. A pair with ``n <= 0`` returns the other pair unchanged; (0, 0) is the identity.
    """
    arrays = np.broadcast_arrays(
        _as_words(word_a, "word_a"),
        _as_weights(n_a, "n_a"),
        _as_words(word_b, "word_b"),
        _as_weights(n_b, "n_b"),
    )
    shape = arrays[0].shape
    flat = [np.ascontiguousarray(a).ravel() for a in arrays]
    w, n = _merge2(*flat)
    if not shape:
        return w[0], n[0]
    return w.reshape(shape), n.reshape(shape)


def merge_kway(words, n, offsets):
    """k-way §3.4 merge over CSR groups of parts — ``(words uint64[m], n_total int64[m])``.

    Per group, lane = quantize(Σ nᵢ·laneᵢ / Σ nᵢ) with the presence floor, quantized once;
    parts with ``n <= 0`` are skipped and an all-empty group folds to (0, 0). Integer sums
    make the result identical for any order of the parts.
    """
    w = np.ascontiguousarray(_as_words(words)).ravel()
    nn = np.ascontiguousarray(_as_weights(n, "n")).ravel()
    if nn.shape != w.shape:
        raise ValueError(f"n has {nn.size} parts, words has {w.size}")
    return _merge_kway(w, nn, _as_offsets(offsets, w.shape[0]))
