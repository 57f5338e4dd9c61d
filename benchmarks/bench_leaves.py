"""Benchmark: a leaf's fixed cost, on a region of sparse tracks written as many small leaves.

Short passes of synthetic photons (``--pass-points`` each, seeded) spread over a wide box
are aggregated once into the standard product (count, mean, min, max and a height
t-digest at order 19 in order-9 shards, the default pyramid: each leaf task also writes
its leaf column) and written with ``zagg.to_hive`` on one thread (dask's synchronous
scheduler), so that each leaf's time is its own. Each tree given by ``--trees`` (this
checkout first; another, e.g. the main checkout, through its own interpreter with its
path first) writes the same points into a fresh store, in alternating rounds. Printed per
tree: leaves written, objects per leaf (the store's files over its leaves: the leaf, its
column, sidecars and the run's root objects), wall and CPU seconds per leaf, and beside
them the leaf's floor that no writer avoids: the §5 content hashes, which cover every
cell of every array of the leaf, filled or not (sha256 over the arrays' logical bytes,
timed here), so the fixed cost per leaf beyond its bytes is CPU per leaf minus that
floor. The machine may be shared: read the CPU columns, and the ratios between trees of
one run; the wall clock adds the file system's cost per object.

    python benchmarks/bench_leaves.py                         # this checkout, 4e5 points
    python benchmarks/bench_leaves.py --trees . /work/main    # before / after
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

#: a wide box crossed by many short passes: most shards hold one pass's photons
REGION = (-100.0, -80.0, -40.0, -70.0)


def one_run(n: int, pass_points: int, store: str) -> dict:
    """Aggregate and write the points into ``store`` (in this interpreter); the write's
    wall and CPU seconds and the leaves written."""
    import dask

    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from common import standard_config

    import zagg
    from zagg.sources.synthetic import synthetic_photons

    points = synthetic_photons(n, REGION, chunk_size=pass_points, seed=3).compute()
    with dask.config.set(scheduler="sync"):
        shards = zagg.aggregate(points, zagg.load_config(standard_config()))
        t0, c0 = time.perf_counter(), time.process_time()
        summary = zagg.to_hive(shards, store)
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    objects = sum(len(files) for _, _, files in os.walk(store))
    return {"wall": wall, "cpu": cpu, "leaves": summary.leaves_written, "objects": objects}


def hash_floor(reps: int = 3) -> float:
    """CPU seconds of sha256 over one leaf's arrays' logical bytes (every cell of the
    shard, each array at its stored width): the §5 content hashes' floor per leaf."""
    import hashlib

    import numpy as np

    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from common import standard_config

    import zagg
    from zagg.config.store import StoreSpec

    spec = StoreSpec.of(zagg.load_config(standard_config()))
    cells = spec.grid.cells_per_shard
    widths = [8]  # the morton coordinate
    for entry in spec.fields.values():
        widths.append(8 if entry.get("kind") == "ragged" else np.dtype(entry["dtype"]).itemsize)
    best = float("inf")
    for _ in range(reps):
        c0 = time.process_time()
        for w in widths:
            h = hashlib.sha256()
            h.update(bytes(cells * w))
            h.hexdigest()
        best = min(best, time.process_time() - c0)
    return best


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--points", type=float, default=4e5)
    ap.add_argument("--pass-points", type=int, default=400)
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--trees", nargs="+", default=["."])
    ap.add_argument("--one", help=argparse.SUPPRESS)  # a child's store: run once, print JSON
    args = ap.parse_args()
    if args.one:
        print(json.dumps(one_run(int(args.points), args.pass_points, args.one)))
        return 0
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    trees = [here if t == "." else os.path.abspath(t) for t in args.trees]
    results: dict[str, list[dict]] = {t: [] for t in trees}
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(args.rounds):
            for j, tree in enumerate(trees if i % 2 == 0 else trees[::-1]):
                env = {**os.environ, "PYTHONPATH": tree}
                cmd = [sys.executable, os.path.abspath(__file__), "--one", f"{tmp}/s{i}_{j}"]
                cmd += ["--points", str(args.points), "--pass-points", str(args.pass_points)]
                out = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True)
                results[tree].append(json.loads(out.stdout.strip().splitlines()[-1]))
    floor = hash_floor()
    print(
        f"{int(args.points):,} points in passes of {args.pass_points}; one thread; "
        f"the §5 hashes of one leaf's arrays (its floor): {floor * 1e3:.1f} ms CPU"
    )
    print(
        f"{'tree':<32} {'leaves':>7} {'objects/leaf':>13} {'wall/leaf':>10} {'CPU/leaf':>9}"
        f" {'beyond floor':>13}"
    )
    base = None
    for tree, runs in results.items():
        leaves = runs[0]["leaves"]
        wall = min(r["wall"] for r in runs) / leaves
        cpu = min(r["cpu"] for r in runs) / leaves
        base = base or cpu
        print(
            f"{tree[-32:]:<32} {leaves:7d} {runs[0]['objects'] / leaves:13.1f}"
            f" {wall * 1e3:7.1f} ms {cpu * 1e3:6.1f} ms"
            f" {(cpu - floor) * 1e3:10.1f} ms   CPU ÷ first tree {cpu / base:.2f}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
