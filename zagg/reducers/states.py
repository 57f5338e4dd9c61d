"""The built-in per-cell states: each one's chunk kernel, combine and compact form.

A state's value holds one row per cell of a partial (first axis), or for digests one
:class:`~zagg.reducers.partials.Digests` (CSR centroids). ``chunk(points, spec)`` reads the points
of one input chunk through :class:`zagg.engine.keying.CellPoints`; ``combine(values, groups,
spec)`` merges the values of several pieces, where ``groups`` (:class:`zagg.reducers.partials.Groups`)
says which rows of their concatenation belong to each merged cell. The record that ties
them together is :class:`zagg.reducers.State`.

- ``count``: finite values of the source (keyed points when there is none), int64.
- ``sum``, ``sumsq``: double-double ``(m, 2)`` sums ``[hi, lo]``: every partial sum is an
  error-free transformation, so the float64 result does not depend on the chunking.
- ``min``, ``max``: float64, NaN where a cell has no finite value.
- ``digest``: t-digest centroids (loss-free while a cell holds at most delta values),
  optionally with a location word per centroid.
- ``lanes``: the composition word's exact lane counts ``(m, 8)`` and stratum size in one
  ``(m, 9)`` int64 array.

Kernels are imported when first used, so loading a config never loads numba.
"""

from __future__ import annotations

import numpy as np

#: the name under which a state reads each kept point's order-29 morton word
POINT_WORDS = "__point_words__"

_LANES = 8  # composition lanes; column _LANES of a lanes state is the stratum size


# -- count ---------------------------------------------------------------------------------
def count_chunk(points, spec) -> np.ndarray:
    from zagg.kernels import segments

    grp = points.grouping
    if spec.source is None:
        if spec.where is None:
            return np.diff(grp.offsets)
        hits = grp.addressed(points.selected(spec.where))
        return segments.segment_sums(hits, grp.offsets, grp.starts)
    return segments.count_finite(points.addressed(spec.source, spec.where), grp.starts, grp.offsets)


def sum_combine(values, groups, spec) -> np.ndarray:
    """Exact integer sums per cell (counts, lane counts)."""
    from zagg.kernels import segments

    rows = np.concatenate([np.asarray(v, np.int64) for v in values])
    return segments.combine_sum(rows, groups.perm, groups.offsets)


def compact_count(value: np.ndarray) -> np.ndarray:
    """Counts as int32 while they fit (a waiting partial's counts are small)."""
    if value.dtype == np.int64 and (value.size == 0 or value.max() < 2**31):
        return value.astype(np.int32)
    return value


# -- double-double sums --------------------------------------------------------------------
def sum_dd_chunk(points, spec) -> np.ndarray:
    from zagg.kernels import segments

    grp = points.grouping
    return segments.dd_sums(points.addressed(spec.source, spec.where), grp.starts, grp.offsets)


def sumsq_dd_chunk(points, spec) -> np.ndarray:
    from zagg.kernels import segments

    grp = points.grouping
    return segments.dd_sums(
        points.addressed(spec.source, spec.where), grp.starts, grp.offsets, squares=True
    )


def dd_combine(values, groups, spec) -> np.ndarray:
    from zagg.kernels import segments

    return segments.combine_dd(np.concatenate(values), groups.perm, groups.offsets)


def dd_value(dd: np.ndarray) -> np.ndarray:
    """The float64 value of double-double sums ``(m, 2)``."""
    return dd[:, 0] + dd[:, 1]


def dd_variance(count, sums, squares, ddof: int = 0) -> np.ndarray:
    """Variance from double-double sums and squares (NaN where count <= ddof)."""
    from zagg.kernels import segments

    return segments.dd_variance(count, sums[:, 0], sums[:, 1], squares[:, 0], squares[:, 1], ddof)


# -- extremes ------------------------------------------------------------------------------
def min_chunk(points, spec) -> np.ndarray:
    return _extreme_chunk(points, spec, False)


def max_chunk(points, spec) -> np.ndarray:
    return _extreme_chunk(points, spec, True)


def _extreme_chunk(points, spec, take_max: bool) -> np.ndarray:
    from zagg.kernels import segments

    grp = points.grouping
    return segments.extremes(
        points.addressed(spec.source, spec.where), grp.starts, grp.offsets, take_max
    )


def min_combine(values, groups, spec) -> np.ndarray:
    return _extreme_combine(values, groups, False)


def max_combine(values, groups, spec) -> np.ndarray:
    return _extreme_combine(values, groups, True)


def _extreme_combine(values, groups, take_max: bool) -> np.ndarray:
    from zagg.kernels import segments

    rows = np.concatenate([np.asarray(v, np.float64) for v in values])
    return segments.combine_extreme(rows, groups.perm, groups.offsets, take_max)


def compact_extreme(value: np.ndarray) -> np.ndarray:
    """Extremes as float32 where that is exact (float32 sources always are)."""
    if value.dtype != np.float64:
        return value
    with np.errstate(over="ignore"):
        narrow = value.astype(np.float32)
    return narrow if np.array_equal(narrow, value, equal_nan=True) else value


# -- t-digests -----------------------------------------------------------------------------
def digest_chunk(points, spec):
    """Each cell's t-digest of its finite source values (float32 centroids, unit weights
    dropped while every cell stays loss-free); located digests also carry each centroid's
    location word, flux digests weigh each value by ``weight_source``."""
    from zagg.kernels import located, tdigest
    from zagg.reducers.partials import Digests

    opts = spec.opts
    if opts.get("timed"):
        from zagg.reducers.timed import timed_chunk

        return timed_chunk(points, spec)
    grp = points.grouping
    delta = int(opts["delta"])
    flux = opts.get("weights") == "flux"
    if opts.get("located"):
        v = points.contiguous(spec.source, spec.where)
        weights = points.contiguous_values(opts["weight_source"]) if flux else None
        if v.dtype.kind != "f":
            v = v.astype(np.float64)
        m, w, o, loc = located.located_build(
            v,
            points.contiguous_values(POINT_WORDS),
            grp.offsets,
            delta,
            weights=None if weights is None else weights.astype(np.float64, copy=False),
        )
        return Digests.of(m, w, o, loc)
    v = points.addressed(spec.source, spec.where)
    if v.dtype.kind != "f":
        v = v.astype(np.float64)
    weights = None
    if flux:
        weights = grp.addressed(points.values(opts["weight_source"])).astype(np.float64, copy=False)
    m, w, o = tdigest.build(
        v,
        grp.offsets,
        delta,
        weights=weights,
        out_dtype=np.float32,
        starts=grp.starts,
        drop_unit_weights=True,
    )
    return Digests.of(m, w, o)


def digest_reads(spec, declared) -> set[str]:
    """A flux digest reads its weights; a located one its points' order-29 words."""
    opts = spec.opts
    names = {opts["weight_source"]} if opts.get("weights") == "flux" else set()
    if opts.get("timed"):
        names.add(opts["clock"][0])
    return names | ({POINT_WORDS} if opts.get("located") else set())


def digest_held(opts) -> tuple[int, int]:
    """A waiting digest partial: an offset per cell; per point (while loss-free, a
    centroid per point) its float32 mean and weight, and its location and time words when
    kept."""
    return 8, 8 + 8 * bool(opts.get("located")) + 8 * bool(opts.get("timed"))


def _runs(values, groups):
    """The pieces' centroids back to back, and each merged cell's rows as sorted runs (one
    per piece): ``(means, weights or None, run_starts, run_sizes)``, runs in cell order."""
    means = np.concatenate([d.means for d in values])
    unit = all(d.weights is None for d in values)
    weights = None if unit else np.concatenate([d.weights_or_ones() for d in values])
    sizes = np.concatenate([np.diff(d.offsets) for d in values])
    starts = np.concatenate(([0], np.cumsum(sizes)[:-1])).astype(np.int64)
    # the rows of row group perm[i], in merged cell order
    return means, weights, starts[groups.perm], sizes[groups.perm]


def digest_combine(values, groups, spec):
    """The k-way merge of the pieces' digests per cell (loss-free while a cell's total
    weight stays within delta; located centroids keep their common ancestor word)."""
    from zagg.kernels import located, segments, tdigest
    from zagg.reducers.partials import Digests

    opts = spec.opts
    if opts.get("timed"):
        from zagg.reducers.timed import timed_combine

        return timed_combine(values, groups, spec)
    delta = int(opts["delta"])
    declaration = "flux" if opts.get("weights") == "flux" else "counts"
    means, weights, run_starts, run_sizes = _runs(values, groups)
    if not opts.get("located"):
        m, w, o = tdigest.merge_runs(
            means,
            weights,
            run_starts,
            run_sizes,
            groups.offsets,
            delta,
            declaration=declaration,
            out_dtype=np.float32,
        )
        return Digests.of(m, w, o)
    if weights is None:
        weights = np.ones(means.size, np.float32)
    cell_rows = np.add.reduceat(run_sizes, groups.offsets[:-1]) if run_sizes.size else run_sizes
    offsets = np.concatenate(([0], np.cumsum(cell_rows))).astype(np.int64)
    means = segments.gather_runs(means, run_starts, run_sizes)
    weights = segments.gather_runs(weights, run_starts, run_sizes)
    locs = segments.gather_runs(np.concatenate([d.locs for d in values]), run_starts, run_sizes)
    m, w, o, loc = located.located_merge(
        means, weights, locs, offsets, delta, declaration=declaration
    )
    return Digests.of(m, w, o, loc)


def digest_fold(values, groups, spec):
    """The pyramid's fold of stored digests per coarser cell (:mod:`zagg.kernels.fold`):
    the parts' mixture re-quantized into the bins a digest of the cell's raw points at the
    fold's delta has, located centroids carrying the common ancestor of every row they took
    mass from, timed centroids the join of their time words (both over the members
    :func:`zagg.kernels.fold.fold_runs` reports). Flux digests merge as the state combines
    them: a flux weight does not say whether a row is one observation or many, which the
    fold's reading of a part needs."""
    from zagg.kernels import fold, located
    from zagg.reducers.partials import Digests

    opts = spec.opts
    if opts.get("weights") == "flux":
        return digest_combine(values, groups, spec)
    delta = int(opts["delta"])
    means, weights, run_starts, run_sizes = _runs(values, groups)
    if opts.get("timed"):
        from zagg.reducers.timed import with_times

        m, w, o, members, member_offsets = fold.fold_runs(
            means, weights, run_starts, run_sizes, groups.offsets, delta, return_members=True
        )
        w = np.ones(m.size) if w is None else w.astype(np.float64)
        locs = np.concatenate([d.locs for d in values]) if opts.get("located") else None
        times = np.concatenate([d.times for d in values])
        return with_times((m.astype(np.float64), w, o, members, member_offsets), times, locs)
    if not opts.get("located"):
        m, w, o = fold.fold_runs(means, weights, run_starts, run_sizes, groups.offsets, delta)
        return Digests.of(m, w, o)
    locs = np.concatenate([d.locs for d in values])
    m, w, o, loc = located.located_fold(
        means, weights, locs, run_starts, run_sizes, groups.offsets, delta
    )
    return Digests.of(m, w, o, loc)


# -- composition lanes ---------------------------------------------------------------------
def lanes_chunk(points, spec) -> np.ndarray:
    """Exact lane counts of the composition word over the rows of its ``of`` digest, and
    the stratum size, per cell."""
    from zagg.kernels import composition

    opts = spec.opts
    rows = np.isfinite(points.values(opts["of_source"]).astype(np.float64, copy=False))
    if opts.get("of_where") is not None:
        rows &= points.selected(opts["of_where"])
    lanes, nsig = composition.lane_counts(
        points.values(spec.source),
        points.permutation(),
        points.grouping.offsets,
        int(opts["threshold"]),
        rows,
    )
    return np.concatenate([lanes, nsig[:, None]], axis=1)


def lanes_reads(spec, declared) -> set[str]:
    """The rows of a composition are those of its digest: its source and predicate."""
    from zagg.checks import predicate

    opts = spec.opts
    names = {opts["of_source"]}
    if opts.get("of_where"):
        names |= set(predicate.parse(opts["of_where"], declared).variables)
    return names


def compose_lanes(state: np.ndarray) -> np.ndarray:
    """Composition words from a lanes state."""
    from zagg.kernels import composition

    return composition.compose(state[:, :_LANES], state[:, _LANES])


def lanes_signal(state: np.ndarray) -> np.ndarray:
    """The stratum size column of a lanes state."""
    return state[:, _LANES]


# -- pyramid folds of stored values --------------------------------------------------------
# Each folds the stored values of child cells (one array or Digests per contributor, rows in
# cell order) into one value per parent cell, through the state combine that made them.
class FoldSpec:
    """The ``spec`` a state's ``combine`` reads when it folds stored values: only
    ``opts`` (a digest's delta and weights declaration)."""

    source = None
    where = None

    def __init__(self, state, opts):
        self.state = state
        self.opts = dict(opts or {})


def fold_count(values, groups, opts, divisor=None) -> np.ndarray:
    """Counts fold as the count state's exact integer sum."""
    return sum_combine([np.asarray(v, np.int64) for v in values], groups, None)


def fold_sum(values, groups, opts, divisor=None) -> np.ndarray:
    """Sums fold as the sum state's double-double combine over ``[value, 0]`` pairs: the
    exactly rounded sum of the children's stored sums."""
    pairs = []
    for v in values:
        dd = np.zeros((len(v), 2))
        dd[:, 0] = v
        pairs.append(dd)
    return dd_value(dd_combine(pairs, groups, None))


def fold_min(values, groups, opts, divisor=None) -> np.ndarray:
    return min_combine(values, groups, None)


def fold_max(values, groups, opts, divisor=None) -> np.ndarray:
    return max_combine(values, groups, None)


def fold_digest(values, groups, opts, divisor=None):
    """Digests fold by the pyramid's k-way fold (:func:`digest_fold`), at the fold's own
    delta."""
    return digest_fold(list(values), groups, FoldSpec(None, opts))


def fold_composition(values, groups, opts, divisor=None) -> np.ndarray:
    """Composition words fold by the §3.4 k-way law, each word weighted by its ``of``
    digest's weight at the same cell (``divisor``, one array per contributor), quantized
    once per parent cell."""
    from zagg.kernels import composition

    words = np.concatenate([np.asarray(v, np.uint64) for v in values])[groups.perm]
    n = np.concatenate([np.asarray(d, np.int64) for d in divisor])[groups.perm]
    out, _total = composition.merge_kway(words, n, groups.offsets)
    return out
