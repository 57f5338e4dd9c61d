"""A chunk's reduction split by time window: one partial per (shard, window) unit.

The chunk is keyed once; its kept points are then split by the window their time falls
in (:func:`zagg.windows.assign.window_index`), and each window's points are reduced as an
unwindowed chunk's are. The result answers to unit keys (:mod:`zagg.windows.units`)
wherever a chunk result answers to shard words, so discovery, the per-unit merges and the
leaf writes run unchanged: windows are a dimension of the graph, one chunk per unit.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from zagg.engine.keying import CellPoints
from zagg.engine.plan import POINT_WORDS
from zagg.engine.reduce import ChunkResult, reduce_points
from zagg.reducers.partials import Partial
from zagg.windows import assign, units


@dataclass
class WindowedChunkResult(ChunkResult):
    """Per window index, the chunk's :class:`~zagg.engine.reduce.ChunkResult` of its points in
    that window; ``shards`` holds the unit keys present (ascending)."""

    parts: dict | None = None  # window index → ChunkResult
    shard_order: int = 0
    clocks: dict | None = None  # unit key → its clocked observations (record.Clock)

    def piece(self, unit: int) -> Partial:
        shard, index = units.unpack([unit], self.shard_order)
        part = self.parts.get(int(index[0]))
        if part is None:
            return self.partial.take(0, 0)
        piece = part.piece(int(shard[0]))
        if self.clocks is not None:
            piece.clock = self.clocks.get(int(unit))
        return piece

    def shard_rows(self) -> np.ndarray:
        rows = [self.parts[i].shard_rows() for i in sorted(self.parts)]
        keys = [units.pack(self.parts[i].shards, i, self.shard_order) for i in sorted(self.parts)]
        if not rows:
            return np.zeros(0, np.int64)
        keys, rows = np.concatenate(keys), np.concatenate(rows)
        return rows[np.argsort(keys, kind="stable")]


def subset(points: CellPoints, mask: np.ndarray) -> CellPoints:
    """The kept points where ``mask`` holds, grouped by cell anew."""
    words = points.values(POINT_WORDS) if points.plan.needs_point_words else None
    return CellPoints(
        points.plan,
        points.cell_words[mask],
        lambda name: points.values(name)[mask],
        None if words is None else words[mask],
    )


def reduce_windows(plan, points: CellPoints, counts: dict) -> WindowedChunkResult:
    """Reduce one keyed chunk per window; points in no window are counted as
    ``outside_windows`` and dropped."""
    w = plan.windowing
    index = (
        assign.window_index(w, points.values(w.time_field))
        if points.cell_words.size
        else np.zeros(0, np.int64)
    )
    counts = dict(counts)
    outside = int(np.count_nonzero(index < 0))
    counts["outside_windows"] = outside
    counts["keyed"] = counts["keyed"] - outside
    parts = {}
    clocks = {} if plan.keeps_clocks else None
    instants = None
    if clocks is not None and points.cell_words.size:
        from zagg.windows.toc import instants as instants_of

        instants = instants_of(w, points.values(w.time_field))[0]
    present = np.unique(index[index >= 0])
    for i in present.tolist():
        mask = index == i
        sub = points if mask.all() else subset(points, mask)
        parts[i] = reduce_points(plan, sub, {})
        if clocks is not None:
            clocks.update(unit_clocks(plan, sub.cell_words, instants[mask], i))
    keys = [units.pack(parts[i].shards, i, plan.grid.shard_order) for i in present.tolist()]
    keys = np.sort(np.concatenate(keys)) if keys else np.zeros(0, np.uint64)
    granules = None
    if plan.granule_var is not None:
        granules = {}
        for i, part in parts.items():
            for shard, g in (part.granules or {}).items():
                key = int(units.pack([shard], i, plan.grid.shard_order)[0])
                granules[key] = g
    empty = Partial(np.zeros(0, np.uint64), {})
    return WindowedChunkResult(
        empty, keys, np.zeros(1, np.int64), counts, granules, parts, plan.grid.shard_order, clocks
    )


def unit_clocks(plan, cell_words: np.ndarray, instants: np.ndarray, index: int) -> dict:
    """The clock of each unit of one window's points (by unit key)."""
    from zagg import grid as G
    from zagg.windows.record import clock_of

    shard = G.ancestor(cell_words, plan.grid.shard_order)
    order = np.argsort(shard, kind="stable")
    shard, instants = shard[order], instants[order]
    starts = np.flatnonzero(np.concatenate(([True], shard[1:] != shard[:-1])))
    bounds = np.append(starts, shard.size)
    out = {}
    for a, b in zip(bounds[:-1], bounds[1:], strict=True):
        key = int(units.pack([shard[a]], index, plan.grid.shard_order)[0])
        out[key] = clock_of(instants[a:b])
    return out


def time_range(plan, part: Partial) -> tuple[float, float] | None:
    """A unit's first and last observation time (the time field's units) from its merged
    partial's min and max states of the time field."""
    if not part.cells.size:
        return None
    lo, hi = plan.time_states
    return float(np.nanmin(part.states[lo])), float(np.nanmax(part.states[hi]))
