"""Worker start-up for clusters zagg starts: load what the tasks will need before any task.

distributed imports this module in each worker process as it starts (``preload``). The
worker then imports the modules its tasks run (keying, reduction, leaf writes: numba,
mortie, zarr) and pays numba's one-time set-up of its typing registries, ≈ 0.6 s on the
first call of any compiled kernel. ``zagg.run`` starts its cluster in the background, so
this happens while the client imports dask, numba and xarray and opens the source, instead
of on the first tasks of the run.
"""

from __future__ import annotations

from zagg import aggregate, write  # noqa: F401  (the task modules and what they import)
from zagg.hive import leaf  # noqa: F401
from zagg.kernels.setup import run_numba_setup


def dask_setup(worker) -> None:
    """Run numba's one-time set-up (any cached kernel's first call does it)."""
    run_numba_setup()
