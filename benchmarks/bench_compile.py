"""Numba compile cost: the shipped t-digest and strata configs with an empty kernel cache.

Each config runs ``zagg.pipeline.warm.warm`` (aggregate, write and read back a few thousand
synthetic photons in one process) in a fresh interpreter whose ``NUMBA_CACHE_DIR`` is an
empty folder (cold: every kernel it calls is compiled), then again in another interpreter
on the same folder (warm: every kernel is loaded from the cache). The difference is what
a fresh environment, or a new worker of an image that was not warmed, pays once. The
compile is single-threaded, so its CPU seconds (printed beside) are what the wall time
would be on an idle machine: read those when the machine is shared.

``warm`` reduces its points in one chunk, so it never merges partials across chunks.
``--chunks N`` (N > 1) runs instead the same points split in N chunks, plus as many again
packed into a few cells (cells past their digest's delta), written and read back the same
way: a run's cross-chunk merges, compressed ones included, compile too.

    python benchmarks/bench_compile.py [--configs atl03_synthetic atl03_strata] [--chunks 4]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile

#: the cold strata target: a fresh environment's first strata run compiles within it
TARGET_STRATA_COLD_S = 15.0
LABELS = {"atl03_synthetic": "t-digest", "atl03_strata": "strata"}

PROBE = """
import json, sys, time
t0 = time.perf_counter()
import zagg.pipeline.warm as w
cold = w.is_cold()
c0 = time.process_time()
seconds = w.warm([sys.argv[1]], points=int(sys.argv[2]))
print(json.dumps({"cold": cold, "seconds": seconds[sys.argv[1]],
                  "cpu": time.process_time() - c0, "process": time.perf_counter() - t0}))
"""


CHUNKED = """
import json, sys, tempfile, time
t0 = time.perf_counter()
import dask, xarray as xr
import zagg
import zagg.pipeline.warm as w
from zagg.sources.synthetic import synthetic_photons
cold = w.is_cold()
c0 = time.process_time()
name, points, chunks = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
t1 = time.perf_counter()
spread = synthetic_photons(points, seed=0, chunk_size=points)
packed = synthetic_photons(points, (-100.0002, -75.50002, -100.0, -75.5), seed=1,
                           chunk_size=points)
ds = xr.concat([spread, packed], dim="photon").chunk({"photon": -(-2 * points // chunks)})
with tempfile.TemporaryDirectory() as tmp, dask.config.set(scheduler="synchronous"):
    cfg = zagg.load_config(name)
    zagg.to_hive(zagg.aggregate(ds, cfg), tmp + "/s")
    back = zagg.open_hive(tmp + "/s").load()
    for field, spec in cfg.raw["aggregation"]["variables"].items():
        if spec.get("function") == "tdigest":
            zagg.quantile(back, field, [0.1, 0.5, 0.9]).values
print(json.dumps({"cold": cold, "seconds": time.perf_counter() - t1,
                  "cpu": time.process_time() - c0, "process": time.perf_counter() - t0}))
"""


def timed(name: str, cache: str, points: int, chunks: int = 1) -> dict:
    env = {**os.environ, "NUMBA_CACHE_DIR": cache}
    probe = [PROBE, name, str(points)] if chunks <= 1 else [CHUNKED, name, str(points), str(chunks)]
    out = subprocess.run(
        [sys.executable, "-c", *probe],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--configs", nargs="+", default=list(LABELS))
    ap.add_argument("--points", type=int, default=20_000)
    ap.add_argument(
        "--chunks",
        type=int,
        default=1,
        help="reduce the points in this many chunks (with as many again in a few dense "
        "cells), so that the cross-chunk merges compile too; 1: zagg warm's one chunk",
    )
    args = ap.parse_args(argv)
    for name in args.configs:
        with tempfile.TemporaryDirectory(prefix="numba-cache-") as cache:
            cold = timed(name, cache, args.points, args.chunks)
            warm = timed(name, cache, args.points, args.chunks)
        assert cold["cold"] and not warm["cold"], (cold, warm)
        label = LABELS.get(name, name)
        line = (
            f"{label:<9} ({name}): cold {cold['seconds']:.1f} s, warm "
            f"{warm['seconds']:.1f} s, compile {cold['seconds'] - warm['seconds']:.1f} s "
            f"(cold / warm {cold['seconds'] / max(warm['seconds'], 1e-9):.1f}); CPU cold "
            f"{cold['cpu']:.1f} s, warm {warm['cpu']:.1f} s; "
            f"process cold {cold['process']:.1f} s, warm {warm['process']:.1f} s"
        )
        if name == "atl03_strata":
            met = "meets" if cold["seconds"] <= TARGET_STRATA_COLD_S else "misses"
            line += f"; {met} the {TARGET_STRATA_COLD_S:.0f} s cold target"
        print(line, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
