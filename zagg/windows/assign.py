"""Instants → windows: which window each observation's time falls in, and their labels.

Times are read as the schedule declares (``units`` since ``epoch`` on ``scale``) and
compared as integer nanoseconds of UTC, so membership is exact: windows are half-open
``[start, end)`` and an instant on a boundary belongs to the later window. A window's
*index* is an integer that orders windows chronologically: the year (yearly), ``12·year
+ month − 1`` (monthly), days since 0001-01-01 (daily), or the position in the declared
list (explicit). ``-1`` marks an instant in no window (outside every explicit window, or
a time that is not finite).
"""

from __future__ import annotations

import numpy as np

from zagg.windows.schedule import NS, UNITS, Window, Windowing, iso

NONE = -1
_DAY0 = np.datetime64("0001-01-01", "D").astype(np.int64)  # days 0001-01-01 → 1970-01-01


def utc_ns(w: Windowing, t) -> tuple[np.ndarray, np.ndarray]:
    """``(UTC datetime64[ns], finite)`` of time-column values ``t`` (numbers in the
    schedule's units since its epoch on its scale, or datetime64 values read as UTC)."""
    t = np.asarray(t)
    if t.dtype.kind == "M":
        ns = t.astype("datetime64[ns]")
        return ns, ~np.isnat(ns)
    if t.dtype.kind not in "fiu":
        raise TypeError(
            f"time field {w.time_field!r} holds {t.dtype} values; expected numbers "
            f"({w.units} since {iso(w.epoch)}) or datetime64"
        )
    f = t.astype(np.float64, copy=False)
    ok = np.isfinite(f)
    off = np.rint(np.where(ok, f, 0.0) * (UNITS[w.units] * NS)).astype(np.int64)
    base = w.epoch.astype("datetime64[ns]").astype(np.int64) - w.scale_offset_s * NS
    return (base + off).astype("datetime64[ns]"), ok


def window_index(w: Windowing, t) -> np.ndarray:
    """The window index of each instant (int64; :data:`NONE` where in no window)."""
    ns, ok = utc_ns(w, t)
    if w.schedule == "yearly":
        idx = ns.astype("datetime64[Y]").astype(np.int64) + 1970
    elif w.schedule == "monthly":
        idx = ns.astype("datetime64[M]").astype(np.int64) + 1970 * 12
    elif w.schedule == "daily":
        idx = ns.astype("datetime64[D]").astype(np.int64) - _DAY0
    else:
        idx = _explicit(w.windows, ns)
    return np.where(ok, idx, NONE).astype(np.int64)


def _explicit(windows: tuple[Window, ...], ns: np.ndarray) -> np.ndarray:
    starts = np.array([x.start for x in windows], "datetime64[ns]")
    ends = np.array([x.end for x in windows], "datetime64[ns]")
    i = np.searchsorted(starts, ns, side="right") - 1
    inside = (i >= 0) & (ns < ends[np.clip(i, 0, None)])
    return np.where(inside, i, NONE)


def label(w: Windowing, index: int) -> str:
    """The window label of an index (``2019``, ``201906``, ``20190601`` or the declared
    label)."""
    index = int(index)
    if w.schedule == "yearly":
        return f"{index:04d}"
    if w.schedule == "monthly":
        return f"{index // 12:04d}{index % 12 + 1:02d}"
    if w.schedule == "daily":
        day = np.datetime64(int(index + _DAY0), "D")
        return np.datetime_as_string(day).replace("-", "")
    return w.windows[index].label


def bounds(w: Windowing, index: int) -> tuple[np.datetime64, np.datetime64]:
    """The UTC ``[start, end)`` of a window, datetime64[s]."""
    index = int(index)
    if w.schedule == "yearly":
        y = np.datetime64(index - 1970, "Y")
        return y.astype("datetime64[s]"), (y + np.timedelta64(1, "Y")).astype("datetime64[s]")
    if w.schedule == "monthly":
        m = np.datetime64(index - 1970 * 12, "M")
        return m.astype("datetime64[s]"), (m + np.timedelta64(1, "M")).astype("datetime64[s]")
    if w.schedule == "daily":
        d = np.datetime64(int(index + _DAY0), "D")
        return d.astype("datetime64[s]"), (d + np.timedelta64(1, "D")).astype("datetime64[s]")
    x = w.windows[index]
    return x.start, x.end


def in_units(w: Windowing, when: np.datetime64) -> float:
    """A UTC instant in the time column's own units (what a ge/lt filter compares)."""
    delta = np.datetime64(when, "ns") - w.epoch.astype("datetime64[ns]")
    return (int(delta.astype(np.int64)) + w.scale_offset_s * NS) / (UNITS[w.units] * NS)


def iso_ns(t) -> str:
    """A UTC datetime64 as ISO 8601 with a ``Z`` at its own precision (stamp time ranges:
    the actual first and last observation)."""
    t = np.datetime64(t, "ns")
    unit = "s" if int(t.astype(np.int64)) % NS == 0 else "ns"
    text = np.datetime_as_string(t, unit=unit)
    if unit == "ns":
        text = text.rstrip("0")
    return f"{text}Z"
