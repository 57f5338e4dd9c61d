"""Benchmark: keying, aggregation and end-to-end rates against mortie.geo2mort, same run.

For each size, synthetic ATL03-like photons are generated into memory first (not timed).
Then, on the same points:

- geo2mort: ``mortie.geo2mort`` alone, the floor every rate is compared with;
- keying:   zagg's keying (cell words straight from mortie at the cell order, which skips
            the point suffix, + shard ancestors); mortie's ``geo2mort(order=c)`` alone is
            printed beside it for reference;
- reduce + combine (excluding keying): grouping by cell and every state's chunk kernel
  (count + mean + min + max + t-digest) per chunk, then the per-shard merge, one thread;
- finalize: each shard's stored values at its occupied cells, one thread;
- end to end: ``zagg.aggregate(ds, cfg).persist()`` (the sparse result) on N dask
  threads, and the same with ``dense=True`` (the leaf-shaped twin, 4^(c-p) cells a shard).

Each thread count runs in its own process with ``RAYON_NUM_THREADS`` set to it, so mortie's
pool and dask's threads use the same cores. Prints rates in M points/s and the ratios.

    python benchmarks/bench_aggregate.py                 # 1e6 and 1e7 points, 1 and 2 cores
    python benchmarks/bench_aggregate.py --sizes 1e6 --threads 1
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

from common import STANDARD_CONFIG, best_of, verdict

CONFIG = STANDARD_CONFIG
CHUNK = 1 << 20
#: the 30 Mpts/s per core target was set where geo2mort ran at 10.5-12.8 Mpts/s per core;
#: as a ratio to the same-run geo2mort (machines differ, and this one drifts) it is the
#: stricter end of that range
TARGET_X = 30 / 10.5


def measure(n: int, threads: int, reps: int, region=None) -> dict:
    import dask
    import mortie
    import numpy as np

    import zagg
    from zagg import grid as G
    from zagg.config.model import load_config
    from zagg.engine.combine import merge_shard
    from zagg.engine.plan import make_plan
    from zagg.engine.reduce import reduce_chunk
    from zagg.engine.shards import finalize
    from zagg.sources.synthetic import DEFAULT_REGION, synthetic_photons

    ds = synthetic_photons(n, tuple(region or DEFAULT_REGION), chunk_size=CHUNK, seed=1)[
        ["lat_ph", "lon_ph", "h_ph"]
    ].compute()
    lat, lon = ds["lat_ph"].values, ds["lon_ph"].values
    ok = np.isfinite(lat) & np.isfinite(lon)
    lat_ok, lon_ok = lat[ok], lon[ok]
    cfg = load_config(CONFIG)
    plan = make_plan(cfg)
    arrs = [ds[name].values for name in plan.inputs]
    chunks = [[a[i : i + CHUNK] for a in arrs] for i in range(0, n, CHUNK)]

    mortie.geo2mort(lat_ok[:1000], lon_ok[:1000])  # warm the pool
    t_geo, _ = best_of(lambda: mortie.geo2mort(lat_ok, lon_ok), reps)

    def keying():
        c, _ = G.cell_words(lat, lon, plan.grid.cell_order)
        return c, G.ancestor(c, plan.grid.shard_order)

    t_key, _ = best_of(keying, reps)
    t_geo_c, _ = best_of(lambda: mortie.geo2mort(lat_ok, lon_ok, order=plan.grid.cell_order), reps)

    def reduce_combine():
        results = [reduce_chunk(plan, *ch) for ch in chunks]
        words = np.unique(np.concatenate([r.shards for r in results]))
        return [(int(w), merge_shard(plan, int(w), *results)) for w in words]

    def finalize_all(combined):
        return [finalize(plan, part, w) for w, part in combined]

    combined = reduce_combine()  # compile numba kernels outside the timing
    finalize_all(combined)
    t_agg, combined = best_of(reduce_combine, reps)
    t_key_chunks, _ = best_of(
        lambda: [G.cell_words(c[0], c[1], plan.grid.cell_order) for c in chunks], reps
    )
    t_fin, _ = best_of(lambda: finalize_all(combined), reps)
    n_shards = len(combined)

    def end_to_end(dense):
        with dask.config.set(scheduler="threads", num_workers=threads):
            return zagg.aggregate(ds, CONFIG, chunk_size=CHUNK, dense=dense).persist()

    t_e2e, res = best_of(lambda: end_to_end(False), reps)
    populated = int((res["count"].values > 0).sum())
    del res
    t_dense, res = best_of(lambda: end_to_end(True), reps)
    del res
    return {
        "n": n,
        "threads": threads,
        "shards": int(n_shards),
        "cells_with_data": populated,
        "geo2mort": n / t_geo,
        "geo2mort_cell_order": n / t_geo_c,
        "keying": n / t_key,
        # reduce_chunk keys its chunk too: the kernels' rate is without that keying
        "aggregate": n / max(t_agg - t_key_chunks, 1e-9),
        "finalize_ms_per_shard": 1e3 * t_fin / max(n_shards, 1),
        "aggregate_with_finalize": n / max(t_agg - t_key_chunks + t_fin, 1e-9),
        "end_to_end": n / t_e2e,
        "dense_end_to_end": n / t_dense,
    }


def report(r: dict) -> None:
    m = 1e6
    per_core = r["geo2mort"] / r["threads"]
    print(
        f"\n{r['n']:.0e} points on {r['threads']} core(s): {r['shards']} shards, "
        f"{r['cells_with_data']:,} cells with data"
    )
    print(
        f"  geo2mort alone           {r['geo2mort'] / m:8.2f} Mpts/s"
        f"   ({per_core / m:.2f} per core)            baseline 1.00"
    )
    print(
        f"  geo2mort at cell order   {r['geo2mort_cell_order'] / m:8.2f} Mpts/s"
        f"                                ratio {r['geo2mort_cell_order'] / r['geo2mort']:.2f}"
    )
    print(
        f"  keying (zagg)            {r['keying'] / m:8.2f} Mpts/s"
        f"                                ratio {r['keying'] / r['geo2mort']:.2f}"
    )
    print(
        f"  reduce + combine         {r['aggregate'] / m:8.2f} Mpts/s per core"
        f"   (target >= 30)                x{r['aggregate'] / per_core:.1f} of geo2mort/core"
        f" (target >= x{TARGET_X:.1f})"
    )
    print(
        f"  finalize shards          {r['finalize_ms_per_shard']:8.1f} ms per shard "
        "(stored values at the occupied cells)"
    )
    print(
        f"  aggregate excl. keying   {r['aggregate_with_finalize'] / m:8.2f} Mpts/s per core"
        f"   (reduce + combine + finalize)"
    )
    print(
        f"  aggregate end to end     {r['end_to_end'] / m:8.2f} Mpts/s"
        f"   (target >= 50% of geo2mort)   ratio {r['end_to_end'] / r['geo2mort']:.2f}"
    )
    print(
        f"  ... dense twin           {r['dense_end_to_end'] / m:8.2f} Mpts/s"
        f"   (dense=True: 4^10 cells a shard) ratio "
        f"{r['dense_end_to_end'] / r['geo2mort']:.2f}"
    )
    print(
        f"  verdict                  reduce + combine {r['aggregate'] / m:.0f}"
        f" Mpts/s per core {'meets' if r['aggregate'] >= 30e6 else 'misses'}"
        f" 30; end to end {verdict(r['end_to_end'] / r['geo2mort'])}"
    )


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", nargs="+", type=float, default=[1e6, 1e7])
    ap.add_argument("--threads", nargs="+", type=int, default=[1, 2])
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument(
        "--region",
        nargs=4,
        type=float,
        default=None,
        metavar=("LON0", "LAT0", "LON1", "LAT1"),
        help="synthetic region (default: the generator's 110 km Pine Island box)",
    )
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        for n in args.sizes:
            print(json.dumps(measure(int(n), args.threads[0], args.reps, args.region)), flush=True)
        return 0
    print(
        "zagg aggregate benchmark (synthetic ATL03-like photons, order 19 cells, order 9 "
        "shards; count + mean + min + max + tdigest)"
    )
    for threads in args.threads:
        env = {**os.environ, "RAYON_NUM_THREADS": str(threads)}
        cmd = [
            sys.executable,
            __file__,
            "--child",
            "--threads",
            str(threads),
            "--reps",
            str(args.reps),
            "--sizes",
            *map(str, args.sizes),
        ]
        if args.region:
            cmd += ["--region", *map(str, args.region)]
        out = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True)
        for line in out.stdout.splitlines():
            if line.startswith("{"):
                report(json.loads(line))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
