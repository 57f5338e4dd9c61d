"""Benchmark: ATL03-shaped HDF5 granules → hive store, against the floor of reading them.

For each size, seeded synthetic ATL03 granules (``--per-granule`` photons each before the
empty beam some granules have, six beams ``gt1l`` … ``gt3r``, 10 000-row gzip chunks) are
written first (not timed; ``--keep DIR`` keeps them for the next run) in a 4°-wide box at
75° S whose height is 0.85 of a track's length (~320 km for 2.5e6 photons), so every track
crosses it once. Then, in the same run:

- floor:       reading the datasets the config needs (lat_ph, lon_ph, h_ph, signal_conf_ph)
               with h5py in a process pool on every core (h5py reads one at a time per
               process), plus ``mortie.geo2mort`` at the cell order on the same photons
               (every core, mortie's own threads): the two costs no run can avoid;
- 1 core:      ``zagg.run`` of the t-digest config (count + t-digest of ``h_ph`` for
               ``land_ice_conf >= 2``, order 19 cells in order 9 shards) on one worker with
               one thread;
- every core:  the same with zagg's default cluster for this machine;
- processes:   the same on one worker process per core with one thread each;
- in memory:   the same run on the granules' points read into memory first (not timed):
               what the source costs beside the engine;
- no store:    ``zagg.aggregate`` with discovery alone (every chunk read, keyed and
               reduced), without the finalize and the leaf writes;
- strata:      ``configs/atl03_strata_granules.yaml`` (count, all-photon t-digest, located
               signal and noise strata, composition word) on every core, same grid;
- region:      a run restricted to the shards whose centres lie in a latitude band across
               every track (``--band``: a tenth of the box's height, so about a tenth of
               each granule's photons), with the read plan on (``read_plan: atl03``) and
               off, in one process; the bytes each run read (``read_chars`` of the process:
               every read of a file, page cache included) against the granules' bytes;
               also without the store (read, key and reduce only).

Each measurement runs in a fresh process on one cluster: a cold first run (imports, numba's
cache, worker start) and ``--reps`` warm ones; rates are photons per second over every
photon of the granules, from the best warm run's ``zagg.run`` wall time (config load to the
last leaf). Peak RSS is the largest resident set of any process of a measurement. The
granules were just written, so reads come from the page cache: this measures decoding,
keying, reduction and writing, not the disk. ``--reps 0`` runs each measurement once, cold.

    python benchmarks/bench_granules.py                         # 1e7 photons
    python benchmarks/bench_granules.py --sizes 1e7 1e8 --reps 2
    python benchmarks/bench_granules.py --sizes 2e5 --per-granule 50000 --reps 1   # smoke
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BEAMS = ("gt1l", "gt1r", "gt2l", "gt2r", "gt3l", "gt3r")
NEEDED = ("heights/lat_ph", "heights/lon_ph", "heights/h_ph", "heights/signal_conf_ph")
P, C = 9, 19
TARGETS = {
    "floor": 0.50,
    "scaling": 1.7,
    "bytes": 0.20,
    "region": 4.0,
    "strata": 0.70,
    "rss_gib": 3.0,
}


def tdigest_config(granules: str, **extra) -> dict:
    return {
        "data_source": {
            "granules": granules,
            "groups": list(BEAMS),
            "coordinates": {
                "latitude": "/{group}/heights/lat_ph",
                "longitude": "/{group}/heights/lon_ph",
            },
            "variables": {
                "h_ph": "/{group}/heights/h_ph",
                "land_ice_conf": {"path": "/{group}/heights/signal_conf_ph", "column": 3},
            },
            "filters": [{"variable": "land_ice_conf", "op": "ge", "value": 2}],
            "delta_time": "/{group}/heights/delta_time",
            **extra,
        },
        "aggregation": {
            "variables": {
                "count": {"function": "count"},
                "h_tdigest": {"function": "tdigest", "source": "h_ph", "params": {"delta": 512}},
            }
        },
        "output": {
            "dataset": {"short_name": "ATL03", "version": "006"},
            "grid": {"type": "healpix", "parent_order": P, "chunk_inner": 13, "child_order": C},
        },
    }


def strata_config(granules: str) -> dict:
    import zagg

    raw = zagg.load_config("atl03_strata_granules").raw
    raw["data_source"]["granules"] = granules
    raw["output"]["grid"] = {
        "type": "healpix",
        "parent_order": P,
        "chunk_inner": 13,
        "child_order": C,
    }
    return raw


# --------------------------------------------------------------------------- one run


def child(spec: dict) -> dict:
    """``spec["reps"]`` zagg.run calls in this process on one cluster (``spec``: config,
    store, cluster knobs, shards): per run its wall time and read_chars (reads of this
    process), its points and cells, and the peak RSS of every process of the cluster. The
    first run is cold (imports, numba's cache, worker start); later ones are warm."""
    import contextlib
    import resource

    import psutil

    import zagg
    from zagg.cluster.clients import cluster_for

    me = psutil.Process()
    if spec.get("in_process"):
        from distributed import LocalCluster

        cluster = LocalCluster(
            processes=False,
            n_workers=1,
            threads_per_worker=os.cpu_count() or 1,
            dashboard_address=None,
        )
    else:
        cluster = contextlib.nullcontext()
    out = {"walls": [], "read_chars": []}
    t0 = time.perf_counter()
    with (
        cluster as local,
        (
            contextlib.nullcontext(local)
            if local is not None
            else cluster_for(None, workers=spec.get("workers"), threads=spec.get("threads"))
        ) as target,
    ):
        out["cluster_start"] = time.perf_counter() - t0
        source = None
        if spec.get("in_memory"):  # the same points, read into memory first (not timed)
            from zagg.sources.granules import open_for_config

            source = open_for_config(zagg.load_config(spec["config"])).compute()
        for _ in range(spec["reps"]):
            shutil.rmtree(spec["store"], ignore_errors=True)
            read0 = me.io_counters().read_chars
            t0 = time.perf_counter()
            if spec.get("aggregate_only"):  # read, key and reduce every chunk; no store
                res = _aggregate(spec, target)
            else:
                res = zagg.run(
                    spec["config"],
                    store=spec["store"],
                    scheduler=target,
                    shards=spec.get("shards"),
                    source=source,
                    progress=False,
                )
                res = (res.points, res.cells_with_data, res.leaves_written)
            out["walls"].append(time.perf_counter() - t0)
            out["read_chars"].append(me.io_counters().read_chars - read0)
    out.update(zip(("points", "cells", "leaves"), res, strict=True))
    out["rss"] = (
        max(
            resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
            resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss,
        )
        * 1024
    )
    return out


def _aggregate(spec: dict, target) -> tuple[int, int, int]:
    """``zagg.aggregate`` (every input chunk read, keyed and reduced, each shard merged and
    finalized, held on the cluster) on ``target``: a run without its leaf writes."""
    import zagg
    from zagg.cluster.clients import connected
    from zagg.sources.granules import open_for_config

    cfg = zagg.load_config(spec["config"])
    with connected(target):
        out = zagg.aggregate(
            open_for_config(cfg, shards=spec.get("shards")), cfg, shards=spec.get("shards")
        )
        pts = out.attrs["zagg"]["points"]["keyed"]
        return pts, -1, len(out.attrs["zagg"]["shards"])


def run_child(spec: dict, tmp: Path) -> dict:
    """:func:`child` in a fresh interpreter, so no measurement shares a process."""
    path = tmp / "spec.json"
    path.write_text(json.dumps(spec))
    env = dict(os.environ)
    env.pop("RAYON_NUM_THREADS", None)  # zagg's cluster sets it for its workers
    res = subprocess.run(
        [sys.executable, __file__, "--child", str(path)], env=env, capture_output=True, text=True
    )
    if res.returncode:
        raise RuntimeError(f"run failed:\n{res.stderr[-3000:]}")
    out = json.loads(res.stdout.strip().splitlines()[-1])
    warm = out["walls"][1:] or out["walls"]
    i = out["walls"].index(min(warm))
    out.update(cold=out["walls"][0], wall=out["walls"][i], read=out["read_chars"][i])
    return out


def best(spec: dict, tmp: Path, reps: int) -> dict:
    """A cold run and ``reps`` warm ones on one cluster (the best warm one reported)."""
    return run_child({**spec, "reps": reps + 1}, tmp)


# --------------------------------------------------------------------------- the floor


def _read_unit(unit) -> tuple[int, float]:
    import time

    import h5py

    path, beam = unit
    t0 = time.perf_counter()
    n = 0
    with h5py.File(path, "r") as f:
        for name in NEEDED:
            n += f[f"{beam}/{name}"][...].size
    return n, time.perf_counter() - t0


def floor(paths, reps: int) -> dict:
    """Seconds to read the needed datasets with h5py on every core, and to key the same
    photons with geo2mort (every core)."""
    from concurrent.futures import ProcessPoolExecutor

    import h5py
    import mortie
    import numpy as np

    units = [(str(p), b) for p in paths for b in BEAMS]
    cores = os.cpu_count() or 1
    t_read = math.inf
    with ProcessPoolExecutor(cores) as pool:
        list(pool.map(_read_unit, units[:cores]))  # start the workers outside the timing
        for _ in range(reps):
            t0 = time.perf_counter()
            list(pool.map(_read_unit, units, chunksize=1))
            t_read = min(t_read, time.perf_counter() - t0)
    lat, lon = [], []
    for p in paths:
        with h5py.File(p, "r") as f:
            for b in BEAMS:
                for name, out in (("lat_ph", lat), ("lon_ph", lon)):
                    d = f[f"{b}/heights/{name}"]
                    v = d[...]
                    out.append(np.where(v == d.attrs["_FillValue"][0], np.nan, v))
    lat, lon = np.concatenate(lat), np.concatenate(lon)
    mortie.geo2mort(lat[:1000], lon[:1000], order=C)  # warm the pool
    t_geo = math.inf
    for _ in range(reps):
        t0 = time.perf_counter()
        mortie.geo2mort(lat, lon, order=C)
        t_geo = min(t_geo, time.perf_counter() - t0)
    return {"read": t_read, "geo2mort": t_geo, "photons": int(lat.size)}


def box_for(per: int) -> tuple[float, float, float, float]:
    """A 4°-wide box at 75° S whose height is 0.85 of a granule's track length: every track
    crosses it from edge to edge once (wrapping back in for its last ~15 %)."""
    from zagg.sources.synthetic import SHOT_SPACING, beam_counts, beam_rates

    shots = beam_counts(per, 0.2)[0] / beam_rates(0.2)[1][0]
    height = 0.85 * shots * SHOT_SPACING / 111_200.0
    return (-102.0, -75.0 - height / 2, -98.0, -75.0 + height / 2)


def band_shards(box, fraction: float):
    """The shards whose centres lie in a latitude band of ``fraction`` of the box's height
    across its middle (so they hold about that fraction of every track), and the band."""
    import mortie
    import numpy as np

    from zagg import grid as G
    from zagg.sources.regions import region_shards

    mid, half = 0.5 * (box[1] + box[3]), 0.5 * fraction * (box[3] - box[1])
    bbox = f"{box[0]},{mid - half:.4f},{box[2]},{mid + half:.4f}"
    cover = G.from_decimal(region_shards(bbox=bbox, order=P))
    lat, _ = mortie.mort2geo(cover)
    keep = np.abs(np.asarray(lat) - mid) <= half
    return G.to_decimal(cover[keep]), bbox


def granules_for(n: int, per: int, seed: int, keep: Path | None, tmp: Path) -> list[Path]:
    from zagg.sources.write_granules import write_granules

    count = math.ceil(n / per)
    where = (keep or tmp) / f"atl03-{count}x{per}-seed{seed}-box{box_for(per)[1]:.3f}"
    marker = where / ".complete"
    if marker.exists():
        return sorted(where.glob("ATL03_*.h5"))
    shutil.rmtree(where, ignore_errors=True)
    paths = write_granules(
        where, count, product="ATL03", points_per_granule=per, region=box_for(per), seed=seed
    )
    marker.touch()
    return paths


# --------------------------------------------------------------------------- report


def measure(n: int, args, tmp: Path) -> dict:
    paths = granules_for(n, args.per_granule, args.seed, args.keep, tmp)
    gdir = str(paths[0].parent)
    disk = sum(p.stat().st_size for p in paths)
    cores = os.cpu_count() or 1
    fl = floor(paths, max(args.reps, 1))
    store = str(tmp / "store")
    plain = tdigest_config(gdir)
    r = {"n": n, "granules": len(paths), "disk": disk, "floor": fl, "cores": cores}
    r["one"] = best({"config": plain, "store": store, "workers": 1, "threads": 1}, tmp, args.reps)
    r["all"] = best({"config": plain, "store": store}, tmp, args.reps)
    optional = {
        "procs": {"config": plain, "store": store, "workers": cores, "threads": 1},
        "memory": {"config": plain, "store": store, "in_memory": True},
        "agg_all": {"config": plain, "store": store, "aggregate_only": True},
        "strata": {"config": strata_config(gdir), "store": store},
    }
    for name, spec in optional.items():
        if name not in args.skip and not (name == "procs" and cores == 1):
            r[name] = best(spec, tmp, args.reps)
    shards, r["bbox"] = band_shards(box_for(args.per_granule), args.band)
    for plan in ("off", "on"):
        cfg = tdigest_config(gdir, read_plan="atl03" if plan == "on" else False)
        spec = {"config": cfg, "store": store, "shards": list(shards), "in_process": True}
        r[f"region_{plan}"] = best(spec, tmp, args.reps)
        r[f"region_agg_{plan}"] = best({**spec, "aggregate_only": True}, tmp, args.reps)
    r["band_shards"] = len(shards)
    return r


def verdict(value: float, target: float, higher: bool = True) -> str:
    ok = value >= target if higher else value <= target
    return f"{'meets' if ok else 'misses'} {'>=' if higher else '<='} {target:g}"


def report(r: dict) -> None:
    m, fl, rows = 1e6, r["floor"], r["floor"]["photons"]
    floor_rate = rows / (fl["read"] + fl["geo2mort"])

    def rate(x):
        return rows / x["wall"]

    def span(x):
        warm = x["walls"][1:] or x["walls"]
        return f"{x['wall']:5.2f} s (warm {min(warm):.2f}-{max(warm):.2f}, cold {x['cold']:.2f})"

    print(
        f"\n{r['n']:.0e} photons asked: {r['granules']} granules, {rows:,} photons, "
        f"{r['disk'] / 2**20:,.0f} MiB on disk; {r['one']['points']:,} kept, "
        f"{r['one']['cells']:,} cells with data, {r['one']['leaves']} shards"
    )
    print(
        f"  floor: h5py read on {r['cores']} cores {fl['read']:.2f} s + geo2mort "
        f"{fl['geo2mort']:.2f} s = {floor_rate / m:.2f} Mphotons/s"
    )
    one, every = rate(r["one"]), rate(r["all"])
    print(
        f"  1 core       {one / m:7.2f} Mphotons/s  {span(r['one'])}  "
        f"ratio to floor {one / floor_rate:.2f}"
    )
    print(
        f"  every core   {every / m:7.2f} Mphotons/s  {span(r['all'])}  "
        f"ratio to floor {every / floor_rate:.2f}  ({verdict(every / floor_rate, TARGETS['floor'])})"
        f"; every core / 1 core {every / one:.2f} ({verdict(every / one, TARGETS['scaling'])})"
    )
    if "procs" in r:
        procs = rate(r["procs"])
        print(
            f"  processes    {procs / m:7.2f} Mphotons/s  {span(r['procs'])}  "
            f"({r['cores']} worker processes x 1 thread) ratio to floor "
            f"{procs / floor_rate:.2f}"
        )
    if "memory" in r:
        memory = rate(r["memory"])
        print(
            f"  in memory    {memory / m:7.2f} Mphotons/s  {span(r['memory'])}  the same run "
            f"on the points read into memory first; granules / in memory "
            f"{every / memory:.2f}"
        )
    if "agg_all" in r:
        agg = rate(r["agg_all"])
        print(
            f"  no store     {agg / m:7.2f} Mphotons/s  {span(r['agg_all'])}  read, key and "
            f"reduce only (zagg.aggregate, discovery); ratio to floor {agg / floor_rate:.2f}"
        )
    if "strata" in r:
        strata = rate(r["strata"])
        print(
            f"  strata       {strata / m:7.2f} Mphotons/s  {span(r['strata'])}  strata / "
            f"plain {strata / every:.2f} ({verdict(strata / every, TARGETS['strata'])})"
        )
    on, off = r["region_on"], r["region_off"]
    frac = on["points"] / max(r["all"]["points"], 1)
    print(f"  region {r['bbox']} ({r['band_shards']} shards, {frac:.1%} of the kept photons):")
    for name, x in (("plan off", off), ("plan on", on)):
        print(
            f"    {name:9s} {span(x)}  read {x['read'] / 2**20:8.1f} MiB = "
            f"{x['read'] / r['disk']:.1%} of the granules' bytes; {x['points']:,} points, "
            f"{x['cells']:,} cells"
        )
    same = (on["points"], on["cells"]) == (off["points"], off["cells"])
    print(
        f"    plan on reads {on['read'] / r['disk']:.1%} of the bytes "
        f"({verdict(on['read'] / r['disk'], TARGETS['bytes'], higher=False)}), "
        f"runs {off['wall'] / on['wall']:.2f}x faster than off "
        f"({verdict(off['wall'] / on['wall'], TARGETS['region'])}); same points and cells: "
        f"{same}"
    )
    a_on, a_off = r["region_agg_on"], r["region_agg_off"]
    print(
        f"    read, key and reduce only: plan off {span(a_off)}, on {span(a_on)}: "
        f"{a_off['wall'] / a_on['wall']:.2f}x; read {a_on['read'] / r['disk']:.1%} of the "
        f"bytes with the plan, {a_off['read'] / r['disk']:.1%} without"
    )
    peak = max(r[k]["rss"] for k in ("one", "all", "strata", "procs") if k in r)
    print(
        f"  peak RSS     {peak / 2**30:.2f} GiB (largest process of any run; "
        f"{verdict(peak / 2**30, TARGETS['rss_gib'], higher=False)} GiB)"
    )


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--sizes", nargs="+", type=float, default=[1e7], help="photons per size (default 1e7)"
    )
    ap.add_argument(
        "--per-granule",
        type=int,
        default=2_500_000,
        help="photons per granule (default 2.5e6, ~32 MB files)",
    )
    ap.add_argument("--reps", type=int, default=2, help="best of this many runs")
    ap.add_argument(
        "--band",
        type=float,
        default=0.1,
        help="latitude band of the region runs, as a fraction of the box's "
        "height (default 0.1: about a tenth of every track)",
    )
    ap.add_argument("--seed", type=int, default=1, help="granule generator seed")
    ap.add_argument(
        "--keep",
        type=Path,
        default=None,
        help="write the granules here and reuse them in later runs",
    )
    ap.add_argument(
        "--skip",
        nargs="*",
        default=[],
        choices=("procs", "memory", "agg_all", "strata"),
        help="leave out these optional measurements (for long sizes)",
    )
    ap.add_argument("--child", type=Path, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        print(json.dumps(child(json.loads(args.child.read_text()))))
        return 0
    print(
        f"zagg granule benchmark (synthetic ATL03 granules → store; t-digest config "
        f"land_ice_conf >= 2, order {C} cells, order {P} shards; {os.cpu_count()} cores)"
    )
    tmp = Path(tempfile.mkdtemp(prefix="zagg-bench-granules-"))
    try:
        for n in map(int, args.sizes):
            report(measure(n, args, tmp))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
