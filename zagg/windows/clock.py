"""The clock of a time column as one small hashable value, for states that read times.

A state's options are part of its identity (two fields share a state only when their
options agree) and travel in the plan to every task, so they are plain tuples:
``(time_field, epoch, scale, units)``.
"""

from __future__ import annotations

from functools import lru_cache

from zagg.windows.schedule import Windowing, iso, parse_windowing


def clock_of(w: Windowing) -> tuple[str, str, str, str]:
    """The clock of a window schedule's time field."""
    return (w.time_field, iso(w.epoch), w.scale, w.units)


@lru_cache(maxsize=16)
def windowing_of(clock: tuple) -> Windowing:
    """A schedule reading times on ``clock`` (only its clock is used)."""
    field, epoch, scale, units = clock
    return parse_windowing(
        {"schedule": "yearly", "time_field": field, "epoch": epoch, "scale": scale, "units": units},
        (field,),
    )
