"""Numba's compile cost, paid ahead: ``python -m zagg warm`` and the first-run notice.

zagg's kernels are compiled by numba on their first call in an environment and cached on
disk (beside the modules, or under ``NUMBA_CACHE_DIR``); every later process loads them.
:func:`warm` calls every kernel a run and a read use, on a few thousand synthetic
photons, in this process: image builds and set-up scripts run it once so that the first
real run (and every new worker of a cluster started from the image) starts warm.
:func:`is_cold` says whether this environment has compiled nothing yet, which is when a
run says it is compiling.
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from pathlib import Path

#: the shipped configs warm compiles for: every reducer and kernel kind a run uses
CONFIGS = ("atl03_synthetic", "atl03_strata")
NOTICE = (
    "zagg: compiling numba kernels for this environment (once; later runs load "
    "them from the cache; `python -m zagg warm` compiles them ahead)"
)


def cache_dirs() -> list[Path]:
    """Where numba caches zagg's kernels: ``NUMBA_CACHE_DIR`` when set, else the
    ``__pycache__`` folders beside the kernel modules."""
    base = os.environ.get("NUMBA_CACHE_DIR")
    if base:
        return [Path(base)]
    here = Path(__file__).resolve().parent.parent
    return [here / "kernels" / "__pycache__", here / "hive" / "__pycache__"]


def is_cold() -> bool:
    """Whether no t-digest kernel of zagg is cached yet (a fresh environment)."""
    for d in cache_dirs():
        if d.is_dir() and any(d.rglob("tdigest.*.nbi")):
            return False
    return True


def notice_if_cold(out=None) -> bool:
    """Print :data:`NOTICE` (to stderr) when :func:`is_cold`; returns whether it did."""
    if not is_cold():
        return False
    print(NOTICE, file=out or sys.stderr, flush=True)
    return True


def warm(configs=CONFIGS, points: int = 20_000, out=None) -> dict[str, float]:
    """Aggregate, write and read back ``points`` synthetic photons with each config, in
    this process; returns the seconds each took (the compile time when cold)."""
    import dask

    import zagg
    from zagg.sources.synthetic import synthetic_photons

    seconds = {}
    ds = synthetic_photons(points, seed=0, chunk_size=points)
    with (
        tempfile.TemporaryDirectory(prefix="zagg-warm-") as tmp,
        dask.config.set(scheduler="synchronous"),
    ):
        for name in configs:
            t0 = time.perf_counter()
            cfg = zagg.load_config(name)
            store = Path(tmp) / name
            zagg.to_hive(zagg.aggregate(ds, cfg), str(store))
            back = zagg.open_hive(str(store)).load()
            for field, spec in cfg.raw["aggregation"]["variables"].items():
                if spec.get("function") != "tdigest":
                    continue
                zagg.quantile(back, field, [0.1, 0.5, 0.9]).values  # noqa: B018
            seconds[name] = time.perf_counter() - t0
            if out is not None:
                print(f"warm {name:<18} {seconds[name]:6.1f} s", file=out, flush=True)
    return seconds
