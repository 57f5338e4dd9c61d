"""A dask-gateway cluster for a run: its options from zagg's knobs and deployment profile.

A gateway declares what a client may choose per cluster (its ``cluster_options``). zagg
fills the usual names when the gateway offers them: ``worker_cores`` (the worker's
threads), ``worker_memory`` (GiB) and ``environment`` (the deployment profile of
:func:`zagg.cluster.profile.launched_worker_environ`, so the workers start with mortie's pool sized
to their threads, glibc's heap settings and ``zagg.cluster.preload``). A gateway that offers no
``environment`` option needs the profile in its worker image instead (see
``dask-gateway/README.md``). Needs the ``dask-gateway`` package (the ``gateway`` extra).
"""

from __future__ import annotations

from zagg.cluster.clients import ClusterError
from zagg.cluster.profile import launched_worker_environ

#: the option names zagg fills when the gateway declares them
CORES, MEMORY, ENVIRONMENT = "worker_cores", "worker_memory", "environment"


def _gateway_module():
    try:
        import dask_gateway
    except ImportError:
        raise ClusterError(
            "--gateway needs the dask-gateway client: pip install 'zagg[gateway]' (or dask-gateway)"
        ) from None
    return dask_gateway


def cluster_options(
    gateway, *, threads: int | None = None, memory_limit=None, options: dict | None = None
):
    """The gateway's cluster options with zagg's choices filled in: ``threads`` as
    ``worker_cores``, ``memory_limit`` (a size such as ``"4GiB"`` or bytes) as
    ``worker_memory`` in GiB, the deployment profile merged into ``environment``, then
    ``options`` (any option the gateway declares, by name) over all of them."""
    opts = gateway.cluster_options()
    offered = set(opts)
    if threads is not None:
        _set(opts, offered, CORES, int(threads), "threads")
    if memory_limit is not None:
        _set(opts, offered, MEMORY, _gib(memory_limit), "memory_limit")
    if ENVIRONMENT in offered:
        cores = int(opts[CORES]) if CORES in offered else int(threads or 1)
        opts[ENVIRONMENT] = {**launched_worker_environ(cores), **dict(opts[ENVIRONMENT])}
    for name, value in (options or {}).items():
        _set(opts, offered, name, value, name)
    return opts


def _set(opts, offered: set, name: str, value, knob: str) -> None:
    if name not in offered:
        raise ClusterError(
            f"the gateway offers no cluster option {name!r} (for {knob}); it "
            f"offers: {', '.join(sorted(offered)) or 'none'}"
        )
    try:
        opts[name] = value
    except (TypeError, ValueError) as exc:
        raise ClusterError(f"the gateway refuses {name}={value!r}: {exc}") from None


def _gib(memory_limit) -> float:
    from zagg.checks.validation import ConfigError, parse_bytes

    try:
        n = parse_bytes(memory_limit, "memory_limit")
    except ConfigError:
        raise ClusterError(
            f"memory limit {memory_limit!r} is not a size for a gateway "
            "worker; use e.g. '4GiB' or '512MiB'"
        ) from None
    return round(n / 2**30, 3)


def new_cluster(
    address: str,
    *,
    workers: int | None = None,
    threads: int | None = None,
    memory_limit=None,
    adaptive: tuple[int, int] | None = None,
    options: dict | None = None,
    auth=None,
    proxy_address=None,
):
    """A new dask-gateway cluster at ``address`` (shut down when closed, or when this
    process exits), scaled to ``workers`` or adapting between ``adaptive = (min, max)``."""
    dask_gateway = _gateway_module()
    if workers is not None and adaptive is not None:
        raise ClusterError("give workers or adaptive=(min, max), not both")
    try:
        with dask_gateway.Gateway(address, proxy_address=proxy_address, auth=auth) as gw:
            opts = cluster_options(gw, threads=threads, memory_limit=memory_limit, options=options)
        cluster = dask_gateway.GatewayCluster(
            address=address,
            proxy_address=proxy_address,
            auth=auth,
            cluster_options=opts,
            shutdown_on_close=True,
        )
    except OSError as exc:
        raise ClusterError(
            f"cannot reach a dask-gateway at {address!r} ({exc}); check the "
            "URL (e.g. http://127.0.0.1:8000) and that the gateway "
            "runs"
        ) from exc
    if adaptive is not None:
        lo, hi = adaptive
        cluster.adapt(minimum=int(lo), maximum=int(hi))
    else:
        cluster.scale(1 if workers is None else int(workers))
    return cluster
