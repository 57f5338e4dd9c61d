"""Worker start-up for clusters zagg starts: load what the tasks will need before any task.

distributed imports this module in each worker process as it starts (``preload``; pass
``--preload zagg.cluster.preload`` to ``dask worker`` on a cluster of your own). The worker then
imports the modules its tasks run (keying, reduction, leaf writes: numba, mortie, zarr) and
pays numba's one-time set-up before its first task instead of during it, and shows zagg's
warnings as one ``zagg: warning: ...`` line each, as the command line does (a worker's
stderr is the terminal of the command that started it).
"""

from __future__ import annotations

from zagg.engine import aggregate, write  # noqa: F401  (the task modules and what they import)
from zagg.errors import brief_warnings
from zagg.hive import leaf  # noqa: F401
from zagg.kernels.setup import run_numba_setup


def dask_setup(worker) -> None:
    """Run numba's one-time set-up (any cached kernel's first call does it); zagg's
    warnings as one line each."""
    run_numba_setup()
    brief_warnings()
