"""Benchmark: open a sparse store and map its median, zagg's reader against moczarr's.

Each size first writes a store, untimed: the synthetic ATL03-like photons of the default
region (sparse tracks over Pine Island Glacier) aggregated with the standard config (count,
mean, min, max and a t-digest of heights; order-19 cells in order-9 shards) and written with
``zagg.to_hive``. Then, each in a fresh process of its own (so its peak RSS is its own), with
the libraries imported before the clock starts:

- zagg: ``zagg.open_hive(store)`` (the sparse default) and
  ``zagg.quantile(ds, "h_tdigest", 0.5).values``;
- moczarr: ``moczarr.open_hive(store)``, the occupied rows (``count > 0``, its documented
  occupancy filter), their digests decoded with ``moczarr.ragged.decode_cell`` and
  ``moczarr.tdigest.quantile_from_tdigest`` per cell;
- an interpreter that imports the same libraries and reads nothing (the baseline the
  memory target allows on top of twice the store's size).

zagg's time is printed for the process's first map (numba's cached kernels load inside it)
and for a second one in the same process. Printed per size: wall and peak RSS of both
readers, the store's size on disk, and the ratios against the targets (zagg at least 3 times
faster than moczarr; peak RSS at most twice the store plus the interpreter; the 5e6-point
map under 3 s).

    python benchmarks/bench_read.py                  # 5e6 and 1e7 points
    python benchmarks/bench_read.py --sizes 5e6 --store-dir /tmp/stores   # keep the stores
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from common import standard_config

SPEED_TARGET = 3.0  # zagg's wall at least 3x shorter than moczarr's
MEMORY_FACTOR = 2.0  # peak RSS at most 2x the store's size plus the interpreter
WALL_TARGET_S = 3.0  # the 5e6-point map, on the machine of benchmarks/README.md


def write_store(n: int, path: str, chunk: int) -> None:
    """Aggregate ``n`` synthetic photons into a store at ``path`` (in a child process)."""
    subprocess.run([sys.executable, __file__, "--write", str(n), path, str(chunk)], check=True)


def _write_here(n: int, path: str, chunk: int) -> None:
    import dask

    import zagg
    from zagg.sources.synthetic import synthetic_photons

    ds = synthetic_photons(n, chunk_size=chunk, seed=1)
    with dask.config.set(scheduler="threads"):
        zagg.to_hive(zagg.aggregate(ds, standard_config()), path)


def store_bytes(path: str) -> int:
    return sum(p.stat().st_size for p in Path(path).rglob("*") if p.is_file())


def measure(reader: str, store: str) -> dict:
    """Run one reader in a fresh process; its printed JSON record."""
    out = subprocess.run(
        [sys.executable, __file__, "--measure", reader, store], capture_output=True, text=True
    )
    if out.returncode != 0 and not out.stdout.strip():
        raise RuntimeError(f"{reader} failed: {out.stderr[-2000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def _peak_bytes() -> int:
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def _measure_here(reader: str, store: str) -> None:
    import time
    import warnings

    import numpy as np

    warnings.simplefilter("ignore")
    record: dict = {"reader": reader}
    if reader == "zagg":
        import dask.array  # noqa: F401
        import xarray  # noqa: F401

        import zagg
        import zagg.read

        walls = []
        for _ in range(2):
            t0 = time.perf_counter()
            ds = zagg.open_hive(store)
            median = zagg.quantile(ds, "h_tdigest", 0.5).values
            walls.append(time.perf_counter() - t0)
        record.update(
            wall=walls[0],
            again=walls[1],
            cells=int(np.isfinite(median).sum()),
            shards=len(ds.attrs["zagg"]["shards"]),
        )
    elif reader == "moczarr":
        import moczarr
        from moczarr import ragged, tdigest

        t0 = time.perf_counter()
        ds = moczarr.open_hive(store)
        occupied = np.flatnonzero(ds["count"].values > 0)
        payloads = ds["h_tdigest"].isel(cells=occupied).values
        element = ragged.parse_ragged_attrs(ds["h_tdigest"].attrs, field="h_tdigest")
        median = np.array(
            [tdigest.quantile_from_tdigest(ragged.decode_cell(p, element), 0.5) for p in payloads]
        )
        record.update(
            wall=time.perf_counter() - t0,
            cells=int(np.isfinite(median).sum()),
            shards=len(
                np.unique(np.asarray(ds["morton"].values)[occupied] >> np.uint64(60 - 2 * 9))
            ),
        )
    else:  # the interpreter with both readers' libraries imported
        import dask.array  # noqa: F401
        import moczarr  # noqa: F401
        import xarray  # noqa: F401

        import zagg.read  # noqa: F401
    record["peak"] = _peak_bytes()
    print(json.dumps(record), flush=True)
    os._exit(0)  # moczarr's object-store threads can abort a normal interpreter shutdown


def gib(n: float) -> str:
    return f"{n / 2**30:.2f} GiB"


def mib(n: float) -> str:
    return f"{n / 2**20:.1f} MiB"


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", nargs="+", default=["5e6", "1e7"])
    ap.add_argument("--chunk", type=int, default=1 << 20, help="points per input chunk")
    ap.add_argument("--store-dir", help="write (or reuse) the stores here and keep them")
    ap.add_argument("--no-moczarr", action="store_true", help="time zagg's reader only")
    args = ap.parse_args(argv)
    os.environ.setdefault("RAYON_NUM_THREADS", str(os.cpu_count() or 1))
    tmp = None
    base = args.store_dir
    if base is None:
        tmp = tempfile.mkdtemp(prefix="zagg-bench-read-")
        base = tmp
    try:
        interpreter = measure("interpreter", base)["peak"]
        print(f"interpreter with zagg, moczarr, xarray and dask imported: {gib(interpreter)}")
        for size in args.sizes:
            n = int(float(size))
            store = os.path.join(base, f"store-{n}")
            if not os.path.exists(os.path.join(store, "morton_hive.json")):
                write_store(n, store, args.chunk)
            on_disk = store_bytes(store)
            ours = measure("zagg", store)
            print(
                f"\n{n} points: {ours['shards']} shards, {ours['cells']:,} cells with data; "
                f"store {mib(on_disk)} on disk"
            )
            budget = MEMORY_FACTOR * on_disk + interpreter
            print(
                f"  zagg     open + median map  {ours['wall']:7.2f} s (again in the same "
                f"process {ours['again']:.2f} s)   peak RSS {gib(ours['peak'])}"
            )
            theirs = None
            if not args.no_moczarr:
                theirs = measure("moczarr", store)
                print(
                    f"  moczarr  open + median map  {theirs['wall']:7.2f} s"
                    f"{'':37}peak RSS {gib(theirs['peak'])}   ({theirs['cells']:,} cells)"
                )
            print(
                f"  memory   zagg's peak / (2 x store + interpreter) = "
                f"{ours['peak'] / budget:.2f} (target <= 1)"
            )
            if theirs is not None:
                speedup = theirs["wall"] / ours["wall"]
                print(
                    f"  speed    moczarr wall / zagg wall = {speedup:.1f} "
                    f"(target >= {SPEED_TARGET:g}); again {theirs['wall'] / ours['again']:.1f}"
                )
            if n == 5_000_000:
                verdict = "meets" if ours["wall"] < WALL_TARGET_S else "misses"
                print(f"  wall     {ours['wall']:.2f} s {verdict} the {WALL_TARGET_S:g} s target")
    finally:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--write":
        _write_here(int(sys.argv[2]), sys.argv[3], int(sys.argv[4]))
    elif len(sys.argv) > 1 and sys.argv[1] == "--measure":
        _measure_here(sys.argv[2], sys.argv[3])
    else:
        main()
