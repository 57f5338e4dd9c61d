"""Benchmark: what the Icechunk companion costs a run, and whether the ref carriers pay.

Granules (``bench_granules``' seeded ATL03-shaped files, count + t-digest at the production
geometry: order 19 cells in order 9 shards, 4^4 inner chunks per leaf, the default pyramid
swept after the leaves) are run twice on one cluster, into fresh stores:

- off:  ``output.icechunk: false``;
- on:   the default — each leaf task writes its ref carrier, the run commits the leaves'
        references (``leaf``), the sweep the overviews' (``node``), and the run closes
        with ``finalize`` and its tag.

It prints both wall times, the commits' wall time as a share of the run (target: at most
10 % at the 1e8-photon granule run), and the whole overhead (on ÷ off, which holds the
carriers' reads and writes inside the leaf tasks too). Then, on the "on" store, the
commit of a fresh repository twice: gathering the carriers, and with every carrier
removed (every object read again, as §11.4's reads at commit time) — the ratio decides
whether the carriers pay. A commit of the unchanged store and the repo's size beside the
hive's (virtual references only) close the local part.

``--s3-size`` repeats the on/off runs and the two commits with the stores on a local S3
server that delays every request by ``--latency`` (``bench_s3``'s moto server), on that
many photons of the same granules: where a read costs a round trip, which is where the
carriers matter. ``--splits`` also times a fresh commit at other split orders (Icechunk 1
pays per reference in proportion to an array's manifests).

    python benchmarks/bench_icechunk.py                              # 1e7 photons
    python benchmarks/bench_icechunk.py --size 2e6 --per-granule 5e5 --s3-size 0  # smoke
    python benchmarks/bench_icechunk.py --size 1e8 --keep /data/granules
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time
import warnings
from pathlib import Path

from bench_granules import box_for, granules_for, tdigest_config

TARGET = 0.10


def granule_config(granules: str, store: str, icechunk: bool) -> dict:
    cfg = tdigest_config(granules)
    cfg["output"].update(store=store, icechunk=icechunk, sweep="stages")
    return cfg


def synthetic_config(store: str, size: int, box, icechunk: bool) -> dict:
    return {
        "data_source": {
            "coordinates": {"latitude": "lat_ph", "longitude": "lon_ph"},
            "variables": ["h_ph"],
            "synthetic": {"points": size, "region": list(box), "chunk_size": 1_000_000},
        },
        "aggregation": {
            "variables": {
                "count": {"function": "count"},
                "h_tdigest": {"function": "tdigest", "source": "h_ph", "params": {"delta": 512}},
            }
        },
        "output": {
            "store": store,
            "dataset": {"short_name": "BENCH", "version": "1"},
            "grid": {"parent_order": 9, "chunk_inner": 13, "child_order": 19},
            "sweep": "stages",
            "icechunk": icechunk,
        },
    }


def commit_seconds(summary) -> float:
    """The run's own Icechunk work at the client: its commits and its finalize."""
    leaf = summary.icechunk or {}
    node = (summary.sweep.icechunk if summary.sweep is not None else None) or {}
    closing = leaf.get("finalize") or {}
    return leaf.get("seconds", 0.0) + node.get("seconds", 0.0) + closing.get("commit_s", 0.0)


def tree_bytes(path: str) -> int:
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(path) for f in fs)


def runs(config, client, stores, reps: int, **kw) -> dict:
    """Wall time and summary of the run without the companion and with it, each into a
    fresh store, alternating ``reps`` times (the fastest of each kept: the first run of a
    process also warms its cluster)."""
    import zagg
    from zagg.hive.storage import StoreRoot

    out = {}
    warm = kw.pop("warm", None)
    if warm is not None:  # a small run first: the cluster's workers import and compile
        zagg.run(warm, scheduler=client, progress=False, **kw)
    for _ in range(reps):
        for on in (False, True):
            root = StoreRoot(stores[on], kw.get("storage_options"))
            if root.is_local:
                shutil.rmtree(stores[on], ignore_errors=True)
            else:
                for key in root.list_keys(""):
                    root.delete(key)
            t0 = time.perf_counter()
            with warnings.catch_warnings():
                warnings.filterwarnings("ignore", "Sending large graph")
                summary = zagg.run(config(stores[on], on), scheduler=client, progress=False, **kw)
            wall = time.perf_counter() - t0
            if on not in out or wall < out[on][0]:
                out[on] = (wall, summary)
    return out


def carriers_or_reads(store: str, options=None, splits=()) -> dict:
    """A fresh repository committed from the carriers (and again at each split order of
    ``splits``), then with every carrier removed."""
    from zagg.hive.storage import StoreRoot
    from zagg.pyramid.icechunk import commit
    from zagg.pyramid.icechunk_knobs import Settings

    root = StoreRoot(store, options)
    out = {"splits": {}}
    for split in splits:
        root.delete_prefix("icechunk")
        out["splits"][split] = commit(store, options, settings=Settings(split_order=split))
    root.delete_prefix("icechunk")
    out["carriers"] = commit(store, options)
    again = commit(store, options)
    out["unchanged"] = again
    for key in root.list_keys(""):
        if "icechunk_refs" in key.rsplit("/", 1)[-1]:
            root.delete(key)
    root.delete_prefix("icechunk")
    out["read"] = commit(store, options)
    return out


def report(label: str, done: dict, commits: dict) -> None:
    (off, _), (on, summary) = done[False], done[True]
    spent = commit_seconds(summary)
    verdict = "meets" if spent / on <= TARGET else "misses"
    c, r = commits["carriers"], commits["read"]
    print(f"{label}")
    print(f"  leaves            {summary.leaves_written:,} ({summary.points or 0:,} points)")
    print(f"  run, repo off     {off:8.2f} s")
    print(f"  run, repo on      {on:8.2f} s  (on / off {on / off:.3f})")
    print(
        f"  commits + finalize {spent:7.2f} s  = {spent / on:.1%} of the run "
        f"({verdict} the target {TARGET:.0%})"
    )
    print(
        f"  fresh commit, carriers  {c.seconds:7.2f} s  ({c.carriers:,} objects from "
        f"carriers, {c.read:,} read; {c.refs:,} refs)"
    )
    print(
        f"  fresh commit, no carrier {r.seconds:6.2f} s  ({r.read:,} objects read)  "
        f"carriers / reads {c.seconds / r.seconds:.2f}"
    )
    u = commits["unchanged"]
    print(f"  unchanged commit  {u.seconds:8.2f} s  ({u.carriers + u.read:,} objects read)")
    for split, s in commits["splits"].items():
        print(
            f"  fresh commit at split_order {split}: {s.seconds:7.2f} s "
            f"({s.seconds / c.seconds:.1f} x the default's)"
        )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", type=float, default=1e7, help="granule photons (default 1e7)")
    ap.add_argument("--per-granule", type=float, default=2.5e6)
    ap.add_argument("--seed", type=int, default=3)
    ap.add_argument("--keep", type=Path, default=None, help="keep the granules here")
    ap.add_argument(
        "--s3-size", type=float, default=2e6, help="granule photons run into S3 (0: skip)"
    )
    ap.add_argument("--latency", type=float, default=0.02, help="S3 seconds per request")
    ap.add_argument("--reps", type=int, default=1, help="runs of each kind (the fastest kept)")
    ap.add_argument(
        "--splits",
        type=int,
        nargs="*",
        default=[4],
        help="split orders a fresh commit is also timed at (6: the spec's production default)",
    )
    args = ap.parse_args()
    os.environ.setdefault("ICECHUNK_LOG", "error")
    from zagg.cluster.clients import cluster_for, connected

    tmp = Path(tempfile.mkdtemp(prefix="bench-icechunk-"))
    try:
        paths = granules_for(int(args.size), int(args.per_granule), args.seed, args.keep, tmp)
        gdir = str(paths[0].parent)
        with cluster_for(None) as cluster, connected(cluster) as client:
            stores = {on: str(tmp / f"store-{'on' if on else 'off'}") for on in (False, True)}
            box = box_for(int(args.per_granule))
            warm = synthetic_config(str(tmp / "warm"), 100_000, box, True)
            done = runs(
                lambda s, on: granule_config(gdir, s, on), client, stores, args.reps, warm=warm
            )
            commits = carriers_or_reads(stores[True], splits=args.splits)
            report(f"granules, {int(args.size):,} photons, local disk", done, commits)
            repo = tree_bytes(os.path.join(stores[True], "icechunk"))
            hive = tree_bytes(stores[True]) - repo
            print(f"  repo / hive bytes {repo / hive:8.2%}  ({repo:,} of {hive:,})")
            for s in stores.values():
                shutil.rmtree(s, ignore_errors=True)
            if args.s3_size:
                s3(
                    args,
                    client,
                    granules_for(
                        int(args.s3_size), int(args.per_granule), args.seed, args.keep, tmp
                    ),
                )
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def s3(args, client, paths) -> None:
    """The same on a local S3 server that delays every request: the granules stay on the
    local disk, the stores go to the server."""
    import s3fs
    from bench_s3 import Server

    server = Server(args.latency)
    gdir = str(paths[0].parent)
    try:
        s3fs.S3FileSystem(**server.options).mkdir("bench")
        stores = {on: f"s3://bench/store-{'on' if on else 'off'}" for on in (False, True)}
        done = runs(
            lambda s, on: granule_config(gdir, s, on),
            client,
            stores,
            args.reps,
            storage_options=server.options,
        )
        commits = carriers_or_reads(stores[True], server.options)
        report(
            f"granules, {int(args.s3_size):,} photons, store on S3 at "
            f"{args.latency * 1e3:.0f} ms a request",
            done,
            commits,
        )
    finally:
        server.close()


if __name__ == "__main__":
    main()
