"""ICESat-2 beams: which of a granule's six ground tracks are strong, their ATLAS spots, and
the granule's reference ground track and cycle, as per-point variables.

ATLAS fires three strong and three weak beams; which ground tracks (``gt1l`` ... ``gt3r``)
carry the strong ones depends on the spacecraft's orientation, recorded per granule in
``/orbit_info/sc_orient``: 0 (backward) puts the strong beams on the left tracks
(``gt1l gt2l gt3l``, spots 1, 3, 5), 1 (forward) on the right ones (``gt1r gt2r gt3r``, spots
5, 3, 1); 2 (in transition) has no fixed assignment. The granule's reference ground track
and cycle are ``/orbit_info/rgt`` and ``/orbit_info/cycle_number``.

:data:`POINT_VARIABLES` are the per-point variables a granule Dataset gets from this
metadata (each constant along one group of one granule): ``beam`` (the ground track as a
number, ``gt1l`` 10, ``gt1r`` 20, ``gt2l`` 30, ``gt2r`` 40, ``gt3l`` 50, ``gt3r`` 60),
``spot`` (the ATLAS spot, 1..6; odd spots are strong), ``strong`` (1 on a strong beam, 0 on
a weak one), ``rgt`` and ``cycle``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from zagg.sources.errors import GranuleError

__all__ = [
    "BEAM_SELECTIONS",
    "POINT_VARIABLES",
    "Orbit",
    "beam_code",
    "is_beam",
    "read_orbit",
    "spot",
    "strong",
]

BEAM_SELECTIONS = ("strong", "weak", "all")
POINT_VARIABLES = ("beam", "spot", "strong", "rgt", "cycle")
#: the dtype of each per-point variable
DTYPES = {"beam": "i1", "spot": "i1", "strong": "i1", "rgt": "i2", "cycle": "i2"}
ORBIT_PATHS = {
    "sc_orient": "/orbit_info/sc_orient",
    "rgt": "/orbit_info/rgt",
    "cycle": "/orbit_info/cycle_number",
}
BACKWARD, FORWARD, TRANSITION = 0, 1, 2
_BEAM = re.compile(r"^gt([123])([lr])$")


@dataclass(frozen=True)
class Orbit:
    """A granule's orbit metadata (None: the granule does not record it)."""

    sc_orient: int | None = None
    rgt: int | None = None
    cycle: int | None = None


def is_beam(group: str | None) -> bool:
    """Whether a group is an ICESat-2 ground track (``gt1l`` ... ``gt3r``)."""
    return group is not None and _BEAM.match(group) is not None


def beam_code(group: str) -> int:
    """The ground track as a number: ``gt1l`` 10, ``gt1r`` 20, ... ``gt3r`` 60."""
    pair, side = _BEAM.match(group).groups()
    return 20 * (int(pair) - 1) + (10 if side == "l" else 20)


def strong(group: str, sc_orient: int) -> bool:
    """Whether ``group`` carries a strong beam under the orientation ``sc_orient``."""
    side = _BEAM.match(group).group(2)
    return side == ("l" if sc_orient == BACKWARD else "r")


def spot(group: str, sc_orient: int) -> int:
    """The ATLAS spot (1..6) of ``group`` under the orientation ``sc_orient``: backward,
    ``gt1l`` is spot 1 and ``gt3r`` spot 6; forward, ``gt3r`` is spot 1 and ``gt1l`` spot 6."""
    code = beam_code(group) // 10  # 1..6 from gt1l to gt3r
    return code if sc_orient == BACKWARD else 7 - code


def read_orbit(f) -> Orbit:
    """The orbit metadata of the open granule ``f`` (each value None when absent). An
    ``sc_orient`` holding several values (the orientation changed within the granule) reads
    as :data:`TRANSITION`."""
    values = {}
    for key, path in ORBIT_PATHS.items():
        obj = f.get(path)
        if obj is None or getattr(obj, "shape", None) is None:
            values[key] = None
            continue
        arr = np.asarray(obj[()]).ravel()
        if not arr.size:
            values[key] = None
        elif key == "sc_orient" and np.unique(arr).size > 1:
            values[key] = TRANSITION
        else:
            values[key] = int(arr[0])
    return Orbit(**values)


def kept_groups(
    groups: tuple[str, ...], beams: str, orbit: Orbit, gid: str, key: str
) -> tuple[str, ...]:
    """The groups of one granule a ``beams`` selection keeps, by its orientation; a
    granule without a fixed orientation is refused (a :class:`GranuleError` naming it)."""
    if beams == "all":
        return groups
    if orbit.sc_orient not in (BACKWARD, FORWARD):
        what = (
            "does not record /orbit_info/sc_orient"
            if orbit.sc_orient is None
            else f"has sc_orient {orbit.sc_orient} (the spacecraft was turning: no beam is "
            "steadily strong)"
        )
        raise GranuleError(
            f"granule {gid!r} {what}, so its {beams} beams are unknown; set {key}: all, or "
            "leave the granule out (on_error: skip)"
        )
    want = beams == "strong"
    return tuple(g for g in groups if strong(g, orbit.sc_orient) == want)
