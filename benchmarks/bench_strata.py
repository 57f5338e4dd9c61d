"""Benchmark: the ATL03 strata product against a plain t-digest, and against geo2mort, same run.

For each size, synthetic ATL03-like photons (``synthetic_photons(n, chunk_size=1_000_000,
seed=1)``) are generated into memory first (not timed). Then, on the same points, with dask's
threaded scheduler on every core (``RAYON_NUM_THREADS`` = cores, so mortie's pool uses them
too):

- geo2mort: ``mortie.geo2mort`` alone on the finite points — the floor, as in the other
            benchmarks;
- plain:    ``zagg.aggregate(ds, cfg).persist()`` with count + t-digest of ``h_ph``;
- strata:   the same call with ``configs/atl03_strata.yaml`` (count, all-photon t-digest,
            located and timed signal and noise t-digests split by the five surface
            confidences, and the composition of the signal stratum);
- untimed:  the strata config with its digests located only (no ``_times`` words), so the
            ratio strata / untimed is what the per-centroid times cost.

Both configs use order 19 cells and order 9 shards. Each figure is the best of ``--reps``
runs; the numba kernels are compiled on a small slice first, outside the timing. Prints rates
in M points/s, the ratios strata / plain and strata / untimed, and each rate's ratio to
geo2mort.

    python benchmarks/bench_strata.py                    # 1e6 and 1e7 points
    python benchmarks/bench_strata.py --sizes 1e6 --reps 3
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from common import best_of

STRATA_CONFIG = Path(__file__).resolve().parent.parent / "configs" / "atl03_strata.yaml"
PLAIN = {
    "data_source": {
        "coordinates": {"latitude": "lat_ph", "longitude": "lon_ph"},
        "variables": ["h_ph"],
    },
    "aggregation": {
        "variables": {
            "count": {"function": "count"},
            "h_tdigest": {"function": "tdigest", "source": "h_ph"},
        }
    },
    "output": {
        "dataset": {"short_name": "BENCH", "version": "1"},
        "grid": {"parent_order": 9, "child_order": 19},
    },
}


def strata_config() -> dict:
    import yaml

    raw = yaml.safe_load(STRATA_CONFIG.read_text())
    raw["output"]["grid"] = {**raw["output"].get("grid", {}), "parent_order": 9, "child_order": 19}
    return raw


def untimed_config() -> dict:
    raw = strata_config()
    for spec in raw["aggregation"]["variables"].values():
        spec.pop("timed", None)
    return raw


def measure(n: int, reps: int, cores: int) -> dict:
    import dask
    import mortie
    import numpy as np

    import zagg
    from zagg.sources.synthetic import synthetic_photons

    ds = synthetic_photons(n, chunk_size=1_000_000, seed=1).compute()
    lat, lon = ds["lat_ph"].values, ds["lon_ph"].values
    ok = np.isfinite(lat) & np.isfinite(lon)
    lat_ok, lon_ok = lat[ok], lon[ok]
    plain, strata = zagg.load_config(PLAIN), zagg.load_config(strata_config())
    untimed = zagg.load_config(untimed_config())

    mortie.geo2mort(lat_ok[:1000], lon_ok[:1000])  # warm the pool
    t_geo, _ = best_of(lambda: mortie.geo2mort(lat_ok, lon_ok), reps)

    with dask.config.set(scheduler="threads", num_workers=cores):
        head = ds.isel(photon=slice(0, 100_000))
        for cfg in (plain, strata, untimed):  # compile the numba kernels outside the timing
            zagg.aggregate(head, cfg).persist()
        t_plain, res = best_of(lambda: zagg.aggregate(ds, plain).persist(), reps)
        t_strata, _ = best_of(lambda: zagg.aggregate(ds, strata).persist(), reps)
        t_untimed, _ = best_of(lambda: zagg.aggregate(ds, untimed).persist(), reps)
    return {
        "n": n,
        "cells_with_data": int((res["count"].values > 0).sum()),
        "geo2mort": n / t_geo,
        "plain": n / t_plain,
        "strata": n / t_strata,
        "untimed": n / t_untimed,
    }


def report(r: dict, cores: int) -> None:
    m = 1e6
    print(f"\n{r['n']:.0e} points on {cores} core(s): {r['cells_with_data']:,} cells with data")
    print(f"  geo2mort alone       {r['geo2mort'] / m:8.2f} Mpts/s   baseline 1.00")
    print(
        f"  plain t-digest       {r['plain'] / m:8.2f} Mpts/s   ratio to geo2mort "
        f"{r['plain'] / r['geo2mort']:.2f}"
    )
    print(
        f"  strata               {r['strata'] / m:8.2f} Mpts/s   ratio to geo2mort "
        f"{r['strata'] / r['geo2mort']:.2f}"
    )
    print(
        f"  strata, untimed      {r['untimed'] / m:8.2f} Mpts/s   ratio to geo2mort "
        f"{r['untimed'] / r['geo2mort']:.2f}"
    )
    print(f"  strata / plain       {r['strata'] / r['plain']:8.2f}")
    print(f"  strata / untimed     {r['strata'] / r['untimed']:8.2f}")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", nargs="+", type=float, default=[1e6, 1e7])
    ap.add_argument("--reps", type=int, default=2, help="best of this many runs")
    args = ap.parse_args(argv)
    cores = os.cpu_count() or 1
    os.environ["RAYON_NUM_THREADS"] = str(cores)  # before mortie is imported
    print(
        f"zagg strata benchmark (synthetic ATL03-like photons, order 19 cells, order 9 "
        f"shards; plain = count + tdigest, strata = {STRATA_CONFIG.name}; threaded "
        f"scheduler, {cores} cores)"
    )
    for n in map(int, args.sizes):
        report(measure(n, args.reps, cores), cores)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
