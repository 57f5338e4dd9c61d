"""Waiting for long computations: progress, and stopping cleanly when asked.

With a ``distributed`` client the futures are waited for in short steps, so a progress
line can follow them (``progress=True``) and a stop asked for from elsewhere
(:func:`request_stop`, what the command line's Ctrl-C handler calls) ends the wait with
``KeyboardInterrupt`` at the next step. With the local schedulers, dask's ProgressBar
prints to stderr once work passes a second.
"""

from __future__ import annotations

import contextlib
import sys
import threading
import time

import dask

from zagg.errors import ZaggWarning

_stop = threading.Event()
STEP_SECONDS = 0.2  # how often a wait looks at its futures and at a stop request


def request_stop() -> None:
    """Ask every wait of this process to stop with ``KeyboardInterrupt``."""
    _stop.set()


def clear_stop() -> None:
    _stop.clear()


def check_stop() -> None:
    """Raise ``KeyboardInterrupt`` if a stop was asked for (and take the request back)."""
    if _stop.is_set():
        _stop.clear()
        raise KeyboardInterrupt


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


def compute(
    tasks, *, progress: bool = False, label: str = "", release: bool = False, on_failure=None
) -> list:
    """``dask.compute(*tasks)`` with a progress line when asked.

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
            wait(futures, progress=progress, label=label)
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


def persist(objs, *, progress: bool = False, label: str = "", optimize: bool = True) -> list:
    """``dask.persist(*objs)``; on a distributed client, waits (with a progress line when
    asked) until every result is held. ``optimize=False`` keeps the tasks' annotations
    (graph optimization fuses tasks and drops them)."""
    client = active_client()
    out = list(dask.persist(*objs, optimize_graph=optimize))
    if client is not None:
        from distributed import futures_of

        wait(futures_of(out), progress=progress, label=label)
    return out


def wait(futures, *, progress: bool = False, label: str = "") -> None:
    """Wait until every future is done (finished, failed or cancelled), in steps of
    :data:`STEP_SECONDS`, printing a progress line to stderr when asked; raises
    ``KeyboardInterrupt`` at the step after :func:`request_stop`."""
    futures = list(futures)
    bar = new_bar(label, len(futures)) if progress and futures else None
    from distributed import wait as wait_for

    pending = futures
    try:
        while True:
            check_stop()
            pending = [f for f in pending if not f.done()]
            if bar is not None:
                bar.show(len(futures) - len(pending))
            if not pending or any(f.status == "error" for f in futures):
                break  # (gather raises a failed task's exception)
            try:
                wait_for(pending, timeout=STEP_SECONDS, return_when="FIRST_COMPLETED")
            except TimeoutError:
                pass
    finally:
        if bar is not None:
            bar.close()


def in_notebook() -> bool:
    """Whether this process is a Jupyter kernel (its output is a notebook's cells)."""
    shell = sys.modules.get("IPython")
    if shell is None or "ipykernel" not in sys.modules:
        return False
    ip = shell.get_ipython()
    return ip is not None and type(ip).__name__ == "ZMQInteractiveShell"


def new_bar(label: str, total: int):
    """A progress bar for ``total`` tasks: an HTML bar in a notebook's cell output, else
    a text line on stderr."""
    return _NotebookBar(label, total) if in_notebook() else _Bar(label, total)


class _Bar:
    """A one-line text progress bar on stderr: label, done / total, elapsed seconds."""

    WIDTH = 40

    def __init__(self, label: str, total: int):
        self.total, self.t0, self.last = total, time.perf_counter(), -1.0
        if label:
            print(label, file=sys.stderr, flush=True)

    def show(self, done: int) -> None:
        now = time.perf_counter()
        if done != self.total and now - self.last < 0.5:
            return
        self.last = now
        filled = int(self.WIDTH * done / self.total)
        line = (
            f"\r[{'#' * filled}{' ' * (self.WIDTH - filled)}] {done}/{self.total} | "
            f"{now - self.t0:.1f} s"
        )
        print(line, end="", file=sys.stderr, flush=True)

    def close(self) -> None:
        print(file=sys.stderr, flush=True)


class _NotebookBar(_Bar):
    """The same bar as an HTML ``<progress>`` element, updated in place in the cell's
    output (IPython's display handles; no widget library needed)."""

    def __init__(self, label: str, total: int):
        from IPython.display import HTML, display

        self.total, self.t0, self.last, self.label = total, time.perf_counter(), -1.0, label
        self._html = HTML
        self.handle = display(self._render(0), display_id=True)

    def _render(self, done: int):
        import html

        text = (
            f"{html.escape(self.label)} " if self.label else ""
        ) + f"{done}/{self.total} | {time.perf_counter() - self.t0:.1f} s"
        return self._html(
            f'<progress value="{done}" max="{self.total}" '
            f'style="width: 40ch"></progress> <code>{text}</code>'
        )

    def show(self, done: int) -> None:
        now = time.perf_counter()
        if done != self.total and now - self.last < 0.5:
            return
        self.last = now
        self.handle.update(self._render(done))

    def close(self) -> None:
        pass


def _salvage(client, futures, on_failure) -> None:
    """Hand ``on_failure`` the results of the finished ``futures``; a failure here only
    warns, so the error that stopped the computation is the one raised."""
    import warnings

    try:
        on_failure(client.gather([f for f in futures if f.status == "finished"]))
    except Exception as exc:
        warnings.warn(
            f"could not collect the finished tasks' results: {exc}", ZaggWarning, stacklevel=3
        )
