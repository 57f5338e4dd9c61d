"""Timed t-digests: one toc time word per centroid row (spec §8.3, ``{field}_times``).

A centroid made of one observation carries that observation's timestamp word unchanged; a
centroid made of several carries mortie's join (``toc_reduce``) of its members' words, a
conservative range containing every member's instant. The digest's means and weights are
exactly those of :func:`zagg.kernels.tdigest.build` / :func:`~zagg.kernels.tdigest.merge`;
the members each output centroid absorbed come from those kernels (``return_members``), so
located digests keep their location words beside the times. Rows that tie on mean and
weight are ordered by (location word, time word), so a loss-free digest does not depend on
the order its observations or pieces arrived in. Observations whose time is not finite do
not enter a timed digest (a centroid's word must contain its members' instants).
"""

from __future__ import annotations

import mortie
import numpy as np

from zagg.kernels import located as located_
from zagg.kernels import segments, tdigest


def centroid_times(
    words: np.ndarray, member_index: np.ndarray, member_offsets: np.ndarray
) -> np.ndarray:
    """Each centroid's time word: the toc join of its members' words."""
    if member_offsets.size <= 1:
        return np.zeros(0, np.uint64)
    member = np.ascontiguousarray(words[member_index], dtype=np.uint64)
    return np.asarray(mortie.toc_reduce(member, offsets=member_offsets.astype(np.int64)), np.uint64)


def order_ties(means, weights, offsets, companions: list[np.ndarray]) -> list[np.ndarray]:
    """The companion arrays with rows tying on (cell, mean, weight) ordered by the
    companions themselves (first array first)."""
    n = means.size
    if n < 2:
        return companions
    seg = np.repeat(np.arange(offsets.size - 1), np.diff(offsets))
    new = np.ones(n, bool)
    new[1:] = (seg[1:] != seg[:-1]) | (means[1:] != means[:-1]) | (weights[1:] != weights[:-1])
    if new.all():
        return companions
    run = np.cumsum(new)
    tied = np.flatnonzero(np.bincount(run)[run] > 1)  # rows in a run of two or more: few
    order = np.lexsort([*(c[tied] for c in reversed(companions)), run[tied]])
    perm = np.arange(n)
    perm[tied] = tied[order]  # each tie run's rows stay in its own positions
    return [c[perm] for c in companions]


def with_times(result, times: np.ndarray, locs: np.ndarray | None = None):
    """The :class:`~zagg.reducers.partials.Digests` of a digest kernel's ``result`` (means,
    weights, offsets and each centroid's members, ``return_members=True``) with each
    centroid's time word, the join of its members' ``times``, and (located) its location
    word from ``locs``: how any merge that reports its partition keeps the companions."""
    means, weights, offsets, member_index, member_offsets = result
    out_times = centroid_times(times, member_index, member_offsets)
    comps = [out_times]
    if locs is not None:
        comps.insert(0, located_.member_locations(locs, member_index, member_offsets))
    if weights is None:
        weights = np.ones(means.size, np.float32)
    comps = order_ties(means, weights, offsets, comps)
    loc = comps[0] if locs is not None else None
    from zagg.reducers.partials import Digests

    return Digests.of(means, weights, offsets, loc, comps[-1])


def timed_chunk(points, spec):
    """A chunk's timed digests per cell (the digest state's chunk for ``timed: true``)."""
    from zagg.reducers.states import POINT_WORDS
    from zagg.windows.clock import windowing_of
    from zagg.windows.toc import observation_words

    opts = spec.opts
    grp = points.grouping
    clock = windowing_of(opts["clock"])
    v = points.contiguous(spec.source, spec.where)
    if v.dtype.kind != "f":
        v = v.astype(np.float64)
    words = observation_words(clock, points.contiguous_values(clock.time_field))
    v = np.where(words != 0, v, np.nan)  # no clock, no centroid
    weights = None
    if opts.get("weights") == "flux":
        weights = points.contiguous_values(opts["weight_source"]).astype(np.float64, copy=False)
    locs = points.contiguous_values(POINT_WORDS) if opts.get("located") else None
    result = tdigest.build(v, grp.offsets, int(opts["delta"]), weights=weights, return_members=True)
    return with_times(result, words, locs)


def timed_combine(values, groups, spec):
    """The k-way merge of timed digests per cell, joining the time words of the rows each
    merged centroid absorbs."""
    opts = spec.opts
    declaration = "flux" if opts.get("weights") == "flux" else "counts"
    means = np.concatenate([d.means for d in values])
    weights = np.concatenate([d.weights_or_ones() for d in values])
    sizes = np.concatenate([np.diff(d.offsets) for d in values])
    starts = np.concatenate(([0], np.cumsum(sizes)[:-1])).astype(np.int64)
    run_sizes = sizes[groups.perm]
    run_starts = starts[groups.perm]
    cell_rows = np.add.reduceat(run_sizes, groups.offsets[:-1]) if run_sizes.size else run_sizes
    offsets = np.concatenate(([0], np.cumsum(cell_rows))).astype(np.int64)
    means = segments.gather_runs(means, run_starts, run_sizes)
    weights = segments.gather_runs(weights, run_starts, run_sizes)
    times = segments.gather_runs(np.concatenate([d.times for d in values]), run_starts, run_sizes)
    locs = None
    if opts.get("located"):
        locs = segments.gather_runs(np.concatenate([d.locs for d in values]), run_starts, run_sizes)
    result = tdigest.merge(
        means, weights, offsets, int(opts["delta"]), declaration=declaration, return_members=True
    )
    return with_times(result, times, locs)
