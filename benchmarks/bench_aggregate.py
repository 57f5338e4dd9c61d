"""Benchmark: keying, aggregation and end-to-end rates against mortie.geo2mort, same run.

For each size, synthetic ATL03-like photons are generated into memory first (not timed).
Then, on the same points:

- geo2mort: ``mortie.geo2mort`` alone — the floor every rate is compared with;
- keying:   zagg's keying (cell words straight from mortie at the cell order, which skips
            the point suffix, + shard ancestors); mortie's ``geo2mort(order=c)`` alone is
            printed beside it for reference;
- aggregate (excluding keying): grouping by cell, count + mean + min + max + t-digest per
  chunk, the per-shard combine and the finalize into dense shard arrays, single-threaded;
- end to end: ``zagg.aggregate(ds, cfg).persist()`` on N dask threads;
- dense twin alone: allocating and filling, with no data at all, the arrays the result must
  hold for the run's shards (4^(c-p) cells per shard: the morton words, every field at its
  fill, ``b""`` in every digest cell), kept alive as a persisted result is, the shards
  built on N threads at once. Dense fields are made as the result makes them
  (``zagg.filled``: fill pages shared copy-on-write until a value lands on them). Keying
  plus that bounds the end-to-end ratio any implementation of this Dataset can reach on
  this machine: the printed ceiling.

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
    from zagg.aggregate import (
        ChunkResult,
        _combine,
        finalize_shard,
        key_chunk,
        make_plan,
        reduce_keyed,
        shard_contents,
        state_key,
    )
    from zagg.config import load_config
    from zagg.sources.synthetic import DEFAULT_REGION, synthetic_photons

    ds = synthetic_photons(n, tuple(region or DEFAULT_REGION), chunk_size=CHUNK,
                           seed=1)[["lat_ph", "lon_ph", "h_ph"]].compute()
    lat, lon = ds["lat_ph"].values, ds["lon_ph"].values
    ok = np.isfinite(lat) & np.isfinite(lon)
    lat_ok, lon_ok = lat[ok], lon[ok]
    cfg = load_config(CONFIG)
    plan = make_plan(cfg)
    fields = tuple(cfg.fields.values())
    keys = tuple(state_key(f, cfg) for f in fields)
    arrs = {"lat_ph": lat, "lon_ph": lon, "h_ph": ds["h_ph"].values}
    chunks = [{k: v[i:i + CHUNK] for k, v in arrs.items()} for i in range(0, n, CHUNK)]

    mortie.geo2mort(lat_ok[:1000], lon_ok[:1000])  # warm the pool
    t_geo, _ = best_of(lambda: mortie.geo2mort(lat_ok, lon_ok), reps)

    def keying():
        c, _ = G.cell_words(lat, lon, plan.cell_order)
        return c, G.ancestor(c, plan.shard_order)

    t_key, _ = best_of(keying, reps)
    t_geo_c, _ = best_of(lambda: mortie.geo2mort(lat_ok, lon_ok, order=plan.cell_order), reps)
    keyed = [key_chunk(plan, ch) for ch in chunks]

    def reduce_combine():
        results = []
        for cells, values, counts in keyed:
            part, shards, bounds = reduce_keyed(plan, cells, values)
            results.append(ChunkResult(part, shards, bounds, counts))
        words = np.unique(np.concatenate([r.shards for r in results]))
        return [(int(w), _combine(plan, *[r.piece(int(w)) for r in results])) for w in words]

    def finalize(combined):
        for w, part in combined:
            finalize_shard(plan, fields, shard_contents(plan, fields, keys, part, w))

    combined = reduce_combine()  # compile numba kernels outside the timing
    finalize(combined)
    t_agg, combined = best_of(reduce_combine, reps)
    t_fin, _ = best_of(lambda: finalize(combined), reps)
    n_shards = len(combined)

    def end_to_end():
        with dask.config.set(scheduler="threads", num_workers=threads):
            return zagg.aggregate(ds, CONFIG, chunk_size=CHUNK).persist()

    t_e2e, res = best_of(end_to_end, reps)
    populated = int((res["count"].values > 0).sum())
    del res
    t_twin, _ = best_of(lambda: empty_twin(fields, n_shards, 4 ** (plan.cell_order
                                                                     - plan.shard_order),
                                           threads), reps)
    return {
        "n": n, "threads": threads, "shards": int(n_shards), "cells_with_data": populated,
        "geo2mort": n / t_geo, "geo2mort_cell_order": n / t_geo_c, "keying": n / t_key, "aggregate": n / t_agg,
        "finalize_ms_per_shard": 1e3 * t_fin / max(n_shards, 1),
        "aggregate_with_finalize": n / (t_agg + t_fin), "end_to_end": n / t_e2e,
        "twin_seconds": t_twin, "ceiling": t_geo / (t_key + t_twin),
    }


def empty_twin(fields, n_shards: int, n: int, threads: int = 1) -> list:
    """Every array an aggregated Dataset of ``n_shards`` shards holds, at its fill value and
    with no data: the memory the result must occupy, whatever computes it. The shards are
    built on ``threads`` threads at once, as the end-to-end run builds them."""
    from concurrent.futures import ThreadPoolExecutor

    import numpy as np

    from zagg.filled import filled

    def shard(s: int) -> list:
        arrays = [np.arange(s, s + n, dtype=np.uint64)]  # stands for the cell words
        for f in fields:
            if f.kind == "ragged":
                a = np.empty(n, dtype=object)
                a.fill(b"")
            else:  # as the result's dense fields are made: untouched fill pages are shared
                a = filled(n, f.dtype, f.fill_value)
            arrays.append(a)
        return arrays

    with ThreadPoolExecutor(threads) as pool:
        return list(pool.map(shard, range(n_shards)))


def report(r: dict) -> None:
    m = 1e6
    per_core = r["geo2mort"] / r["threads"]
    print(f"\n{r['n']:.0e} points on {r['threads']} core(s): {r['shards']} shards, "
          f"{r['cells_with_data']:,} cells with data")
    print(f"  geo2mort alone           {r['geo2mort'] / m:8.2f} Mpts/s"
          f"   ({per_core / m:.2f} per core)            baseline 1.00")
    print(f"  geo2mort at cell order   {r['geo2mort_cell_order'] / m:8.2f} Mpts/s"
          f"                                ratio {r['geo2mort_cell_order'] / r['geo2mort']:.2f}")
    print(f"  keying (zagg)            {r['keying'] / m:8.2f} Mpts/s"
          f"                                ratio {r['keying'] / r['geo2mort']:.2f}")
    print(f"  reduce + combine         {r['aggregate'] / m:8.2f} Mpts/s per core"
          f"   (target >= 30)                x{r['aggregate'] / per_core:.1f} of geo2mort/core"
          f" (target >= x{TARGET_X:.1f})")
    print(f"  finalize dense shards    {r['finalize_ms_per_shard']:8.1f} ms per shard of "
          f"4^10 cells (fills, payload scatter)")
    print(f"  aggregate excl. keying   {r['aggregate_with_finalize'] / m:8.2f} Mpts/s per core"
          f"   (reduce + combine + finalize)")
    print(f"  aggregate end to end     {r['end_to_end'] / m:8.2f} Mpts/s"
          f"   (target >= 50% of geo2mort)   ratio {r['end_to_end'] / r['geo2mort']:.2f}")
    print(f"  dense twin alone         {r['twin_seconds']:8.2f} s for {r['shards']} shards"
          f" (fills, no data, {r['threads']} thread(s))  ceiling {r['ceiling']:.2f}"
          f"  (geo2mort / (keying + twin))")
    print(f"  verdict                  reduce + combine {r['aggregate'] / m:.0f}"
          f" Mpts/s per core {'meets' if r['aggregate'] >= 30e6 else 'misses'}"
          f" 30; end to end {verdict(r['end_to_end'] / r['geo2mort'], r['ceiling'])}")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", nargs="+", type=float, default=[1e6, 1e7])
    ap.add_argument("--threads", nargs="+", type=int, default=[1, 2])
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--region", nargs=4, type=float, default=None,
                    metavar=("LON0", "LAT0", "LON1", "LAT1"),
                    help="synthetic region (default: the generator's 110 km Pine Island box)")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        for n in args.sizes:
            print(json.dumps(measure(int(n), args.threads[0], args.reps, args.region)),
                  flush=True)
        return 0
    print("zagg aggregate benchmark (synthetic ATL03-like photons, order 19 cells, order 9 "
          "shards; count + mean + min + max + tdigest)")
    for threads in args.threads:
        env = {**os.environ, "RAYON_NUM_THREADS": str(threads)}
        cmd = [sys.executable, __file__, "--child", "--threads", str(threads), "--reps",
               str(args.reps), "--sizes", *map(str, args.sizes)]
        if args.region:
            cmd += ["--region", *map(str, args.region)]
        out = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True)
        for line in out.stdout.splitlines():
            if line.startswith("{"):
                report(json.loads(line))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
