"""Progress reporting for long computations, on whichever scheduler is active.

With a ``distributed`` client, the scheduler's own text progress bar follows the futures;
with the local schedulers, dask's ProgressBar prints to stderr once work passes a second.
"""

from __future__ import annotations

import contextlib
import sys

import dask


def active_client():
    """The distributed client dask computations go to, or None."""
    try:
        from distributed import default_client

        return default_client()
    except (ImportError, ValueError):
        return None


@contextlib.contextmanager
def progress_bar(minimum: float = 1.0):
    """A local-scheduler progress bar around the block."""
    from dask.diagnostics import ProgressBar

    with ProgressBar(minimum=minimum, out=sys.stderr):
        yield


def compute(tasks, *, progress: bool = False, label: str = "", release: bool = False,
            on_failure=None) -> list:
    """``dask.compute(*tasks)`` with a progress bar when asked.

    ``release=True`` empties the ``tasks`` list once a distributed client holds the work,
    so the graph (and any persisted results it references) is not kept alive by the caller
    while the tasks run: the scheduler frees each intermediate when its last user is done.
    When a task fails on a distributed client, ``on_failure`` (if given) receives the
    results of the tasks that finished before the failure is raised.
    """
    client = active_client()
    if client is not None:
        futures = client.compute(list(tasks))
        if release:
            tasks.clear()
        try:
            if progress and futures:
                _distributed_bar(futures, label)
            return client.gather(futures)
        except BaseException:
            if on_failure is not None:
                _salvage(client, futures, on_failure)
            raise
    if progress:
        if label:
            print(label, file=sys.stderr)
        with progress_bar():
            return list(dask.compute(*tasks))
    return list(dask.compute(*tasks))


def _salvage(client, futures, on_failure) -> None:
    """Hand ``on_failure`` the results of the finished ``futures``; a failure here only
    warns, so the error that stopped the computation is the one raised."""
    import warnings

    try:
        on_failure(client.gather([f for f in futures if f.status == "finished"]))
    except Exception as exc:
        warnings.warn(f"could not collect the finished tasks' results: {exc}", stacklevel=3)


def persist(objs, *, progress: bool = False, label: str = "") -> list:
    """``dask.persist(*objs)``; on a distributed client, waits with a progress bar."""
    client = active_client()
    out = list(dask.persist(*objs))
    if client is not None and progress and out:
        _distributed_bar(out, label)
    return out


def _distributed_bar(futures, label: str) -> None:
    from distributed import progress as dprogress

    if label:
        print(label, file=sys.stderr)
    dprogress(futures)
    print(file=sys.stderr)
