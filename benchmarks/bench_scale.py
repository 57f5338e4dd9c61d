"""Benchmark: the default t-digest granule run at scale, against the floor of reading and
keying the same photons.

For each size, ATL03-shaped granules (``zagg.sources.write_granules``, ``--per-granule``
photons each, six beams, 10 000-row gzip chunks, all in the 4°-wide box at 75° S of
bench_granules.py) are taken from a pool (``--keep DIR`` keeps it between runs; missing
granules are written first, not timed). Then, in the same run:

- floor: every gzip chunk of the datasets the run reads (``lat_ph``, ``lon_ph``, ``h_ph``,
  ``signal_conf_ph``) read with ``os.pread`` and inflated with zlib on every core (threads:
  zlib releases the GIL), plus ``mortie.geo2mort`` at the cell order of the same photons
  (mortie's own threads, every core), granule by granule: the two per-photon costs no run
  avoids. Chunk offsets are found (h5py) outside the timing.
- run: ``zagg.run`` of the shipped ``atl03_tdigest`` config (count + t-digest of ``h_ph``
  where ``land_ice_conf >= 2``, order 19 cells in order 9 shards, its default pyramid and
  chained sweep, the Icechunk companion when installed) on the machine's default cluster,
  in a fresh process, as ``zagg run`` runs it. Reported: the process's wall time (start to
  exit) and the run's own (to the last leaf, then the sweep), CPU % and CPU seconds of the
  process tree (beside the floor's CPU seconds: the work, whatever the machine's load),
  peak RSS (the process tree's, sampled every 0.25 s), photons per second, wall ÷ floor,
  the tasks' time per stage (``summary.stages``) with the leaf write's split, the run's
  phases (read + reduce, combine + write, sweep: their spans, the share of the threads
  busy in them and their CPU), and how long 0, 1, ... threads were computing.

The machine's load is printed beside each row (load average, and the CPU % of everything
else on the machine during the run): on a shared machine read the ratios, not the seconds.
``--link N`` builds larger sizes from hard links to the pool's first N granules instead
of writing more (``--link 40 --sizes 1e9`` streams each of 40 granules ten times under ten
names: the same photons, honest for throughput and memory, not for the store's contents).
``--checkout`` runs other source trees' zagg on the same granules (``--rounds`` times,
alternating) and compares their medians and their leaves' content hashes.

    python benchmarks/bench_scale.py --sizes 1e7 1e8 --keep /tmp/zagg-scale
    python benchmarks/bench_scale.py --sizes 1e8 --keep /tmp/zagg-scale --rounds 3 \\
        --checkout ../zagg-previous .                            # before / after
    python benchmarks/bench_scale.py --sizes 2e5 --per-granule 50000    # smoke
"""

from __future__ import annotations

import argparse
import functools
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from bench_granules import BEAMS, NEEDED, C, box_for  # noqa: E402

TARGETS = {"cpu": 180.0, "floor": 2.0, "rss_gib": 3.0}
SAMPLE_S = 0.25


# --------------------------------------------------------------------------- granules


def pool_granules(count: int, per: int, seed: int, where: Path) -> list[Path]:
    """The first ``count`` granules of the pool ``where/atl03-pool-...`` (written one at a
    time when missing: granule i is the same file whatever the pool's size)."""
    from zagg.sources.write_granules import write_granules

    pool = where / f"atl03-pool-{per}-seed{seed}-box{box_for(per)[1]:.3f}"
    pool.mkdir(parents=True, exist_ok=True)
    listing = pool / "granules.txt"  # granule i's file name, line i, once complete
    names = listing.read_text().split() if listing.exists() else []
    while len(names) < count:
        i = len(names)
        scratch = pool / f".writing-{i}"
        shutil.rmtree(scratch, ignore_errors=True)
        (path,) = write_granules(
            scratch,
            1,
            product="ATL03",
            points_per_granule=per,
            region=box_for(per),
            seed=seed,
            first=i,
        )
        if (pool / path.name).exists():
            raise RuntimeError(f"granule {i} of the pool is named like an earlier one")
        path.rename(pool / path.name)
        scratch.rmdir()
        names.append(path.name)
        listing.write_text("\n".join(names) + "\n")
    return [pool / n for n in names[:count]]


def linked_granules(paths: list[Path], count: int, where: Path) -> list[Path]:
    """``count`` file names, hard links to ``paths`` in turn (each granule several times
    under distinct names), in ``where``."""
    where.mkdir(parents=True, exist_ok=True)
    out = []
    for i in range(count):
        src = paths[i % len(paths)]
        dst = where / f"{src.stem}_{i // len(paths):03d}{src.suffix}"
        if not dst.exists():
            os.link(src, dst)
        out.append(dst)
    return out


# --------------------------------------------------------------------------- the floor


def _chunks_of(path: Path) -> tuple[list, list]:
    """(offset, size) of every stored chunk of the needed datasets of one granule, one list
    per dataset, and the lat/lon datasets' fill values."""
    import h5py

    per_dataset, fills = [], {}
    with h5py.File(path, "r") as f:
        for beam in BEAMS:
            for name in NEEDED:
                d = f[f"{beam}/{name}"]
                spans = []
                if d.shape[0]:
                    d.id.chunk_iter(
                        lambda info, spans=spans: spans.append((info.byte_offset, info.size))
                    )
                per_dataset.append((name, beam, spans, d.dtype))
                if name.endswith(("lat_ph", "lon_ph")) and "_FillValue" in d.attrs:
                    fills[name] = float(d.attrs["_FillValue"][0])
    return per_dataset, fills


def _inflate(fd: int, spans: list) -> list[bytes]:
    import zlib

    return [zlib.decompress(os.pread(fd, size, off)) for off, size in spans]


def floor(paths: list[Path]) -> dict:
    """Seconds to read + inflate every needed chunk on every core, and to key the same
    photons with geo2mort (every core), summed over the granules."""
    from concurrent.futures import ThreadPoolExecutor

    import mortie
    import numpy as np

    cores = os.cpu_count() or 1
    t_inflate = t_geo = cpu = 0.0  # wall seconds of each part; CPU seconds of both
    photons = 0
    mortie.geo2mort(np.zeros(1000), np.zeros(1000), order=C)  # start mortie's pool
    with ThreadPoolExecutor(cores) as pool:
        for path in paths:
            datasets, fills = _chunks_of(path)
            fd = os.open(path, os.O_RDONLY)
            try:
                t0, c0 = time.perf_counter(), time.process_time()
                out = list(pool.map(functools.partial(_inflate, fd), [d[2] for d in datasets]))
                t_inflate += time.perf_counter() - t0
                cpu += time.process_time() - c0
            finally:
                os.close(fd)
            coords = {}
            for (name, _, _, dtype), blobs in zip(datasets, out, strict=True):
                if name.endswith(("lat_ph", "lon_ph")):
                    v = np.frombuffer(b"".join(blobs), dtype=dtype)
                    fill = fills.get(name)
                    coords.setdefault(name, []).append(
                        v if fill is None else np.where(v == fill, np.nan, v)
                    )
            del out
            lat = np.concatenate(coords["heights/lat_ph"])
            lon = np.concatenate(coords["heights/lon_ph"])
            t0, c0 = time.perf_counter(), time.process_time()
            mortie.geo2mort(lat, lon, order=C)
            t_geo += time.perf_counter() - t0
            cpu += time.process_time() - c0
            photons += lat.size  # (chunks are whole: padding rows included, a few per beam)
    return {"inflate": t_inflate, "geo2mort": t_geo, "cpu": cpu, "photons": photons}


# --------------------------------------------------------------------------- one run


def config(paths: list[Path]) -> dict:
    """The shipped atl03_tdigest config over ``paths``, its pyramid and sweep as shipped."""
    import zagg

    raw = zagg.load_config("atl03_tdigest").raw
    raw["data_source"]["granules"] = [str(p) for p in paths]
    raw["output"].pop("store", None)
    return raw


def child(spec: dict) -> dict:
    """One ``zagg.run`` in this process on the machine's default cluster (the caller times
    the process): the run's summary as plain numbers, its phases from the task stream,
    and this process tree's CPU % in each phase."""
    import zagg
    from zagg.cluster.clients import cluster_for, connected

    stop, series = threading.Event(), []
    sampler = threading.Thread(target=_sample, args=(stop, series), daemon=True)
    sampler.start()
    with cluster_for(None) as cluster, connected(cluster) as client:
        start = time.time()
        s = zagg.run(
            spec["config"], store=spec["store"], scheduler=client, progress=False, timings=True
        )
        run_wall = time.time() - start
        stream = client.get_task_stream(start=start)
        threads = sum(w["nthreads"] for w in client.scheduler_info()["workers"].values())
    stop.set()
    sampler.join()
    out = {
        "run_wall": run_wall,
        "leaves_wall": s.wall_seconds,
        "points": s.points,
        "read": (s.point_counts or {}).get("points_in"),
        "cells": s.cells_with_data,
        "leaves": s.leaves_written,
        "bytes": s.bytes_written,
        "sweep_wall": None if s.sweep is None else s.sweep.seconds,
        "shard_groups": s.shard_groups,
        "hashes": {r["path"]: r["content_hashes"]["combined"] for r in s.records},
        "threads": threads,
        "phases": [
            (name, a, b, occ, _cpu_between(series, start + a, start + b))
            for name, a, b, occ in phases(stream, start, threads)
        ],
        "busy_threads": occupancy(stream, start, start + run_wall, threads),
    }
    st = s.stages
    if st is not None:
        out["stages"] = dict(st.compute)
        out["leaf_objects"] = st.leaf_objects
        out["leaf_columns"] = st.leaf_columns
    return out


def phases(stream: list, start: float, threads: int) -> list:
    """The run's phases, each as (name, from, to, thread occupancy), in seconds from
    ``start``: "read + reduce" from the first task to the last ``reduce-chunk``, "combine +
    write" from the first combining task to the last ``write-leaf``, "sweep" from its first
    fold to its last; the occupancy is the compute seconds of every task within the span ÷
    (threads × the span)."""
    from distributed.utils import key_split

    from zagg.stages import stage_of

    intervals, first, last = [], {}, {}
    for e in stream:
        stage = stage_of(key_split(e["key"]))
        for ss in e.get("startstops", ()):
            if ss["action"] != "compute":
                continue
            a, b = float(ss["start"]) - start, float(ss["stop"]) - start
            intervals.append((a, b))
            first[stage] = min(first.get(stage, a), a)
            last[stage] = max(last.get(stage, b), b)
    if not intervals:
        return []
    spans = {
        "read + reduce": (min(a for a, _ in intervals), last.get("key + reduce")),
        "combine + write": (first.get("combine"), last.get("write")),
        "sweep": (first.get("pyramid"), last.get("pyramid")),
    }
    out = []
    for name, (lo, hi) in spans.items():
        if lo is None or hi is None or hi <= lo:
            continue
        busy = sum(max(0.0, min(b, hi) - max(a, lo)) for a, b in intervals)
        out.append((name, lo, hi, busy / (threads * (hi - lo))))
    return out


def occupancy(stream: list, start: float, end: float, threads: int) -> list[float]:
    """Seconds of ``start``…``end`` during which 0, 1, … ``threads`` tasks computed."""
    events = []
    for e in stream:
        for ss in e.get("startstops", ()):
            if ss["action"] == "compute":
                events += [(float(ss["start"]), 1), (float(ss["stop"]), -1)]
    events.sort()
    out = [0.0] * (threads + 1)
    running, t = 0, start
    for when, step in events:
        when = min(max(when, start), end)
        out[min(running, threads)] += when - t
        running, t = running + step, when
    out[min(running, threads)] += max(0.0, end - t)
    return out


def _sample(stop: threading.Event, series: list) -> None:
    """Every :data:`SAMPLE_S` until ``stop``: (time, CPU seconds) of this process and its
    children (a benchmark's own thread, never the library's)."""
    import psutil

    me = psutil.Process()
    while not stop.is_set():
        cpu = 0.0
        for p in (me, *me.children(recursive=True)):
            try:
                t = p.cpu_times()
                cpu += t.user + t.system
            except psutil.Error:
                pass
        series.append((time.time(), cpu))
        stop.wait(SAMPLE_S)


def _cpu_between(series: list, a: float, b: float) -> float:
    """CPU % of the sampled processes between times ``a`` and ``b``."""
    import numpy as np

    if len(series) < 2 or b <= a:
        return math.nan
    t, cpu = np.array(series).T
    lo, hi = np.interp([a, b], t, cpu)
    return float(hi - lo) / (b - a) * 100


def run(spec: dict, tmp: Path, checkout: Path) -> dict:
    """:func:`child` in a fresh interpreter importing zagg from ``checkout``: its wall time
    from start to exit, its CPU % (rusage), the peak RSS of its process tree and the CPU
    the rest of the machine used meanwhile (both sampled)."""
    import resource

    import psutil

    path = tmp / "spec.json"
    path.write_text(json.dumps(spec))
    shutil.rmtree(spec["store"], ignore_errors=True)
    load0 = os.getloadavg()[0]
    ru0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    busy0 = _machine_busy()
    t0 = time.perf_counter()
    env = {**os.environ, "PYTHONPATH": str(checkout)}
    proc = psutil.Popen(
        [sys.executable, __file__, "--child", str(path)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    peak = [0]
    stop = threading.Event()
    watcher = threading.Thread(target=_peak_rss, args=(proc, stop, peak), daemon=True)
    watcher.start()
    stdout, stderr = proc.communicate()
    wall = time.perf_counter() - t0
    busy = _machine_busy() - busy0
    ru1 = resource.getrusage(resource.RUSAGE_CHILDREN)  # the reaped process tree's CPU
    stop.set()
    watcher.join()
    if proc.returncode:
        raise RuntimeError(f"run failed:\n{stderr[-3000:]}")
    out = json.loads(stdout.strip().splitlines()[-1])
    cpu_s = (ru1.ru_utime - ru0.ru_utime) + (ru1.ru_stime - ru0.ru_stime)
    out.update(
        wall=wall,
        cpu=cpu_s / wall * 100,
        others=max(0.0, busy - cpu_s) / wall * 100,
        load=(load0, os.getloadavg()[0]),
        rss=peak[0],
        cores=os.cpu_count() or 1,
    )
    return out


def _machine_busy() -> float:
    """CPU seconds the whole machine has been busy."""
    import psutil

    m = psutil.cpu_times()
    return m.user + m.system + m.nice + getattr(m, "irq", 0.0) + getattr(m, "softirq", 0.0)


def _peak_rss(proc, stop: threading.Event, peak: list) -> None:
    """The largest summed RSS of ``proc`` and its children, sampled every SAMPLE_S."""
    import psutil

    while not stop.is_set():
        total = 0
        try:
            tree = [proc, *proc.children(recursive=True)]
        except psutil.Error:
            return
        for p in tree:
            try:
                total += p.memory_info().rss
            except psutil.Error:
                pass
        peak[0] = max(peak[0], total)
        stop.wait(SAMPLE_S)


# --------------------------------------------------------------------------- report


def measure(n: int, args, tmp: Path) -> list[dict]:
    """The floor, then ``--rounds`` rounds of one run per checkout (in the order given)
    on the same granules."""
    count = math.ceil(n / args.per_granule)
    where = args.keep or tmp
    linked = bool(args.link and count > args.link)
    if linked:
        base = pool_granules(args.link, args.per_granule, args.seed, where)
        paths = linked_granules(base, count, where / f"linked-{count}-of-{args.link}")
    else:
        paths = pool_granules(count, args.per_granule, args.seed, where)
    disk = sum(p.stat().st_size for p in paths)
    fl = (
        floor(paths)
        if not args.no_floor
        else dict.fromkeys(("inflate", "geo2mort", "cpu"), math.nan)
    )
    fl.setdefault("photons", 0)
    store = str(tmp / "store")
    out = []
    for k in range(args.rounds):
        for checkout in args.checkout:
            r = run({"config": config(paths), "store": store}, tmp, checkout)
            r.update(n=n, granules=len(paths), disk=disk, floor=fl, linked=linked, round=k)
            r["checkout"] = str(checkout)
            out.append(r)
            shutil.rmtree(store, ignore_errors=True)
    return out


def compare(runs: list[dict]) -> None:
    """Per checkout beside the first: the median over rounds of wall, CPU seconds and
    the two long phases' spans, as ratios; and whether every run wrote the same leaves."""
    import statistics

    first = runs[0]["checkout"]
    by: dict = {}
    for r in runs:
        by.setdefault(r["checkout"], []).append(r)

    def med(rs, f):
        return statistics.median(f(r) for r in rs)

    def phase(name):
        return lambda r: next((b - a for n, a, b, *_ in r["phases"] if n == name), math.nan)

    measures = {
        "wall": lambda r: r["wall"],
        "CPU seconds": lambda r: r["cpu"] * r["wall"] / 100,
        "read + reduce span": phase("read + reduce"),
        "combine + write span": phase("combine + write"),
        "sweep span": phase("sweep"),
    }
    same = all(r["hashes"] == runs[0]["hashes"] for r in runs)
    print(f"\n  every leaf's content hash equal in every run: {same}")
    for checkout, rs in by.items():
        if checkout == first:
            continue
        parts = ", ".join(f"{m} {med(rs, f) / med(by[first], f):.2f}" for m, f in measures.items())
        print(f"  {checkout} ÷ {first} (medians of {len(rs)} rounds): {parts}")


def verdict(value: float, target: float, higher: bool = True) -> str:
    ok = value >= target if higher else value <= target
    return f"{'meets' if ok else 'misses'} {'>=' if higher else '<='} {target:g}"


def report(r: dict, label: str = "") -> None:
    fl = r["floor"]
    floor_s = fl["inflate"] + fl["geo2mort"]
    photons = r["read"] or fl["photons"]
    print(
        f"\n{label}{r['n']:.0e} photons asked: {r['granules']} granules"
        f"{' (hard links)' if r['linked'] else ''}, {photons:,} photons read, "
        f"{r['disk'] / 2**30:.2f} GiB on disk; {r['points']:,} kept, {r['cells']:,} cells "
        f"with data, {r['leaves']} leaves, {r['bytes'] / 2**30:.2f} GiB written"
    )
    print(
        f"  machine: {r['cores']} cores, load average {r['load'][0]:.1f} → {r['load'][1]:.1f}, "
        f"other processes {r.get('others', math.nan):.0f} % CPU during the run"
    )
    print(
        f"  floor: read + inflate {fl['inflate']:.2f} s + geo2mort {fl['geo2mort']:.2f} s = "
        f"{floor_s:.2f} s ({photons / floor_s / 1e6:.1f} M photons/s)"
    )
    sweep = r.get("sweep_wall") or 0.0
    print(
        f"  run: {r['wall']:.2f} s process wall (leaves {r['leaves_wall']:.2f} s, sweep "
        f"{sweep:.2f} s), {photons / r['wall'] / 1e6:.2f} M photons/s; wall / floor "
        f"{r['wall'] / floor_s:.2f} ({verdict(r['wall'] / floor_s, TARGETS['floor'], False)}); "
        f"leaves / floor {r['leaves_wall'] / floor_s:.2f}"
    )
    if r.get("shard_groups"):
        print(f"  shard groups: {r['shard_groups']}")
    cpu_s = r["cpu"] * r["wall"] / 100
    print(
        f"  CPU seconds: run {cpu_s:.1f}, floor {fl['cpu']:.1f}; run / floor "
        f"{cpu_s / fl['cpu']:.2f} (the work, whatever the machine's load)"
    )
    print(
        f"  CPU {r['cpu']:.0f} % of one core over the process wall "
        f"({verdict(r['cpu'], TARGETS['cpu'])}); peak RSS {r['rss'] / 2**30:.2f} GiB "
        f"({verdict(r['rss'] / 2**30, TARGETS['rss_gib'], False)})"
    )
    print("  phases (seconds from the run's start, thread occupancy, CPU %, CPU seconds):")
    for name, a, b, occ, cpu in r.get("phases", ()):
        print(
            f"    {name:<16} {a:7.1f} - {b:7.1f} s  {occ:5.0%}  {cpu:5.0f} %  "
            f"{cpu * (b - a) / 100:7.1f} s"
        )
    busy = r.get("busy_threads")
    if busy:
        print(
            "  seconds of zagg.run with 0, 1, ... threads computing a task: "
            + ", ".join(f"{k}: {s:.1f}" for k, s in enumerate(busy))
        )
    st = r.get("stages")
    if st:
        parts = ", ".join(f"{k} {v:.1f}" for k, v in st.items() if k != "other" or v >= 0.05)
        print(f"  time in tasks on {r['threads']} threads (s): {parts}")
        objects, columns = r.get("leaf_objects"), r.get("leaf_columns")
        if objects is not None:
            print(f"    write: leaf objects {objects:.1f} s, columns {columns or 0:.1f} s")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", nargs="+", type=float, default=[1e7], help="photons per size")
    ap.add_argument("--per-granule", type=int, default=2_500_000, help="photons per granule")
    ap.add_argument("--seed", type=int, default=1, help="granule generator seed")
    ap.add_argument("--keep", type=Path, default=None, help="keep the granule pool here")
    ap.add_argument(
        "--link",
        type=int,
        default=0,
        help="at most this many distinct granules: larger sizes repeat them as hard links",
    )
    ap.add_argument(
        "--checkout",
        nargs="+",
        type=Path,
        default=[Path(__file__).resolve().parents[1]],
        help="run zagg from each of these source trees in turn (default: this one); "
        "their leaves' content hashes are compared",
    )
    ap.add_argument(
        "--rounds", type=int, default=1, help="runs per checkout, the checkouts alternating"
    )
    ap.add_argument(
        "--no-floor", action="store_true", help="leave the floor out (runs alone: no ratios)"
    )
    ap.add_argument("--json", type=Path, default=None, help="also write the results here")
    ap.add_argument("--child", type=Path, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        print(json.dumps(child(json.loads(args.child.read_text()))))
        return 0
    print(
        f"zagg scale benchmark (atl03_tdigest config on ATL03-shaped granules, default "
        f"pyramid and sweep; {os.cpu_count()} cores)"
    )
    tmp = Path(tempfile.mkdtemp(prefix="zagg-bench-scale-"))
    results = []
    try:
        for n in map(int, args.sizes):
            runs = measure(n, args, tmp)
            for r in runs:
                label = f"[{r['checkout']}, round {r['round'] + 1}] " if len(runs) > 1 else ""
                report(r, label)
            if len(runs) > 1:
                compare(runs)
            results += runs
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
