"""Benchmark: key + reduce of the default t-digest product per thread, against geo2mort.

Synthetic ATL03-like photons (track-ordered, as granules are) are cut into 2^20-row chunks
with a granule index beside them, as a granule run reads them, and reduced one chunk at a
time by ``zagg.engine.reduce.reduce_chunk`` under the default ATL03 t-digest config's
aggregation and grid (count + height t-digest at order 19 in order 9 shards, photons kept
where the land-ice confidence is at least 2). One thread: mortie's pool and numba run
with one thread each (set before they load).

Printed per input point, each stage's best of ``--reps`` passes, the stages timed chunk by
chunk beside each other (a shared machine's load swings then hit them alike):

- floor:  ``mortie.geo2mort`` at the cell order on the kept points alone, the per-point
          cost no implementation avoids;
- stages: filter + keep (the filters' mask and the one pass gathering the kept rows with
          keyable coordinates), keying (zagg's own work around geo2mort), grouping by
          cell, the digest build, and the rest (the values' gather, the count kernel,
          granule tracking, the partial and its shard cut);
- key + reduce: the whole ``reduce_chunk``, its rate in M points/s and its ratio to the
          floor, against the 6 M points/s per thread target.

``--cpu`` times by the process's CPU seconds instead of the wall clock: on a shared machine
that is still one thread's cost, where the wall clock counts the time others hold the core.

    python benchmarks/bench_reduce.py                 # 5e6 points
    python benchmarks/bench_reduce.py --points 1e6 --reps 3 --cpu
"""

from __future__ import annotations

import os

os.environ["RAYON_NUM_THREADS"] = "1"
os.environ["NUMBA_NUM_THREADS"] = "1"

import argparse  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402

#: key + reduce points per second per thread, the target
TARGET_RATE = 6e6
CHUNK = 1 << 20
GRANULE_ROWS = 2_500_000  # rows per granule of the index beside the points


def config():
    """The default ATL03 t-digest config, read from the synthetic generator's names."""
    from zagg.config.model import load_config

    raw = load_config("atl03_tdigest").raw
    raw["data_source"] = {
        "coordinates": {"latitude": "lat_ph", "longitude": "lon_ph"},
        "variables": {
            "h_ph": "h_ph",
            "land_ice_conf": {"variable": "signal_conf_ph", "column": 3},
        },
        "filters": [{"variable": "land_ice_conf", "op": "ge", "value": 2}],
    }
    return load_config(raw)


def measure(n: int, reps: int, clock=time.perf_counter) -> dict:
    import mortie
    import numpy as np

    from zagg.engine.keying import key_chunk
    from zagg.engine.plan import make_plan
    from zagg.engine.reduce import reduce_chunk
    from zagg.kernels import keep, segments, tdigest
    from zagg.sources.synthetic import synthetic_photons

    plan = make_plan(config(), None, "granule")
    ds = synthetic_photons(n, chunk_size=CHUNK, seed=1)[
        ["lat_ph", "lon_ph", "h_ph", "signal_conf_ph"]
    ]
    ds = ds.compute()
    source = {name: ds[name].values for name in ds.data_vars}
    source["land_ice_conf"] = np.ascontiguousarray(source["signal_conf_ph"][:, 3])
    source["granule"] = (np.arange(n) // GRANULE_ROWS).astype(np.int32)
    inputs = {name: source[name] for name in plan.inputs}
    chunks = [{k: v[i : i + CHUNK] for k, v in inputs.items()} for i in range(0, n, CHUNK)]

    def run_all():
        return [reduce_chunk(plan, *c.values()) for c in chunks]

    results = run_all()  # compile or load the kernels outside the timing
    digest_spec = next(spec for _, spec in plan.specs if spec.state.name == "digest")
    delta = int(digest_spec.opts["delta"])

    def keep_of(c):
        keep = None
        for f in plan.filters:
            m = f.mask(np.asarray(c[f.variable]))
            keep = m if keep is None else keep & m
        return keep

    kept_ll = [(c["lat_ph"][keep_of(c)], c["lon_ph"][keep_of(c)]) for c in chunks]
    stages = {
        "geo2mort": lambda i, c: mortie.geo2mort(*kept_ll[i], order=plan.grid.cell_order),
        "filter + keep": lambda i, c: keep.keyable_rows(keep_of(c), c["lat_ph"], c["lon_ph"]),
        "key_chunk": lambda i, c: key_chunk(plan, c),
        "group by cell": lambda i, c: segments.group_cells(
            keyed[i].cell_words, plan.grid.cell_order
        ),
        "digest build": lambda i, c: tdigest.build(
            keyed[i].addressed("h_ph"),
            keyed[i].grouping.offsets,
            delta,
            out_dtype=np.float32,
            starts=keyed[i].grouping.starts,
            drop_unit_weights=True,
        ),
        "key + reduce": lambda i, c: reduce_chunk(plan, *c.values()),
    }
    keyed = [key_chunk(plan, c)[0] for c in chunks]
    # every stage of a chunk back to back, so a shared machine's load swings hit them alike;
    # each stage's best pass over the chunks
    t = dict.fromkeys(stages, float("inf"))
    for _ in range(reps):
        spent = dict.fromkeys(stages, 0.0)
        for i, c in enumerate(chunks):
            for name, stage in stages.items():
                t0 = clock()
                stage(i, c)
                spent[name] += clock() - t0
        t = {name: min(t[name], spent[name]) for name in stages}
    t["keying"] = t["key_chunk"] - t["filter + keep"] - t["group by cell"] - t["geo2mort"]
    # the values' gather, the count kernel, granule tracking, the partial and its shard cut
    t["rest"] = t["key + reduce"] - t["key_chunk"] - t["digest build"]
    return {
        "n": n,
        "kept": sum(r.counts["keyed"] for r in results),
        "shards": int(np.unique(np.concatenate([r.shards for r in results])).size),
        "cells": int(np.unique(np.concatenate([r.partial.cells for r in results])).size),
        "t": t,
    }


def report(r: dict) -> None:
    n, t = r["n"], r["t"]
    print(
        f"\n{n:.0e} photons in {CHUNK:,}-row chunks, one thread: {r['kept']:,} keyed, "
        f"{r['shards']} shards, {r['cells']:,} cells with data ({r.get('clock', 'wall time')})"
    )
    for stage in (
        "geo2mort",
        "filter + keep",
        "keying",
        "group by cell",
        "digest build",
        "rest",
    ):
        label = "floor: geo2mort" if stage == "geo2mort" else "  " + stage
        print(f"  {label:<24} {1e9 * t[stage] / n:7.1f} ns/point")
    total = t["key + reduce"]
    ours = total - t["geo2mort"]
    rate = n / total
    met = "meets" if rate >= TARGET_RATE else "misses"
    print(
        f"  key + reduce             {1e9 * total / n:7.1f} ns/point = {rate / 1e6:.2f} M points/s "
        f"per thread ({met} {TARGET_RATE / 1e6:.0f} M); floor alone {n / t['geo2mort'] / 1e6:.2f} "
        f"M points/s; floor / key + reduce {t['geo2mort'] / total:.2f}; ours "
        f"{1e9 * ours / n:.1f} ns/point ({ours / total:.0%})"
    )


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--points", type=float, default=5e6)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument(
        "--cpu",
        action="store_true",
        help="time by the process's CPU seconds (one thread's work, whatever else the machine runs)",
    )
    args = ap.parse_args(argv)
    r = measure(int(args.points), args.reps, time.process_time if args.cpu else time.perf_counter)
    r["clock"] = "CPU time" if args.cpu else "wall time"
    report(r)
    return 0


if __name__ == "__main__":
    sys.exit(main())
