"""Pieces every benchmark script shares: the timer and the standard photon config."""

from __future__ import annotations

import copy
import threading
import time

#: count + mean + min + max + t-digest of synthetic photon heights, order 19 in order 9
STANDARD_CONFIG = {
    "data_source": {
        "coordinates": {"latitude": "lat_ph", "longitude": "lon_ph"},
        "variables": ["h_ph"],
    },
    "aggregation": {
        "variables": {
            "count": {"function": "count"},
            "h_mean": {"function": "mean", "source": "h_ph"},
            "h_min": {"function": "min", "source": "h_ph"},
            "h_max": {"function": "max", "source": "h_ph"},
            "h_tdigest": {"function": "tdigest", "source": "h_ph"},
        }
    },
    "output": {
        "dataset": {"short_name": "BENCH", "version": "1"},
        "grid": {"parent_order": 9, "child_order": 19},
        # the benchmarks time the leaf write; bench_pyramid times the sweep on its own
        "sweep": False,
    },
}


def standard_config(**data_source) -> dict:
    """A copy of :data:`STANDARD_CONFIG` with extra ``data_source`` keys."""
    cfg = copy.deepcopy(STANDARD_CONFIG)
    cfg["data_source"].update(data_source)
    return cfg


def best_of(fn, reps: int):
    """(best wall seconds, last result) of ``reps`` calls of ``fn``."""
    best = float("inf")
    out = None
    for _ in range(reps):
        t0 = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t0)
    return best, out


#: the end-to-end target of both benchmarks: half of the same run's geo2mort rate
TARGET_RATIO = 0.5


def verdict(ratio: float, ceiling: float | None = None, target: float = TARGET_RATIO) -> str:
    """Whether ``ratio`` (÷ geo2mort) meets ``target``, and when it does not and the same
    run measured a ``ceiling`` (the best ratio any implementation reaches here), whether
    that ceiling allows it."""
    if ratio >= target:
        return f"{ratio:.2f} meets the target {target:.2f}"
    if ceiling is None:
        return f"{ratio:.2f} below the target {target:.2f}"
    if ceiling < target:
        return (
            f"{ratio:.2f} below the target {target:.2f}, which the ceiling {ceiling:.2f} "
            "puts out of reach here"
        )
    return f"{ratio:.2f} below the target {target:.2f}, which the ceiling {ceiling:.2f} allows"


def sample_rss(stop: threading.Event, out: list, every: float = 0.2) -> None:
    """Append to ``out`` the peak RSS (bytes) of this process and its children, sampled
    every ``every`` seconds until ``stop`` is set (run it in a thread)."""
    import psutil

    me, peak = psutil.Process(), 0
    while not stop.is_set():
        total = 0
        for p in (me, *me.children(recursive=True)):
            try:
                total += p.memory_info().rss
            except psutil.Error:
                pass
        peak = max(peak, total)
        stop.wait(every)
    out.append(peak)
