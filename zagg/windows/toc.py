"""Observation times as mortie toc words, and toc words back to ``datetime64[ns]``.

A toc word (``mortie-toc/1``) holds an instant exact to the nanosecond, or a conservative
range, on mortie's continuous GPS-aligned scale. Times of a ``gps`` or ``tai`` column go
there by arithmetic (TAI = GPS + 19 s, no leap seconds on either); times of a ``utc``
column go through mortie's leap-second table (:func:`mortie.from_datetime64`). Mortie is the
one authority for the words: nothing here encodes or merges them by hand.
:func:`pinned_order` is the one check of a stored temporal order against the pin.
"""

from __future__ import annotations

import mortie
import numpy as np

from zagg.windows.assign import utc_ns
from zagg.windows.record import TEMPORAL_ORDER
from zagg.windows.schedule import NS, UNITS, Windowing

GPS_EPOCH = np.datetime64("1980-01-06T00:00:00", "ns")
TAI_MINUS_GPS_S = 19


def instants(w: Windowing, t) -> tuple[np.ndarray, np.ndarray]:
    """``(mortie ns on its GPS-aligned scale (int64), finite)`` of time-column values."""
    t = np.asarray(t)
    if w.scale == "utc" or t.dtype.kind == "M":
        ns, ok = utc_ns(w, t)
        out = np.zeros(ns.shape, np.int64)
        if ok.any():
            out[ok] = np.asarray(mortie.from_datetime64(ns[ok]), np.int64)
        return out, ok
    f = t.astype(np.float64, copy=False)
    ok = np.isfinite(f)
    off = np.rint(np.where(ok, f, 0.0) * (UNITS[w.units] * NS)).astype(np.int64)
    label = int((w.epoch.astype("datetime64[ns]") - GPS_EPOCH).astype(np.int64))
    if w.scale == "tai":
        label -= TAI_MINUS_GPS_S * NS
    gps = label + off
    return np.asarray(mortie.from_gps_ns(gps), np.int64), ok


def observation_words(w: Windowing, t) -> np.ndarray:
    """One timestamp toc word per observation (uint64; 0, the empty word, where the time
    is not finite)."""
    ns, ok = instants(w, t)
    out = np.zeros(ns.shape, np.uint64)
    if ok.any():
        out[ok] = np.asarray(mortie.time2toc(ns[ok].astype(np.uint64)), np.uint64)
    return out


def decode(words) -> tuple[np.ndarray, np.ndarray]:
    """``(start, end)`` UTC ``datetime64[ns]`` of toc words: both the instant for a
    timestamp, the conservative envelope (end exclusive) for a range."""
    words = np.asarray(words, np.uint64)
    if not words.size:
        empty = np.zeros(words.shape, "datetime64[ns]")
        return empty, empty.copy()
    start, end = mortie.toc2time(words.reshape(-1))
    return (
        np.asarray(mortie.to_datetime64(start)).reshape(words.shape),
        np.asarray(mortie.to_datetime64(end)).reshape(words.shape),
    )


def pinned_order(value) -> int:
    """A stored ``temporal_order`` (a leaf record's counts, the root counts block, a
    ``coverage.toc`` and its shards' covers) as an int, refused (``ValueError``) unless it
    is a whole number from 0 to the pinned :data:`~zagg.windows.record.TEMPORAL_ORDER`:
    every bucket of the temporal path is at most that fine."""
    if isinstance(value, bool) or not isinstance(value, int | np.integer):
        raise ValueError(f"temporal_order {value!r} is not a whole number")
    if int(value) > TEMPORAL_ORDER:
        raise ValueError(f"temporal_order {int(value)} is above the pin {TEMPORAL_ORDER}")
    if int(value) < 0:
        raise ValueError(f"temporal_order {int(value)} is negative")
    return int(value)
