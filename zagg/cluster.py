"""Where a run executes: a LocalCluster sized to the machine, or an existing scheduler.

Worker processes get ``RAYON_NUM_THREADS`` equal to their thread count so mortie's Rust
kernels share the worker's cores instead of each spawning a thread per machine core.

Every worker also keeps freed buffers in its heap for reuse (see :mod:`zagg.heap`); the
setting is made from inside each worker by a plugin, so it also reaches workers of
clusters zagg did not start.
"""

from __future__ import annotations

import contextlib
import os

import psutil

from .heap import tune_heap


def machine_defaults() -> dict:
    """Workers, threads and memory per worker for this machine (2 threads per worker)."""
    cores = os.cpu_count() or 1
    threads = 2 if cores >= 2 else 1
    workers = max(1, cores // threads)
    memory = psutil.virtual_memory().total
    return {"n_workers": workers, "threads_per_worker": threads,
            "memory_limit": int(memory * 0.8 / workers)}


def _heap_plugin():
    from distributed import WorkerPlugin

    class HeapReuse(WorkerPlugin):
        """Runs :func:`tune_heap` in every worker, current and future."""

        name = "zagg-heap-reuse"

        def setup(self, worker):
            tune_heap()

    return HeapReuse()


@contextlib.contextmanager
def client_for(scheduler: str | None = None, *, workers: int | None = None,
               threads: int | None = None, memory_limit: str | int | None = None,
               dashboard: bool = False):
    """Yield a ``distributed.Client``: connected to ``scheduler`` if given, else to a new
    LocalCluster (closed on exit). Keyword knobs override :func:`machine_defaults`."""
    from distributed import Client, LocalCluster

    if scheduler:
        with Client(scheduler) as client:
            client.register_plugin(_heap_plugin())
            yield client
        return
    opts = machine_defaults()
    if workers:
        opts["n_workers"] = int(workers)
    if threads:
        opts["threads_per_worker"] = int(threads)
    if memory_limit:
        opts["memory_limit"] = memory_limit
    env = {"RAYON_NUM_THREADS": str(opts["threads_per_worker"]), "OMP_NUM_THREADS": "1"}
    with LocalCluster(processes=True, env=env, silence_logs=40,
                      dashboard_address=":8787" if dashboard else ":0",
                      host="127.0.0.1", **opts) as cluster, Client(cluster) as client:
        client.register_plugin(_heap_plugin())
        yield client
