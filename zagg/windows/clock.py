"""The clock of a time column as one small hashable value, for states that read times.

A state's options are part of its identity (two fields share a state only when their
options agree) and travel in the plan to every task, so they are plain tuples:
``(time_field, epoch, scale, units)``. A store's clock is declared once: by the data
source (``epoch``, ``scale`` and ``units`` beside its time variable, read as the windowing
block reads them) or by ``output.windowing``; per-centroid times and time ranges read it.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import lru_cache

from zagg.checks.validation import fail
from zagg.windows.schedule import Windowing, iso, parse_clock_keys, parse_windowing

#: the data-source keys that declare how its time variable counts
SOURCE_CLOCK_KEYS = ("epoch", "scale", "units")
KEYS = ("time_field", "epoch", "scale", "units")


def clock_of(w: Windowing) -> tuple[str, str, str, str]:
    """The clock of a window schedule's time field."""
    return (w.time_field, iso(w.epoch), w.scale, w.units)


def source_clock(
    raw: Mapping, time_field: str | None, time_key: str, path: str = "data_source"
) -> tuple[str, str, str, str] | None:
    """The clock a data-source block declares for its time variable ``time_field`` (named
    by its ``time_key``: ``time``, or ``delta_time`` for granules): None without
    ``epoch``, ``scale`` or ``units``; refused when they come without the variable."""
    given = [k for k in SOURCE_CLOCK_KEYS if k in raw]
    if not given:
        return None
    if time_field is None:
        fail(
            f"{path}.{given[0]}",
            f"the clock describes the time variable, which {path}.{time_key} names; "
            f"add {path}.{time_key}, or remove {', '.join(given)}",
        )
    epoch, scale, units = parse_clock_keys(raw, path)
    return (time_field, iso(epoch), scale, units)


def with_source_clock(raw, clock: tuple | None):
    """An ``output.windowing`` mapping whose absent time keys are taken from the data
    source's ``clock`` (a store has one clock)."""
    if clock is None or not isinstance(raw, Mapping) or raw.get("schedule") in (None, "none"):
        return raw
    return {**dict(zip(KEYS, clock, strict=True)), **raw}


def check_one_clock(w: Windowing | None, clock: tuple | None) -> None:
    """Refuse a window schedule reading times on another clock than the data source's."""
    if w is None or clock is None:
        return
    for key, mine, theirs in zip(KEYS, clock_of(w), clock, strict=True):
        if mine != theirs:
            fail(
                f"output.windowing.{key}",
                f"{mine!r} differs from the data source's clock ({key} {theirs!r}); a store "
                "reads its times on one clock: drop the key (the windowing block takes the "
                "data source's) or make the two agree",
            )


@lru_cache(maxsize=16)
def windowing_of(clock: tuple) -> Windowing:
    """A schedule reading times on ``clock`` (only its clock is used)."""
    field, epoch, scale, units = clock
    return parse_windowing(
        {"schedule": "yearly", "time_field": field, "epoch": epoch, "scale": scale, "units": units},
        (field,),
    )
