"""The pyramid's k-way fold of "counts" t-digests: one coarser cell from its parts' digests.

Packing the parts' centroids whole, sorted by mean (:func:`zagg.kernels.tdigest.merge`),
treats each as a point mass; but a centroid of weight w stands for w observations spread
between its neighbours, and the parts of a coarser cell overlap in value. Packed whole,
the coarse centroids' members reach past their neighbours, so their ranks, and with them
the quantiles, drift; and whole parts underfill the k1 bound, so the fold holds more
centroids than its delta's budget, more at every level of a cascade. A fold instead reads
each part as a distribution and re-quantizes their sum:

- A centroid of weight 1 is one observation: a point mass at its mean. A heavier one holds
  the observations between the edges it shares with its neighbours in its own digest. An
  edge is where a piecewise-parabolic curve through the digest's quantiles, whose averages
  over the centroids' rank intervals are their means (Colella and Woodward's
  reconstruction, the weights as widths), crosses the rank between the two; beside a single
  observation it is that observation; a digest's outermost centroid mirrors its inner
  extent. The mass is uniform on either side of the mean, split so that the mean is kept.
- The fold's centroids are the k1 greedy bins over the total weight N under the pyramid's
  size law (:func:`bins`), each holding the parts' mass over its rank interval, at that
  mass's mean. The law spends the declared delta on a compression that grows with the
  observations a cell summarizes (:func:`compression`): delta itself up to delta
  observations (the cell is kept whole), then :data:`GROWTH` more per doubling of N /
  delta, up to :data:`CEILING` times delta (about 1.4 delta centroids). A coarse cell
  summarizes many children and is one of few, so its sharper digest costs little, while
  a fine cell of a few hundred observations keeps about the leaf law's size; and since
  each fold of a cascade reads its children's centroids as the observations they stand
  for, sharper children lose less at every merge below. So a fold holds its law's budget,
  its weights are integers summing to N, the cell's sum (means times weights) is kept,
  and a fold of single observations (every weight 1) is the direct digest under the law.
- A cell whose parts hold no more rows than its bins (a loss-free cell, or one part
  already at the budget) keeps the parts' rows, sorted by mean: a fold invents no rows.

Each input row reaches a range of output centroids: a row cut at a bin edge is a member of
the centroids on both sides, so a location or time word reduced over each centroid's
members still contains every observation beneath it.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

from zagg.kernels.tdigest import weight_limit

_ZERO = np.int64(0)
#: the size law's compression grows by this fraction of delta per doubling of N / delta
GROWTH = 0.28
#: ... up to this multiple of delta
CEILING = 2.75
#: tolerance on cumulative weight, relative to the cell's total: sums of cut masses are
#: inexact in float64 (sums of whole unit weights are exact)
_EPS = 1e-12


@njit(cache=True, nogil=True)
def _compression(total, delta):
    """The k1 compression a fold of ``total`` observations bins at, under declared
    ``delta``: delta up to delta observations, then :data:`GROWTH` delta more per doubling
    of ``total / delta``, at most :data:`CEILING` delta."""
    if total <= delta:
        return delta
    return delta * min(CEILING, 1.0 + GROWTH * math.log2(total / delta))


@njit(cache=True, nogil=True)
def _bins(total, delta, edges, most):
    """The k1 greedy bin edges over ``total`` unit weights into ``edges`` at the size law's
    compression (:func:`_compression`); returns their number (bins + 1), or 0 when there
    would be more than ``most`` bins. The edges are those of
    :func:`zagg.kernels.tdigest.build`'s centroids over ``total`` observations at that
    compression: each bin holds as many as fit under its k1 limit, at least one."""
    scale = _compression(total, delta)
    edges[0] = 0.0
    k = 1
    edge = 0.0
    while edge < total:
        if k > most:
            return 0
        nxt = math.floor(weight_limit(edge, total, scale))
        nxt = min(max(nxt, edge + 1.0), total)
        edges[k] = nxt
        edge = nxt
        k += 1
    return k


# -- one part as a distribution ------------------------------------------------------------
@njit(cache=True, nogil=True)
def _ppm_slope(m, w, a, n, j):
    """The limited mean slope of row j across its neighbours (Colella and Woodward's
    delta a_j, with the weights as widths); 0 at the ends and at a local extremum."""
    if j <= 0 or j >= n - 1:
        return 0.0
    wm = np.float64(w[a + j - 1])
    w0 = np.float64(w[a + j])
    wp = np.float64(w[a + j + 1])
    dm = np.float64(m[a + j]) - np.float64(m[a + j - 1])
    dp = np.float64(m[a + j + 1]) - np.float64(m[a + j])
    if dp * dm <= 0.0:
        return 0.0
    d = w0 / (wm + w0 + wp) * ((2.0 * wm + w0) / (wp + w0) * dp + (w0 + 2.0 * wp) / (wm + w0) * dm)
    return min(abs(d), 2.0 * abs(dm), 2.0 * abs(dp)) * (1.0 if d > 0.0 else -1.0)


@njit(cache=True, nogil=True)
def _edges(m, w, a, n, out):
    """``out[c]`` = the value where row c's observations end and row c + 1's begin."""
    for c in range(n - 1):
        m0 = np.float64(m[a + c]) + 0.0
        m1 = np.float64(m[a + c + 1]) + 0.0
        w0 = np.float64(w[a + c])
        w1 = np.float64(w[a + c + 1])
        if w0 <= 1.0:
            out[c] = m0
            continue
        if w1 <= 1.0:
            out[c] = m1
            continue
        x = m0 + w0 / (w0 + w1) * (m1 - m0)
        if 0 < c < n - 2:
            wm = np.float64(w[a + c - 1])
            wp = np.float64(w[a + c + 2])
            z1 = (wm + w0) / (2.0 * w0 + w1)
            z2 = (wp + w1) / (2.0 * w1 + w0)
            x += (
                2.0 * w1 * w0 / (w0 + w1) * (z1 - z2) * (m1 - m0)
                - w0 * z1 * _ppm_slope(m, w, a, n, c + 1)
                + w1 * z2 * _ppm_slope(m, w, a, n, c)
            ) / (wm + w0 + w1 + wp)
        out[c] = min(max(x, m0), m1)


@njit(cache=True, nogil=True)
def _event(ex, ed, ep, er, e, x, d, p, row):
    ex[e] = x
    ed[e] = d
    ep[e] = p
    er[e] = row
    return e + 1


@njit(cache=True, nogil=True)
def _part_events(m, w, a, n, row0, bx, ex, ed, ep, er, e):
    """Append one part's events at ``e``: rows ``a:a + n`` of ``(m, w)``, sorted by mean and
    numbered from ``row0``; an event is a position, the change of density there and a point
    mass (``bx`` is scratch for the rows' edges). Returns the new event count."""
    _edges(m, w, a, n, bx)
    for c in range(n):
        mc = np.float64(m[a + c]) + 0.0
        wc = np.float64(w[a + c])
        lo = bx[c - 1] if c > 0 else mc
        hi = bx[c] if c + 1 < n else mc
        if c == 0 and n > 1:  # the outermost rows mirror their inner extent
            lo = mc - (hi - mc)
        if c + 1 == n and n > 1:
            hi = mc + (mc - lo)
        row = row0 + c
        if wc <= 1.0 or not (lo < mc or mc < hi):
            e = _event(ex, ed, ep, er, e, mc, 0.0, wc, row)
            continue
        # the mean kept: a share of w uniform on [lo, mc], the rest on [mc, hi]
        span_l = mc - lo if lo < mc else 0.0
        span_r = hi - mc if mc < hi else 0.0
        ml = wc * (span_r / (span_l + span_r))
        mr = wc - ml
        dl = ml / span_l if span_l > 0.0 else 0.0
        dr = mr / span_r if span_r > 0.0 else 0.0
        point = (ml if span_l == 0.0 else 0.0) + (mr if span_r == 0.0 else 0.0)
        if span_l > 0.0:
            e = _event(ex, ed, ep, er, e, lo, dl, 0.0, row)
        e = _event(ex, ed, ep, er, e, mc, dr - dl, point, row)
        if span_r > 0.0:
            e = _event(ex, ed, ep, er, e, hi, -dr, 0.0, row)
    return e


# -- sorting -------------------------------------------------------------------------------
@njit(cache=True, nogil=True)
def _before(ex, ed, ep, er, i, j):
    """Whether event i sorts before event j: by position, then density change, point mass
    and row (equal events then sum alike in whatever order the parts arrive)."""
    if ex[i] != ex[j]:
        return ex[i] < ex[j]
    if ed[i] != ed[j]:
        return ed[i] < ed[j]
    if ep[i] != ep[j]:
        return ep[i] < ep[j]
    return er[i] < er[j]


@njit(cache=True, nogil=True)
def _sort_events(ex, ed, ep, er, n, sx, sd, sp, sr, bounds):
    """Sort the events ``[:n]`` in place into :func:`_before` order (``sx``.. are scratch),
    by merging ascending runs: one part's events arrive nearly sorted, so this costs about
    n log parts."""
    nb = 1
    bounds[0] = 0
    for i in range(1, n):
        if _before(ex, ed, ep, er, i, i - 1):
            bounds[nb] = i
            nb += 1
    bounds[nb] = n
    ax, ad, ap, ar = ex, ed, ep, er
    bx, bd, bp, br = sx, sd, sp, sr
    swapped = False
    while nb > 1:
        k = 0
        for r in range(0, nb, 2):
            lo = bounds[r]
            mid = bounds[r + 1]
            hi = bounds[r + 2] if r + 1 < nb else mid
            i, j = lo, mid
            for o in range(lo, hi):
                right = j < hi and (i >= mid or _before(ax, ad, ap, ar, j, i))
                f = j if right else i
                bx[o] = ax[f]
                bd[o] = ad[f]
                bp[o] = ap[f]
                br[o] = ar[f]
                j += right
                i += 1 - right
            bounds[k] = lo
            k += 1
        bounds[k] = n
        nb = k
        ax, ad, ap, ar, bx, bd, bp, br = bx, bd, bp, br, ax, ad, ap, ar
        swapped = not swapped
    if swapped:
        for i in range(n):
            ex[i] = sx[i]
            ed[i] = sd[i]
            ep[i] = sp[i]
            er[i] = sr[i]


@njit(cache=True, nogil=True)
def _merge_points(means, run_starts, run_sizes, r0, r1, keys, rows, tk, tr, bounds, carry):
    """A cell's single observations (runs ``r0:r1`` of ``means``, each sorted) merged into
    ``keys`` ascending (-0.0 as 0.0; ties in run order), with their row numbers in ``rows``
    when ``carry`` (``tk``/``tr`` scratch): rounds of branch-free pairwise merges, as cheap
    as a merge of whole centroids. Returns the count."""
    n = _ZERO
    nb = 0
    for r in range(r0, r1):
        size = run_sizes[r]
        if size == 0:
            continue
        bounds[nb] = n
        nb += 1
        a = run_starts[r]
        for i in range(size):
            keys[n] = np.float64(means[a + i]) + 0.0
            rows[n] = n
            n += 1
    bounds[nb] = n
    sk, sr, dk, dr = keys, rows, tk, tr
    swapped = False
    while nb > 1:
        k = 0
        for r in range(0, nb, 2):
            lo = bounds[r]
            mid = bounds[r + 1]
            hi = bounds[r + 2] if r + 1 < nb else mid
            i, j, o = lo, mid, lo
            while i < mid and j < hi:  # which side is smaller is a coin toss: no branch
                x = sk[i]
                y = sk[j]
                right = y < x
                dk[o] = y if right else x
                if carry:
                    dr[o] = sr[j] if right else sr[i]
                j += right
                i += 1 - right
                o += 1
            f = i if i < mid else j
            for t in range(o, hi):  # the rest of whichever side is left
                dk[t] = sk[f]
                if carry:
                    dr[t] = sr[f]
                f += 1
            bounds[k] = lo
            k += 1
        bounds[k] = n
        nb = k
        sk, sr, dk, dr = dk, dr, sk, sr
        swapped = not swapped
    if swapped:
        for i in range(n):
            keys[i] = tk[i]
            if carry:
                rows[i] = tr[i]
    return n


# -- the fold ------------------------------------------------------------------------------
@njit(cache=True, nogil=True)
def _sweep(ex, ed, ep, er, ne, edges, k, eps, out_m, out_w, pos, flo, fhi):
    """Walk the sorted events, cutting the parts' mass at the bin edges: writes the
    ``k - 1`` centroids at ``out[pos:]``, and for each row the cumulative weight where its
    mass starts (``flo``, preset negative) and ends (``fhi``). Returns the new position."""
    last = k - 2  # the last bin takes whatever remains
    f = 0.0  # weight so far
    dens = 0.0  # density of the spread rows at the current position
    x0 = ex[0]
    b = 0
    edge = edges[1]
    cm = 0.0  # the current bin's mass, moment and value span
    cs = 0.0
    lo = x0
    hi = x0
    for e in range(ne):
        x = ex[e]
        d = max(dens, 0.0)
        if d > 0.0 and x > x0:  # the spread mass between the previous event and this one
            while b < last and f + d * (x - x0) >= edge - eps:
                take = max(edge - f, 0.0)
                xc = min(max(x0 + take / d, x0), x)
                if cm == 0.0:
                    lo = x0
                cm += take
                cs += take * 0.5 * (x0 + xc)
                out_m[pos + b] = min(max(cs / cm if cm > 0.0 else xc, lo), xc)
                out_w[pos + b] = edges[b + 1] - edges[b]
                f = edge
                x0 = xc
                b += 1
                edge = edges[b + 1]
                cm = 0.0
                cs = 0.0
            if x > x0:
                s = d * (x - x0)
                if cm == 0.0:
                    lo = x0
                cm += s
                cs += s * 0.5 * (x0 + x)
                f += s
                hi = x
        x0 = x
        row = er[e]
        if flo[row] < 0.0:
            flo[row] = f
        p = ep[e]
        while p > 0.0:
            if b < last and edge - f <= eps:  # the bin is full: close it
                out_m[pos + b] = min(max(cs / cm if cm > 0.0 else x, lo), hi)
                out_w[pos + b] = edges[b + 1] - edges[b]
                b += 1
                edge = edges[b + 1]
                cm = 0.0
                cs = 0.0
                continue
            take = p if b == last else min(p, edge - f)
            if cm == 0.0:
                lo = x
            cm += take
            cs += take * x
            f += take
            p -= take
            hi = x
        fhi[row] = f
        dens += ed[e]
    out_m[pos + b] = min(max(cs / cm if cm > 0.0 else hi, lo), hi)
    out_w[pos + b] = edges[b + 1] - edges[b]
    return pos + b + 1


@njit(cache=True, nogil=True)
def _reach(edges, k, lo, hi, eps):
    """The first and last bin (of ``k - 1``) whose rank interval overlaps ``(lo, hi)``: bin
    b spans ``edges[b]:edges[b + 1]``. (A hand-written bisection: numpy's searchsorted costs
    seconds of compile.)"""
    a, b = 0, k - 2  # first: the lowest bin whose upper edge exceeds lo
    while a < b:
        mid = (a + b) // 2
        if edges[mid + 1] > lo + eps:
            b = mid
        else:
            a = mid + 1
    first = a
    a, b = first, k - 2  # last: the highest bin whose lower edge is below hi
    while a < b:
        mid = (a + b + 1) // 2
        if edges[mid] < hi - eps:
            a = mid
        else:
            b = mid - 1
    return first, a


@njit(cache=True, nogil=True)
def _bin_run(means, a, n, delta, edges, out_m, out_w, pos):
    """One cell of ``n`` single observations, ``means[a:a + n]`` sorted: the direct digest
    (each bin the average of its observations; the rows themselves when they fit under
    ``delta``) written at ``out[pos:]``, read where the run lies. Returns the new position."""
    k = _bins(np.float64(n), delta, edges, n - 1) if n > delta else 0
    if k == 0:
        for o in range(n):
            out_m[pos + o] = np.float64(means[a + o]) + 0.0
            if out_w.size > 0:
                out_w[pos + o] = 1.0
        return pos + n
    for b in range(k - 1):
        lo = np.int64(edges[b])
        hi = np.int64(edges[b + 1])
        cs = 0.0
        for o in range(a + lo, a + hi):
            cs += np.float64(means[o]) + 0.0
        first = np.float64(means[a + lo]) + 0.0
        last = np.float64(means[a + hi - 1]) + 0.0
        out_m[pos + b] = min(max(cs / (hi - lo), first), last)
        out_w[pos + b] = hi - lo
    return pos + k - 1


@njit(cache=True, nogil=True)
def _fold_runs(
    means,
    weights,
    ones,
    run_starts,
    run_sizes,
    cell_runs,
    delta,
    out_m,
    out_w,
    out_off,
    track,
    ids,
    first,
    last,
):
    """Kernel of :func:`fold_runs` (``ones``: every row weighs 1, ``weights`` unread). With
    ``track``, ``ids``/``first``/``last`` receive, per
    input row (numbered in cell, then run order), its index into ``means`` and the range of
    output centroids it reaches. Returns the centroid count."""
    out_off[0] = 0
    write_w = out_w.size > 0  # (empty: every cell keeps its single observations)
    longest = _ZERO
    for j in range(cell_runs.size - 1):
        n = _ZERO
        for r in range(cell_runs[j], cell_runs[j + 1]):
            n += run_sizes[r]
        longest = max(longest, n)
    cap = 3 * longest + 1
    ex = np.empty(cap, np.float64)
    ed = np.empty(cap, np.float64)
    ep = np.empty(cap, np.float64)
    er = np.empty(cap, np.int64)
    sx = np.empty(cap, np.float64)
    sd = np.empty(cap, np.float64)
    sp = np.empty(cap, np.float64)
    sr = np.empty(cap, np.int64)
    bounds = np.empty(cap + 1, np.int64)
    tk = np.empty(longest, np.float64)
    flo = np.empty(longest, np.float64)
    fhi = np.empty(longest, np.float64)
    edges = np.empty(longest + 2, np.float64)
    pos = _ZERO
    row0 = _ZERO  # the cell's first row
    for j in range(cell_runs.size - 1):
        r0 = cell_runs[j]
        r1 = cell_runs[j + 1]
        if ones and not track and r1 - r0 == 1:  # one sorted run of single observations
            pos = _bin_run(means, run_starts[r0], run_sizes[r0], delta, edges, out_m, out_w, pos)
            out_off[j + 1] = pos
            continue
        n = _ZERO
        total = 0.0
        unit = True
        for r in range(r0, r1):
            a = run_starts[r]
            for i in range(run_sizes[r]):
                wi = 1.0 if ones else np.float64(weights[a + i])
                total += wi
                unit &= wi == 1.0
                ep[n] = wi
                if track:
                    ids[row0 + n] = a + i
                n += 1
        k = _bins(total, delta, edges, n - 1) if total > delta else 0
        if unit:  # single observations: their values, sorted
            _merge_points(means, run_starts, run_sizes, r0, r1, ex, er, tk, sr, bounds, track)
        elif k == 0:  # rows kept: sorted by mean, then weight (whatever the parts' order)
            o = _ZERO
            for r in range(r0, r1):
                a = run_starts[r]
                for i in range(run_sizes[r]):
                    ex[o] = np.float64(means[a + i]) + 0.0
                    ed[o] = 0.0
                    er[o] = o
                    o += 1
            _sort_events(ex, ed, ep, er, n, sx, sd, sp, sr, bounds)
        if k == 0:  # each row kept as it is
            for o in range(n):
                out_m[pos + o] = ex[o]
                if write_w:
                    out_w[pos + o] = 1.0 if unit else ep[o]
                if track:
                    first[row0 + er[o]] = pos + o
                    last[row0 + er[o]] = pos + o
            pos += n
        elif unit:  # the direct digest: each bin averages its observations
            for b in range(k - 1):
                lo = np.int64(edges[b])
                hi = np.int64(edges[b + 1])
                cs = 0.0
                for o in range(lo, hi):
                    cs += ex[o]
                out_m[pos + b] = min(max(cs / (hi - lo), ex[lo]), ex[hi - 1])
                out_w[pos + b] = hi - lo
                if track:
                    for o in range(lo, hi):
                        first[row0 + er[o]] = pos + b
                        last[row0 + er[o]] = pos + b
            pos += k - 1
        else:
            e = _ZERO
            local = _ZERO
            for r in range(r0, r1):
                e = _part_events(
                    means, weights, run_starts[r], run_sizes[r], local, tk, ex, ed, ep, er, e
                )
                local += run_sizes[r]
            _sort_events(ex, ed, ep, er, e, sx, sd, sp, sr, bounds)
            for i in range(n):
                flo[i] = -1.0
            eps = _EPS * total
            start = pos
            pos = _sweep(ex, ed, ep, er, e, edges, k, eps, out_m, out_w, pos, flo, fhi)
            if track:
                for i in range(n):
                    f0, f1 = _reach(edges, k, flo[i], fhi[i], eps)
                    first[row0 + i] = start + f0
                    last[row0 + i] = start + f1
        row0 += n
        out_off[j + 1] = pos
    return pos


@njit(cache=True, nogil=True)
def _member_lists(ids, first, last, k, member_index, member_offsets):
    """Each output centroid's members (input rows), from every row's range of centroids."""
    for o in range(k + 1):
        member_offsets[o] = 0
    for i in range(ids.size):
        for o in range(first[i], last[i] + 1):
            member_offsets[o + 1] += 1
    for o in range(k):
        member_offsets[o + 1] += member_offsets[o]
    cursor = member_offsets[:k].copy()
    for i in range(ids.size):
        for o in range(first[i], last[i] + 1):
            member_index[cursor[o]] = ids[i]
            cursor[o] += 1


def compression(total, delta) -> float:
    """The k1 compression the pyramid's size law gives a cell of ``total`` observations
    under declared ``delta`` (see the module's docstring)."""
    return float(_compression(float(total), float(delta)))


def bins(total, delta):
    """The edges (cumulative weights) of the bins of ``total`` observations under declared
    ``delta``: where the centroids of the cell's folded digest begin and end (those of a
    k1 digest built from them at :func:`compression`)."""
    total = float(total)
    edges = np.empty(int(total) + 2, np.float64)
    return edges[: _bins(total, float(delta), edges, int(total) + 1)].copy()


def fold_runs(means, weights, run_starts, run_sizes, cell_runs, delta, *, return_members=False):
    """Fold "counts" digests held as sorted runs: cell j folds the runs
    ``cell_runs[j]:cell_runs[j + 1]``, run r being rows ``run_starts[r]:run_starts[r] +
    run_sizes[r]`` of ``(means, weights)``: one part's digest, sorted by mean (``weights``
    None: every row weighs 1). Returns float32 ``(means, weights, offsets)``; with
    ``return_members`` also ``(member_index, member_offsets)``: output centroid c took
    mass from the input rows ``member_index[member_offsets[c]:member_offsets[c + 1]]``
    (indices into ``means``), and a row cut at a bin edge is a member of both sides. Like
    :func:`zagg.kernels.tdigest.merge_runs`, implicit unit weights come back None when no
    cell compresses."""
    means = np.ascontiguousarray(means, dtype=np.float32).reshape(-1)
    ones = weights is None
    weights = np.ascontiguousarray(np.empty(0) if ones else weights, dtype=np.float32).reshape(-1)
    if not ones and weights.size != means.size:
        raise ValueError("means and weights must have the same length")
    run_starts = np.ascontiguousarray(run_starts, dtype=np.int64)
    run_sizes = np.ascontiguousarray(run_sizes, dtype=np.int64)
    cell_runs = np.ascontiguousarray(cell_runs, dtype=np.int64)
    delta = float(delta)
    if not delta >= 1.0:
        raise ValueError(f"delta must be >= 1, got {delta}")
    if cell_runs.size < 1 or np.any(np.diff(cell_runs) < 0):
        raise ValueError("cell_runs must be non-decreasing run bounds")
    cum = np.concatenate(([0], np.cumsum(run_sizes)))
    per_cell = cum[cell_runs[1:]] - cum[cell_runs[:-1]]  # rows, the weight of unit rows
    rows = int(per_cell.sum())
    loss_free = ones and (per_cell.size == 0 or per_cell.max() <= delta)
    out_m = np.empty(rows, np.float32)
    out_w = np.empty(0 if loss_free else rows, np.float32)
    out_off = np.empty(cell_runs.size, np.int64)
    tracked = rows if return_members else 0
    ids, first, last = (np.empty(tracked, np.int64) for _ in range(3))
    k = _fold_runs(
        means,
        weights,
        ones,
        run_starts,
        run_sizes,
        cell_runs,
        delta,
        out_m,
        out_w,
        out_off,
        bool(return_members),
        ids,
        first,
        last,
    )
    copy = 2 * k < rows  # (drop unused capacity when it is most of it)
    out_m = out_m[:k].copy() if copy else out_m[:k]
    out_w = None if loss_free else out_w[:k].copy() if copy else out_w[:k]
    result = (out_m, out_w, out_off)
    if not return_members:
        return result
    member_offsets = np.empty(k + 1, np.int64)
    member_index = np.empty(int((last - first + 1).sum()), np.int64)
    _member_lists(ids, first, last, k, member_index, member_offsets)
    return (*result, member_index, member_offsets)


def sort_points(means, offsets) -> np.ndarray:
    """Single observations sorted by value within each cell (cell j holds rows
    ``offsets[j]:offsets[j + 1]``): the values a fold's merge of the cells' sorted runs
    reads (-0.0 as 0.0; ties are equal values), by one sort per cell instead of a merge of
    every run. NaN has no place in that order: the caller keeps it out."""
    out = np.asarray(means, np.float32) + np.float32(0.0)
    offsets = np.asarray(offsets, np.int64)
    for a, b in zip(offsets[:-1].tolist(), offsets[1:].tolist(), strict=True):
        if b - a > 1:
            out[a:b].sort()
    return out
