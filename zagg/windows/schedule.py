"""``output.windowing``: the time-window schedule of a store, parsed and validated.

A windowed store (``morton-hive/2``) splits each shard's observations into one leaf per
time window. Windows are UTC calendar intervals, half-open ``[start, end)``: an instant on
a boundary belongs to the later window. Generative schedules (``yearly``, ``monthly``,
``daily``) name their windows ``YYYY``, ``YYYYMM``, ``YYYYMMDD`` (hyphen-free, so names
sort chronologically); an ``explicit`` schedule lists its windows, each a range
``{label, start, end}`` or a point ``{label, timestamp}`` (the one second ``[t, t+1 s)``).
Bounds are whole seconds: each truncates to the second holding it, and is never widened.

The schedule also says how to read the time column: ``time_field`` (a declared
data_source variable) counts ``units`` since ``epoch`` on the clock ``scale``. GPS and TAI
clocks run a fixed 18 s and 37 s ahead of UTC (no leap table: none has been declared since
2017). Every refusal names the key (and the entry) at fault and what would be valid.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from zagg.checks.validation import check_keys, did_you_mean, fail

SCHEDULES = ("none", "yearly", "monthly", "daily", "explicit")
RESERVED_SCHEDULES = ("quarterly",)  # in the grammar, not implemented
SCALES = {"utc": 0, "gps": 18, "tai": 37}  # seconds the clock runs ahead of UTC
UNITS = {"seconds": 1, "days": 86400}  # seconds per unit
ALL_TOKEN = "all"  # names the all-time fold; never a window label
LABEL_RE = re.compile(r"^[0-9A-Za-z-]{1,32}$")
KEYS = ("schedule", "time_field", "epoch", "scale", "units", "windows")
RANGE_KEYS = ("label", "start", "end")
POINT_KEYS = ("label", "timestamp")
PATH = "output.windowing"
NS = 1_000_000_000
#: bits of a unit key left for the window index below a shard word (zagg.windows.units)
UNIT_BITS_FREE = 54


@dataclass(frozen=True)
class Window:
    """One window: its label and UTC bounds in whole seconds, half-open."""

    label: str
    start: np.datetime64  # datetime64[s], UTC
    end: np.datetime64

    def as_dict(self) -> dict:
        return {"label": self.label, "start": iso(self.start), "end": iso(self.end)}


@dataclass(frozen=True)
class Windowing:
    """A validated window schedule and how to read the time column."""

    schedule: str
    time_field: str | None = None
    epoch: np.datetime64 | None = None  # the epoch's label on the declared scale, [s]
    scale: str = "utc"
    units: str = "seconds"
    windows: tuple[Window, ...] = ()  # explicit schedules only, ascending by start

    @property
    def windowed(self) -> bool:
        return self.schedule != "none"

    @property
    def scale_offset_s(self) -> int:
        return SCALES[self.scale]

    def manifest_block(self) -> dict:
        """The manifest's ``temporal`` block: the schedule and how times are read (never
        the store's actual extent, which the leaves' stamps carry)."""
        block = {
            "schedule": self.schedule,
            "time_field": self.time_field,
            "epoch": iso(self.epoch),
            "scale": self.scale,
            "units": self.units,
            "calendar": "gregorian-utc",
            "boundaries": "half-open",
            "append": "new-windows-add-leaves",
        }
        if self.schedule == "explicit":
            block["windows"] = [w.as_dict() for w in self.windows]
        return block

    def as_dict(self) -> dict:
        """A plain mapping :func:`parse_windowing` reads back to an equal schedule."""
        out = {"schedule": self.schedule}
        if self.windowed:
            out.update(
                time_field=self.time_field,
                epoch=iso(self.epoch),
                scale=self.scale,
                units=self.units,
            )
        if self.schedule == "explicit":
            out["windows"] = [w.as_dict() for w in self.windows]
        return out


def iso(t) -> str | None:
    """A datetime64 as ISO 8601 UTC with a ``Z``, whole seconds (None stays None)."""
    if t is None:
        return None
    return f"{np.datetime_as_string(np.datetime64(t, 's'), unit='s')}Z"


def parse_instant(value, path: str) -> np.datetime64:
    """An ISO 8601 instant (string, or a date/datetime YAML parsed) as datetime64[ms] UTC;
    a value without a UTC offset is read as UTC."""
    if isinstance(value, dt.datetime):
        when = value
    elif isinstance(value, dt.date):
        when = dt.datetime(value.year, value.month, value.day)
    elif isinstance(value, str):
        text = value.strip()
        try:
            when = dt.datetime.fromisoformat(
                text[:-1] + "+00:00" if text.endswith(("Z", "z")) else text
            )
        except ValueError:
            fail(
                path,
                f"{value!r} is not an ISO 8601 instant; write e.g. "
                "'2019-06-01T00:00:00Z' or '2019-06-01'",
            )
    else:
        fail(path, f"expected an ISO 8601 instant such as '2019-06-01T00:00:00Z', got {value!r}")
    if when.tzinfo is not None:
        when = when.astimezone(dt.UTC).replace(tzinfo=None)
    return np.datetime64(when, "ms")


def whole_second(t: np.datetime64) -> np.datetime64:
    """The whole second holding ``t`` (bounds truncate, never widen)."""
    return np.datetime64(t, "ms").astype("datetime64[s]")


def parse_windowing(raw, variables=(), shard_order: int | None = None) -> Windowing | None:
    """Validate ``output.windowing`` (absent or ``schedule: none`` → None).

    ``variables`` are the data_source's declared names (``time_field`` must be one of
    them); ``shard_order`` bounds how many windows a schedule may hold (each run unit is
    keyed by one 64-bit word, :mod:`zagg.windows.units`).
    """
    if raw is None:
        return None
    check_keys(raw, KEYS, PATH, ("schedule",))
    schedule = raw["schedule"]
    if schedule in RESERVED_SCHEDULES:
        fail(
            f"{PATH}.schedule",
            f"{schedule!r} is reserved by the format but not implemented; "
            "use monthly, or explicit windows for quarters",
        )
    if schedule not in SCHEDULES:
        fail(
            f"{PATH}.schedule",
            f"{schedule!r} is not a schedule{did_you_mean(schedule, SCHEDULES)}; "
            f"valid: {', '.join(SCHEDULES)}",
        )
    if schedule == "none":
        extra = sorted(set(raw) - {"schedule"})
        if extra:
            fail(
                f"{PATH}.{extra[0]}",
                "schedule: none splits nothing; remove this key or choose a schedule",
            )
        return None
    if "time_field" not in raw:
        fail(
            f"{PATH}.time_field",
            "a windowed store needs the variable holding each "
            f"observation's time; one of: {', '.join(variables) or '(none declared)'}",
        )
    time_field = raw["time_field"]
    if not isinstance(time_field, str) or time_field not in variables:
        fail(
            f"{PATH}.time_field",
            f"{time_field!r} is not a declared data_source variable"
            f"{did_you_mean(time_field, variables)}; windows filter on a column the run "
            f"reads, so declare it (declared: {', '.join(variables) or 'none'})",
        )
    epoch, scale, units = parse_clock_keys(raw, PATH)
    windows: tuple[Window, ...] = ()
    if schedule == "explicit":
        windows = parse_windows(raw.get("windows"))
    elif "windows" in raw:
        fail(
            f"{PATH}.windows",
            f"only schedule: explicit lists windows; the {schedule} "
            "schedule makes its own; remove the list or set schedule: explicit",
        )
    out = Windowing(schedule, time_field, epoch, scale, units, windows)
    if shard_order is not None:
        check_unit_room(out, shard_order)
    return out


def parse_clock_keys(raw: Mapping, path: str) -> tuple[np.datetime64, str, str]:
    """``epoch`` (required), ``scale`` and ``units`` of a block that declares how a time
    variable counts (``output.windowing``, or the data source's clock at ``path``)."""
    if "epoch" not in raw:
        fail(
            f"{path}.epoch",
            "give the instant the time column counts from, as ISO 8601 "
            "UTC (e.g. '2018-01-01T00:00:00Z' for ICESat-2 delta_time)",
        )
    epoch = parse_instant(raw["epoch"], f"{path}.epoch")
    if epoch != whole_second(epoch):
        fail(
            f"{path}.epoch",
            f"{raw['epoch']!r} is not a whole second; the epoch is the "
            "time column's zero and must be exact",
        )
    scale = raw.get("scale", "utc")
    if scale not in SCALES:
        fail(
            f"{path}.scale",
            f"{scale!r} is not a time scale{did_you_mean(scale, SCALES)}; "
            f"valid: {', '.join(SCALES)} (GPS and TAI run 18 s and 37 s ahead of UTC)",
        )
    units = raw.get("units", "seconds")
    if units not in UNITS:
        fail(
            f"{path}.units",
            f"{units!r} is not a unit{did_you_mean(units, UNITS)}; valid: {', '.join(UNITS)}",
        )
    return whole_second(epoch), scale, units


def parse_windows(raw) -> tuple[Window, ...]:
    """The explicit windows, each checked, points desugared to one second, then checked
    together (unique labels, disjoint), in ascending order."""
    path = f"{PATH}.windows"
    if not isinstance(raw, list) or not raw:
        fail(
            path,
            "schedule: explicit needs a non-empty list of windows, each "
            "{label, start, end} or {label, timestamp}",
        )
    out = []
    for i, entry in enumerate(raw):
        out.append(parse_entry(entry, f"{path}[{i}]"))
    seen: dict[str, int] = {}
    for i, w in enumerate(out):
        if w.label in seen:
            fail(
                f"{path}[{i}].label",
                f"{w.label!r} is already the label of window "
                f"{seen[w.label]}; labels must be unique",
            )
        seen[w.label] = i
    order = sorted(range(len(out)), key=lambda i: out[i].start)
    for a, b in zip(order, order[1:], strict=False):
        if out[b].start < out[a].end:
            fail(
                f"{path}[{b}]",
                f"window {out[b].label!r} [{iso(out[b].start)}, "
                f"{iso(out[b].end)}) overlaps window {out[a].label!r} [{iso(out[a].start)}, "
                f"{iso(out[a].end)}); windows must be disjoint (a point entry covers its "
                "whole second)",
            )
    return tuple(out[i] for i in order)


def parse_entry(entry, path: str) -> Window:
    """One explicit window: a range ``{label, start, end}`` or a point ``{label,
    timestamp}`` (the second ``[t, t + 1 s)``), with no other key."""
    if not isinstance(entry, Mapping):
        fail(path, f"expected {{label, start, end}} or {{label, timestamp}}, got {entry!r}")
    keys = set(entry)
    if "timestamp" in keys and keys & {"start", "end"}:
        fail(
            path,
            "an entry is either a point {label, timestamp} or a range {label, start, "
            "end}, not both; split it into two windows",
        )
    allowed = POINT_KEYS if "timestamp" in keys else RANGE_KEYS
    check_keys(entry, allowed, path, allowed)
    label = entry["label"]
    if not isinstance(label, str) or not LABEL_RE.match(label) or label == ALL_TOKEN:
        fail(
            f"{path}.label",
            f"{label!r} is not a window label: use 1-32 characters of "
            f"[0-9A-Za-z-] (no '_'), and not {ALL_TOKEN!r}, which names the all-time fold",
        )
    if "timestamp" in entry:
        start = whole_second(parse_instant(entry["timestamp"], f"{path}.timestamp"))
        return Window(label, start, start + np.timedelta64(1, "s"))
    start = parse_instant(entry["start"], f"{path}.start")
    end = parse_instant(entry["end"], f"{path}.end")
    if end <= start:
        fail(path, f"start {iso(start)} is not before end {iso(end)}; a window is [start, end)")
    s, e = whole_second(start), whole_second(end)
    if s == e:
        fail(
            path,
            f"both bounds fall in the second {iso(s)}, so the window would be empty "
            "(bounds truncate to whole seconds); for one second use {label, timestamp}",
        )
    return Window(label, s, e)


def index_bits(w: Windowing) -> int:
    """How many bits the schedule's largest window index needs (:mod:`zagg.windows.assign`)."""
    largest = {
        "yearly": 9999,
        "monthly": 9999 * 12 + 11,
        "daily": 3_652_058,
        "explicit": len(w.windows),
    }[w.schedule]
    return int(largest).bit_length()


def check_unit_room(w: Windowing, shard_order: int) -> None:
    """Refuse a schedule whose window indices do not fit beside a shard word at this
    shard order (a unit key is one uint64: the shard word with the window in the bits
    its order leaves zero)."""
    room = UNIT_BITS_FREE - 2 * shard_order
    need = index_bits(w)
    if need > room:
        fail(
            f"{PATH}.schedule",
            f"a {w.schedule} schedule needs {need} bits per window index, "
            f"but shards at parent_order {shard_order} leave {max(room, 0)}; use a coarser "
            "schedule or a lower output.grid.parent_order",
        )
