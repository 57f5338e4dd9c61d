"""Benchmark: the same store on 1 and 2 workers, on a local cluster and on a local gateway.

The synthetic photons (the dense box of bench_store by default, 1e7 points) are written
once to an uncompressed zarr input, untimed. Then for each of four clusters (a
``LocalCluster`` of 1 and of 2 single-threaded worker processes, and a cluster of the
repository's local dask-gateway, started here on 127.0.0.1, with 1 and 2 single-core
workers) one warm-up run on a small input pays the workers' set-up, then ``--runs`` timed
``zagg.run`` calls (default 3, the best is kept) write the whole store, each into a fresh
store. The machine's load average is printed beside the results: on a machine whose
cores other work shares, the speed-up cannot show. The cluster's start (up to
its last worker) is timed apart. Printed: every run's wall time, the speed-up from 1 to 2
workers on each kind of cluster and the gateway's overhead against the local cluster of
the same size, ratios of runs measured in this one process, one after another.

    python benchmarks/bench_scaling.py                       # 1e7 points, dense box
    python benchmarks/bench_scaling.py --size 1e6 --no-gateway
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

from bench_store import write_points
from common import standard_config

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

DENSE_BOX = (-100.2, -75.6, -99.8, -75.4)
TARGET_SPEEDUP = 1.7  # 2 workers against 1
TARGET_OVERHEAD = 0.10  # gateway run against the local cluster's, cluster start apart


def timed_run(cfg: dict, warm_cfg: dict, client, workdir: str, runs: int) -> tuple[float, object]:
    """(best wall seconds, summary) of ``runs`` runs, each into a fresh store, after a
    warm-up run."""
    from zagg.pipeline.run import run

    run(warm_cfg, store=tempfile.mkdtemp(dir=workdir), scheduler=client, progress=False)
    best, summary = float("inf"), None
    for _ in range(runs):
        store = tempfile.mkdtemp(dir=workdir)
        t0 = time.perf_counter()
        summary = run(cfg, store=store, scheduler=client, progress=False)
        best = min(best, time.perf_counter() - t0)
        shutil.rmtree(store, ignore_errors=True)
    return best, summary


def on_cluster(kind: str, workers: int, url: str | None, cfg, warm_cfg, workdir: str, runs: int):
    """(cluster start seconds, run seconds, summary) on a new cluster of ``kind``."""
    from zagg.cluster.clients import connect

    t0 = time.perf_counter()
    if kind == "gateway":
        client = connect(gateway=url, workers=workers, threads=1, memory_limit="3GiB")
    else:
        client = connect(workers=workers, threads=1)
    with client:
        client.wait_for_workers(workers, timeout=300)
        start = time.perf_counter() - t0
        wall, summary = timed_run(cfg, warm_cfg, client, workdir, runs)
    return start, wall, summary


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", type=float, default=1e7)
    ap.add_argument(
        "--region",
        nargs=4,
        type=float,
        default=list(DENSE_BOX),
        metavar=("LON0", "LAT0", "LON1", "LAT1"),
    )
    ap.add_argument("--chunk", type=int, default=1_000_000)
    ap.add_argument("--runs", type=int, default=3, help="timed runs per cluster (the best is kept)")
    ap.add_argument("--no-gateway", dest="gateway", action="store_false")
    args = ap.parse_args()
    n = int(args.size)
    workdir = tempfile.mkdtemp(prefix="zagg-scaling-")
    load = os.getloadavg()[0]
    try:
        write_points(n, args.region, args.chunk, f"{workdir}/points.zarr")
        write_points(min(n, 100_000), args.region, args.chunk, f"{workdir}/warm.zarr")
        cfg = standard_config(input=f"{workdir}/points.zarr")
        warm_cfg = standard_config(input=f"{workdir}/warm.zarr")
        kinds = ["local", "gateway"] if args.gateway else ["local"]
        results = {}
        for kind in kinds:
            if kind == "gateway":
                from gateway_server import local_gateway

                with local_gateway(Path(workdir) / "gateway.log") as (url, _):
                    for w in (1, 2):
                        results[kind, w] = on_cluster(
                            kind, w, url, cfg, warm_cfg, workdir, args.runs
                        )
            else:
                for w in (1, 2):
                    results[kind, w] = on_cluster(kind, w, None, cfg, warm_cfg, workdir, args.runs)
        print(
            f"load average {load:.1f} at the start, {os.getloadavg()[0]:.1f} at the end, "
            f"on {os.cpu_count()} cores; best of {args.runs} run(s) per cluster"
        )
        first = next(iter(results.values()))[2]
        print(f"{n:.0e} points: {first.shards} shards, {first.cells_with_data:,} cells with data")
        same = {(s.shards, s.cells_with_data, s.points) for _, _, s in results.values()}
        print(f"same shards, cells and points in every run: {len(same) == 1}")
        for (kind, w), (start, wall, s) in results.items():
            label = "local cluster" if kind == "local" else "local gateway"
            print(
                f"{label:<14} {w} worker{'s' if w > 1 else ' '}  run {wall:7.2f} s "
                f"({s.points / wall / 1e6:5.2f} M points/s), cluster start {start:5.1f} s"
            )
        for kind in kinds:
            up = results[kind, 1][1] / results[kind, 2][1]
            met = "meets" if up >= TARGET_SPEEDUP else "misses"
            print(
                f"speed-up 1 -> 2 workers, {kind}: {up:.2f} ({met} the target {TARGET_SPEEDUP:.1f})"
            )
        if args.gateway:
            for w in (1, 2):
                over = results["gateway", w][1] / results["local", w][1] - 1
                met = "meets" if over <= TARGET_OVERHEAD else "misses"
                print(
                    f"gateway overhead, {w} worker{'s' if w > 1 else ''}: {100 * over:+.1f} % "
                    f"of the local run ({met} the target {100 * TARGET_OVERHEAD:.0f} %); "
                    f"cluster start {results['gateway', w][0]:.1f} s against "
                    f"{results['local', w][0]:.1f} s"
                )
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
