"""Window schedules: parsing, the refusal catalogue, and instant → window assignment."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import yaml

from zagg.config.model import ConfigError, load_config
from zagg.windows import assign, units
from zagg.windows.schedule import parse_windowing

VARS = ("h_ph", "delta_time")
EPOCH = "2018-01-01T00:00:00Z"
YEAR_2018 = 365 * 86400  # seconds from 2018-01-01 to 2019-01-01 (UTC, no leap second)


def sched(**kw):
    raw = {"schedule": "yearly", "time_field": "delta_time", "epoch": EPOCH, **kw}
    return parse_windowing(raw, VARS, 9)


def explicit(*windows, **kw):
    return sched(schedule="explicit", windows=list(windows), **kw)


def labels(w, t):
    idx = assign.window_index(w, np.asarray(t, dtype=np.float64))
    return [None if i < 0 else assign.label(w, i) for i in idx]


# -- assignment -------------------------------------------------------------------------
def test_boundary_instant_belongs_to_the_later_window():
    w = sched()
    assert labels(w, [YEAR_2018 - 1e-6, YEAR_2018, YEAR_2018 + 1e-6]) == ["2018", "2019", "2019"]


def test_gps_runs_18_seconds_ahead_of_utc():
    # GPS seconds since 2018-01-01 reach UTC 2019-01-01T00:00:00 at YEAR_2018 + 18
    gps = sched(scale="gps")
    assert labels(gps, [YEAR_2018 + 17.999, YEAR_2018 + 18]) == ["2018", "2019"]
    utc = sched(scale="utc")
    assert labels(utc, [YEAR_2018 + 17.999]) == ["2019"]
    tai = sched(scale="tai")
    assert labels(tai, [YEAR_2018 + 36.5, YEAR_2018 + 37]) == ["2018", "2019"]
    # bounds in the column's own units say the same
    start, _ = assign.bounds(gps, 2019)
    assert assign.in_units(gps, start) == YEAR_2018 + 18
    assert assign.in_units(tai, start) == YEAR_2018 + 37


def test_monthly_daily_labels_and_day_units():
    t = np.array([YEAR_2018 + 151 * 86400 + 0.5])  # 2019-06-01T00:00:00.5 UTC
    assert labels(sched(schedule="monthly"), t) == ["201906"]
    assert labels(sched(schedule="daily"), t) == ["20190601"]
    days = sched(schedule="daily", units="days")
    assert labels(days, [365.0, 364.999999]) == ["20190101", "20181231"]
    m = sched(schedule="monthly")
    i = int(assign.window_index(m, t)[0])
    assert [str(b) for b in assign.bounds(m, i)] == ["2019-06-01T00:00:00", "2019-07-01T00:00:00"]


def test_nan_times_are_in_no_window():
    assert labels(sched(), [np.nan, np.inf, 0.0]) == [None, None, "2018"]


def test_explicit_ranges_are_half_open_and_adjacent_windows_split_at_the_boundary():
    w = explicit(
        {"label": "a", "start": "2019-01-01", "end": "2019-02-01"},
        {"label": "b", "start": "2019-02-01", "end": "2019-03-01"},
    )
    feb = YEAR_2018 + 31 * 86400
    assert labels(w, [YEAR_2018 - 1, YEAR_2018, feb - 1e-3, feb, feb + 28 * 86400]) == [
        None,
        "a",
        "a",
        "b",
        None,
    ]


def test_point_window_covers_its_whole_second_only():
    w = explicit({"label": "scene-a", "timestamp": "2021-03-14T12:00:31.024Z"})
    (win,) = w.windows
    assert (str(win.start), str(win.end)) == ("2021-03-14T12:00:31", "2021-03-14T12:00:32")
    t31 = assign.in_units(w, np.datetime64("2021-03-14T12:00:31"))
    assert labels(w, [t31 - 1e-3, t31, t31 + 0.024, t31 + 0.999, t31 + 1]) == [
        None,
        "scene-a",
        "scene-a",
        "scene-a",
        None,
    ]
    # a rounded-off timestamp matches nothing of the acquisition's own second
    rounded = explicit({"label": "scene-a", "timestamp": "2021-03-14T12:00:00Z"})
    assert labels(rounded, [t31 + 0.024]) == [None]


def test_sub_second_range_straddling_a_second_renders_to_that_second():
    w = explicit({"label": "x", "start": "2020-01-01T12:00:01.9Z", "end": "2020-01-01T12:00:02.1Z"})
    (win,) = w.windows
    assert (str(win.start), str(win.end)) == ("2020-01-01T12:00:01", "2020-01-01T12:00:02")


def test_yaml_dates_and_offsets_read_as_utc():
    raw = yaml.safe_load("""
schedule: explicit
time_field: delta_time
epoch: 2018-01-01
windows:
  - {label: melt-2019, start: 2019-06-01, end: "2019-09-01T02:00:00+02:00"}
""")
    w = parse_windowing(raw, VARS, 9)
    assert str(w.epoch) == "2018-01-01T00:00:00"
    assert w.windows[0].as_dict() == {
        "label": "melt-2019",
        "start": "2019-06-01T00:00:00Z",
        "end": "2019-09-01T00:00:00Z",
    }


def test_unit_keys_round_trip_beside_shard_words():
    import zagg.grid as G

    shard = G.from_decimal(["-5121141141", "11213"])
    shard9 = G.from_decimal(["-5121141141"])
    keys = units.pack(shard9[[0, 0]], np.array([2019, 2020]), 9)
    s, i = units.unpack(keys, 9)
    assert s.tolist() == [int(shard9[0])] * 2 and i.tolist() == [2019, 2020]
    assert keys[0] < keys[1]
    s5, i5 = units.unpack(units.pack(shard[1:], [3_652_058], 5), 5)
    assert s5.tolist() == [int(shard[1])] and i5.tolist() == [3_652_058]


def test_manifest_block_lists_explicit_windows():
    w = explicit({"label": "p", "timestamp": "2021-03-14T12:00:31Z"}, scale="gps")
    assert w.manifest_block() == {
        "schedule": "explicit",
        "time_field": "delta_time",
        "epoch": "2018-01-01T00:00:00Z",
        "scale": "gps",
        "units": "seconds",
        "calendar": "gregorian-utc",
        "boundaries": "half-open",
        "append": "new-windows-add-leaves",
        "windows": [{"label": "p", "start": "2021-03-14T12:00:31Z", "end": "2021-03-14T12:00:32Z"}],
    }
    assert parse_windowing(w.as_dict(), VARS, 9) == w


# -- refusals ---------------------------------------------------------------------------
R = "output.windowing"
RANGE_A = {"label": "a", "start": "2019-01-01", "end": "2019-02-01"}
REFUSALS = [
    ({"schedule": "quarterly"}, f"{R}.schedule", "reserved"),
    ({"schedule": "weekly"}, f"{R}.schedule", "not a schedule"),
    ({"schedule": "none", "time_field": "delta_time"}, f"{R}.time_field", "splits nothing"),
    ({"_drop": "time_field"}, f"{R}.time_field", "needs the variable"),
    ({"time_field": "time"}, f"{R}.time_field", "not a declared data_source variable"),
    ({"_drop": "epoch"}, f"{R}.epoch", "give the instant"),
    ({"epoch": "yesterday"}, f"{R}.epoch", "not an ISO 8601"),
    ({"epoch": "2018-01-01T00:00:00.5Z"}, f"{R}.epoch", "not a whole second"),
    ({"scale": "glonass"}, f"{R}.scale", "not a time scale"),
    ({"units": "hours"}, f"{R}.units", "not a unit"),
    ({"colour": "red"}, f"{R}.colour", "unknown key"),
    ({"windows": [RANGE_A]}, f"{R}.windows", "only schedule: explicit"),
    ({"schedule": "explicit"}, f"{R}.windows", "non-empty list"),
    (
        {
            "schedule": "explicit",
            "windows": [RANGE_A, {**RANGE_A, "start": "2020-01-01", "end": "2020-02-01"}],
        },
        f"{R}.windows[1].label",
        "already the label",
    ),
    (
        {
            "schedule": "explicit",
            "windows": [RANGE_A, {"label": "b", "start": "2019-01-31", "end": "2019-03-01"}],
        },
        f"{R}.windows[1]",
        "overlaps window 'a'",
    ),
    (
        {
            "schedule": "explicit",
            "windows": [RANGE_A, {"label": "p", "timestamp": "2019-01-15T00:00:00Z"}],
        },
        f"{R}.windows[1]",
        "overlaps window 'a'",
    ),
    (
        {
            "schedule": "explicit",
            "windows": [
                {"label": "p", "timestamp": "2019-01-15T00:00:00.2Z"},
                {"label": "q", "timestamp": "2019-01-15T00:00:00.7Z"},
            ],
        },
        f"{R}.windows[1]",
        "overlaps window 'p'",
    ),
    (
        {
            "schedule": "explicit",
            "windows": [{"label": "a", "start": "2019-02-01", "end": "2019-01-01"}],
        },
        f"{R}.windows[0]",
        "not before end",
    ),
    (
        {
            "schedule": "explicit",
            "windows": [{"label": "a", "start": "2019-02-01", "end": "2019-02-01"}],
        },
        f"{R}.windows[0]",
        "not before end",
    ),
    (
        {
            "schedule": "explicit",
            "windows": [
                {"label": "a", "start": "2020-01-01T12:00:01.0Z", "end": "2020-01-01T12:00:01.4Z"}
            ],
        },
        f"{R}.windows[0]",
        "would be empty",
    ),
    (
        {
            "schedule": "explicit",
            "windows": [{"label": "p", "timestamp": "2019-01-15", "width": 60}],
        },
        f"{R}.windows[0].width",
        "unknown key",
    ),
    (
        {
            "schedule": "explicit",
            "windows": [
                {
                    "label": "p",
                    "timestamp": "2019-01-15",
                    "start": "2019-01-15",
                    "end": "2019-01-16",
                }
            ],
        },
        f"{R}.windows[0]",
        "not both",
    ),
    (
        {"schedule": "explicit", "windows": [{"label": "a", "start": "2019-01-01"}]},
        f"{R}.windows[0].end",
        "required",
    ),
    (
        {"schedule": "explicit", "windows": [{**RANGE_A, "label": "all"}]},
        f"{R}.windows[0].label",
        "all-time fold",
    ),
    (
        {"schedule": "explicit", "windows": [{**RANGE_A, "label": "melt_2019"}]},
        f"{R}.windows[0].label",
        "not a window label",
    ),
    (
        {"schedule": "explicit", "windows": [{**RANGE_A, "label": "x" * 33}]},
        f"{R}.windows[0].label",
        "not a window label",
    ),
    ({"schedule": "explicit", "windows": ["2019"]}, f"{R}.windows[0]", "expected {label"),
]


@pytest.mark.parametrize(
    ("change", "key", "words"), REFUSALS, ids=[f"{i}-{k}" for i, (_, k, _) in enumerate(REFUSALS)]
)
def test_refusals_name_the_key_and_the_entry(change, key, words):
    raw = {"schedule": "yearly", "time_field": "delta_time", "epoch": EPOCH}
    change = dict(change)
    drop = change.pop("_drop", None)
    raw.update(change)
    if drop:
        del raw[drop]
    if raw["schedule"] == "none":
        raw = {k: v for k, v in raw.items() if k in ("schedule", *change)}
    with pytest.raises(ConfigError) as exc:
        parse_windowing(raw, VARS, 9)
    msg = str(exc.value)
    assert msg.startswith(f"config key '{key}'"), msg
    assert words in msg, msg


def test_daily_windows_refused_when_the_shard_order_leaves_no_room():
    with pytest.raises(ConfigError, match="parent_order 17 leave 20"):
        parse_windowing({"schedule": "daily", "time_field": "delta_time", "epoch": EPOCH}, VARS, 17)


def test_config_carries_the_schedule():
    raw = yaml.safe_load(open("configs/atl03_synthetic.yaml"))
    raw2 = copy.deepcopy(raw)
    raw2["output"]["windowing"] = {
        "schedule": "yearly",
        "time_field": "delta_time",
        "epoch": EPOCH,
        "scale": "gps",
    }
    raw2["output"]["pyramid"] = False
    cfg = load_config(raw2)
    assert cfg.output.windowing.schedule == "yearly"
    assert load_config(raw).output.windowing is None
    raw2["output"]["windowing"] = {"schedule": "none"}
    assert load_config(raw2).output.windowing is None
