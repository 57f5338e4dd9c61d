"""Benchmark: this checkout against another one (a previous main), side by side.

The same synthetic ATL03-like photons (count + mean + min + max + t-digest, order 19 cells,
order 9 shards) are written once to an uncompressed zarr store per case. Then, in rounds
that alternate which checkout goes first, each checkout runs in a fresh process of its own
(``PYTHONPATH`` pointing at it) and times, through the public API only:

- ``aggregate``: ``zagg.aggregate(ds, cfg).persist()`` on the points in memory, the default
  result of each checkout (first call, and the best later one);
- ``run``: ``zagg.run`` from the zarr store into a fresh store on zagg's default local
  cluster, started once (first run, and the best later one), with the peak RSS of the
  process tree;
- ``cli``: ``python -m zagg run`` on the same input, from process start to exit.

Both checkouts write the same store: this one declares no pyramid unless ``--pyramid`` is
given (then its leaf tasks also write the pyramid's leaf columns, which a checkout from
before the pyramid does not). Prints per case and measure each checkout's range over the
rounds and the speed ratio of the medians (above 1: this checkout is faster).

    python benchmarks/bench_compare.py --baseline ../zagg-previous
    python benchmarks/bench_compare.py --baseline ../zagg-previous --cases dense-1e8 --rounds 2
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from common import sample_rss, standard_config

HERE = Path(__file__).resolve().parent
DENSE = (-100.2, -75.6, -99.8, -75.4)  # 0.4° × 0.2°: a few shards, most cells occupied
CASES = {  # name → (points, region or None for the generator's sparse default, chunk)
    "dense-1e7": (10_000_000, DENSE, 1_000_000),
    "sparse-1e7": (10_000_000, None, 1_000_000),
    "dense-1e8": (100_000_000, DENSE, 2_000_000),
}
IN_MEMORY_MAX = 20_000_000  # larger cases skip the in-memory aggregate


def write_points(n: int, region, chunk: int, path: str) -> None:
    """The photons (lat, lon, height) as an uncompressed zarr store, in a child process."""
    code = f"""
import dask
from zagg.sources.synthetic import DEFAULT_REGION, synthetic_photons
region = {list(region) if region else None!r} or list(DEFAULT_REGION)
ds = synthetic_photons({n}, tuple(region), chunk_size={chunk}, seed=1)[["lat_ph", "lon_ph", "h_ph"]]
with dask.config.set(scheduler="threads"):
    ds.to_zarr({path!r}, mode="w", zarr_format=3, consolidated=False,
               encoding={{v: {{"compressors": None}} for v in ds.data_vars}})
"""
    subprocess.run([sys.executable, "-c", code], check=True, env=_env(HERE.parent))


def _env(checkout: Path) -> dict:
    return {**os.environ, "PYTHONPATH": str(checkout)}


def config(points: str, pyramid_off: bool) -> dict:
    """The standard config on ``points``; ``pyramid_off`` declares no pyramid (the output
    of a checkout that predates it, whose config parser does not know the key)."""
    cfg = standard_config(input=points)
    if pyramid_off:
        cfg["output"]["pyramid"] = False
    return cfg


def child(points: str, chunk: int, runs: int, in_memory: bool, pyramid_off: bool) -> dict:
    """Time the measures in this process (whichever checkout ``zagg`` imports from)."""
    import xarray as xr

    import zagg

    try:
        from zagg.cluster.clients import client_for
    except ImportError:  # a checkout from before the packages by stage
        from zagg.cluster import client_for

    out = {"zagg": str(Path(zagg.__file__).parent.parent)}
    cfg = config(points, pyramid_off)
    if in_memory:
        ds = xr.open_zarr(points, consolidated=False).compute()
        times = []
        for _ in range(runs):
            t0 = time.perf_counter()
            res = zagg.aggregate(ds, cfg, chunk_size=chunk).persist()
            times.append(time.perf_counter() - t0)
            del res
        out["aggregate"] = times
        del ds
    stop, peak = threading.Event(), []
    sampler = threading.Thread(target=sample_rss, args=(stop, peak, 0.1), daemon=True)
    sampler.start()
    times = []
    with client_for(None) as client:
        for _ in range(runs):
            store = tempfile.mkdtemp(prefix="zagg-compare-")
            t0 = time.perf_counter()
            zagg.run(cfg, store=f"{store}/s", scheduler=client, progress=False)
            times.append(time.perf_counter() - t0)
            shutil.rmtree(store, ignore_errors=True)
    stop.set()
    sampler.join()
    out["run"], out["peak_gib"] = times, peak[0] / 2**30
    return out


def cli(checkout: Path, points: str, workdir: str, pyramid_off: bool) -> float:
    import yaml

    cfg_path = f"{workdir}/config.yaml"
    with open(cfg_path, "w") as f:
        yaml.safe_dump(config(points, pyramid_off), f)
    store = f"{workdir}/cli-store"
    shutil.rmtree(store, ignore_errors=True)
    t0 = time.perf_counter()
    subprocess.run(
        [sys.executable, "-m", "zagg", "run", cfg_path, "--store", store, "--quiet"],
        check=True,
        capture_output=True,
        env=_env(checkout),
    )
    took = time.perf_counter() - t0
    shutil.rmtree(store, ignore_errors=True)
    return took


def measure(
    checkout: Path,
    points: str,
    chunk: int,
    runs: int,
    in_memory: bool,
    workdir: str,
    pyramid_off: bool = False,
) -> dict:
    cmd = [
        sys.executable,
        __file__,
        "--child",
        points,
        str(chunk),
        str(runs),
        str(int(in_memory)),
        str(int(pyramid_off)),
    ]
    done = subprocess.run(
        cmd, check=True, capture_output=True, text=True, cwd=HERE, env=_env(checkout)
    )
    out = json.loads(done.stdout.strip().splitlines()[-1])
    if Path(out["zagg"]).resolve() != checkout.resolve():
        raise SystemExit(f"{checkout}: the child imported zagg from {out['zagg']}")
    out["cli"] = [cli(checkout, points, workdir, pyramid_off)]
    return out


def _pick(times: list[float], which: int) -> float:
    """The first call's time, or the best later one's."""
    return times[0] if which == 0 else min(times[1:] or times)


def summarize(name: str, results: dict[str, list[dict]]) -> None:
    base, new = results["baseline"], results["this"]
    print(f"\n{name}")
    rows = [
        ("aggregate first", "aggregate", 0),
        ("aggregate again", "aggregate", 1),
        ("run first", "run", 0),
        ("run again", "run", 1),
        ("cli", "cli", 0),
    ]
    for label, key, which in rows:
        if key not in base[0]:
            continue
        a, b = [_pick(r[key], which) for r in base], [_pick(r[key], which) for r in new]
        ratio = statistics.median(a) / statistics.median(b)
        print(
            f"  {label:16} baseline {min(a):6.2f}-{max(a):6.2f} s   this {min(b):6.2f}-"
            f"{max(b):6.2f} s   speed ratio {ratio:4.2f}"
        )
    pa, pb = [r["peak_gib"] for r in base], [r["peak_gib"] for r in new]
    print(
        f"  {'peak RSS (run)':16} baseline {min(pa):6.2f}-{max(pa):6.2f} GiB this "
        f"{min(pb):6.2f}-{max(pb):6.2f} GiB"
    )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--baseline", type=Path, help="the other checkout (its repository root)")
    ap.add_argument("--cases", nargs="+", default=list(CASES), choices=list(CASES))
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--runs", type=int, default=2, help="calls per measure and process")
    ap.add_argument(
        "--points",
        type=float,
        default=None,
        help="override every case's number of points (a quick check)",
    )
    ap.add_argument(
        "--pyramid",
        action="store_true",
        help="let this checkout write its default pyramid columns (by default it "
        "declares none, so both checkouts write the same store)",
    )
    ap.add_argument("--child", nargs=5, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        points, chunk, runs, in_memory, off = args.child
        print(json.dumps(child(points, int(chunk), int(runs), in_memory == "1", off == "1")))
        return 0
    if args.baseline is None:
        ap.error("--baseline is required")
    checkouts = {"baseline": args.baseline.resolve(), "this": HERE.parent}
    print(
        f"zagg side by side: this checkout {checkouts['this']} against {checkouts['baseline']}, "
        f"{args.rounds} rounds alternating which goes first, {os.cpu_count()} cores"
    )
    for name in args.cases:
        n, region, chunk = CASES[name]
        n = int(args.points or n)
        work = tempfile.mkdtemp(prefix="zagg-compare-points-")
        points = f"{work}/points.zarr"
        write_points(n, region, chunk, points)
        results = {"baseline": [], "this": []}
        off = {"baseline": False, "this": not args.pyramid}
        for label in results:  # each checkout's numba cache warmed, untimed
            measure(checkouts[label], points, chunk, 1, n <= IN_MEMORY_MAX, work, off[label])
        for r in range(args.rounds):
            order = ["baseline", "this"] if r % 2 == 0 else ["this", "baseline"]
            for label in order:
                results[label].append(
                    measure(
                        checkouts[label],
                        points,
                        chunk,
                        args.runs,
                        n <= IN_MEMORY_MAX,
                        work,
                        off[label],
                    )
                )
        summarize(f"{name} ({n:.0e} points)", results)
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
