"""Benchmark: the Icechunk companion's commit as a share of the run it indexes.

Synthetic photons are run (leaves, then the chained sweep) into a fresh windowed store
with the default pyramid and ``output.icechunk: false``; then the companion is committed
over that store (``zagg.pyramid.icechunk.commit``: the reads of every object's shard index
and HEAD, the repo's groups and arrays, one commit of every reference). It prints the
run's and the commit's wall times and the commit's share of the two (target: at most 10 %
at the 1e8-photon granule run), the references written, and the repo's size beside the
hive's (virtual references only: a small fraction). A second commit of the unchanged
store is timed too (it writes nothing).

    python benchmarks/bench_icechunk.py              # 2e5 photons, well under a minute
    python benchmarks/bench_icechunk.py --size 1e7
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time

TARGET = 0.10
REGION = (-100.2, -75.6, -99.8, -75.4)


def config(store: str, size: int) -> dict:
    return {
        "data_source": {
            "coordinates": {"latitude": "lat_ph", "longitude": "lon_ph"},
            "variables": ["h_ph", "delta_time"],
            "synthetic": {"points": size, "region": list(REGION), "chunk_size": 100_000},
        },
        "aggregation": {
            "variables": {
                "count": {"function": "count"},
                "h_mean": {"function": "mean", "source": "h_ph"},
                "h_tdigest": {"function": "tdigest", "source": "h_ph"},
            }
        },
        "output": {
            "store": store,
            "dataset": {"short_name": "BENCH", "version": "1"},
            "grid": {"parent_order": 8, "child_order": 14, "chunk_inner": 11},
            "windowing": {
                "schedule": "yearly",
                "time_field": "delta_time",
                "epoch": "2018-01-01T00:00:00Z",
                "scale": "gps",
            },
            "sweep": "stages",
            "icechunk": False,
        },
    }


def tree_bytes(path: str) -> int:
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(path) for f in fs)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", type=float, default=2e5, help="photons (default 2e5)")
    ap.add_argument("--workers", type=int, default=1)
    args = ap.parse_args()
    import zagg
    from zagg.pyramid.icechunk import commit

    tmp = tempfile.mkdtemp(prefix="bench-icechunk-")
    store = os.path.join(tmp, "store")
    try:
        t0 = time.perf_counter()
        zagg.run(config(store, int(args.size)), workers=args.workers, threads=1, progress=False)
        run_s = time.perf_counter() - t0
        first = commit(store, run_id="bench")
        again = commit(store, run_id="again")
        repo = tree_bytes(os.path.join(store, "icechunk"))
        hive = tree_bytes(store) - repo
        share = first.seconds / (run_s + first.seconds)
        print(f"photons            {int(args.size):,}")
        print(f"run (leaves+sweep) {run_s:8.2f} s")
        print(
            f"icechunk commit    {first.seconds:8.2f} s  ({first.objects:,} objects, "
            f"{first.refs:,} refs, rows {first.rows})"
        )
        print(f"unchanged commit   {again.seconds:8.2f} s  (commits: {again.commits or 'none'})")
        verdict = "meets" if share <= TARGET else "misses"
        print(f"commit share       {share:8.1%}  ({verdict} the target {TARGET:.0%})")
        print(f"repo / hive bytes  {repo / hive:8.2%}  ({repo:,} of {hive:,})")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
