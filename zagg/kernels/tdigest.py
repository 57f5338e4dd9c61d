"""Per-cell t-digests over CSR-style segments.

Payload contract: one cell's digest is the raw bytes of a little-endian, C-order float32
array of shape (k, 2) with rows ``[mean, weight]`` sorted ascending by mean; weights are
observation counts summing to the number of finite values; an empty cell is ``b""``.
While a cell holds ``n <= delta`` observations the digest is loss-free (one weight-1
centroid per value); above that it is compressed with Dunning's merging t-digest under the
k1 scale function ``k(q) = delta / (2 pi) * asin(2 q - 1)``.

Those are "counts" digests (spec §2.0). Given per-observation ``weights``, :func:`build`
makes "flux" digests instead: the loss-free regime is still keyed on the observation count,
and compression positions observations by cumulative weight. :func:`build` and
:func:`merge` can also report which input rows formed each output centroid (the basis of
the location channel in :mod:`zagg.kernels.located`).

Segments are given by ``offsets`` (int64, length m + 1): segment i is
``[offsets[i], offsets[i + 1])``. Kernels compute in float64; payloads round to float32,
which keeps centroid weights exact up to 2**24 observations each. Because a payload is just
rows of centroids, ``b"".join`` of several payloads of one cell is itself a valid (unsorted)
centroid list, ready for :func:`merge`.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

from zagg.kernels import networks
from zagg.kernels.constants import DEFAULT_DELTA

WEIGHTS_DECLARATIONS = ("counts", "flux")  # spec §2.0; absent means "counts"

# build sorts segments of up to _SHORT values inside the kernel; longer ones are sorted by the
# wrapper with numpy, whose SIMD sort beats any numba sort even with a python loop over them.
_SHORT = 64
# a zero typed int64 from the start: a literal 0 (a counter's first value, an argument)
# would make numba compile a second specialization of every kernel it reaches
_ZERO = np.int64(0)
_EIGHT = np.int64(8)
_SIXTEEN = np.int64(16)
PAYLOAD_DTYPE = np.dtype("<f4")
_ROW_BYTES = 2 * PAYLOAD_DTYPE.itemsize


# ---------------------------------------------------------------------------------------
# numba kernels
# ---------------------------------------------------------------------------------------


@njit(cache=True, nogil=True)
def weight_limit(before, total, delta):
    """Largest cumulative weight a centroid starting at ``before`` may reach (k1 scale)."""
    k0 = delta / (2.0 * math.pi) * math.asin(2.0 * before / total - 1.0)
    arg = (k0 + 1.0) * (2.0 * math.pi / delta)
    if arg >= 0.5 * math.pi:
        return total
    return 0.5 * total * (1.0 + math.sin(arg))


@njit(cache=True, nogil=True)
def _compress(m, w, n, total, delta, out_m, out_w, pos, starts, base):
    """Greedy single-pass k1 merge of ``n`` centroids sorted by mean into ``out[pos:]``.

    A centroid absorbs the next one while its right edge stays within one k-unit of its left
    edge. Returns the new write position. Unless ``starts`` is None, ``starts[c]`` receives
    ``base`` plus the input row at which output centroid c begins, so a centroid's members
    are the input rows up to the next start (the None check is resolved at compile time).
    """
    before = 0.0
    cur_w = w[0]
    cur_s = m[0] * w[0]
    lo = m[0]
    hi = m[0]
    limit = weight_limit(before, total, delta)
    if starts is not None:
        starts[pos] = base
    for i in range(1, n):
        wi = w[i]
        if before + cur_w + wi <= limit:
            cur_w += wi
            cur_s += m[i] * wi
            hi = m[i]
        else:
            out_m[pos] = min(max(cur_s / cur_w, lo), hi)
            out_w[pos] = cur_w
            pos += 1
            if starts is not None:
                starts[pos] = base + i
            before += cur_w
            limit = weight_limit(before, total, delta)
            cur_w = wi
            cur_s = m[i] * wi
            lo = m[i]
            hi = m[i]
    out_m[pos] = min(max(cur_s / cur_w, lo), hi)
    out_w[pos] = cur_w
    return pos + 1


@njit(cache=True, nogil=True)
def _max_segment(offsets):
    """Length of the longest segment (sizes the scratch buffers)."""
    longest = 0
    for s in range(offsets.size - 1):
        longest = max(longest, offsets[s + 1] - offsets[s])
    return longest


@njit(cache=True, nogil=True)
def _small_sort(src, n, dst, base, keys):
    """Sort ``src[:n]`` into ``dst[base:base + n]`` (n <= _SHORT; float32 values held as
    float64, no NaN, no -0.0; ``src`` holds at least 16 slots and its tail past n is
    overwritten; ``keys`` is scratch of _SHORT int64).

    Up to 16 values (most cells) go through a branch-free sorting network padded with +inf;
    larger ones scatter each value to its rank, an O(n^2) count that vectorises and avoids
    insertion sort's mispredictions, as fast as a 32-wide network at these sizes, which
    would cost seconds to compile. The count compares one int64 key per value: the float32
    bits made monotone in the value, with the value's index below them, so keys are distinct
    and ties rank in input order.
    """
    if n <= 16:
        networks.sort_up_to_16(src, dst, base, n, np.inf)
        return
    for k in range(n):
        b = np.int64(np.float32(src[k]).view(np.int32))
        b ^= (b >> 31) & 0x7FFFFFFF  # negative floats: larger magnitude, smaller key
        keys[k] = (b << 6) | k
    for k in range(n):
        x = keys[k]
        r = 0
        for j in range(n):
            r += keys[j] < x
        dst[base + r] = src[k]


@njit(cache=True, nogil=True)
def _build(values, starts, offsets, delta, out_m, out_w, out_off):
    """Kernel of :func:`build` over float32 values; segment s is ``values[starts[s]:]`` of
    length ``offsets[s + 1] - offsets[s]``, and segments longer than ``_SHORT`` arrive
    already sorted. Writes centroids to ``out_m``/``out_w`` and segment bounds to
    ``out_off``; returns the number of centroids. ``out_w=None`` promises that no segment
    holds more than ``delta`` values: every weight is then 1 and none is written.
    ``out_m`` holds 16 slots more than the values: a segment of up to 16 finite values (most
    cells) is loaded, sorted and written whole by a network (+inf past its end, which the
    next segment overwrites), with no branch on its length.
    """
    out_off[0] = 0
    longest = _max_segment(offsets)
    big = longest if longest > min(_SHORT, delta) else 0
    buf = np.empty(big, np.float64)
    ones = np.ones(big, np.float64)
    small = np.empty(_SHORT, np.float64)
    keys = np.empty(_SHORT, np.int64)
    nv = values.shape[0]
    pos = _ZERO
    for s in range(offsets.size - 1):
        a = starts[s]
        length = offsets[s + 1] - offsets[s]
        n = _ZERO
        bad = 1
        if 0 < length <= min(16, delta) and a + 16 <= nv:
            bad = 0
            for j in range(16):
                x = np.float64(values[a + j]) + 0.0
                inside = j < length
                small[j] = x if inside else np.inf
                bad += inside & (not math.isfinite(x))
        if bad == 0:
            if length <= 8:
                networks.sort8(small, out_m, pos, _EIGHT)
            else:
                networks.sort16(small, out_m, pos, _SIXTEEN)
            if out_w is not None:
                for i in range(length):
                    out_w[pos + i] = 1.0
            pos += length
        elif length <= _SHORT:
            for j in range(a, a + length):  # branch-free filter; + 0.0 turns -0.0 into 0.0
                x = np.float64(values[j]) + 0.0
                small[n] = x
                n += math.isfinite(x)
            if n <= delta:  # loss-free: sort straight into the output
                _small_sort(small, n, out_m, pos, keys)
                if out_w is not None:
                    for i in range(n):
                        out_w[pos + i] = 1.0
                pos += n
            elif out_w is not None:
                _small_sort(small, n, buf, _ZERO, keys)
                pos = _compress(buf, ones, n, float(n), delta, out_m, out_w, pos, None, _ZERO)
        else:
            for j in range(a, a + length):
                x = np.float64(values[j]) + 0.0
                if math.isfinite(x):
                    buf[n] = x
                    n += 1
            if n <= delta:
                for i in range(n):
                    out_m[pos + i] = buf[i]
                if out_w is not None:
                    for i in range(n):
                        out_w[pos + i] = 1.0
                pos += n
            elif out_w is not None:
                pos = _compress(buf, ones, n, float(n), delta, out_m, out_w, pos, None, _ZERO)
        out_off[s + 1] = pos
    return pos


@njit(cache=True, nogil=True)
def _sort_runs(m, w, n, tm, tw, bounds, idx, ti, track):
    """Stable sort of rows ``(m, w)[:n]`` by mean, in place, by merging ascending runs.

    A merge input is a few concatenated sorted digests, so this costs O(n log runs).
    ``tm``/``tw``/``bounds`` are scratch of length >= n (bounds >= n + 1). With ``track``,
    ``idx`` is permuted along with the rows (``ti`` is its scratch); both are arrays either
    way, so the kernel compiles once.
    """
    nb = 1
    bounds[0] = 0
    for i in range(1, n):
        if m[i] < m[i - 1]:
            bounds[nb] = i
            nb += 1
    bounds[nb] = n
    src_m, src_w, dst_m, dst_w = m, w, tm, tw
    src_i, dst_i = idx, ti
    swapped = False
    while nb > 1:
        k = 0
        for r in range(0, nb, 2):
            lo = bounds[r]
            mid = bounds[r + 1]
            hi = bounds[r + 2] if r + 1 < nb else mid
            i, j = lo, mid
            for o in range(lo, hi):
                if j >= hi or (i < mid and src_m[i] <= src_m[j]):
                    dst_m[o] = src_m[i]
                    dst_w[o] = src_w[i]
                    if track:
                        dst_i[o] = src_i[i]
                    i += 1
                else:
                    dst_m[o] = src_m[j]
                    dst_w[o] = src_w[j]
                    if track:
                        dst_i[o] = src_i[j]
                    j += 1
            bounds[k] = lo
            k += 1
        bounds[k] = n
        nb = k
        src_m, src_w, dst_m, dst_w = dst_m, dst_w, src_m, src_w
        src_i, dst_i = dst_i, src_i
        swapped = not swapped
    if swapped:
        for i in range(n):
            m[i] = tm[i]
            w[i] = tw[i]
            if track:
                idx[i] = ti[i]


@njit(cache=True, nogil=True)
def _emit(m, w, n, total, loss_free, delta, out_m, out_w, pos, starts, kept):
    """Write one sorted segment ``(m, w)[:n]`` at ``out[pos:]``: as it is when
    ``loss_free``, else k1-compressed. Unless ``starts`` is None it records each centroid's
    first member position (from ``kept``). Returns the new write position."""
    if loss_free:
        for i in range(n):
            out_m[pos + i] = m[i]
            out_w[pos + i] = w[i]
            if starts is not None:
                starts[pos + i] = kept + i
        return pos + n
    return _compress(m, w, n, total, delta, out_m, out_w, pos, starts, kept)


@njit(cache=True, nogil=True)
def _merge(means, weights, offsets, delta, flux, out_m, out_w, out_off, members, starts):
    """Kernel of :func:`merge`, writing like :func:`_build`; returns the number of centroids.

    ``flux`` selects the flux rules: ties in mean ordered by weight, loss-free while a
    segment has at most ``delta`` rows (instead of total weight). Unless ``members`` is None,
    it receives the sorted input row indices and ``starts`` each centroid's first position
    in it (see :func:`_compress`).
    """
    out_off[0] = 0
    longest = _max_segment(offsets)
    bm = np.empty(longest, np.float64)
    bw = np.empty(longest, np.float64)
    tm = np.empty(longest, np.float64)
    tw = np.empty(longest, np.float64)
    bounds = np.empty(longest + 1, np.int64)
    bi = np.empty(longest if members is not None else 0, np.int64)
    ti = np.empty(bi.size, np.int64)
    track = bi.size > 0
    pos = _ZERO
    kept = _ZERO
    for s in range(offsets.size - 1):
        a = offsets[s]
        n = offsets[s + 1] - a
        total = 0.0
        for i in range(n):
            bm[i] = means[a + i] + 0.0
            bw[i] = weights[a + i]
            total += bw[i]
            if track:
                bi[i] = a + i
        _sort_runs(bm, bw, n, tm, tw, bounds, bi, ti, track)
        if flux:
            _order_weight_ties(bm, bw, bi, track, n)
        if members is not None:
            for i in range(n):
                members[kept + i] = bi[i]
        loss_free = (n <= delta) if flux else (total <= delta)
        pos = _emit(bm, bw, n, total, loss_free, delta, out_m, out_w, pos, starts, kept)
        kept += n
        out_off[s + 1] = pos
    return pos


@njit(cache=True, nogil=True)
def _merge_pair(src, a, na, b, nb, dst, o):
    """Stable merge of the sorted rows ``src[a:a + na]`` and ``src[b:b + nb]`` into
    ``dst[o:]`` (-0.0 written as 0.0); returns the end position. The select is branch-free:
    a branch on which side is smaller mispredicts about half the time on real data. Called,
    not inlined: its six call sites would each compile a copy."""
    ea = a + na
    eb = b + nb
    while a < ea and b < eb:
        x = src[a]
        y = src[b]
        right = y < x
        dst[o] = (y if right else x) + 0.0
        b += right
        a += 1 - right
        o += 1
    while a < ea:
        dst[o] = src[a] + 0.0
        a += 1
        o += 1
    while b < eb:
        dst[o] = src[b] + 0.0
        b += 1
        o += 1
    return o


@njit(cache=True, nogil=True)
def _merge_unit_runs(means, run_starts, run_sizes, r0, r1, ta, tb, rs, rn, dst, base):
    """Merge the sorted runs ``r0:r1`` of ``means`` into ``dst[base:]`` by rounds of
    pairwise merges (ping-ponging through ``ta``/``tb``, typed like ``means``; ``rs``/``rn``
    hold at least ``r1 - r0`` run bounds). The last round writes ``dst`` directly. Every
    position is an int64 (never a literal 0), so :func:`_merge_pair` compiles once per
    pair of array types."""
    k = r1 - r0
    if k == 1:
        return _merge_pair(means, run_starts[r0], run_sizes[r0], _ZERO, _ZERO, dst, base)
    if k == 2:
        return _merge_pair(
            means, run_starts[r0], run_sizes[r0], run_starts[r0 + 1], run_sizes[r0 + 1], dst, base
        )
    o = _ZERO
    m = 0
    for r in range(r0, r1, 2):
        nb = run_sizes[r + 1] if r + 1 < r1 else _ZERO
        sb = run_starts[r + 1] if r + 1 < r1 else _ZERO
        rs[m] = o
        o = _merge_pair(means, run_starts[r], run_sizes[r], sb, nb, ta, o)
        rn[m] = o - rs[m]
        m += 1
    src, other = ta, tb
    while m > 2:
        o = _ZERO
        k = 0
        for r in range(0, m, 2):
            nb = rn[r + 1] if r + 1 < m else _ZERO
            sb = rs[r + 1] if r + 1 < m else _ZERO
            start = o
            o = _merge_pair(src, rs[r], rn[r], sb, nb, other, o)
            rs[k] = start
            rn[k] = o - start
            k += 1
        m = k
        src, other = other, src
    return _merge_pair(src, rs[0], rn[0], rs[1], rn[1], dst, base)


@njit(cache=True, nogil=True)
def _merge_runs(
    means, weights, unit, run_starts, run_sizes, cell_runs, delta, flux, out_m, out_w, out_off
):
    """Kernel of :func:`merge_runs`: cell j's centroids are the runs
    ``cell_runs[j]:cell_runs[j + 1]`` of ``(means, weights)``, each sorted by mean (``unit``:
    every weight is 1 and ``weights`` is not read). A cell made of one loss-free counts run
    is copied straight to the output; the others are gathered, merged and compressed as in
    :func:`_merge`. An empty ``out_w`` promises that no cell compresses (its weights are all
    1 and are not written). Returns the number of centroids. Its arrays have one type
    whatever the weights, so it compiles once."""
    out_off[0] = 0
    longest = 0
    most_runs = 0
    for j in range(cell_runs.size - 1):
        n = _ZERO
        for r in range(cell_runs[j], cell_runs[j + 1]):
            n += run_sizes[r]
        longest = max(longest, n)
        most_runs = max(most_runs, cell_runs[j + 1] - cell_runs[j])
    ta = np.empty(longest, means.dtype)
    tb = np.empty(longest, means.dtype)
    rs = np.empty(most_runs, np.int64)
    rn = np.empty(most_runs, np.int64)
    bm = np.empty(longest, np.float64)
    bw = np.empty(longest, np.float64)
    tm = np.empty(longest, np.float64)
    tw = np.empty(longest, np.float64)
    tc = np.empty(longest, out_m.dtype)  # a unit merge's means before they are compressed
    bounds = np.empty(longest + 1, np.int64)
    no_rows = np.empty(0, np.int64)
    track = no_rows.size > 0  # (never: a typed False)
    write_w = out_w.size > 0
    pos = _ZERO
    for j in range(cell_runs.size - 1):
        r0 = cell_runs[j]
        r1 = cell_runs[j + 1]
        if r1 - r0 == 1 and not flux:  # flux runs still need their ties ordered by weight
            a = run_starts[r0]
            n = run_sizes[r0]
            total = float(n)
            if not unit:
                total = 0.0
                for i in range(n):
                    total += weights[a + i]
            if total <= delta:
                for i in range(n):
                    out_m[pos + i] = means[a + i]
                    if write_w:
                        out_w[pos + i] = 1.0 if unit else weights[a + i]
                pos += n
                out_off[j + 1] = pos
                continue
        n = _ZERO
        total = 0.0
        if unit and not flux:  # unit weights: merge the means alone
            for r in range(r0, r1):
                n += run_sizes[r]
            if n <= delta:
                _merge_unit_runs(means, run_starts, run_sizes, r0, r1, ta, tb, rs, rn, out_m, pos)
                if write_w:
                    for i in range(n):
                        out_w[pos + i] = 1.0
                pos += n
            elif write_w:  # (an empty out_w promises no cell compresses)
                _merge_unit_runs(means, run_starts, run_sizes, r0, r1, ta, tb, rs, rn, tc, _ZERO)
                for i in range(n):
                    bm[i] = tc[i]
                bw[:n] = 1.0
                pos = _compress(bm, bw, n, float(n), delta, out_m, out_w, pos, None, _ZERO)
            out_off[j + 1] = pos
            continue
        if not write_w:  # unreachable: weighted or flux merges always get out_w
            continue
        for r in range(r0, r1):
            a = run_starts[r]
            for i in range(run_sizes[r]):
                bm[n] = means[a + i] + 0.0
                bw[n] = 1.0 if unit else weights[a + i]
                total += bw[n]
                n += 1
        _sort_runs(bm, bw, n, tm, tw, bounds, no_rows, no_rows, track)
        if flux:
            _order_weight_ties(bm, bw, no_rows, track, n)
        loss_free = (n <= delta) if flux else (total <= delta)
        pos = _emit(bm, bw, n, total, loss_free, delta, out_m, out_w, pos, None, _ZERO)
        out_off[j + 1] = pos
    return pos


@njit(cache=True, nogil=True)
def _order_weight_ties(m, w, idx, track, n):
    """Order rows ``(m, w)[:n]``, already sorted by mean, by weight within runs of equal mean.

    Insertion sort: linear when ties are rare. Makes a flux digest independent of the order
    its rows arrived in. With ``track``, ``idx`` is permuted along.
    """
    for k in range(1, n):
        mk = m[k]
        wk = w[k]
        if not (m[k - 1] == mk and w[k - 1] > wk):
            continue
        ik = idx[k] if track else 0
        i = k
        while i > 0 and m[i - 1] == mk and w[i - 1] > wk:
            m[i] = m[i - 1]
            w[i] = w[i - 1]
            if track:
                idx[i] = idx[i - 1]
            i -= 1
        m[i] = mk
        w[i] = wk
        if track:
            idx[i] = ik


@njit(cache=True, nogil=True)
def _rank_permutation(src, n, perm, keys, bits):
    """Stable sorting permutation of ``src[:n]`` (n <= _SHORT; finite values, no -0.0):
    ``perm[r]`` is the row of rank r, counted as in :func:`_small_sort` (ties by row).
    Counting, rather than a network over (value, row) keys, keeps a second element type
    of the networks out of the compile. ``keys`` and ``bits`` are scratch the callers
    provide (unused)."""
    for k in range(n):
        x = src[k]
        r = 0
        for j in range(n):
            r += (src[j] < x) | ((src[j] == x) & (j < k))
        perm[r] = k


@njit(cache=True, nogil=True)
def _build_tracked(values, weights, rows, offsets, delta, out_m, out_w, out_off, members, starts):
    """Kernel of :func:`build` for weighted input or member tracking.

    ``values`` and ``weights`` are float32 (unit weights for counts); position j of a
    segment reads input row ``rows[j]``, which the caller has arranged to be sorted by
    value (stably) in segments longer than ``_SHORT``. Rows with a non-finite value or a
    weight that is not positive and finite are dropped; the rest are stably sorted by value
    then weight, carrying their input row index. A segment is loss-free while it keeps at
    most ``delta`` rows, else k1-compressed by weight. Unless None, ``members`` receives the
    kept row indices in sorted order and ``starts`` each centroid's first position in it.
    Returns ``(centroids, kept rows)``.
    """
    out_off[0] = 0
    longest = _max_segment(offsets)
    bm = np.empty(longest, np.float64)
    bw = np.empty(longest, np.float64)
    sm = np.empty(longest, np.float64)
    sw = np.empty(longest, np.float64)
    si = np.empty(longest, np.int64)
    perm = np.empty(longest, np.int64)
    keys = np.empty(32, np.uint64)
    bits = np.empty(32, np.float32)
    pos = _ZERO
    kept = _ZERO
    for s in range(offsets.size - 1):
        a = offsets[s]
        length = offsets[s + 1] - a
        n = _ZERO
        for j in range(a, a + length):  # branch-free filter, as in _build
            r = rows[j]
            x = np.float64(values[r]) + 0.0
            wj = np.float64(weights[r])
            bm[n] = x
            bw[n] = wj
            si[n] = r
            n += math.isfinite(x) & (wj > 0.0) & math.isfinite(wj)
        if length <= _SHORT:
            _rank_permutation(bm, n, perm, keys, bits)
        else:  # already sorted
            for i in range(n):
                perm[i] = i
        total = 0.0
        for i in range(n):
            p = perm[i]
            sm[i] = bm[p]
            sw[i] = bw[p]
            perm[i] = si[p]
            total += sw[i]
        _order_weight_ties(sm, sw, perm, perm.size > 0, n)
        if members is not None:
            for i in range(n):
                members[kept + i] = perm[i]
        pos = _emit(sm, sw, n, total, n <= delta, delta, out_m, out_w, pos, starts, kept)
        kept += n
        out_off[s + 1] = pos
    return pos, kept


@njit(cache=True, nogil=True)
def _positions(weights, a, k, pos):
    """Centroid positions in 0-based rank space (``C_i + w_i / 2 - 1/2``); returns total."""
    c = 0.0
    for i in range(k):
        w = np.float64(weights[a + i])
        pos[i] = c + 0.5 * w - 0.5
        c += w
    return c


@njit(cache=True, nogil=True)
def segment_quantiles(means, weights, offsets, q, out):
    """``out[s, j]`` = quantile ``q[j]`` of segment s (see :func:`quantile`)."""
    nseg = offsets.size - 1
    pos = np.empty(_max_segment(offsets), np.float64)
    for s in range(nseg):
        a = offsets[s]
        k = offsets[s + 1] - a
        if k == 0:
            out[s, :] = np.nan
            continue
        total = _positions(weights, a, k, pos)
        for j in range(q.size):
            # Same rank arithmetic and lerp as numpy's "hazen" method.
            r = (total * q[j] + 0.5) - 1.0
            if r <= pos[0]:
                out[s, j] = means[a]
            elif r >= pos[k - 1]:
                out[s, j] = means[a + k - 1]
            elif math.isnan(r):
                out[s, j] = np.nan
            else:
                i = np.searchsorted(pos[:k], r, side="right") - 1
                g = (r - pos[i]) / (pos[i + 1] - pos[i])
                lo = np.float64(means[a + i])  # float64 arithmetic on float32 rows too
                hi = np.float64(means[a + i + 1])
                d = hi - lo
                out[s, j] = hi - d * (1.0 - g) if g >= 0.5 else lo + d * g
    return out


@njit(cache=True, nogil=True)
def segment_cdfs(means, weights, offsets, x, out):
    """``out[s, j]`` = cdf at ``x[j]`` of segment s (see :func:`cdf`)."""
    nseg = offsets.size - 1
    pos = np.empty(_max_segment(offsets), np.float64)
    for s in range(nseg):
        a = offsets[s]
        k = offsets[s + 1] - a
        if k == 0:
            out[s, :] = np.nan
            continue
        total = _positions(weights, a, k, pos)
        seg = means[a : a + k]
        for j in range(x.size):
            v = x[j]
            if math.isnan(v):
                out[s, j] = np.nan
            elif v < seg[0]:
                out[s, j] = 0.0
            elif v > seg[k - 1]:
                out[s, j] = 1.0
            else:
                lo = np.searchsorted(seg, v, side="left")
                hi = np.searchsorted(seg, v, side="right")
                if hi > lo:  # v equals one or more centroid means: middle of the tie group
                    p = 0.5 * (pos[lo] + pos[hi - 1])
                else:
                    i = lo - 1
                    m0, m1 = np.float64(seg[i]), np.float64(seg[i + 1])
                    p = pos[i] + (v - m0) / (m1 - m0) * (pos[i + 1] - pos[i])
                out[s, j] = (p + 0.5) / total
    return out


# ---------------------------------------------------------------------------------------
# numpy wrappers
# ---------------------------------------------------------------------------------------


def _offsets(offsets, n):
    offsets = np.ascontiguousarray(offsets, dtype=np.int64)
    if offsets.ndim != 1 or offsets.size < 1:
        raise ValueError("offsets must be a 1-D array of length m + 1")
    if offsets[0] < 0 or offsets[-1] > n or np.any(np.diff(offsets) < 0):
        raise ValueError("offsets must be non-decreasing and within the data")
    return offsets


def _kernel_float(x):
    return np.float32 if getattr(x, "dtype", None) == np.float32 else np.float64


def _outputs(offsets, dtype=np.float64, with_weights=True, pad=0):
    """Output buffers, allocated by numpy: its huge-page-aware allocator makes first touch of
    large arrays several times cheaper than allocation inside numba. ``pad`` more slots of
    means (a kernel's scratch past the last centroid)."""
    cap = int(offsets[-1] - offsets[0])
    out_w = np.empty(cap, dtype) if with_weights else None
    return np.empty(cap + pad, dtype), out_w, np.empty(offsets.size, np.int64)


def _trimmed(out_m, out_w, out_off, k):
    """Drop unused capacity, copying only when more than half of it is unused."""
    copy = 2 * k < out_m.size
    out_m = out_m[:k].copy() if copy else out_m[:k]
    if out_w is not None:
        out_w = out_w[:k].copy() if copy else out_w[:k]
    return out_m, out_w, out_off


def _check_delta(delta):
    delta = float(delta)
    if not delta >= 1.0:
        raise ValueError(f"delta must be >= 1, got {delta}")
    return delta


def build(
    values,
    offsets,
    delta=DEFAULT_DELTA,
    *,
    weights=None,
    return_members=False,
    out_dtype=np.float64,
    starts=None,
    drop_unit_weights=False,
):
    """Build one digest per segment of ``values`` (grouped by segment, unsorted within).

    Values are cast to float32 and non-finite ones (including float32 overflow) dropped.
    Returns ``(means, weights, out_offsets)``: centroids sorted within each segment, float64
    unless ``out_dtype`` asks for float32 (the payload precision; the unweighted path then
    skips a conversion pass).

    ``weights`` (one per value) builds a "flux" digest (spec §2.0): weights are cast to
    float32, and a row whose weight is not positive and finite there produces no centroid.
    A segment stays loss-free while it keeps at most ``delta`` observations, whatever their
    weights, so its payload is the (value, weight) pairs sorted by value, then weight; above
    that, compression places observations by cumulative weight and centroid means are
    weight-averaged. Without ``weights`` every observation weighs 1 ("counts").

    With ``return_members`` two more arrays are returned, ``(member_index,
    member_offsets)``: the input rows absorbed by output centroid j are
    ``member_index[member_offsets[j]:member_offsets[j + 1]]`` (indices into ``values``, in
    sorted order; every kept row appears exactly once, dropped rows nowhere).

    ``starts`` addresses segment s as ``values[starts[s]:starts[s] + offsets[s + 1] -
    offsets[s]]`` (segments anywhere in ``values``; ``offsets`` then only give sizes), so
    cells that are runs of the input need no gather first.

    ``drop_unit_weights`` returns None for the weights when no segment holds more than
    ``delta`` values and there are no ``weights`` (every centroid then weighs 1), as
    :func:`merge_runs` does; the weights are then never written.
    """
    values = np.asarray(values).reshape(-1)
    delta = _check_delta(delta)
    if starts is not None:
        starts, sizes = _segment_starts(starts, offsets, values.size)
        if weights is not None or return_members:
            from zagg.kernels.segments import gather_runs

            values = gather_runs(values, starts, sizes)
            if weights is not None:
                weights = gather_runs(np.asarray(weights).reshape(-1), starts, sizes)
            starts = None
    offsets = _offsets(offsets, values.size if starts is None else int(offsets[-1]))
    if weights is not None or return_members:
        return _build_with(values, offsets, delta, weights, return_members)
    sizes = np.diff(offsets)
    long = np.flatnonzero(sizes > _SHORT)
    with np.errstate(over="ignore", invalid="ignore"):
        values = np.ascontiguousarray(values.astype(np.float32, copy=bool(long.size)))
    starts = offsets[:-1] if starts is None else starts
    for s in long.tolist():
        values[starts[s] : starts[s] + sizes[s]].sort()
    unit = drop_unit_weights and (sizes.size == 0 or sizes.max() <= delta)
    out = _outputs(offsets, out_dtype, with_weights=not unit, pad=16)
    return _trimmed(*out, _build(values, starts, offsets, delta, *out))


def _segment_starts(starts, offsets, n):
    """Checked int64 ``starts`` and segment sizes (from ``offsets``) within ``n`` values."""
    starts = np.ascontiguousarray(starts, dtype=np.int64)
    sizes = np.diff(np.asarray(offsets, np.int64))
    if (
        starts.shape != sizes.shape
        or np.any(sizes < 0)
        or (starts.size and (starts.min() < 0 or np.max(starts + sizes) > n))
    ):
        raise ValueError("starts must give one in-bounds start per segment of offsets")
    return starts, sizes


def _build_with(values, offsets, delta, weights, return_members):
    """:func:`build` through the tracking kernel (weighted input and/or members)."""
    with np.errstate(over="ignore", invalid="ignore"):
        values = np.ascontiguousarray(values, dtype=np.float32)
        if weights is None:
            weights = np.ones(values.size, np.float32)
        else:
            weights = np.asarray(weights).reshape(-1)
            if weights.size != values.size:
                raise ValueError("weights must have one entry per value")
            weights = np.ascontiguousarray(weights, dtype=np.float32)
    rows = np.arange(values.size, dtype=np.int64)
    for s in np.flatnonzero(np.diff(offsets) > _SHORT).tolist():
        a, b = offsets[s], offsets[s + 1]
        rows[a:b] = a + _stable_order(values[a:b])
    out = _outputs(offsets)
    members, starts = _member_buffers(offsets, return_members)
    k, kept = _build_tracked(values, weights, rows, offsets, delta, *out, members, starts)
    return _with_members(_trimmed(*out, k), members, starts, k, kept)


def _stable_order(x):
    """Stable sorting permutation of float32 ``x`` whose finite part is sorted by value.

    One uint64 sort of ``(order-preserving value bits << 32) | position`` keys: several
    times faster than numpy's stable argsort. Non-finite values land somewhere (the
    kernels drop them); ``+ 0`` folds -0.0 into 0.0 so the two tie by position.
    """
    if x.size >= 2**32:
        raise ValueError("segments of 2**32 values or more are not supported")
    bits = (x + np.float32(0.0)).view(np.uint32)
    key = np.where(bits >> 31 != 0, ~bits, bits | np.uint32(0x80000000)).astype(np.uint64)
    key <<= np.uint64(32)
    key |= np.arange(x.size, dtype=np.uint64)
    key.sort()
    return (key & np.uint64(0xFFFFFFFF)).astype(np.int64)


def _member_buffers(offsets, wanted):
    if not wanted:
        return None, None
    cap = int(offsets[-1] - offsets[0])
    return np.empty(cap, np.int64), np.empty(cap + 1, np.int64)


def _with_members(result, members, starts, k, kept):
    """Append ``(member_index, member_offsets)`` to a kernel result when tracked."""
    if members is None:
        return result
    starts[k] = kept
    return (*result, members[:kept], starts[: k + 1])


def check_weights_declaration(declaration):
    """The spec §2.0 weights declaration, with an absent one (None) read as "counts";
    an unknown value is a future revision and refused."""
    if declaration is None:
        return "counts"
    if declaration not in WEIGHTS_DECLARATIONS:
        raise ValueError(
            f"unknown weights declaration {declaration!r}; known declarations are "
            f"{list(WEIGHTS_DECLARATIONS)}"
        )
    return declaration


def check_weights_compatible(a_decl, b_decl):
    """Refuse a merge of digests carrying different weights declarations (spec §2.0).

    Counts and flux weights mean different things, so their merged sum would mean neither.
    Absent (None) is "counts". Returns the shared declaration, ready for :func:`merge`.
    """
    a, b = check_weights_declaration(a_decl), check_weights_declaration(b_decl)
    if a != b:
        raise ValueError(
            f"cannot merge digests with weights declaration {a_decl!r} (read as {a!r}) and "
            f"{b_decl!r} (read as {b!r}): counts and flux weights do not mix"
        )
    return a


def merge(
    means,
    weights,
    offsets,
    delta=DEFAULT_DELTA,
    *,
    declaration="counts",
    return_members=False,
    out_dtype=np.float64,
):
    """Merge the concatenated centroids of several digests per segment into one digest.

    Each segment is stably sorted by mean and compressed only if its total weight exceeds
    ``delta``, so loss-free pieces merge to exactly the sorted union of their values.

    ``declaration="flux"`` (spec §2.0; check mixed inputs with
    :func:`check_weights_compatible`) applies :func:`build`'s flux rules instead: ties in
    mean are ordered by weight, and a segment is compressed only when it holds more than
    ``delta`` rows, since a flux weight counts no observations. Loss-free flux pieces thus
    merge to exactly the build of their union too.

    ``return_members`` appends ``(member_index, member_offsets)`` as in :func:`build`, with
    indices into the input centroid rows.
    """
    flux = check_weights_declaration(declaration) == "flux"
    # float32 inputs are read as they are (no widening copy): the kernel copies each segment
    # into float64 buffers, so its arithmetic is float64 either way
    means = np.ascontiguousarray(means, dtype=_kernel_float(means)).reshape(-1)
    weights = np.ascontiguousarray(weights, dtype=_kernel_float(weights)).reshape(-1)
    if means.size != weights.size:
        raise ValueError("means and weights must have the same length")
    offsets = _offsets(offsets, means.size)
    delta = _check_delta(delta)
    out = _outputs(offsets, out_dtype)
    members, starts = _member_buffers(offsets, return_members)
    k = _merge(means, weights, offsets, delta, flux, *out, members, starts)
    return _with_members(_trimmed(*out, k), members, starts, k, int(offsets[-1] - offsets[0]))


def merge_runs(
    means,
    weights,
    run_starts,
    run_sizes,
    cell_runs,
    delta=DEFAULT_DELTA,
    *,
    declaration="counts",
    out_dtype=np.float32,
):
    """:func:`merge` of centroids that sit in sorted runs scattered over the inputs.

    Cell j merges runs ``cell_runs[j]:cell_runs[j + 1]``; run r is the rows
    ``run_starts[r]:run_starts[r] + run_sizes[r]`` of ``(means, weights)``, sorted by mean
    (one digest of one partial); ``weights=None`` means every centroid weighs 1, and the
    weights come back None too when every cell stays loss-free. Equal to :func:`merge`
    over the gathered rows, without gathering them first, and a cell held by a single
    loss-free digest is a plain copy.
    """
    flux = check_weights_declaration(declaration) == "flux"
    means = np.ascontiguousarray(means, dtype=_kernel_float(means)).reshape(-1)
    given = weights is not None
    if given:
        weights = np.ascontiguousarray(weights, dtype=_kernel_float(weights)).reshape(-1)
    else:
        weights = np.empty(0, means.dtype)
    run_starts = np.asarray(run_starts, dtype=np.int64)
    run_sizes = np.asarray(run_sizes, dtype=np.int64)
    cell_runs = np.asarray(cell_runs, dtype=np.int64)
    rows = int(run_sizes.sum())
    delta = _check_delta(delta)
    # unit weights that stay loss-free in every cell give unit weights back (None)
    unit = (
        not given
        and not flux
        and (cell_runs.size < 2 or np.add.reduceat(run_sizes, cell_runs[:-1]).max() <= delta)
    )
    out = (
        np.empty(rows, out_dtype),
        np.empty(0 if unit else rows, out_dtype),
        np.empty(cell_runs.size, np.int64),
    )
    k = _merge_runs(means, weights, not given, run_starts, run_sizes, cell_runs, delta, flux, *out)
    if unit:
        return out[0][:k], None, out[2]
    return _trimmed(*out, k)


def to_payloads(means, weights, offsets):
    """Serialise each segment to payload bytes; returns an object array of length m."""
    offsets = np.asarray(offsets, dtype=np.int64)
    lo, hi = int(offsets[0]), int(offsets[-1])
    rows = np.empty((hi - lo, 2), PAYLOAD_DTYPE)
    rows[:, 0] = np.asarray(means)[lo:hi]
    rows[:, 1] = np.asarray(weights)[lo:hi]
    buf = rows.tobytes()
    edges = ((offsets - lo) * _ROW_BYTES).tolist()
    out = np.empty(offsets.size - 1, dtype=object)
    out[:] = [buf[edges[i] : edges[i + 1]] for i in range(offsets.size - 1)]
    return out


def payload_to_array(payload):
    """Decode one payload to a float32 (k, 2) array of ``[mean, weight]`` rows."""
    if payload is None:
        payload = b""
    if len(payload) % _ROW_BYTES:
        raise ValueError(f"payload length {len(payload)} is not a multiple of {_ROW_BYTES}")
    return np.frombuffer(payload, PAYLOAD_DTYPE).astype(np.float32).reshape(-1, 2)


def from_payloads(payloads):
    """Inverse of :func:`to_payloads`: ``(means, weights, offsets)`` in float64.

    ``None`` entries are read as empty digests.
    """
    items = [b"" if p is None else bytes(p) for p in np.asarray(payloads, dtype=object).ravel()]
    lengths = np.fromiter((len(p) for p in items), dtype=np.int64, count=len(items))
    if np.any(lengths % _ROW_BYTES):
        raise ValueError(f"payload lengths must be multiples of {_ROW_BYTES}")
    offsets = np.zeros(len(items) + 1, np.int64)
    np.cumsum(lengths // _ROW_BYTES, out=offsets[1:])
    rows = np.frombuffer(b"".join(items), PAYLOAD_DTYPE).reshape(-1, 2)
    return rows[:, 0].astype(np.float64), rows[:, 1].astype(np.float64), offsets


def _probabilities(q):
    qa = np.ascontiguousarray(q, dtype=np.float64).reshape(-1)
    if np.any((qa < 0) | (qa > 1)):
        raise ValueError("quantile probabilities must lie in [0, 1]")
    return qa


def _as_single(digest):
    if digest is None or isinstance(digest, bytes | bytearray | memoryview):
        arr = payload_to_array(digest)
    else:
        arr = np.asarray(digest).reshape(-1, 2)
    means = np.ascontiguousarray(arr[:, 0], dtype=np.float64)
    weights = np.ascontiguousarray(arr[:, 1], dtype=np.float64)
    return means, weights, np.array([0, means.size], np.int64)


def _shape_result(res, q):
    return res[0] if np.ndim(q) == 0 else res.reshape(np.shape(q))


def quantile(digest, q):
    """Quantile(s) ``q`` in [0, 1] of one digest (payload bytes or (k, 2) array).

    Centroid i sits at cumulative weight ``C_i + w_i / 2``; ranks between centroids are
    linearly interpolated and clamped to the extreme means. On a loss-free digest this is
    numpy's ``method="hazen"``. NaN for an empty digest.
    """
    qa = _probabilities(q)
    return _shape_result(segment_quantiles(*_as_single(digest), qa, np.empty((1, qa.size)))[0], q)


def cdf(digest, x):
    """Cumulative fraction at ``x`` under the interpolation of :func:`quantile` (its inverse).

    0 below the smallest mean, 1 above the largest, NaN for an empty digest; at a centroid
    mean it is the mid-point position of that centroid (or of a run of equal means).
    """
    xa = np.ascontiguousarray(x, dtype=np.float64).reshape(-1)
    return _shape_result(segment_cdfs(*_as_single(digest), xa, np.empty((1, xa.size)))[0], x)


def quantiles(payloads, q):
    """Quantiles of many digests: shape (m,) for scalar ``q``, else (m, len(q)); NaN if empty."""
    qa = _probabilities(q)
    means, weights, offsets = from_payloads(payloads)
    res = segment_quantiles(means, weights, offsets, qa, np.empty((offsets.size - 1, qa.size)))
    return res[:, 0] if np.ndim(q) == 0 else res
