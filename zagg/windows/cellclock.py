"""Per-cell time ranges (``function: time_range``): one toc word per cell (spec §8.2).

The state is each cell's first and last instant (mortie's ns on its GPS-aligned scale, read
on the window schedule's clock); it merges by min and max, and the stored word is mortie's
join of the two: a timestamp word when the cell's observations share one instant, else the
conservative range containing all of them. An empty cell keeps the reserved fill 0.
"""

from __future__ import annotations

import numpy as np

LO_EMPTY = np.iinfo(np.int64).max
HI_EMPTY = np.iinfo(np.int64).min


def chunk(points, spec) -> np.ndarray:
    """``(n_cells, 2)`` int64: each cell's first and last instant of ``spec.source``."""
    from zagg.windows.clock import windowing_of
    from zagg.windows.toc import instants

    grp = points.grouping
    values = points.contiguous(spec.source, spec.where)
    ns, ok = instants(windowing_of(spec.opts["clock"]), values)
    lo = np.where(ok, ns, LO_EMPTY)
    hi = np.where(ok, ns, HI_EMPTY)
    starts = grp.offsets[:-1]
    if not starts.size:
        return np.zeros((0, 2), np.int64)
    return np.stack([np.minimum.reduceat(lo, starts), np.maximum.reduceat(hi, starts)], axis=1)


def combine(values, groups, spec) -> np.ndarray:
    rows = np.concatenate(values)[groups.perm]
    starts = groups.offsets[:-1]
    return np.stack(
        [np.minimum.reduceat(rows[:, 0], starts), np.maximum.reduceat(rows[:, 1], starts)], axis=1
    )


def reads(spec, declared) -> set[str]:
    return set()


def present(states) -> np.ndarray:
    s = states["clock_range"]
    return s[:, 1] >= s[:, 0]


def finalize(states, params) -> np.ndarray:
    """The cells' toc words (0 where a cell saw no finite time)."""
    import mortie

    s = states["clock_range"]
    has = s[:, 1] >= s[:, 0]
    out = np.zeros(s.shape[0], np.uint64)
    if has.any():
        lo = np.asarray(mortie.time2toc(s[has, 0].astype(np.uint64)), np.uint64)
        hi = np.asarray(mortie.time2toc(s[has, 1].astype(np.uint64)), np.uint64)
        out[has] = np.asarray(mortie.toc_merge(lo, hi), np.uint64)
    return out


def spec_attrs(params) -> dict:
    return {"temporal": {"spec": "zagg-toc/1", "shape": "per-cell", "grammar": "mortie-toc/1"}}
