"""Where a run executes: a LocalCluster sized to the machine, or an existing scheduler.

Worker processes get ``RAYON_NUM_THREADS`` equal to their thread count so mortie's Rust
kernels share the worker's cores instead of each spawning a thread per machine core, and
``MALLOC_ARENA_MAX`` so that their threads share one malloc arena (see :mod:`zagg.heap`;
distributed's nanny sets it in the client's environment as it spawns them, as it does its
own ``MALLOC_TRIM_THRESHOLD_``). A
local cluster of one worker whose threads take every core (the default on one or two
cores: see :func:`runs_in_process`) runs inside the client's process instead.

Every worker also keeps freed buffers in its heap for reuse (see :mod:`zagg.heap`), and
freezes its objects out of the garbage collector when it closes (see :func:`fast_exit`);
both are made from inside each worker by plugins, so they also reach workers of clusters
zagg did not start.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import gc
import os

import psutil

from .heap import ARENA_MAX, process_is_owned, tune_heap
from .progress import active_client


def machine_defaults() -> dict:
    """Workers, threads and memory per worker for this machine (2 threads per worker)."""
    cores = os.cpu_count() or 1
    threads = 2 if cores >= 2 else 1
    workers = max(1, cores // threads)
    memory = psutil.virtual_memory().total
    return {"n_workers": workers, "threads_per_worker": threads,
            "memory_limit": int(memory * 0.8 / workers)}


def runs_in_process(n_workers: int, threads_per_worker: int) -> bool:
    """Whether a local cluster of these sizes runs inside this process: one worker whose
    threads take every core. mortie's pool then needs no pinning, and a worker process
    would only add its start (≈ 0.8 s here: distributed's imports, the task modules',
    numba's set-up) and a copy of every result it hands back."""
    return n_workers == 1 and threads_per_worker >= (os.cpu_count() or 1)


def fast_exit() -> None:
    """Let this process exit without collecting garbage it is about to drop anyway.

    With numba, llvmlite, xarray and pandas loaded, the interpreter's final collections
    walk millions of objects: about 0.9 s of every exit here, and a cluster's close waits
    for each worker's. Freezing moves every object out of the collector's sight; nothing
    is leaked, the process memory goes back to the system as it ends.
    """
    gc.freeze()


def _worker_plugins():
    from distributed import WorkerPlugin

    class HeapReuse(WorkerPlugin):
        """Runs :func:`tune_heap` in every worker process, current and future (one a nanny
        started), and in the CLI's own process for a worker running inside it: never in
        a process the worker shares otherwise, such as a notebook running an in-process
        cluster, whose heap is not zagg's to tune."""

        name = "zagg-heap-reuse"

        def setup(self, worker):
            if worker.nanny or process_is_owned():
                tune_heap(memory_limit=worker.memory_manager.memory_limit)

    class FastExit(WorkerPlugin):
        """Runs :func:`fast_exit` as a worker process closes (one a nanny started, so
        the process ends with it): not when the plugin is only replaced, nor for workers
        that share another process."""

        name = "zagg-fast-exit"

        def teardown(self, worker):
            from distributed.core import Status

            if worker.status == Status.closing and worker.nanny:
                fast_exit()

    return HeapReuse(), FastExit()


def _register(client) -> None:
    for plugin in _worker_plugins():
        client.register_plugin(plugin)


@contextlib.contextmanager
def entered_in_background(manager):
    """Enter the context manager ``manager`` (a cluster's start, say) in a background
    thread and yield a future of what it gives, so the caller works on meanwhile.

    On the way out the start is waited for and ``manager`` is exited in the caller's thread,
    with the body's exception if there is one. A start that failed raises from
    ``future.result()``; when the body raised first, the body's exception propagates.
    """
    pool = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="zagg-start")
    future = pool.submit(manager.__enter__)
    pool.shutdown(wait=False)
    try:
        yield future
    except BaseException as exc:
        started = future.exception() is None  # waits for the start to end
        if not (started and manager.__exit__(type(exc), exc, exc.__traceback__)):
            raise
    else:
        if future.exception() is None:
            manager.__exit__(None, None, None)


class ClusterError(ValueError):
    """Cluster settings zagg refuses, or a scheduler it cannot reach."""


#: how long a client waits for a scheduler given by address before giving up
CONNECT_TIMEOUT = "15s"


def check_knobs(workers=None, threads=None, memory_limit=None) -> None:
    """Refuse local-cluster settings that would hang or fail inside distributed: worker and
    thread counts below 1, and memory limits that are neither a size, a fraction of the
    machine's memory (0 < f <= 1) nor "auto"."""
    for name, value in (("workers", workers), ("threads", threads)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, int)
                                  or value < 1):
            raise ClusterError(f"{name} must be a whole number >= 1, got {value!r}")
    if memory_limit is None or memory_limit == "auto":
        return
    from .validation import ConfigError, parse_bytes

    if isinstance(memory_limit, float) and 0 < memory_limit <= 1:
        return
    try:
        parse_bytes(memory_limit, "memory_limit")
    except ConfigError:
        raise ClusterError(f"memory limit {memory_limit!r} is not a size; use e.g. '4GiB', "
                           "'512MiB', a fraction of the machine's memory such as 0.5, or "
                           "'auto'") from None


@contextlib.contextmanager
def cluster_for(scheduler: str | None = None, *, workers: int | None = None,
                threads: int | None = None, memory_limit: str | int | None = None,
                dashboard: bool = False, processes: bool | None = None):
    """Yield what a client connects to: ``scheduler`` itself when given, else a new
    LocalCluster (closed on exit). Keyword knobs override :func:`machine_defaults`;
    ``processes`` (default: unless :func:`runs_in_process`) puts the workers in processes
    of their own."""
    if scheduler:
        yield scheduler
        return
    check_knobs(workers, threads, memory_limit)
    import dask
    from distributed import LocalCluster

    opts = machine_defaults()
    if workers is not None:
        opts["n_workers"] = int(workers)
    if threads is not None:
        opts["threads_per_worker"] = int(threads)
    if memory_limit is not None:
        opts["memory_limit"] = memory_limit
    if processes is None:
        processes = not runs_in_process(opts["n_workers"], opts["threads_per_worker"])
    if processes:
        env = {"RAYON_NUM_THREADS": str(opts["threads_per_worker"]), "OMP_NUM_THREADS": "1"}
        where = {"processes": True, "env": env, "host": "127.0.0.1",
                 "preload": ["zagg.preload"], "dashboard_address": ":8787" if dashboard
                 else ":0"}
    else:  # in-process transport: nothing listens on the network but a dashboard asked for
        where = {"processes": False,
                 "dashboard_address": "127.0.0.1:8787" if dashboard else None}
    # CRITICAL: a task error reaches the client as its exception (with the remote
    # traceback); the worker need not also log a "Compute Failed" block on stderr
    # glibc reads MALLOC_ARENA_MAX as a process starts: the nanny sets it (like its own
    # MALLOC_TRIM_THRESHOLD_) in this process's environment just before spawning a worker
    spawn_env = {"distributed.nanny.pre-spawn-environ.MALLOC_ARENA_MAX": str(ARENA_MAX)}
    with dask.config.set(spawn_env if processes else {}):
        cluster = LocalCluster(silence_logs=50, **where, **opts)
    with cluster:
        yield cluster


@contextlib.contextmanager
def connected(target):
    """Yield a ``distributed.Client`` of ``target`` (an address, a cluster, or a client of
    one, e.g. a dask-gateway notebook's) with zagg's worker plugins registered. Enter it in
    the thread that computes: the client becomes that thread's current one. A client
    passed in stays open afterwards: it is the caller's."""
    from distributed import Client

    if isinstance(target, Client):
        _register(target)
        with target.as_current():
            yield target
        return
    before = active_client()
    try:
        client = Client(target, timeout=CONNECT_TIMEOUT) if isinstance(target, str) \
            else Client(target)
    except (OSError, ValueError, TypeError) as exc:
        _close_half_made(before)
        if not isinstance(target, str):
            raise
        raise ClusterError(f"cannot reach a dask scheduler at {target!r} ({exc}); check the "
                           "address (e.g. tcp://10.0.0.5:8786) and that its scheduler is "
                           "running, or leave --scheduler out for a local cluster") from exc
    with client:
        _register(client)
        yield client


def _close_half_made(before) -> None:
    """Close the client a failed ``Client(...)`` left behind: it registers itself as the
    process's default before connecting, so while its error is referenced (a notebook
    keeps the last one) every later dask computation would wait on it forever."""
    left = active_client()
    if left is not None and left is not before and left.status != "running":
        left.close()


@contextlib.contextmanager
def client_for(scheduler: str | None = None, **knobs):
    """Yield a ``distributed.Client``: connected to ``scheduler`` if given, else to a new
    LocalCluster (closed on exit); the knobs are those of :func:`cluster_for`."""
    with cluster_for(scheduler, **knobs) as target, connected(target) as client:
        yield client
