"""The compute benchmarks (key, reduce, combine, windows, the pyramid's ladder) run, count
what they aggregated correctly and state their verdict: counts are checked against mortie's
own keying of the same synthetic points, timings never (the machines are shared)."""

from __future__ import annotations

import re

import mortie
import numpy as np
from benches import N, counts_printed, expected_counts, run_bench, verdict


def test_verdict_names_the_target_and_whether_the_ceiling_allows_it():
    assert verdict(0.53, 0.7) == "0.53 meets the target 0.50"
    assert verdict(0.5, 0.4) == "0.50 meets the target 0.50"
    assert verdict(0.37, 0.72) == "0.37 below the target 0.50, which the ceiling 0.72 allows"
    assert verdict(0.1, 0.21) == (
        "0.10 below the target 0.50, which the ceiling 0.21 puts out of reach here"
    )


def test_bench_aggregate_counts_and_verdict():
    text = run_bench("bench_aggregate.py", "--sizes", str(N), "--threads", "1", "--reps", "1")
    assert counts_printed(text) == expected_counts()
    line = next(s for s in text.splitlines() if s.strip().startswith("verdict"))
    assert re.search(
        r"reduce \+ combine \d+ Mpts/s per core (meets|misses) 30; end to end "
        r"\d\.\d\d (meets|below) the target 0\.50",
        line,
    ), line


def test_bench_reduce_counts_the_kept_points_and_their_cells():
    """bench_reduce keys and reduces what mortie alone keys: the photons the land-ice
    confidence keeps, their shards and cells; and it prints its per-thread verdict."""
    from zagg.sources.synthetic import synthetic_photons

    ds = synthetic_photons(N, chunk_size=1 << 20, seed=1).compute()
    lat, lon = ds["lat_ph"].values, ds["lon_ph"].values
    kept = (ds["signal_conf_ph"].values[:, 3] >= 2) & np.isfinite(lat) & np.isfinite(lon)
    cells = np.unique(mortie.geo2mort(lat[kept], lon[kept], order=19)).size
    shards = np.unique(mortie.geo2mort(lat[kept], lon[kept], order=9)).size
    text = run_bench("bench_reduce.py", "--points", str(N), "--reps", "1")
    m = re.search(r"([\d,]+) keyed, (\d+) shards, ([\d,]+) cells with data", text)
    assert m, text
    assert int(m.group(1).replace(",", "")) == int(kept.sum())
    assert (int(m.group(2)), int(m.group(3).replace(",", ""))) == (shards, cells)
    assert re.search(r"M points/s per thread \((meets|misses) 6 M\)", text), text


def test_bench_windows_counts_shards_windows_and_leaves():
    from zagg.sources.synthetic import DEFAULT_REGION, synthetic_photons
    from zagg.windows import assign
    from zagg.windows.schedule import parse_windowing

    ds = synthetic_photons(N, tuple(DEFAULT_REGION), chunk_size=2_000, seed=1).compute()
    lat, lon = ds["lat_ph"].values, ds["lon_ph"].values
    ok = np.isfinite(lat) & np.isfinite(lon)
    shards = mortie.geo2mort(lat[ok], lon[ok], order=9)
    cells = np.unique(mortie.geo2mort(lat[ok], lon[ok], order=19))
    w = parse_windowing(
        {"schedule": "yearly", "time_field": "t", "epoch": "2018-01-01", "scale": "gps"}, ("t",)
    )
    years = assign.window_index(w, ds["delta_time"].values[ok])
    leaves = len(set(zip(shards.tolist(), years.tolist(), strict=True)))
    labels = sorted({str(y) for y in years.tolist()})
    text = run_bench("bench_windows.py", "--size", str(N), "--reps", "1", "--chunk", "2000")
    assert (
        f"{N:,} points: {len(np.unique(shards))} shards, {len(cells):,} cells with data, "
        f"{len(np.unique(shards))} leaves (unwindowed)"
    ) in text
    assert (
        f"windowed: {len(np.unique(shards))} shards, {len(labels)} windows "
        f"({', '.join(labels)}), {leaves} leaves, {int(ok.sum()):,} points"
    ) in text
    line = next(s for s in text.splitlines() if s.startswith("verdict"))
    assert re.fullmatch(
        r"verdict: windowed / unwindowed = \d+\.\d\d (meets|misses) the target "
        r"1\.30",
        line,
    ), line


def test_bench_pyramid_counts_the_ladder_and_prints_the_ratios():
    from zagg.sources.synthetic import DEFAULT_REGION, synthetic_photons

    text = run_bench(
        "bench_pyramid.py",
        *("--size", str(N), "--accuracy-size", "160000"),
        *("--region", *map(str, DEFAULT_REGION)),
    )
    assert counts_printed(text) == expected_counts()
    ds = synthetic_photons(N, tuple(DEFAULT_REGION), chunk_size=1 << 20, seed=1).compute()
    lat, lon = ds["lat_ph"].values, ds["lon_ph"].values
    ok = np.isfinite(lat) & np.isfinite(lon)
    nodes = {k: len(np.unique(mortie.geo2mort(lat[ok], lon[ok], order=k))) for k in range(9)}
    line = next(s for s in text.splitlines() if s.startswith("ladder nodes per order"))
    assert line.split(": ", 1)[1] == ", ".join(f"{k}:{nodes[k]}" for k in range(8, -1, -1))
    assert re.search(r"columns' share of the leaf tasks \d+\.\d%", text)
    assert re.search(r"ladder / leaf write +\d+\.\d\d +\((meets|misses) the target 0\.30\)", text)
    assert len(re.findall(r"peak RSS, .* GiB \((under|over) the 3 GiB target\)", text)) == 4
    assert "re-sweep of the unchanged store: 0 nodes folded" in text
    # the digests' budget and accuracy: one row per level holding compressed cells, the
    # columns' groups folded from raw holding more centroids than a digest at delta 128
    # (the pyramid's size law)
    rows = {
        int(m.group(1)): m
        for m in re.finditer(
            r"^ +(\d+) +\d+ +(\d+) +(\d+) +(\d\.\d\d) .* (meets|misses) +\d+\.\d\d +[\d.]+-[\d.]+$",
            text,
            re.M,
        )
    }
    assert set(rows) >= {13, 12, 11, 10, 9}
    for r in (13, 12, 11):
        assert int(rows[r].group(2)) > int(rows[r].group(3)) and float(rows[r].group(4)) > 1
