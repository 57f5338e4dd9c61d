"""Progress reporting for long computations: a bar on the active scheduler."""

from __future__ import annotations

import contextlib
import sys


@contextlib.contextmanager
def progress_bar(minimum: float = 1.0):
    """Show a text progress bar for dask computations inside the block.

    With a distributed client active, the scheduler's progress is shown by the caller via
    :func:`distributed.progress`; for the local schedulers dask's ProgressBar prints to
    stderr once the work takes longer than ``minimum`` seconds.
    """
    from dask.diagnostics import ProgressBar

    with ProgressBar(minimum=minimum, out=sys.stderr):
        yield
