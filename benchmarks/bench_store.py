"""Benchmark: synthetic points → hive store end to end, with peak memory, against geo2mort.

Each size first writes its synthetic ATL03-like photons (latitude, longitude, height) to an
uncompressed zarr store on local disk, untimed. It then starts zagg's default local cluster
(every core: on one or two cores a single worker inside this process, as ``python -m zagg
run`` has; ``--processes`` gives it a process of its own) and runs ``zagg.run`` on that
input ``--runs`` times (default 2), each into a fresh store: the workers read the points
chunk by chunk (never materialised on the client, so the 1e8 run streams), and reading them
is part of the timed run. The first run pays the workers' one-time set-up (imports,
numba's registries and cache loads; inside this process, only the first size's first run
does); the later ones show the rate of a long-lived cluster, as in a notebook session.
Then ``python -m zagg run`` on the same input is timed from process start to exit, as a
batch script running one region at a time would see it (``--no-cli`` skips it). Peak RSS
is sampled
over the whole process tree (client, scheduler, workers). What new memory costs here is
printed first: a first run grows the worker's heap from nothing, and on a VM that hands
freed memory back to its host every such page costs a host fault (≈ 2 ms per MiB on the
machine of benchmarks/README.md, against ≈ 0.03 once resident). The same process measures
``mortie.geo2mort`` alone on RAYON threads = cores, and prints the ratios to it.

It also prints a ceiling for the "zagg alone" ratio, from work the spec makes every writer
of these stores do, measured in the same run: keying the points (at the geo2mort rate), the
§5 content hashes (sha256 over every cell of every array of a leaf, filled or not: 36 bytes
a cell for this config, ~36 MB per leaf, plus the digest payloads) and zstd level 3, the
declared codec, over the digest fields' vlen frames (their size read from the written
frames' headers, the rate from recompressing a sample of them). Both rates are measured
with every core working at once, as in a run (zstd scales well below the core count on this
machine), and geo2mort / (geo2mort + that) is the best ratio any writer can reach here.

    python benchmarks/bench_store.py                    # 1e6 and 1e7 points
    python benchmarks/bench_store.py --sizes 1e8 --runs 1   # the streamed 100 M point run
    python benchmarks/bench_store.py --region -100.2 -75.6 -99.8 -75.4   # a dense box
"""

from __future__ import annotations

import argparse
import gc
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time

from common import sample_rss, standard_config, verdict


def write_points(n: int, region, chunk: int, path: str) -> float:
    """Generate the synthetic photons (lat, lon, height) into an uncompressed zarr store at
    ``path`` in a child process (its freed buffers would otherwise stay in this process's
    heap and count in the runs' peak RSS); returns the seconds taken."""
    out = subprocess.run(
        [sys.executable, __file__, "--write-points", str(n), *map(str, region), str(chunk), path],
        capture_output=True,
        text=True,
        check=True,
    )
    return float(out.stdout.split()[-1])


def _write_points_here(n: int, region, chunk: int, path: str) -> float:
    import dask

    from zagg.sources.synthetic import synthetic_photons

    ds = synthetic_photons(n, tuple(region), chunk_size=chunk, seed=1)[["lat_ph", "lon_ph", "h_ph"]]
    t0 = time.perf_counter()
    with dask.config.set(scheduler="threads"):
        ds.to_zarr(
            path,
            mode="w",
            zarr_format=3,
            consolidated=False,
            encoding={v: {"compressors": None} for v in ds.data_vars},
        )
    return time.perf_counter() - t0


def geo2mort_rate(n: int = 4_000_000) -> float:
    import mortie
    import numpy as np

    rng = np.random.default_rng(0)
    lat, lon = rng.uniform(-76, -75, n), rng.uniform(-102, -98, n)
    mortie.geo2mort(lat[:1000], lon[:1000])
    best = float("inf")
    for _ in range(3):
        t0 = time.perf_counter()
        mortie.geo2mort(lat, lon)
        best = min(best, time.perf_counter() - t0)
    return n / best


_TOUCH = """
import time, numpy as np
a = np.empty(256 * 2**20, np.uint8)
t = time.perf_counter(); a.fill(1); fresh = time.perf_counter() - t
t = time.perf_counter(); a.fill(2); again = time.perf_counter() - t
print(fresh / 256 * 1e3, again / 256 * 1e3)
"""


def fault_cost() -> tuple[float, float]:
    """Milliseconds per MiB to fill memory a fresh process has just been given, and to fill
    it again once resident: the price of a worker's heap growth on this machine (a VM that
    hands freed memory back to its host pays a host fault per page)."""
    out = subprocess.run(
        [sys.executable, "-c", _TOUCH], capture_output=True, text=True, check=True
    ).stdout.split()
    return float(out[0]), float(out[1])


def cell_bytes(cfg: dict) -> int:
    """Bytes a cell adds to a leaf's §5 hash input, filled or not: its morton word, each
    dense field's value and each vlen field's u64 length prefix."""
    import numpy as np

    from zagg.config.model import load_config

    fields = load_config(cfg).fields.values()
    return 8 + sum(8 if f.kind == "ragged" else np.dtype(f.dtype).itemsize for f in fields)


def concurrently(work, threads: int) -> float:
    """Seconds for ``threads`` threads to run ``work(i)`` at once (best of three): the
    work the spec requires runs on every core during a store run, and on this machine
    some of it (zstd) scales well below the core count."""
    best = float("inf")
    for _ in range(3):
        pool = [threading.Thread(target=work, args=(i,)) for i in range(threads)]
        t0 = time.perf_counter()
        for t in pool:
            t.start()
        for t in pool:
            t.join()
        best = min(best, time.perf_counter() - t0)
    return best


def sha256_rate(nbytes: int, threads: int) -> float:
    """Bytes/s of sha256 over an ``nbytes`` leaf-sized buffer per thread, ``threads``
    threads at once (one buffer each)."""
    import hashlib

    import numpy as np

    bufs = [np.zeros(nbytes, np.uint8) for _ in range(threads)]
    return threads * nbytes / concurrently(lambda i: hashlib.sha256(bufs[i]).digest(), threads)


def vlen_frames(store: str, sample_bytes: int = 64 << 20) -> tuple[int, list[bytes]]:
    """(raw bytes of every vlen inner chunk in the store's leaves, from their zstd frame
    headers; up to ``sample_bytes`` of those chunks, decompressed)."""
    import zstandard

    from zagg.hive.decode import inner_chunks, layout
    from zagg.hive.storage import StoreRoot
    from zagg.hive.walk import walk_leaves

    root = StoreRoot(store)
    dctx = zstandard.ZstdDecompressor()
    total, sample, sampled = 0, [], 0
    for prefix, _ in walk_leaves(root):
        for group in root.list_dir(prefix)[0]:
            for name in root.list_dir(f"{prefix}/{group}")[0]:
                key = f"{prefix}/{group}/{name}"
                found = layout(root.read_json(f"{key}/zarr.json") or {})
                if found is None or found[3] is not None:
                    continue  # not a vlen array
                for chunk in inner_chunks(root, key, found):
                    if chunk is None:
                        continue
                    size = zstandard.frame_content_size(chunk)
                    total += size
                    if sampled < sample_bytes:
                        sample.append(dctx.decompress(chunk))
                        sampled += size
    return total, sample


def zstd_rate(frames: list[bytes], threads: int) -> float:
    """Bytes/s of zstd level 3 (no checksum), one call per frame as the writer does, with
    ``threads`` threads each compressing its share of the frames at once."""
    import zstandard

    if not frames:
        return float("inf")

    def work(i: int) -> None:
        zstd = zstandard.ZstdCompressor(level=3, write_checksum=False, write_content_size=True)
        for frame in frames[i::threads]:
            zstd.compress(frame)

    return sum(map(len, frames)) / concurrently(work, threads)


def read_and_key(client, cfg: dict, n: int, chunk: int) -> float:
    """Seconds for the run's own cluster to read every input chunk of the variables the
    config uses and key it with geo2mort at the cell order, one task per chunk (best of
    two): the share of a run that no writer of this store can skip, under the run's own
    threads and pinning, and without any of zagg's code."""
    src = cfg["data_source"]
    path, lat, lon = src["input"], src["coordinates"]["latitude"], src["coordinates"]["longitude"]
    names = sorted({lat, lon, *src["variables"]})
    order = cfg["output"]["grid"]["child_order"]

    def task(lo: int, hi: int) -> int:
        import mortie
        import zarr

        group = zarr.open_group(path, mode="r")
        arrs = {name: group[name][lo:hi] for name in names}
        return int(mortie.geo2mort(arrs[lat], arrs[lon], order=order).size)

    starts = list(range(0, n, chunk))
    ends = [min(lo + chunk, n) for lo in starts]
    best = float("inf")
    for _ in range(2):
        t0 = time.perf_counter()
        keyed = sum(client.gather(client.map(task, starts, ends, pure=False)))
        best = min(best, time.perf_counter() - t0)
        assert keyed == n, (keyed, n)
    return best


def cli_run(cfg: dict, workdir: str) -> float:
    """Seconds of ``python -m zagg run`` on ``cfg`` into a fresh store, from process start
    to exit: what a batch script running one region at a time waits for (its own cluster
    start, imports and the first run's set-up included)."""
    import yaml

    path = f"{workdir}/config.yaml"
    with open(path, "w") as f:
        yaml.safe_dump(cfg, f)
    t0 = time.perf_counter()
    subprocess.run(
        [sys.executable, "-m", "zagg", "run", path, "--store", f"{workdir}/cli-store", "--quiet"],
        check=True,
        capture_output=True,
    )
    return time.perf_counter() - t0


def longest_shard_chain(records: list) -> float:
    """Seconds of the longest chain of dependent shard tasks in a run's task stream: per
    shard, its pieces and combines, its last merge and finalize, then its leaf write.
    After the reduction, a cluster with threads to spare waits for this chain."""
    stages = ("piece-", "combine-", "shard-cells-", "write-leaf-")
    per_shard: dict = {}
    for r in records:
        key = r["key"]
        if not isinstance(key, tuple) or not str(key[0]).startswith(stages):
            continue
        took = sum(s["stop"] - s["start"] for s in r["startstops"] if s["action"] == "compute")
        per_shard[key[1]] = per_shard.get(key[1], 0.0) + took
    return max(per_shard.values(), default=0.0)


def one_run(cfg: dict, client) -> tuple[float, object, int, str, float]:
    """(wall seconds, run summary, peak RSS of the process tree, store directory, longest
    shard chain) of one ``zagg.run`` into a fresh store on ``client``'s cluster."""
    from distributed import get_task_stream

    from zagg.pipeline.run import run

    tmp = tempfile.mkdtemp(prefix="zagg-bench-")
    stop, peak = threading.Event(), []
    sampler = threading.Thread(target=sample_rss, args=(stop, peak), daemon=True)
    sampler.start()
    with get_task_stream(client) as stream:
        t0 = time.perf_counter()
        summary = run(cfg, store=f"{tmp}/store", scheduler=client.scheduler.address, progress=False)
        wall = time.perf_counter() - t0
    stop.set()
    sampler.join()
    return wall, summary, peak[0], tmp, longest_shard_chain(stream.data)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", nargs="+", type=float, default=[1e6, 1e7])
    ap.add_argument(
        "--region", nargs=4, type=float, default=None, metavar=("LON0", "LAT0", "LON1", "LAT1")
    )
    ap.add_argument("--child-order", type=int, default=19)
    ap.add_argument("--chunk", type=int, default=1_000_000)
    ap.add_argument(
        "--runs",
        type=int,
        default=2,
        help="runs per size on one cluster (the first pays the workers' one-time "
        "set-up; later ones show a long-lived cluster's rate)",
    )
    ap.add_argument(
        "--processes",
        action="store_true",
        default=None,
        help="workers in processes of their own even where zagg's default runs "
        "a single worker inside the client's process",
    )
    ap.add_argument(
        "--no-cli",
        dest="cli",
        action="store_false",
        help="skip the `python -m zagg run` measurement",
    )
    ap.add_argument("--write-points", nargs=7, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.write_points:
        n, *box, chunk, path = args.write_points
        print(_write_points_here(int(n), [float(v) for v in box], int(chunk), path))
        return 0
    cores = os.cpu_count() or 1
    os.environ["RAYON_NUM_THREADS"] = str(cores)

    # the client's library imports are paid once per process, not per run (zagg loads its
    # own modules on first use: a session's first run would pay them)
    import dask.array  # noqa: F401
    import xarray  # noqa: F401
    import zarr  # noqa: F401

    import zagg.engine.aggregate  # noqa: F401
    import zagg.engine.write  # noqa: F401
    from zagg.cluster.clients import client_for
    from zagg.sources.synthetic import DEFAULT_REGION

    region = list(args.region or DEFAULT_REGION)
    base = geo2mort_rate()
    leaf_bytes = cell_bytes(standard_config()) * 4 ** (args.child_order - 9)
    hash_rate = sha256_rate(leaf_bytes, cores)
    print(
        f"zagg store benchmark: synthetic ATL03-like photons over {region}, order "
        f"{args.child_order} cells, order 9 shards, count + mean + min + max + tdigest, "
        f"{cores} cores"
    )
    print(f"geo2mort alone on {cores} cores: {base / 1e6:.2f} Mpts/s (baseline)")
    fresh, resident = fault_cost()
    print(
        f"new memory: {fresh:.2f} ms per MiB on first touch, {resident:.2f} once resident "
        "(what a worker's heap growth costs, paid mostly by the first run)"
    )
    for n in map(int, args.sizes):
        points = tempfile.mkdtemp(prefix="zagg-bench-points-")
        t_gen = write_points(n, region, args.chunk, f"{points}/points.zarr")
        cfg = standard_config(input=f"{points}/points.zarr")
        cfg["output"]["grid"]["child_order"] = args.child_order
        t0 = time.perf_counter()
        with client_for(None, processes=args.processes) as client:
            t_start = time.perf_counter() - t0
            runs = []
            for i in range(max(args.runs, 1)):
                wall, summary, peak, tmp, chain = one_run(cfg, client)
                if i == 0:
                    vlen_bytes, sample = vlen_frames(f"{tmp}/store")
                    t_zstd = vlen_bytes / zstd_rate(sample, cores)
                    del sample
                shutil.rmtree(tmp, ignore_errors=True)
                runs.append((wall, summary, peak, chain))
            t_read_key = read_and_key(client, cfg, n, args.chunk)
        gc.collect()
        t_cli = cli_run(cfg, points) if args.cli else None
        shutil.rmtree(points, ignore_errors=True)
        wall, summary, _, chain = runs[0]
        rate = n / (t_start + wall)
        print(
            f"\n{n:.0e} points: {summary.shards} shards, {summary.cells_with_data:,} cells "
            f"with data, {summary.bytes_written / 2**20:,.0f} MiB written"
        )
        print(
            f"  end to end      {rate / 1e6:7.2f} Mpts/s   ({t_start + wall:.1f} s wall: "
            f"cluster start and the first run)"
        )
        print(f"  cluster start   {t_start:7.1f} s")
        if t_cli is not None:
            print(
                f"  CLI end to end  {n / t_cli / 1e6:7.2f} Mpts/s   ({t_cli:.1f} s: `python -m "
                f"zagg run` from process start to exit; ratio to geo2mort {n / t_cli / base:.2f})"
            )
        print(
            f"  input           {t_gen:7.1f} s       (writing the points' zarr store "
            "beforehand, untimed)"
        )
        print(
            f"  zagg alone      {n / wall / 1e6:7.2f} Mpts/s   (the first run, reading the "
            f"points included; ratio to geo2mort {n / wall / base:.2f})"
        )
        if len(runs) > 1:
            again = min(r[0] for r in runs[1:])
            print(
                f"  ... again       {n / again / 1e6:7.2f} Mpts/s   (best later run on the same "
                f"cluster, workers set up; ratio {n / again / base:.2f})"
            )
        print(f"  per shard       {wall / max(summary.shards, 1) * cores:7.3f} core-s (first run)")
        print(f"  peak RSS        {max(r[2] for r in runs) / 2**30:7.2f} GiB (all processes)")
        print(
            f"  longest chain   {chain:7.2f} s       (first run: the heaviest shard's tasks "
            "after the reduction, its merges, finalize and write; what a cluster with "
            "threads to spare waits for)"
        )
        print(f"  ratio to geo2mort {rate / base:5.2f}   (end to end)")
        t_hash = (summary.shards * leaf_bytes + vlen_bytes) / hash_rate
        t_floor = n / base + t_hash + t_zstd
        print(
            f"  ceiling         {n / base / t_floor:7.2f}          (geo2mort / (geo2mort + "
            f"sha256 {t_hash:.2f} s + zstd-3 {t_zstd:.2f} s, both on {cores} threads at "
            'once): the best "zagg alone" ratio any writer of this store can reach; '
            "target >= 0.50)"
        )
        t_required = t_read_key + t_hash + t_zstd
        print(
            f"  floor           {n / base / t_required:7.2f}          (geo2mort / (read + "
            f"key {t_read_key:.2f} s as tasks on the run's cluster + sha256 + zstd-3): the "
            "same ceiling with the points read from the input and keyed as a run must, "
            "under the run's own threads)"
        )
        ceiling = n / base / t_floor
        print(
            f"  verdict         first run {verdict(n / wall / base, ceiling)}"
            + (f"; again {verdict(n / again / base, ceiling)}" if len(runs) > 1 else "")
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
