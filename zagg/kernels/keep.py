"""The rows of a chunk that get keyed, and their coordinates, gathered in one pass.

A chunk's filters keep most of its rows, and a few rows more fall out because their
coordinates cannot be keyed (non-finite, or a latitude outside [-90, 90]). Longitudes are
angles: every finite one is wrapped into [-180, 180) on the way (:func:`wrap_longitude`), so
one position keys to one cell however its longitude is spelled. Listing the kept
rows and gathering the coordinates through them one array at a time reads and writes every
array several times; :func:`keyable_rows` walks the chunk once, branch-free, and writes the
rows and both coordinates of every keyable kept point side by side.
"""

from __future__ import annotations

import numba as nb
import numpy as np


@nb.njit(cache=True, nogil=True, inline="always")
def wrap_longitude(x):
    """``x`` degrees as the same angle in [-180, 180), exactly (``fmod`` is exact and each
    shift by 360 is exact on the half-range it applies to), -0.0 as 0.0; a non-finite ``x``
    gives NaN. An in-range longitude other than -0.0 comes back unchanged bit for bit."""
    if -180.0 <= x < 180.0:  # nearly every longitude: no division
        return x + 0.0  # -0.0 + 0.0 is 0.0
    r = np.fmod(x, 360.0)
    if r >= 180.0:
        r -= 360.0
    elif r < -180.0:
        r += 360.0
    return r + 0.0  # -0.0 + 0.0 is 0.0


@nb.njit(cache=True, nogil=True)
def _keyable(keep, masked, lat, lon, rows, lat_out, lon_out):
    """Write row, latitude and wrapped longitude of every keyable row ``keep`` keeps (every
    row unless ``masked``); returns (rows written, rows ``keep`` keeps)."""
    k = 0
    kept = 0
    for i in range(lat.shape[0]):
        take = keep[i] != 0 if masked else True
        y = lat[i]
        x = lon[i]
        # |NaN| <= 90 is False, so a finite latitude is part of the range check
        ok = take & (abs(y) <= 90.0) & np.isfinite(x)
        rows[k] = i
        lat_out[k] = y
        lon_out[k] = wrap_longitude(x) if ok else x
        k += ok  # every slot is written, the next one overwrites a refused row
        kept += take
    return k, kept


def _read_only(x: np.ndarray) -> np.ndarray:
    """A read-only C-contiguous view: inputs arrive writeable or not, and numba compiles one
    copy of a kernel per flavour."""
    x = np.ascontiguousarray(x).view()
    x.flags.writeable = False
    return x


def keyable_rows(keep, lat, lon):
    """The rows ``keep`` (a boolean mask, or None for all rows) keeps whose coordinates can
    be keyed (finite, latitude within [-90, 90]), with their float64 latitudes and
    longitudes wrapped into [-180, 180): ``(rows, lat, lon, n_kept)``, ``n_kept`` the rows ``keep`` keeps before the
    coordinate check. Rows ascend; ``rows`` is int64."""
    lat = _read_only(np.asarray(lat, dtype=np.float64))
    lon = _read_only(np.asarray(lon, dtype=np.float64))
    n = lat.shape[0]
    if lon.shape != lat.shape:
        raise ValueError("latitude and longitude must have the same length")
    if keep is None:
        mask = _read_only(np.zeros(1, np.uint8))
    else:
        mask = _read_only(np.asarray(keep, dtype=np.bool_).view(np.uint8))
        if mask.shape != lat.shape:
            raise ValueError("the mask must have one entry per row")
    rows = np.empty(n, np.int64)
    lat_out = np.empty(n, np.float64)
    lon_out = np.empty(n, np.float64)
    k, kept = _keyable(mask, keep is not None, lat, lon, rows, lat_out, lon_out)
    return rows[:k], lat_out[:k], lon_out[:k], int(kept)
