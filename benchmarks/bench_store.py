"""Benchmark: synthetic points → hive store end to end, with peak memory, against geo2mort.

Each size runs ``zagg.run`` (a LocalCluster on this machine, every core) from the lazy
synthetic generator — the points are generated inside the tasks, never materialised on the
client — into a fresh store. Peak RSS is sampled over the whole process tree (client,
scheduler, workers). The same run measures ``mortie.geo2mort`` alone on RAYON threads =
cores, and prints the ratio of the end-to-end rate to it.

    python benchmarks/bench_store.py                    # 1e6 and 1e7 points
    python benchmarks/bench_store.py --sizes 1e8        # the streamed 100 M point run
    python benchmarks/bench_store.py --region -100.2 -75.6 -99.8 -75.4   # a dense box
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import threading
import time

from common import standard_config


def sample_rss(stop: threading.Event, out: list) -> None:
    import psutil

    me = psutil.Process()
    peak = 0
    while not stop.is_set():
        procs = [me, *me.children(recursive=True)]
        total = 0
        for p in procs:
            try:
                total += p.memory_info().rss
            except psutil.Error:
                pass
        peak = max(peak, total)
        stop.wait(0.2)
    out.append(peak)


def generation_seconds(n: int, region, chunk: int) -> float:
    """Wall time to generate the synthetic photons alone (threaded scheduler, all cores)."""
    import dask

    from zagg.sources.synthetic import synthetic_photons

    ds = synthetic_photons(n, tuple(region), chunk_size=chunk, seed=1)
    t0 = time.perf_counter()
    with dask.config.set(scheduler="threads"):
        dask.compute(*[ds[v].data.sum() for v in ("lat_ph", "lon_ph", "h_ph")])
    return time.perf_counter() - t0


def cluster_start_seconds() -> float:
    from zagg.cluster import client_for

    t0 = time.perf_counter()
    with client_for(None):
        t = time.perf_counter() - t0
    return t


def geo2mort_rate(n: int = 4_000_000) -> float:
    import mortie
    import numpy as np

    rng = np.random.default_rng(0)
    lat, lon = rng.uniform(-76, -75, n), rng.uniform(-102, -98, n)
    mortie.geo2mort(lat[:1000], lon[:1000])
    best = float("inf")
    for _ in range(3):
        t0 = time.perf_counter()
        mortie.geo2mort(lat, lon)
        best = min(best, time.perf_counter() - t0)
    return n / best


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", nargs="+", type=float, default=[1e6, 1e7])
    ap.add_argument("--region", nargs=4, type=float, default=None,
                    metavar=("LON0", "LAT0", "LON1", "LAT1"))
    ap.add_argument("--child-order", type=int, default=19)
    ap.add_argument("--chunk", type=int, default=1_000_000)
    args = ap.parse_args()
    cores = os.cpu_count() or 1
    os.environ["RAYON_NUM_THREADS"] = str(cores)

    import xarray  # noqa: F401  (the client's library imports are not part of a run)

    from zagg.run import run
    from zagg.sources.synthetic import DEFAULT_REGION

    region = list(args.region or DEFAULT_REGION)
    base = geo2mort_rate()
    t_start = cluster_start_seconds()
    print(f"zagg store benchmark: synthetic ATL03-like photons over {region}, order "
          f"{args.child_order} cells, order 9 shards, count + mean + min + max + tdigest, "
          f"{cores} cores")
    print(f"geo2mort alone on {cores} cores: {base / 1e6:.2f} Mpts/s (baseline)")
    for n in map(int, args.sizes):
        cfg = standard_config(synthetic={"points": n, "region": region, "seed": 1,
                                         "chunk_size": args.chunk})
        cfg["output"]["grid"]["child_order"] = args.child_order
        tmp = tempfile.mkdtemp(prefix="zagg-bench-")
        stop, peak = threading.Event(), []
        sampler = threading.Thread(target=sample_rss, args=(stop, peak), daemon=True)
        sampler.start()
        t0 = time.perf_counter()
        summary = run(cfg, store=f"{tmp}/store", progress=False)
        wall = time.perf_counter() - t0
        stop.set()
        sampler.join()
        shutil.rmtree(tmp, ignore_errors=True)
        # timed after the run: generating in this process first would leave its freed
        # buffers in the client's heap and inflate the run's peak RSS
        t_gen = generation_seconds(n, region, args.chunk)
        rate = n / wall
        print(f"\n{n:.0e} points: {summary.shards} shards, {summary.cells_with_data:,} cells "
              f"with data, {summary.bytes_written / 2**20:,.0f} MiB written")
        print(f"  end to end      {rate / 1e6:7.2f} Mpts/s   ({wall:.1f} s wall, cluster start "
              f"included)")
        print(f"  input generation {n / t_gen / 1e6:6.2f} Mpts/s   (synthetic photons alone, "
              f"{t_gen:.1f} s; inside the end-to-end time)")
        print(f"  cluster start   {t_start:7.1f} s       (inside the end-to-end time)")
        rest = max(wall - t_gen - t_start, 1e-9)
        print(f"  zagg alone      {n / rest / 1e6:7.2f} Mpts/s   (end to end minus input "
              f"generation and cluster start; ratio to geo2mort {n / rest / base:.2f})")
        print(f"  per shard       {wall / max(summary.shards, 1) * cores:7.3f} core-s")
        print(f"  peak RSS        {peak[0] / 2**30:7.2f} GiB (all processes)")
        print(f"  ratio to geo2mort {rate / base:5.2f}   (target >= 0.50)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
