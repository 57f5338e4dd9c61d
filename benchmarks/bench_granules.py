"""Benchmark: HDF5 granule reading, and aggregating from granules, against in-memory aggregation.

For each size, seeded synthetic ATL03 granules (500 000 photons each before the empty beam
some granules have, six beams ``gt1l`` … ``gt3r``) are written into a temporary directory
first (not timed). Then, in one process and on the same photons, with dask's threaded
scheduler on every core (``RAYON_NUM_THREADS`` = cores, so mortie's pool uses them too):

- read:            ``open_granules(parse_granule_source(block)).compute()`` — HDF5 reads of
                   latitude, longitude, ``h_ph`` and column 3 of ``signal_conf_ph`` only;
- read+aggregate:  ``zagg.aggregate(open_granules(...), cfg).persist()`` — count + mean +
                   t-digest of ``h_ph`` for photons with land-ice confidence >= 2, order 19
                   cells, order 9 shards;
- in memory:       the same Dataset computed into numpy first (not timed), then
                   ``zagg.aggregate(ds, cfg).persist()`` — the baseline.

Rates are photons read per second (every row of the opened Dataset, before the filter);
ratios are read+aggregate / in memory and read / in memory. Each figure is the best of
``--reps`` runs. The granules were just written, so reads are served by the OS page cache:
this measures HDF5 decoding, chunking and scheduling, not the disk. The in-memory input is
chunked by ``zagg.aggregate``'s default (2**20 rows), the granule input one granule and beam
per chunk, as ``open_granules`` makes them.

    python benchmarks/bench_granules.py                  # 1e6 and 1e7 photons
    python benchmarks/bench_granules.py --sizes 1e6 --reps 3
"""

from __future__ import annotations

import argparse
import math
import os
import shutil
import tempfile

from common import best_of

BEAMS = ("gt1l", "gt1r", "gt2l", "gt2r", "gt3l", "gt3r")
POINTS_PER_GRANULE = 500_000


def source_block(directory: str) -> dict:
    return {
        "granules": directory,
        "groups": list(BEAMS),
        "coordinates": {"latitude": "/{group}/heights/lat_ph",
                        "longitude": "/{group}/heights/lon_ph"},
        "variables": {"h_ph": "/{group}/heights/h_ph",
                      "land_ice_conf": {"path": "/{group}/heights/signal_conf_ph", "column": 3}},
        "filters": [{"variable": "land_ice_conf", "op": "ge", "value": 2}],
    }


def config(directory: str) -> dict:
    return {
        "data_source": source_block(directory),
        "aggregation": {"variables": {
            "count": {"function": "count"},
            "h_mean": {"function": "mean", "source": "h_ph"},
            "h_tdigest": {"function": "tdigest", "source": "h_ph"},
        }},
        "output": {"dataset": {"short_name": "ATL03", "version": "006"},
                   "grid": {"parent_order": 9, "child_order": 19}},
    }


def measure(n: int, reps: int, cores: int, seed: int) -> dict:
    import dask

    import zagg
    from zagg.sources.granules import open_granules, parse_granule_source
    from zagg.sources.write_granules import write_granules

    tmp = tempfile.mkdtemp(prefix="zagg-bench-granules-")
    try:
        per = min(POINTS_PER_GRANULE, n)
        paths = write_granules(tmp, math.ceil(n / per), product="ATL03",
                               points_per_granule=per, seed=seed)
        cfg = zagg.load_config(config(tmp))
        source = parse_granule_source(source_block(tmp))

        with dask.config.set(scheduler="threads", num_workers=cores):
            in_memory = open_granules(source).compute()  # not timed
            rows = in_memory.sizes["obs"]
            # compile the numba kernels and warm the pools outside the timing
            zagg.aggregate(in_memory.isel(obs=slice(0, 100_000)), cfg).persist()

            t_read, _ = best_of(lambda: open_granules(source).compute(), reps)
            t_both, res = best_of(lambda: zagg.aggregate(open_granules(source), cfg).persist(),
                                  reps)
            t_mem, res_mem = best_of(lambda: zagg.aggregate(in_memory, cfg).persist(), reps)
        kept = int(res["count"].values.sum())
        if kept != int(res_mem["count"].values.sum()):
            print(f"  warning: granule and in-memory runs kept different photon counts "
                  f"({kept:,} vs {int(res_mem['count'].values.sum()):,})")
        return {
            "n": n, "granules": len(paths), "rows": rows, "kept": kept,
            "cells_with_data": int((res["count"].values > 0).sum()),
            "read": rows / t_read, "read_aggregate": rows / t_both, "in_memory": rows / t_mem,
        }
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def report(r: dict) -> None:
    m = 1e6
    print(f"\n{r['n']:.0e} photons asked: {r['granules']} granules, {r['rows']:,} photons read, "
          f"{r['kept']:,} kept by the filter, {r['cells_with_data']:,} cells with data")
    print(f"  in memory (aggregate)      {r['in_memory'] / m:8.2f} Mphotons/s   baseline 1.00")
    print(f"  read + aggregate           {r['read_aggregate'] / m:8.2f} Mphotons/s   "
          f"ratio {r['read_aggregate'] / r['in_memory']:.2f}")
    print(f"  read only                  {r['read'] / m:8.2f} Mphotons/s   "
          f"ratio {r['read'] / r['in_memory']:.2f}")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", nargs="+", type=float, default=[1e6, 1e7],
                    help="photons to write per size (granules of 500 000 photons)")
    ap.add_argument("--reps", type=int, default=2, help="best of this many runs")
    ap.add_argument("--seed", type=int, default=1, help="granule generator seed")
    args = ap.parse_args(argv)
    cores = os.cpu_count() or 1
    os.environ["RAYON_NUM_THREADS"] = str(cores)  # before mortie is imported
    print(f"zagg granule benchmark (synthetic ATL03 granules, land_ice_conf >= 2, order 19 "
          f"cells, order 9 shards; count + mean + tdigest; threaded scheduler, {cores} cores)")
    for n in map(int, args.sizes):
        report(measure(n, args.reps, cores, args.seed))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
