"""The per-chunk reduction: one input chunk's points → a partial per shard it touches.

:func:`reduce_chunk` keys the chunk (:func:`zagg.engine.keying.key_chunk`), runs every state's own
chunk kernel over the cell-grouped points and cuts the resulting partial by shard. What a
chunk task returns, :class:`ChunkResult`, is small: per-cell states, never raw points.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from zagg import grid as G
from zagg.engine.keying import key_chunk
from zagg.engine.plan import Plan
from zagg.engine.temporal import shard_clocks
from zagg.reducers.partials import Partial


@dataclass
class ChunkResult:
    """A chunk's partial with the shards it touches and its point accounting."""

    partial: Partial
    shards: np.ndarray  # shard words present, ascending
    bounds: np.ndarray  # row bounds of each shard in partial.cells (len + 1)
    counts: dict[str, int]
    granules: dict[int, list[int]] | None = None  # shard word → granule indices it holds
    #: shard word → its clocked observations (a run whose fields keep times)
    shard_clocks: dict | None = field(default=None, kw_only=True)

    def piece(self, shard_word: int) -> Partial:
        """The rows of one shard (views of this chunk's arrays; empty if it has none)."""
        i = np.searchsorted(self.shards, np.uint64(shard_word))
        if i == len(self.shards) or self.shards[i] != np.uint64(shard_word):
            return self.partial.take(0, 0)
        piece = self.partial.take(int(self.bounds[i]), int(self.bounds[i + 1]))
        if self.shard_clocks is not None:
            piece.clock = self.shard_clocks.get(int(shard_word))
        return piece

    def shard_rows(self) -> np.ndarray:
        """Per shard of :attr:`shards`, the rows its piece holds (cells, plus centroids
        for digest states): roughly what combining and writing that shard will cost."""
        rows = np.diff(self.bounds)
        for value in self.partial.states.values():
            offsets = getattr(value, "offsets", None)
            if offsets is not None:
                rows = rows + np.diff(offsets[self.bounds])
        return rows.astype(np.int64)

    def summary(self) -> tuple:
        """What discovery needs on the client: shards, point counts, granules, rows."""
        return self.shards, self.counts, self.granules, self.shard_rows()


def reduce_chunk(plan: Plan, *arrays) -> ChunkResult:
    """Key, filter, group and reduce one input chunk (``arrays`` in ``plan.inputs`` order)."""
    arrs = dict(zip(plan.inputs, arrays, strict=True))
    points, counts = key_chunk(plan, arrs)
    if plan.windowing is not None:
        from zagg.engine.reduce_windows import reduce_windows

        return reduce_windows(plan, points, counts)
    return reduce_points(plan, points, counts)


def reduce_points(plan: Plan, points, counts: dict) -> ChunkResult:
    """Reduce keyed points (:class:`~zagg.engine.keying.CellPoints`): every state's chunk kernel,
    the partial cut by shard."""
    states = {key: spec.state.chunk(points, spec) for key, spec in plan.specs}
    cells = points.grouping.cells
    partial = Partial(cells, states).compact(plan.state_specs)
    granules = None
    if plan.granule_var is not None and cells.size:
        granules = _shard_granules(points, plan.granule_var, plan.grid.shard_order)
    shard_of_cell = G.ancestor(cells, plan.grid.shard_order)
    if cells.size:
        starts = np.flatnonzero(np.concatenate(([True], shard_of_cell[1:] != shard_of_cell[:-1])))
        shards = shard_of_cell[starts]
        bounds = np.append(starts, cells.size).astype(np.int64)
    else:
        shards = np.zeros(0, np.uint64)
        bounds = np.zeros(1, np.int64)
    clocks = shard_clocks(plan, points)
    return ChunkResult(partial, shards, bounds, counts, granules, shard_clocks=clocks)


def _shard_granules(points, granule_var: str, shard_order: int) -> dict[int, list[int]]:
    """Shard word → the granule indices of its points (shards in order of their first
    granule, each list ascending). Points arrive in runs of one cell and of one granule, so
    only where a run of either starts is a (shard, granule) pair read, never every point."""
    grp = points.grouping
    shard = G.ancestor(grp.run_cells, shard_order)
    new_shard = np.concatenate(([True], shard[1:] != shard[:-1]))
    s_at, s_word = grp.runs[new_shard], shard[new_shard]
    g_at, g_val = points.runs(granule_var)
    at = np.union1d(s_at, g_at)
    words = s_word[np.searchsorted(s_at, at, side="right") - 1]
    grans = np.asarray(g_val)[np.searchsorted(g_at, at, side="right") - 1]
    by = np.lexsort((words, grans))  # granule, then shard
    words, grans = words[by], grans[by]
    new = np.concatenate(([True], (words[1:] != words[:-1]) | (grans[1:] != grans[:-1])))
    out: dict[int, list[int]] = {}
    for w, g in zip(words[new].tolist(), grans[new].tolist(), strict=True):
        out.setdefault(int(w), []).append(int(g))
    return out
