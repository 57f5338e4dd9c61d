"""What a run's aggregation holds in memory while its shards wait for their inputs.

A shard's partial is complete only when the last input chunk that reaches it is reduced,
so a run whose every granule crosses every shard (satellite tracks over a region) holds
every chunk's reduction until its last chunk is read, and their merges: its memory grows
with its rows. What one row can make a partial hold is bounded by the states the plan
computes (:meth:`zagg.reducers.records.State.held_bytes`): at most an occupied cell of its
own (its word and each state's row: the cells of different chunks' reductions are not yet
merged, so the leaf's cell count bounds nothing here) and what a loss-free digest keeps of
a point. :mod:`zagg.pipeline.stream` sizes a run's shard groups by it.
"""

from __future__ import annotations

import numpy as np

from zagg.engine.plan import Plan

CELL_WORD_BYTES = 8  # every occupied cell of a partial carries its morton word


def held_per(plan: Plan) -> tuple[int, int]:
    """``(bytes per occupied cell, bytes per point)`` the plan's partials hold at most."""
    cell, point = CELL_WORD_BYTES, 0
    for _, spec in plan.specs:
        c, p = spec.state.held_bytes(spec.opts)
        cell, point = cell + c, point + p
    return cell, point


def held_bytes(plan: Plan, rows) -> np.ndarray:
    """At most the bytes the reductions of ``rows`` input rows hold before they are
    merged (each row a cell of its own), per entry of ``rows``."""
    cell, point = held_per(plan)
    return np.asarray(rows, dtype=np.int64) * (cell + point)
