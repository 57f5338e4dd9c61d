"""What the leaf writer asks of a windowed run: each unit's window and time range, its
leaf's temporal record (the store root's temporal coverage after the leaves is
:func:`zagg.hive.rootsection.root_temporal`).

Kept apart from :mod:`zagg.engine.write` so that the writer only names these steps.
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
