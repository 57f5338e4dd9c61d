"""The deployment profile: process-level settings for the workers that run zagg's tasks.

Settings that pay at the process level (glibc's malloc thresholds and arenas, the thread
pools of mortie's Rust kernels and of BLAS) cannot be changed by a library once a process
runs, so zagg never tries. They are environment, set where worker processes start: the
shipped dask config file (:data:`PROFILE`) for clusters of your own, applied automatically
to the local clusters zagg starts (:func:`local_cluster_config`).
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path

PROFILE = Path(str(resources.files("zagg") / "data" / "deploy" / "dask.yaml"))


def profile() -> dict:
    """The profile as a dask config mapping (``distributed.nanny...``)."""
    import yaml

    return yaml.safe_load(PROFILE.read_text(encoding="utf-8"))


def worker_environ(threads: int) -> dict[str, str]:
    """Environment of a worker process running ``threads`` task threads: mortie's pool
    (rayon) takes one thread per task thread instead of one per machine core each."""
    env = {str(k): str(v) for k, v in profile()["distributed"]["nanny"]["environ"].items()}
    return {**env, "RAYON_NUM_THREADS": str(int(threads))}


def local_cluster_config() -> dict:
    """The profile's spawn environment as flat dask config keys, for ``dask.config.set``
    around a LocalCluster that starts worker processes."""
    spawn = profile()["distributed"]["nanny"]["pre-spawn-environ"]
    return {f"distributed.nanny.pre-spawn-environ.{k}": str(v) for k, v in spawn.items()}


def launched_worker_environ(threads: int) -> dict[str, str]:
    """The whole profile as the environment of a worker process someone else launches (a
    dask-gateway backend, a batch job): the nanny's spawn settings and the worker preload
    travel as dask config variables (their values are Python literals, which keep the
    variable names' case), beside :func:`worker_environ`."""
    spawn = {
        str(k): str(v) for k, v in profile()["distributed"]["nanny"]["pre-spawn-environ"].items()
    }
    return {
        **worker_environ(threads),
        "DASK_DISTRIBUTED__NANNY__PRE_SPAWN_ENVIRON": repr(spawn),
        "DASK_DISTRIBUTED__WORKER__PRELOAD": repr(["zagg.cluster.preload"]),
    }
