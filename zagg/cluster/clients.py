"""Where a run executes: a LocalCluster sized to the machine, an existing scheduler, or a
dask-gateway cluster (:mod:`zagg.cluster.gateway`); :func:`connect` gives a client of any of them.

A local cluster of one worker whose threads take every core (the default on one or two
cores: see :func:`runs_in_process`) runs inside the client's process; otherwise its
worker processes start with zagg's deployment profile (:mod:`zagg.cluster.profile`): mortie's
thread pool sized to the worker's threads, glibc's heap settings. Everything listens on
127.0.0.1 only, and no dashboard is started unless asked for. A cluster or client passed
in is used as it is: zagg never changes a cluster it did not start.
"""

from __future__ import annotations

import contextlib
import functools
import os

from zagg.cluster.profile import local_cluster_config, worker_environ
from zagg.engine.progress import active_client
from zagg.errors import ZaggError, ZaggWarning


def machine_defaults() -> dict:
    """Workers, threads and memory per worker for this machine (2 threads per worker)."""
    import psutil

    cores = os.cpu_count() or 1
    threads = 2 if cores >= 2 else 1
    workers = max(1, cores // threads)
    memory = psutil.virtual_memory().total
    return {
        "n_workers": workers,
        "threads_per_worker": threads,
        "memory_limit": int(memory * 0.8 / workers),
    }


def runs_in_process(n_workers: int, threads_per_worker: int) -> bool:
    """Whether a local cluster of these sizes runs inside this process: one worker whose
    threads take every core. mortie's pool then needs no pinning, and a worker process
    would only add its start (imports, numba's set-up) and a copy of every result it
    hands back."""
    return n_workers == 1 and threads_per_worker >= (os.cpu_count() or 1)


class ClusterError(ZaggError, ValueError):
    """Cluster settings zagg refuses, or a scheduler it cannot reach."""


class OversubscribedWarning(ZaggWarning):
    """A local cluster asked for more threads than the machine has cores."""


def usable_cores() -> int:
    """The cores this process may run on (its CPU affinity where the system says)."""
    try:
        return len(os.sched_getaffinity(0)) or 1
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def oversubscription(n_workers: int, threads_per_worker: int) -> str | None:
    """Why a local cluster of these sizes oversubscribes the machine (None: it does not).

    More threads than cores is allowed, not refused: a run that waits on object-store
    reads can use more; a compute-bound one only shares the cores and holds more partial
    results in memory at once."""
    cores, total = usable_cores(), n_workers * threads_per_worker
    if total <= cores:
        return None
    return (
        f"{n_workers} worker{'s' if n_workers != 1 else ''} x {threads_per_worker} "
        f"threads = {total} threads on a machine of {cores} core"
        f"{'s' if cores != 1 else ''}: the threads take turns on the cores, so the "
        "aggregation is no faster and each worker holds more partial results in memory at "
        f"once; ask for at most {cores} in all (e.g. --workers 1 --threads {cores}), or "
        "leave --workers and --threads out to size the cluster to the machine (more "
        "threads than cores help only a run that waits on object-store reads)"
    )


#: how long a client waits for a scheduler given by address before giving up
CONNECT_TIMEOUT = "15s"


def check_knobs(workers=None, threads=None, memory_limit=None) -> None:
    """Refuse local-cluster settings that would hang or fail inside distributed: worker and
    thread counts below 1, and memory limits that are neither a size, a fraction of the
    machine's memory (0 < f <= 1) nor "auto"."""
    for name, value in (("workers", workers), ("threads", threads)):
        if value is not None and (
            isinstance(value, bool) or not isinstance(value, int) or value < 1
        ):
            raise ClusterError(f"{name} must be a whole number >= 1, got {value!r}")
    if memory_limit is None or memory_limit == "auto":
        return
    from zagg.checks.validation import ConfigError, parse_bytes

    if isinstance(memory_limit, float) and 0 < memory_limit <= 1:
        return
    try:
        parse_bytes(memory_limit, "memory_limit")
    except ConfigError:
        raise ClusterError(
            f"memory limit {memory_limit!r} is not a size; use e.g. '4GiB', "
            "'512MiB', a fraction of the machine's memory such as 0.5, or "
            "'auto'"
        ) from None


@contextlib.contextmanager
def cluster_for(
    scheduler: str | None = None,
    *,
    workers: int | None = None,
    threads: int | None = None,
    memory_limit: str | int | None = None,
    dashboard: bool = False,
    processes: bool | None = None,
):
    """Yield what a client connects to: ``scheduler`` itself when given, else a new
    LocalCluster (closed on exit; see :func:`local_cluster`)."""
    if scheduler:
        yield scheduler
        return
    with local_cluster(
        workers=workers,
        threads=threads,
        memory_limit=memory_limit,
        dashboard=dashboard,
        processes=processes,
    ) as cluster:
        yield cluster


def local_cluster(
    *,
    workers: int | None = None,
    threads: int | None = None,
    memory_limit: str | int | None = None,
    dashboard: bool = False,
    processes: bool | None = None,
):
    """A new LocalCluster on 127.0.0.1. Keyword knobs override :func:`machine_defaults`;
    ``processes`` (default: unless :func:`runs_in_process`) puts the workers in processes
    of their own; ``dashboard`` serves distributed's dashboard on 127.0.0.1 (port 8787,
    or a free one when that is taken)."""
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
    crowded = oversubscription(opts["n_workers"], opts["threads_per_worker"])
    if crowded is not None:
        import warnings

        warnings.warn(crowded, OversubscribedWarning, stacklevel=3)
    if processes is None:
        processes = not runs_in_process(opts["n_workers"], opts["threads_per_worker"])
    # the scheduler always serves HTTP (health, metrics; the dashboard when asked for);
    # without an address it would take port 8787 on every interface
    # (workers too: an in-process worker's would take a random port on every interface)
    where = {
        "processes": processes,
        "dashboard_address": "127.0.0.1:8787" if dashboard else "127.0.0.1:0",
        "scheduler_kwargs": {"dashboard": bool(dashboard)},
        "worker_dashboard_address": "127.0.0.1:0",
    }
    if processes:
        where.update(
            host="127.0.0.1",
            env=worker_environ(opts["threads_per_worker"]),
            preload=["zagg.cluster.preload"],
        )
    # silence_logs: a task error reaches the client as its exception (with the remote
    # traceback); the worker need not also log a "Compute Failed" block on stderr
    with dask.config.set(local_cluster_config() if processes else {}):
        return LocalCluster(silence_logs=50, **where, **opts)


@contextlib.contextmanager
def connected(target):
    """Yield a ``distributed.Client`` of ``target`` (an address, a cluster, or a client of
    one, e.g. a dask-gateway notebook's). Enter it in the thread that computes: the
    client becomes that thread's current one. A client passed in stays open afterwards:
    it is the caller's."""
    from distributed import Client

    if isinstance(target, Client):
        with target.as_current():
            yield target
        return
    with _new_client(target) as client:
        yield client


def _new_client(target):
    """A new ``distributed.Client`` of an address or a cluster; an unreachable address is
    a :class:`ClusterError` naming it and the fix."""
    from distributed import Client

    before = active_client()
    try:
        return (
            Client(target, timeout=CONNECT_TIMEOUT) if isinstance(target, str) else Client(target)
        )
    except (OSError, ValueError, TypeError) as exc:
        _close_half_made(before)
        if not isinstance(target, str):
            raise
        raise ClusterError(
            f"cannot reach a dask scheduler at {target!r} ({exc}); check the "
            "address (e.g. tcp://10.0.0.5:8786) and that its scheduler is "
            "running, or leave --scheduler out for a local cluster"
        ) from exc


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


@functools.cache
def _client_class():
    from distributed import Client

    class ClusterClient(Client):
        """A client of the cluster :func:`connect` started for it: closing the client
        (``client.close()``, or the end of its ``with`` block) closes that cluster too."""

        def close(self, *args, **kwargs):
            try:
                return super().close(*args, **kwargs)
            finally:
                owned = self.__dict__.pop("_zagg_owned_cluster", None)
                if owned is not None:
                    owned.close()

    return ClusterClient


def connect(
    scheduler=None,
    *,
    gateway: str | None = None,
    workers: int | None = None,
    threads: int | None = None,
    memory_limit=None,
    adaptive: tuple[int, int] | None = None,
    dashboard: bool = False,
    gateway_options: dict | None = None,
    gateway_auth=None,
):
    """A ``distributed.Client`` for a run, from a notebook or a script.

    - nothing: a new LocalCluster on 127.0.0.1 sized by ``workers``, ``threads`` and
      ``memory_limit`` (see :func:`local_cluster`; ``dashboard=True`` serves its
      dashboard on 127.0.0.1, at :func:`zagg.pipeline.watch.dashboard_link` of the client);
    - ``scheduler``: an existing scheduler's address (``tcp://10.0.0.5:8786``);
    - ``gateway``: a new cluster of the dask-gateway at that URL, its workers of
      ``threads`` cores and ``memory_limit`` memory each, with zagg's deployment profile
      as their environment, scaled to ``workers`` (default 1) or adapting between
      ``adaptive=(min, max)``; ``gateway_options`` sets any other option the gateway
      declares, ``gateway_auth`` its authentication (e.g. ``"basic"``, ``"jupyterhub"``).

    ``adaptive`` applies to a local cluster too. A cluster started here belongs to the
    client: closing the client (or leaving ``with connect(...) as client:``) closes it.
    Pass the client to :func:`zagg.run` (``scheduler=client``): runs use it and leave it
    open.
    """
    if scheduler is not None and gateway is not None:
        raise ClusterError("give a scheduler address or a gateway URL, not both")
    if adaptive is not None:
        adaptive = _check_adaptive(adaptive)
    if scheduler is not None:
        if adaptive is not None or dashboard:
            raise ClusterError(
                "adaptive and dashboard are settings of a cluster zagg starts; "
                "an existing scheduler keeps its own"
            )
        return _new_client(scheduler)
    if gateway is not None:
        check_knobs(workers, threads, None)
        from zagg.cluster.gateway import new_cluster

        cluster = new_cluster(
            gateway,
            workers=workers,
            threads=threads,
            memory_limit=memory_limit,
            adaptive=adaptive,
            options=gateway_options,
            auth=gateway_auth,
        )
        # (a gateway cluster's dashboard is always served, behind the gateway's proxy)
    else:
        cluster = local_cluster(
            workers=workers, threads=threads, memory_limit=memory_limit, dashboard=dashboard
        )
        if adaptive is not None:
            cluster.adapt(minimum=adaptive[0], maximum=adaptive[1])
    try:
        client = _client_class()(cluster)
    except BaseException:
        cluster.close()
        raise
    client.__dict__["_zagg_owned_cluster"] = cluster
    if gateway is not None and adaptive is None:
        _await_workers(client, 1 if workers is None else int(workers))
    return client


#: how long a new gateway cluster's client waits for the workers it asked for
WORKERS_WAIT_S = 120


class SlowWorkersWarning(ZaggWarning):
    """A new gateway cluster started fewer workers than asked for in time."""


def _await_workers(client, n: int) -> None:
    """Wait (at most :data:`WORKERS_WAIT_S`) for the ``n`` workers a gateway cluster was
    scaled to, so a run spreads over all of them from its first task instead of starting
    on whichever joined first; a slow gateway only warns, and the run goes on."""
    try:
        client.wait_for_workers(n, timeout=WORKERS_WAIT_S)
    except TimeoutError:
        import warnings

        have = len(client.scheduler_info(n_workers=-1).get("workers", {}))
        warnings.warn(
            f"the gateway started {have} of the {n} workers asked for within "
            f"{WORKERS_WAIT_S} s; the run starts on those and uses the others as they join",
            SlowWorkersWarning,
            stacklevel=3,
        )


def _check_adaptive(adaptive) -> tuple[int, int]:
    try:
        lo, hi = (int(v) for v in adaptive)
    except (TypeError, ValueError):
        raise ClusterError(
            f"adaptive must be (minimum, maximum) workers, got {adaptive!r}"
        ) from None
    if lo < 0 or hi < max(lo, 1):
        raise ClusterError(f"adaptive=({lo}, {hi}): need 0 <= minimum <= maximum and maximum >= 1")
    return lo, hi
