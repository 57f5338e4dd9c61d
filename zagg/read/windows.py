"""Several windows of a time-windowed store as one Dataset with a ``window`` dimension.

Each window is opened as :func:`zagg.read.open_hive` opens one (its own leaves, lazily),
then the windows are aligned on the union of their occupied cells: a cell a window did not
observe holds each field's fill there (``b""`` for a digest). The ``window`` coordinate is
the labels; ``window_start`` / ``window_end`` are each window's UTC bounds from the
manifest's schedule, and ``time_first`` / ``time_last`` the actual first and last
observation of the window's leaves (from their commit stamps), all ``datetime64[ns]``.
"""

from __future__ import annotations

import numpy as np

from zagg.hive.manifest import path_grouping
from zagg.hive.walk import walk_windows
from zagg.read.open import open_hive


def labels_of(root, manifest: dict, windows) -> list[str]:
    """The labels asked for: ``"all"`` for every window the store holds, else the list."""
    if manifest.get("temporal") is None:
        raise ValueError(
            f"windows=...: {root.url} is not a time-windowed store; open it "
            "without window arguments"
        )
    held = list(walk_windows(root, path_grouping(manifest)))
    if isinstance(windows, str):
        if windows != "all":
            raise ValueError(
                f"windows={windows!r}: give a list of labels or 'all' (for one "
                "window use window=...)"
            )
        return held
    labels = [str(w) for w in windows]
    missing = [w for w in labels if w not in held]
    if missing:
        raise ValueError(f"windows {missing} have no leaf in {root.url}; it holds {held[:24]}")
    return labels


def window_bounds(manifest: dict, labels: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """Each window's UTC ``[start, end)`` from the manifest's schedule (NaT when the
    schedule cannot say)."""
    from zagg.windows import assign
    from zagg.windows.schedule import parse_windowing

    block = dict(manifest["temporal"])
    raw = {k: block[k] for k in ("schedule", "time_field", "epoch", "scale", "units") if k in block}
    if "windows" in block:
        raw["windows"] = block["windows"]
    w = parse_windowing(raw, (block.get("time_field"),))
    starts, ends = [], []
    for label in labels:
        index = _index_of(w, label)
        a, b = assign.bounds(w, index) if index is not None else (np.datetime64("NaT", "ns"),) * 2
        starts.append(np.datetime64(a, "ns"))
        ends.append(np.datetime64(b, "ns"))
    return np.array(starts, "datetime64[ns]"), np.array(ends, "datetime64[ns]")


def _index_of(w, label: str) -> int | None:
    if w.schedule == "explicit":
        names = [x.label for x in w.windows]
        return names.index(label) if label in names else None
    try:
        if w.schedule == "yearly":
            return int(label)
        if w.schedule == "monthly":
            return int(label[:4]) * 12 + int(label[4:6]) - 1
        day = np.datetime64(f"{label[:4]}-{label[4:6]}-{label[6:8]}", "D")
        return int(day.astype(np.int64) - np.datetime64("0001-01-01", "D").astype(np.int64))
    except ValueError:
        return None


def _span(ds) -> tuple[np.datetime64, np.datetime64]:
    """The first and last observation of a window's leaves (their stamps' time ranges)."""
    ranges = [r for r in ds.attrs["zagg"].get("time_ranges", []) if r]
    if not ranges:
        return np.datetime64("NaT", "ns"), np.datetime64("NaT", "ns")
    first = min(np.datetime64(r[0].rstrip("Z"), "ns") for r in ranges)
    last = max(np.datetime64(r[1].rstrip("Z"), "ns") for r in ranges)
    return first, last


def open_windows(root, manifest: dict, windows, **kwargs):
    """``open_hive(store, windows=[...])``: the windows stacked on a ``window`` dimension."""
    import xarray as xr

    labels = labels_of(root, manifest, windows)
    if not labels:
        raise ValueError(f"{root.url} holds no windowed leaf: nothing to open")
    parts = [open_hive(root, window=label, **kwargs) for label in labels]
    fills = {}
    for name, var in parts[0].data_vars.items():
        fills[name] = (
            b"" if var.dtype == object else var.attrs.get("_FillValue", _fill_of(parts[0], name))
        )
    spans = [_span(ds) for ds in parts]
    cleaned = []
    for ds in parts:  # aligned on the cell words (a dense read's are derived, in memory)
        ds = ds.drop_vars("cell_ids")
        words = np.asarray(ds["morton"].values, np.uint64)
        ds = ds.drop_vars("morton").assign_coords(morton=("cells", words, ds["morton"].attrs))
        cleaned.append(ds.set_xindex("morton"))
    out = xr.concat(
        cleaned,
        dim="window",
        join="outer",
        fill_value=fills,
        coords="minimal",
        compat="override",
        combine_attrs="override",
    )
    start, end = window_bounds(manifest, labels)
    out = out.assign_coords(
        window=("window", np.array(labels, dtype=object)),
        window_start=("window", start),
        window_end=("window", end),
        time_first=("window", np.array([s[0] for s in spans], "datetime64[ns]")),
        time_last=("window", np.array([s[1] for s in spans], "datetime64[ns]")),
    )
    from zagg.read.build import cell_ids_attrs, centre_coords, nested_of

    words = np.asarray(out["morton"].values, dtype=np.uint64)
    out = out.assign_coords(
        cell_ids=(
            "cells",
            nested_of(words) if words.size else np.zeros(0, np.int64),
            cell_ids_attrs(manifest["cell_order"]),
        ),
        # the windows' cells joined: their centres from the joined words
        **centre_coords(words, -1, out.data_vars),
    )
    out.attrs = dict(parts[0].attrs)
    out.attrs["zagg"] = {**parts[0].attrs["zagg"], "windows": labels}
    out.attrs["zagg"].pop("time_ranges", None)
    return out


def decode_times(words):
    """``(start, end)`` of toc words (a per-cell ``time_range`` field, or any array of
    words) as UTC ``datetime64[ns]`` DataArrays shaped like it: both the instant of a
    timestamp word, the conservative envelope (end exclusive) of a range; NaT where the
    word is the reserved 0 (a cell that saw no observation)."""
    import xarray as xr

    from zagg.windows.toc import decode

    values = np.asarray(words.values if hasattr(words, "values") else words, np.uint64)
    start, end = decode(values)
    empty = values == 0
    start, end = (
        np.where(empty, np.datetime64("NaT", "ns"), start),
        np.where(empty, np.datetime64("NaT", "ns"), end),
    )
    if isinstance(words, xr.DataArray):
        return (
            words.copy(data=start.astype("datetime64[ns]")),
            words.copy(data=end.astype("datetime64[ns]")),
        )
    return start.astype("datetime64[ns]"), end.astype("datetime64[ns]")


def _fill_of(ds, name: str):
    fields = ds.attrs.get("zagg", {}).get("fields", {})
    entry = fields.get(name) or {}
    return entry.get("fill_value", np.nan)
