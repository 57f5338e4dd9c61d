"""Benchmark: the pyramid's cost beside the leaf write it rides on, with peak memory.

The synthetic photons are first written to an uncompressed zarr store (untimed, in a child
process, as ``bench_store.py`` does). On one local cluster the same points are then run
into two fresh stores of the 19/13/9 reference geometry: once with ``pyramid: false`` (the
leaf write alone: the baseline), once with the default declaration (each leaf task also
folds and writes its leaf column, groups 13 to 9), followed by ``zagg.sweep`` of that store
(the ladder above the shard, orders 8 to 0). It prints the three times, the columns' share
of the leaf tasks (from their own timings), the ladder's and the whole pyramid's cost as a
ratio to the baseline leaf write (target: at most 0.30), and the peak RSS of the process
tree over each run, the sweep and everything (target: under 3 GiB; the cluster's workers
keep what earlier runs grew, so later peaks include it). The counts it prints
(shards, cells, ladder nodes per order) are what ``tests/test_benchmarks.py`` checks.
Last it prints the pyramid digests' budget and accuracy per order at ``overview_delta``
128 beside digests built directly from each cell's raw points (``pyramid_accuracy.py``,
on ``--accuracy-size`` points spread over boxes around Antarctica, so that the coarse
orders have many cells; 0 skips it).

    python benchmarks/bench_pyramid.py                      # the dense 1e8-point store
    python benchmarks/bench_pyramid.py --size 1e7 --rounds 3   # best of 3 alternating pairs
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import threading
import time

from common import sample_rss, standard_config

DENSE = (-100.2, -75.6, -99.8, -75.4)
TARGET = 0.30
RSS_TARGET = 3 * 2**30


class Peak:
    """Peak RSS of the process tree while the block runs."""

    def __enter__(self):
        self.stop, self.out = threading.Event(), []
        self.thread = threading.Thread(target=sample_rss, args=(self.stop, self.out), daemon=True)
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        self.thread.join()
        self.bytes = self.out[0]


def run_store(cfg: dict, store: str, client) -> tuple[float, object]:
    from zagg.pipeline.run import run

    t0 = time.perf_counter()
    summary = run(cfg, store=store, scheduler=client.scheduler.address, progress=False)
    return time.perf_counter() - t0, summary


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", type=float, default=1e8)
    ap.add_argument(
        "--region", nargs=4, type=float, default=DENSE, metavar=("LON0", "LAT0", "LON1", "LAT1")
    )
    ap.add_argument("--chunk", type=int, default=2_000_000)
    ap.add_argument("--accuracy-size", type=float, default=1e6)
    ap.add_argument(
        "--rounds",
        type=int,
        default=1,
        help="pairs of runs (off, with columns), alternating which goes first; the "
        "best time of each is printed, with the range",
    )
    args = ap.parse_args()
    n = int(args.size)

    from bench_store import write_points

    import zagg
    from zagg.cluster.clients import client_for

    tmp = tempfile.mkdtemp(prefix="zagg-bench-pyramid-")
    try:
        points = f"{tmp}/points.zarr"
        gen = write_points(n, args.region, min(args.chunk, n), points)
        print(f"{n:,} synthetic photons over {list(args.region)} written in {gen:.1f} s (untimed)")
        warm = f"{tmp}/warm.zarr"
        write_points(min(n, 100_000), args.region, min(args.chunk, n), warm)
        base = standard_config(input=points)
        flat = {**base, "output": {**base["output"], "pyramid": False}}
        with client_for(None) as client, Peak() as everything:
            # the workers' one-time set-up (imports, numba caches) is paid by a small run
            run_store(standard_config(input=warm), f"{tmp}/warm", client)
            zagg.sweep(f"{tmp}/warm")
            times = {"flat": [], "columns": []}
            peaks = {"flat": 0, "columns": 0}
            for i in range(max(args.rounds, 1)):
                order = ("flat", "columns") if i % 2 == 0 else ("columns", "flat")
                for which in order:
                    shutil.rmtree(f"{tmp}/{which}", ignore_errors=True)
                    with Peak() as peak:
                        t, out = run_store(
                            flat if which == "flat" else base, f"{tmp}/{which}", client
                        )
                    times[which].append(t)
                    peaks[which] = max(peaks[which], peak.bytes)
                    if which == "flat":
                        leaf = out
                    else:
                        with_cols = out
            leaf_s, col_s = min(times["flat"]), min(times["columns"])
            with Peak() as during:
                t0 = time.perf_counter()
                swept = zagg.sweep(f"{tmp}/columns")
                sweep_s = time.perf_counter() - t0
        records = with_cols.records
        column = sum(r["timings"].get("column_s", 0.0) for r in records)
        # a leaf task's time: its arrays' encoding (a task of its own beside the leaf's),
        # the leaf's objects and its column
        task = sum(
            r["timings"]["total_s"]
            + r["timings"].get("encoded_s", 0.0)
            + r["timings"].get("column_s", 0.0)
            for r in records
        )
        orders = {}
        for r in swept.records:
            orders[r["order"]] = orders.get(r["order"], 0) + 1
        print(f"points: {with_cols.shards} shards, {with_cols.cells_with_data:,} cells with data")
        print(
            "ladder nodes per order: "
            + ", ".join(f"{k}:{orders[k]}" for k in sorted(orders, reverse=True))
        )

        def spread(key):
            return (
                ""
                if len(times[key]) < 2
                else f" (range {min(times[key]):.1f}-{max(times[key]):.1f} s)"
            )

        print(
            f"leaf write, pyramid off        {leaf_s:8.1f} s   ({leaf.bytes_written / 2**20:,.0f}"
            f" MiB){spread('flat')}"
        )
        print(
            f"leaf write with leaf columns   {col_s:8.1f} s   columns' share of the leaf "
            f"tasks {column / task:.1%}{spread('columns')}"
        )
        print(
            f"sweep (ladder, orders 8..0)    {sweep_s:8.1f} s   {swept.folded} nodes, "
            f"{swept.objects_written} objects, {swept.bytes_written / 2**20:.1f} MiB"
        )
        ladder = sweep_s / leaf_s
        whole = (col_s - leaf_s + sweep_s) / leaf_s
        print(
            f"ladder / leaf write            {ladder:8.2f}   "
            f"({'meets' if ladder <= TARGET else 'misses'} the target {TARGET:.2f})"
        )
        print(
            f"pyramid / leaf write           {whole:8.2f}   (columns' extra leaf time + "
            "sweep, over the pyramid-off write)"
        )
        for label, peak in (
            ("leaf write, pyramid off", peaks["flat"]),
            ("leaf write with columns", peaks["columns"]),
            ("sweep", during.bytes),
            ("whole benchmark", everything.bytes),
        ):
            ok = "under" if peak < RSS_TARGET else "over"
            print(f"peak RSS, {label:<24} {peak / 2**30:6.2f} GiB ({ok} the 3 GiB target)")
        print(
            f"re-sweep of the unchanged store: {zagg.sweep(f'{tmp}/columns').folded} nodes folded"
        )
        if args.accuracy_size:
            from pyramid_accuracy import BOXES, REFERENCE_SETUP, run_accuracy

            lines = run_accuracy(int(args.accuracy_size), tmp, BOXES, REFERENCE_SETUP[2])
            print("\n".join(lines))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
