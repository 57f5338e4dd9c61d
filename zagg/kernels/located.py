"""Located t-digests: one uint64 morton location word per centroid row (spec §2.2).

A centroid formed from a single observation (or a single input centroid) carries that
member's word unchanged, so point words stay point words. A centroid formed from several
carries the deepest common ancestor of its members' words, an area cell that contains every
one of them. Ancestry is mortie's: all multi-member centroids of a call go to one ragged
``mortie.common_ancestor(words, offsets=...)`` call. Members of one cell share a base cell,
which that call requires.

Row order: the digest kernels sort rows by mean (then weight, for flux). Rows that tie on
both are ordered here by location word, so a loss-free located digest does not depend on
the order its observations or pieces arrived in. Means and weights are exactly those of
:func:`zagg.kernels.tdigest.build` / :func:`~zagg.kernels.tdigest.merge`, and of
:func:`zagg.kernels.fold.fold_runs` for the pyramid's folds, whose centroids' members are
every row they took mass from (a row cut between two centroids is a member of both).

Location payload: one cell's words are the raw bytes of a little-endian uint64 array,
row-aligned with that cell's digest payload; an empty cell is ``b""``.
"""

from __future__ import annotations

import mortie
import numpy as np
from numba import njit

from zagg.kernels import fold, tdigest

_WORD_DTYPE = np.dtype("<u8")


@njit(cache=True, nogil=True)
def _order_full_ties(means, weights, words, offsets):
    """Within each segment, sort rows tying on (mean, weight) by word, in place.

    Rows arrive sorted by mean (ties by weight or not at all), so this insertion sort only
    moves rows inside tie runs: linear when ties are rare.
    """
    for s in range(offsets.size - 1):
        a = offsets[s]
        for k in range(a + 1, offsets[s + 1]):
            m = means[k]
            w = weights[k]
            x = words[k]
            i = k
            while i > a and means[i - 1] == m and weights[i - 1] == w and words[i - 1] > x:
                words[i] = words[i - 1]
                i -= 1
            words[i] = x


def _as_words(words, n):
    words = np.asarray(words).reshape(-1)
    if words.dtype != np.uint64:
        raise ValueError(f"location words must be uint64, got {words.dtype}")
    if words.size != n:
        raise ValueError(f"expected {n} location words, got {words.size}")
    return words


def member_locations(words, member_index, member_offsets):
    """Location word of each centroid from its members' words.

    ``member_index``/``member_offsets`` are as returned by ``build``/``merge`` with
    ``return_members=True``. Single-member centroids take their member's word as is; all
    the others are reduced by one ragged ``mortie.common_ancestor`` call.
    """
    member_words = words[member_index]
    if np.any(member_words == 0):
        raise ValueError("a kept row carries the null location word 0")
    sizes = np.diff(member_offsets)
    out = member_words[member_offsets[:-1]]  # the first member: exact for single members
    multi = np.flatnonzero(sizes > 1)
    if multi.size:
        lengths = sizes[multi]
        group_offsets = np.zeros(multi.size + 1, np.int64)
        np.cumsum(lengths, out=group_offsets[1:])
        shift = np.repeat(member_offsets[multi] - group_offsets[:-1], lengths)
        gathered = member_words[np.arange(group_offsets[-1]) + shift]
        out[multi] = mortie.common_ancestor(gathered, offsets=group_offsets)
    return out


def _located(result, words):
    means, weights, offsets, member_index, member_offsets = result
    loc = member_locations(words, member_index, member_offsets)
    _order_full_ties(means, weights, loc, offsets)
    return means, weights, offsets, loc


def located_build(values, words, offsets, delta=tdigest.DEFAULT_DELTA, weights=None):
    """:func:`zagg.kernels.tdigest.build` plus one location word per centroid.

    ``words`` holds each observation's uint64 morton word (order-29 point words at ingest,
    spec §2.2), aligned with ``values``; rows the build drops need no valid word, every
    kept row must carry a non-null one. Returns ``(means, weights, out_offsets,
    loc_words)``.
    """
    values = np.asarray(values).reshape(-1)
    words = _as_words(words, values.size)
    result = tdigest.build(values, offsets, delta, weights=weights, return_members=True)
    return _located(result, words)


def located_merge(
    means, weights, loc_words, offsets, delta=tdigest.DEFAULT_DELTA, *, declaration="counts"
):
    """:func:`zagg.kernels.tdigest.merge` of located digests, carrying location words.

    ``loc_words`` is row-aligned with ``means``; each segment is the concatenated rows of
    one cell's pieces. A centroid that absorbed several rows carries their deepest common
    ancestor (of any mix of point and area words). Returns ``(means, weights, out_offsets,
    loc_words)``.
    """
    means = np.asarray(means).reshape(-1)
    loc_words = _as_words(loc_words, means.size)
    result = tdigest.merge(
        means, weights, offsets, delta, declaration=declaration, return_members=True
    )
    return _located(result, loc_words)


def located_fold(
    means, weights, loc_words, run_starts, run_sizes, cell_runs, delta=tdigest.DEFAULT_DELTA
):
    """:func:`zagg.kernels.fold.fold_runs` of located "counts" digests, carrying location
    words: each folded centroid carries the deepest common ancestor of the words of every
    input row it took mass from (a row cut at a bin edge counts on both sides), so it
    contains every observation beneath it. Returns ``(means, weights, out_offsets,
    loc_words)``."""
    means = np.asarray(means).reshape(-1)
    loc_words = _as_words(loc_words, means.size)
    m, w, o, member_index, member_offsets = fold.fold_runs(
        means, weights, run_starts, run_sizes, cell_runs, delta, return_members=True
    )
    # float64 rows, as build and merge return them: the tie ordering compiles once
    m = m.astype(np.float64)
    w = np.ones(m.size) if w is None else w.astype(np.float64)
    return _located((m, w, o, member_index, member_offsets), loc_words)


def locations_to_payloads(loc_words, offsets):
    """Serialise each segment's words to bytes (little-endian uint64); object array of m."""
    offsets = np.asarray(offsets, dtype=np.int64)
    lo, hi = int(offsets[0]), int(offsets[-1])
    buf = np.asarray(loc_words, dtype=_WORD_DTYPE)[lo:hi].tobytes()
    edges = ((offsets - lo) * _WORD_DTYPE.itemsize).tolist()
    out = np.empty(offsets.size - 1, dtype=object)
    out[:] = [buf[edges[i] : edges[i + 1]] for i in range(offsets.size - 1)]
    return out


def locations_from_payloads(payloads):
    """Inverse of :func:`locations_to_payloads`: ``(loc_words uint64, offsets int64)``.

    ``None`` entries are read as empty cells.
    """
    items = [b"" if p is None else bytes(p) for p in np.asarray(payloads, dtype=object).ravel()]
    lengths = np.fromiter((len(p) for p in items), dtype=np.int64, count=len(items))
    if np.any(lengths % _WORD_DTYPE.itemsize):
        raise ValueError(f"location payload lengths must be multiples of {_WORD_DTYPE.itemsize}")
    offsets = np.zeros(len(items) + 1, np.int64)
    np.cumsum(lengths // _WORD_DTYPE.itemsize, out=offsets[1:])
    words = np.frombuffer(b"".join(items), _WORD_DTYPE).astype(np.uint64)
    return words, offsets
