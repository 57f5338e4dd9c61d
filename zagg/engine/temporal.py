"""What the leaf writer asks of a run that reads times: a windowed unit's window and time
range, each leaf's temporal record, and the clocked observations of an unwindowed chunk's
shards that the record counts (the store root's temporal coverage after the leaves is
:func:`zagg.hive.rootsection.root_temporal`).

Kept apart from :mod:`zagg.engine.write` and :mod:`zagg.engine.reduce` so that they only
name these steps.
"""

from __future__ import annotations

import numpy as np


def unit_window(windowing, sc) -> tuple[str | None, list[str] | None]:
    """The window label of a windowed unit's cells and the actual time range they hold
    (first and last observation, ISO 8601 UTC); ``(None, None)`` unwindowed."""
    if windowing is None or getattr(sc, "window", None) is None:
        return None, None
    from zagg.windows.assign import iso_ns, label, utc_ns

    span = None
    if sc.time_range is not None:
        ns, _ = utc_ns(windowing, np.asarray(sc.time_range, np.float64))
        span = [iso_ns(ns[0]), iso_ns(ns[1])]
    return label(windowing, sc.window), span


def temporal_record(timed: tuple[str, ...], sc) -> dict | None:
    """The leaf's ``temporal.toc`` (:mod:`zagg.windows.record`): when fields declare
    per-centroid times (``timed``, :attr:`zagg.config.store.StoreSpec.timed`) and the unit
    saw a clocked observation."""
    if not timed or getattr(sc, "clock", None) is None:
        return None
    from zagg.windows.record import leaf_record

    return leaf_record(list(timed), sc.clock)


def shard_clocks(plan, points) -> dict | None:
    """Per shard word, the clocked observations of an unwindowed chunk's kept points on the
    plan's clock (a :class:`zagg.windows.record.Clock`; None when no field keeps times)."""
    if plan.clock is None or plan.windowing is not None:
        return None
    if not points.cell_words.size:
        return {}
    from zagg import grid as G
    from zagg.windows.clock import windowing_of
    from zagg.windows.record import clock_of
    from zagg.windows.toc import instants

    ns, ok = instants(windowing_of(plan.clock), points.values(plan.clock[0]))
    shard = G.ancestor(points.cell_words[ok], plan.grid.shard_order)
    ns = ns[ok]
    order = np.argsort(shard, kind="stable")
    shard, ns = shard[order], ns[order]
    starts = np.flatnonzero(np.concatenate(([True], shard[1:] != shard[:-1])))
    bounds = np.append(starts, shard.size)
    return {int(shard[a]): clock_of(ns[a:b]) for a, b in zip(bounds[:-1], bounds[1:], strict=True)}
