"""What the leaf writer asks of a windowed run: each unit's window and time range, its
leaf's temporal record (the store root's temporal coverage after the leaves is
:func:`zagg.hive.rootsection.root_temporal`).

Kept apart from :mod:`zagg.engine.write` so that the writer only names these steps.
"""

from __future__ import annotations

import numpy as np


def run_windowing(z: dict):
    """The window schedule of a run from its ``attrs["zagg"]`` block (None: unwindowed)."""
    if z.get("windowing") is None:
        return None
    from zagg.windows.schedule import parse_windowing

    raw = z["windowing"]
    return parse_windowing(raw, (raw.get("time_field"),))


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


def temporal_record(fields: dict, sc) -> dict | None:
    """The leaf's ``temporal.toc`` (:mod:`zagg.windows.record`): when a field declares
    per-centroid times and the unit saw a clocked observation."""
    timed = sorted(v["times_of"] for v in fields.values() if v.get("times_of"))
    if not timed or getattr(sc, "clock", None) is None:
        return None
    from zagg.windows.record import leaf_record

    return leaf_record(timed, sc.clock)
