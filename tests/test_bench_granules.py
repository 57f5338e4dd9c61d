"""The granule benchmarks (bench_granules, bench_scale) run on small granules: the photons,
kept photons, cells, shards and leaves they print are what h5py and mortie count."""

from __future__ import annotations

import re

import mortie
import numpy as np
from benches import BENCH, run_bench


def test_bench_granules_counts_photons_cells_and_the_region(tmp_path):
    """bench_granules on two small granules: what it prints it aggregated (photons, kept
    photons, cells, shards, the region's points) is what h5py and mortie count. (The
    optional measurements, each a run in a fresh process, print no count checked here.)"""
    import bench_granules as bg

    from zagg import grid as G

    per, band = 500_000, 0.4
    text = run_bench(
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
    lat, keep, cells = kept_cells(paths)
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


def test_bench_scale_counts_photons_cells_leaves_and_compares_checkouts(tmp_path):
    """bench_scale on two small granules, each read twice under two names (--link), by
    this checkout twice: the photons, kept photons, cells and leaves it prints are what
    h5py and mortie count, and both runs wrote the same leaves."""
    root = str(BENCH.parent)
    text = run_bench(
        "bench_scale.py",
        *("--sizes", "2e5", "--per-granule", "50000", "--link", "2", "--keep", str(tmp_path)),
        *("--checkout", root, root),
    )
    paths = sorted(tmp_path.glob("atl03-pool-*/ATL03_*.h5"))
    assert len(paths) == 2
    lat, keep, cells = kept_cells(paths)
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


def kept_cells(paths):
    """Every photon's latitude of the granules at ``paths``, which of them the t-digest
    config keeps (land-ice confidence >= 2, finite coordinates), and mortie's order-19
    cells of the kept ones: what the benchmarks' counts are checked against."""
    import h5py

    from zagg.sources.write_granules import BEAMS

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
    return lat, keep, mortie.geo2mort(lat[keep], lon[keep], order=19)
