"""Benchmark: a yearly-windowed run beside the same run unwindowed, on one cluster.

Both runs aggregate the same synthetic ATL03-like photons (the built-in generator, whose
passes start at seeded times spread over 2019–2023) with the standard benchmark config,
into fresh stores, on one local cluster started once (every core). The windowed run adds
``output.windowing: {schedule: yearly, time_field: delta_time, scale: gps}``, so it writes
one leaf per (shard, year) instead of one per shard. Each run is repeated ``--reps`` times
and the best wall time kept; the workers' one-time set-up (imports, numba caches) is
paid by an untimed small run of each first.

Printed: the counts of both runs (shards, cells with data, leaves, windows), the best wall
of each, and their ratio (windowed ÷ unwindowed) against the target 1.3.

    python benchmarks/bench_windows.py                  # 1e7 points
    python benchmarks/bench_windows.py --size 1e6 --reps 1
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time

from common import standard_config

TARGET = 1.3
EPOCH = "2018-01-01T00:00:00Z"


def config(n: int, seed: int, chunk: int, windowed: bool) -> dict:
    cfg = standard_config(
        variables=["h_ph", "delta_time"], synthetic={"points": n, "seed": seed, "chunk_size": chunk}
    )
    cfg["output"]["pyramid"] = False
    if windowed:
        cfg["output"]["windowing"] = {
            "schedule": "yearly",
            "time_field": "delta_time",
            "epoch": EPOCH,
            "scale": "gps",
        }
    return cfg


def timed_run(cfg: dict, cluster, base: str, label: str, reps: int):
    import zagg

    best, summary = float("inf"), None
    for i in range(reps):
        store = f"{base}/{label}-{i}"
        t0 = time.perf_counter()
        summary = zagg.run(cfg, store=store, scheduler=cluster, progress=False)
        best = min(best, time.perf_counter() - t0)
        shutil.rmtree(store, ignore_errors=True)
    return best, summary


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", type=float, default=1e7, help="points (default 1e7)")
    parser.add_argument("--reps", type=int, default=2, help="runs of each, best kept")
    parser.add_argument(
        "--chunk", type=int, default=250_000, help="points per generated pass (default 250000)"
    )
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args(argv)
    n = int(args.size)

    from zagg.cluster.clients import cluster_for

    base = tempfile.mkdtemp(prefix="bench-windows-")
    try:
        with cluster_for(None) as cluster:
            for windowed in (False, True):  # the workers' set-up, paid before any timing
                timed_run(config(20_000, args.seed, 2_000, windowed), cluster, base, "warm", 1)
            plain_s, plain = timed_run(
                config(n, args.seed, args.chunk, False), cluster, base, "plain", args.reps
            )
            win_s, win = timed_run(
                config(n, args.seed, args.chunk, True), cluster, base, "yearly", args.reps
            )
    finally:
        shutil.rmtree(base, ignore_errors=True)
    windows = sorted({r["window"] for r in win.records})
    print(
        f"{n:,} points: {plain.shards} shards, {plain.cells_with_data:,} cells with data, "
        f"{plain.leaves_written} leaves (unwindowed)"
    )
    print(
        f"windowed: {win.shards} shards, {len(windows)} windows ({', '.join(windows)}), "
        f"{win.leaves_written} leaves, {win.points:,} points"
    )
    print(
        f"unwindowed wall {plain_s:.2f} s, yearly-windowed wall {win_s:.2f} s (best of {args.reps})"
    )
    ratio = win_s / plain_s
    meets = "meets" if ratio <= TARGET else "misses"
    print(f"verdict: windowed / unwindowed = {ratio:.2f} {meets} the target {TARGET:.2f}")


if __name__ == "__main__":
    main()
