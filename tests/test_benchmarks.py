"""The benchmark scripts run, count what they aggregated correctly and state their verdict.

Timings are never asserted (the machines are shared); the shard and cell counts each script
prints are checked against mortie's own keying of the same synthetic points.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import mortie
import numpy as np
import pytest

BENCH = Path(__file__).resolve().parent.parent / "benchmarks"
sys.path.insert(0, str(BENCH))

from common import verdict  # noqa: E402

N = 20_000


def test_verdict_names_the_target_and_whether_the_ceiling_allows_it():
    assert verdict(0.53, 0.7) == "0.53 meets the target 0.50"
    assert verdict(0.5, 0.4) == "0.50 meets the target 0.50"
    assert verdict(0.37, 0.72) == "0.37 below the target 0.50, which the ceiling 0.72 allows"
    assert verdict(0.1, 0.21) == (
        "0.10 below the target 0.50, which the ceiling 0.21 puts out of reach here"
    )


@pytest.fixture(scope="module")
def expected_counts():
    """(shards, cells with data) of the scripts' synthetic points, keyed by mortie alone."""
    from zagg.sources.synthetic import DEFAULT_REGION, synthetic_photons

    ds = synthetic_photons(N, tuple(DEFAULT_REGION), chunk_size=1 << 20, seed=1).compute()
    lat, lon = ds["lat_ph"].values, ds["lon_ph"].values
    ok = np.isfinite(lat) & np.isfinite(lon)
    cells = np.unique(mortie.geo2mort(lat[ok], lon[ok], order=19))
    shards = np.unique(mortie.geo2mort(lat[ok], lon[ok], order=9))
    return len(shards), len(cells)


def _run(*args: str) -> str:
    out = subprocess.run(
        [sys.executable, *args], cwd=BENCH, capture_output=True, text=True, timeout=300
    )
    assert out.returncode == 0, out.stderr[-2000:]
    return out.stdout


def _counts(text: str) -> tuple[int, int]:
    m = re.search(r"points(?: on \d+ core\(s\))?: (\d+) shards, ([\d,]+) cells with data", text)
    assert m, text
    return int(m.group(1)), int(m.group(2).replace(",", ""))


def test_bench_aggregate_counts_and_verdict(expected_counts):
    text = _run("bench_aggregate.py", "--sizes", str(N), "--threads", "1", "--reps", "1")
    assert _counts(text) == expected_counts
    line = next(s for s in text.splitlines() if s.strip().startswith("verdict"))
    assert re.search(
        r"reduce \+ combine \d+ Mpts/s per core (meets|misses) 30; end to end "
        r"\d\.\d\d (meets|below) the target 0\.50",
        line,
    ), line


def test_bench_store_counts_memory_and_verdict(expected_counts):
    text = _run("bench_store.py", "--sizes", str(N), "--runs", "1", "--no-cli")
    assert _counts(text) == expected_counts
    peak = float(re.search(r"peak RSS\s+([\d.]+) GiB", text).group(1))
    assert 0.05 < peak < 3.0
    line = next(s for s in text.splitlines() if s.strip().startswith("verdict"))
    assert re.search(r"first run \d\.\d\d (meets|below) the target 0\.50", line), line


def test_bench_s3_counts_requests_per_leaf(expected_counts):
    text = _run("bench_s3.py", "--size", str(N), "--reps", "1", "--latency", "0.005")
    shards = expected_counts[0]
    new = re.search(r"new store: (\d+) leaves.*\(([^)]*)", text)
    again = re.search(r"existing store: (\d+) leaves.*\(([^)]*)", text)
    assert new and again, text
    assert int(new.group(1)) == int(again.group(1)) == shards
    # versioned leaves are never cleared (a replacement writes a new version beside the old);
    # a replaced leaf's pyramid column, rewritten at its key, clears with one bulk delete
    assert "POST" not in new.group(2)
    assert re.search(rf"POST {shards}\b", again.group(2)), again.group(2)
    assert len(re.findall(r"round trips per leaf, one after another: -?\d+\.\d\d", text)) == 2


def test_bench_read_counts_both_readers_and_prints_the_ratios(expected_counts):
    text = _run("bench_read.py", "--sizes", str(N))
    assert _counts(text) == expected_counts
    cells = expected_counts[1]
    zagg_line = next(s for s in text.splitlines() if s.strip().startswith("zagg "))
    assert re.search(r"open \+ median map\s+\d+\.\d\d s .* peak RSS \d+\.\d\d GiB", zagg_line)
    mz = next(s for s in text.splitlines() if s.strip().startswith("moczarr "))
    assert f"({cells:,} cells)" in mz  # moczarr maps the same cells
    assert re.search(r"store \d+\.\d MiB on disk", text)
    assert re.search(r"memory +zagg's peak / \(2 x store \+ interpreter\) = \d+\.\d\d", text)
    assert re.search(r"speed +moczarr wall / zagg wall = \d+\.\d \(target >= 3\)", text)


def test_bench_pyramid_counts_the_ladder_and_prints_the_ratios(expected_counts):
    from zagg.sources.synthetic import DEFAULT_REGION, synthetic_photons

    text = _run(
        "bench_pyramid.py",
        *("--size", str(N), "--accuracy-size", "160000"),
        *("--region", *map(str, DEFAULT_REGION)),
    )
    assert _counts(text) == expected_counts
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
    # columns' groups folded from raw equal to the direct digests
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
        assert rows[r].group(2) == rows[r].group(3) and rows[r].group(4) == "1.00"


def test_bench_granules_counts_photons_cells_and_the_region(tmp_path):
    """bench_granules on two small granules: what it prints it aggregated (photons, kept
    photons, cells, shards, the region's points) is what h5py and mortie count. (The
    optional measurements, each a run in a fresh process, print no count checked here.)"""
    import bench_granules as bg
    import h5py

    from zagg import grid as G
    from zagg.sources.write_granules import BEAMS

    per, band = 500_000, 0.4
    text = _run(
        "bench_granules.py",
        "--sizes",
        "1e6",
        "--per-granule",
        str(per),
        "--reps",
        "0",
        "--band",
        str(band),
        "--keep",
        str(tmp_path),
        "--skip",
        "procs",
        "memory",
        "agg_all",
        "strata",
    )
    paths = sorted(tmp_path.glob("*/ATL03_*.h5"))
    lat, lon, conf = [], [], []
    for p in paths:
        with h5py.File(p, "r") as f:
            for b in BEAMS:
                h = f[f"{b}/heights"]
                for name, out in (("lat_ph", lat), ("lon_ph", lon)):
                    v = h[name][:]
                    out.append(np.where(v == h[name].attrs["_FillValue"][0], np.nan, v))
                conf.append(h["signal_conf_ph"][:, 3])
    lat, lon, conf = np.concatenate(lat), np.concatenate(lon), np.concatenate(conf)
    keep = (conf >= 2) & np.isfinite(lat) & np.isfinite(lon)
    cells = mortie.geo2mort(lat[keep], lon[keep], order=19)
    shards = mortie.clip2order(9, cells)
    head = re.search(
        r"(\d+) granules, ([\d,]+) photons, .*; ([\d,]+) kept, ([\d,]+) cells with "
        r"data, (\d+) shards",
        text,
    )
    assert head, text
    got = [int(g.replace(",", "")) for g in head.groups()]
    assert got == [
        len(paths),
        lat.size,
        int(keep.sum()),
        np.unique(cells).size,
        np.unique(shards).size,
    ]
    region, _ = bg.band_shards(bg.box_for(per), band)
    inside = np.isin(shards, G.from_decimal(region))
    on = re.search(r"plan on .*; ([\d,]+) points, ([\d,]+) cells", text)
    assert on and int(on.group(1).replace(",", "")) == int(inside.sum()) > 0
    assert int(on.group(2).replace(",", "")) == np.unique(cells[inside]).size
    assert "same points and cells: True" in text
    assert re.search(r"plan on reads [\d.]+% of the bytes", text)


def test_bench_reruns_writes_only_what_changed():
    """bench_reruns on small granules: what each re-run printed it wrote is what the gate
    must do (nothing when unchanged, the lost leaves on resume), never its times."""
    text = _run("bench_reruns.py", "--size", "40000", "--per-granule", "10000", "--workers", "1")
    rows = {
        m.group(1).strip(): (int(m.group(2)), int(m.group(3)))
        for m in re.finditer(
            r"^(.+?)\s+\d+\.\d\d s\s+(\d+) leaves written,\s+(\d+) current", text, flags=re.M
        )
    }
    first, _ = rows["first run (catalog)"]
    assert first > 0 and rows["unchanged re-run (catalog)"] == (0, first)
    lost = max(1, first // 10)
    assert rows["resume, a tenth of leaves lost"] == (lost, first - lost)
    listed, _ = rows["first run (granule list)"]
    assert listed == first and rows["unchanged re-run (granule list)"] == (0, first)
    syn, _ = rows["first run"]
    assert syn > 0 and rows["unchanged re-run"] == (0, syn)
    assert (
        len(
            re.findall(
                r"unchanged re-run ÷ first run, [\w ]+: \d\.\d{3} \((meets|misses) "
                r"the target 0\.05\)",
                text,
            )
        )
        == 3
    )


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
    text = _run("bench_windows.py", "--size", str(N), "--reps", "1", "--chunk", "2000")
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


def test_bench_scaling_counts_every_cluster_and_prints_the_ratios(expected_counts):
    """bench_scaling on tiny data: the same store on 1 and 2 workers of a local cluster and
    of the local gateway it starts itself; counts and the ratio lines, never the times."""
    from zagg.sources.synthetic import DEFAULT_REGION

    text = _run(
        "bench_scaling.py", "--size", str(N), "--runs", "1", "--region", *map(str, DEFAULT_REGION)
    )
    assert _counts(text) == expected_counts
    assert "same shards, cells and points in every run: True" in text
    runs = re.findall(r"^local (cluster|gateway) +(\d) workers? +run +\d+\.\d\d s", text, re.M)
    assert runs == [("cluster", "1"), ("cluster", "2"), ("gateway", "1"), ("gateway", "2")]
    for kind in ("local", "gateway"):
        assert re.search(
            rf"speed-up 1 -> 2 workers, {kind}: \d+\.\d\d \((meets|misses) the "
            r"target 1\.7\)",
            text,
        ), text
    assert (
        len(
            re.findall(
                r"gateway overhead, \d workers?: [+-]\d+\.\d % of the local run "
                r"\((meets|misses) the target 10 %\)",
                text,
            )
        )
        == 2
    )


def test_bench_reduce_counts_the_kept_points_and_their_cells():
    """bench_reduce keys and reduces what mortie alone keys: the photons the land-ice
    confidence keeps, their shards and cells; and it prints its per-thread verdict."""
    from zagg.sources.synthetic import synthetic_photons

    ds = synthetic_photons(N, chunk_size=1 << 20, seed=1).compute()
    lat, lon = ds["lat_ph"].values, ds["lon_ph"].values
    kept = (ds["signal_conf_ph"].values[:, 3] >= 2) & np.isfinite(lat) & np.isfinite(lon)
    cells = np.unique(mortie.geo2mort(lat[kept], lon[kept], order=19)).size
    shards = np.unique(mortie.geo2mort(lat[kept], lon[kept], order=9)).size
    text = _run("bench_reduce.py", "--points", str(N), "--reps", "1")
    m = re.search(r"([\d,]+) keyed, (\d+) shards, ([\d,]+) cells with data", text)
    assert m, text
    assert int(m.group(1).replace(",", "")) == int(kept.sum())
    assert (int(m.group(2)), int(m.group(3).replace(",", ""))) == (shards, cells)
    assert re.search(r"M points/s per thread \((meets|misses) 6 M\)", text), text


def test_bench_icechunk_gathers_each_leaf_from_its_carrier(tmp_path):
    """bench_icechunk on two small granules: the fresh commit takes every leaf and its
    column from their carriers and reads only the overviews; without carriers it reads
    them all; an unchanged commit reads nothing; the repository is a small fraction of
    the hive."""
    text = _run(
        "bench_icechunk.py",
        "--size",
        "2e5",
        "--per-granule",
        "1e5",
        "--s3-size",
        "0",
        "--splits",
        "--keep",
        str(tmp_path),
    )
    leaves = int(re.search(r"leaves\s+(\d+) \(", text).group(1))
    fresh = re.search(
        r"carriers\s+[\d.]+ s\s+\(([\d,]+) objects from carriers, ([\d,]+) read", text
    )
    bare = re.search(r"no carrier\s+[\d.]+ s\s+\(([\d,]+) objects read\)", text)
    assert leaves > 1 and fresh and bare, text
    carried, read = (int(g.replace(",", "")) for g in fresh.groups())
    assert carried == 2 * leaves and read > 0
    assert int(bare.group(1).replace(",", "")) == carried + read
    assert re.search(r"unchanged commit\s+[\d.]+ s\s+\(0 objects read\)", text)
    assert re.search(r"of the run \((meets|misses) the target 10%\)", text)
    share = float(re.search(r"repo / hive bytes\s+([\d.]+)%", text).group(1))
    assert 0 < share < 5


def test_bench_scale_counts_photons_cells_leaves_and_compares_checkouts(tmp_path):
    """bench_scale on two small granules, each read twice under two names (--link), by
    this checkout twice: the photons, kept photons, cells and leaves it prints are what
    h5py and mortie count, and both runs wrote the same leaves."""
    import h5py

    from zagg.sources.write_granules import BEAMS

    root = str(BENCH.parent)
    text = _run(
        "bench_scale.py",
        *("--sizes", "2e5", "--per-granule", "50000", "--link", "2", "--keep", str(tmp_path)),
        *("--checkout", root, root),
    )
    paths = sorted(tmp_path.glob("atl03-pool-*/ATL03_*.h5"))
    assert len(paths) == 2
    lat, lon, conf = [], [], []
    for p in paths:
        with h5py.File(p, "r") as f:
            for b in BEAMS:
                h = f[f"{b}/heights"]
                for name, out in (("lat_ph", lat), ("lon_ph", lon)):
                    v = h[name][:]
                    out.append(np.where(v == h[name].attrs["_FillValue"][0], np.nan, v))
                conf.append(h["signal_conf_ph"][:, 3])
    lat, lon, conf = np.concatenate(lat), np.concatenate(lon), np.concatenate(conf)
    keep = (conf >= 2) & np.isfinite(lat) & np.isfinite(lon)
    cells = mortie.geo2mort(lat[keep], lon[keep], order=19)
    heads = re.findall(
        r"4 granules \(hard links\), ([\d,]+) photons read, .*; ([\d,]+) kept, ([\d,]+) "
        r"cells with data, (\d+) leaves",
        text,
    )
    assert len(heads) == 2, text
    for head in heads:
        got = [int(g.replace(",", "")) for g in head]
        shards = np.unique(mortie.clip2order(9, cells)).size
        assert got == [2 * lat.size, 2 * int(keep.sum()), np.unique(cells).size, shards]
    assert "every leaf's content hash equal in every run: True" in text
    assert len(re.findall(r"CPU seconds: run [\d.]+, floor [\d.]+", text)) == 2
    for phase in ("read + reduce", "combine + write", "sweep"):
        assert len(re.findall(rf"    {re.escape(phase)} +[\d.]+ - +[\d.]+ s", text)) == 2, text
