"""Waiting for long computations: progress, and stopping cleanly when asked.

With a ``distributed`` client the futures are waited for in short steps, so a progress
line can follow them (``progress=True``) and a stop asked for from elsewhere
(:func:`request_stop`, what the command line's Ctrl-C handler calls) ends the wait with
``KeyboardInterrupt`` at the next step. With the local schedulers, dask's ProgressBar
prints to stderr once work passes a second.

A failed task ends the wait at once, and its failure is raised in the caller without
asking distributed to gather it: a task that dies of a ``BaseException`` that is no
``Exception`` (pyo3's ``PanicException``, a Rust panic inside a library) would otherwise
stop distributed's gather short of waking the waiting thread, and the run would wait
forever. Such a death, and a worker process that keeps dying on one task, is raised as
:class:`TaskDied`, one line naming the task.
"""

from __future__ import annotations

import contextlib
import sys
import threading
import time

import dask

from zagg.errors import ZaggError, ZaggWarning

_stop = threading.Event()
STEP_SECONDS = 0.2  # how often a wait looks at its futures and at a stop request


class TaskDied(ZaggError, RuntimeError):
    """A task died of something no Python code raises on purpose: a crash inside a library
    (a Rust panic), or the worker process running it died every time it was tried."""

    @classmethod
    def of(cls, exc: BaseException, key=None) -> TaskDied:
        """The one-line error for ``exc``, the death of task ``key`` (None: unknown)."""
        task = f"a {_task_name(key)!r} task" if key is not None else "a task"
        text = str(exc).strip().splitlines()
        what = f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__
        if type(exc).__name__ == "KilledWorker":
            tries = getattr(exc, "allowed_failures", None)
            tries = "several" if not isinstance(tries, int) else tries + 1
            return cls(
                f"{task} was tried on {tries} workers and each died running it: "
                "a worker out of memory (give workers more --memory-limit, or fewer "
                "--threads) or a crash in a library; the store keeps only complete leaves: "
                "run the same command again to finish it"
            )
        return cls(
            f"{task} died of {what} (a crash inside a library zagg calls, not an error it "
            "reports): the run stopped; the store keeps only complete leaves: report this "
            "line, and run the same command again once its cause is fixed"
        )


def _task_name(key) -> str:
    """A task key's stage, as the dashboard groups it: ``('reduce-chunk-ab12…', 3)`` is
    ``reduce-chunk``."""
    from dask.utils import key_split

    return key_split(key)


def died(exc: BaseException) -> bool:
    """Whether ``exc`` is a task's death rather than an exception to raise as it is: a
    ``BaseException`` that is no ``Exception`` (and not an interrupt or exit, which keep
    their own meaning), or distributed's ``KilledWorker``."""
    if isinstance(exc, (KeyboardInterrupt, SystemExit, GeneratorExit)):
        return False
    return not isinstance(exc, Exception) or type(exc).__name__ == "KilledWorker"


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
    with task_deaths():
        if progress:
            if label:
                print(label, file=sys.stderr)
            with progress_bar():
                return list(dask.compute(*tasks))
        return list(dask.compute(*tasks))


@contextlib.contextmanager
def task_deaths():
    """A task's death on a local scheduler (which raises it in the calling thread) raised
    as :class:`TaskDied`; around every local ``dask.compute``/``persist`` of a run's tasks."""
    try:
        yield
    except BaseException as exc:
        if died(exc):
            raise TaskDied.of(exc) from exc
        raise


def persist(objs, *, progress: bool = False, label: str = "", optimize: bool = True) -> list:
    """``dask.persist(*objs)``; on a distributed client, waits (with a progress line when
    asked) until every result is held. ``optimize=False`` keeps the tasks' annotations
    (graph optimization fuses tasks and drops them)."""
    client = active_client()
    with task_deaths():
        out = list(dask.persist(*objs, optimize_graph=optimize))
    if client is not None:
        from distributed import futures_of

        wait(futures_of(out), progress=progress, label=label)
    return out


def wait(futures, *, progress: bool = False, label: str = "") -> None:
    """Wait until every future is done (finished or cancelled), in steps of
    :data:`STEP_SECONDS`, printing a progress line to stderr when asked; raises
    ``KeyboardInterrupt`` at the step after :func:`request_stop`, and a failed task's
    exception (:class:`TaskDied` for a death) as soon as one fails."""
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
            failed = next((f for f in futures if f.status == "error"), None)
            if failed is not None:
                _raise_failure(failed)
            if not pending:
                break
            try:
                wait_for(pending, timeout=STEP_SECONDS, return_when="FIRST_COMPLETED")
            except TimeoutError:
                pass
    finally:
        if bar is not None:
            bar.close()


def _raise_failure(future) -> None:
    """Raise the failed ``future``'s exception here, read without gathering it (see the
    module's docstring)."""
    exc = future.exception()
    if died(exc):
        raise TaskDied.of(exc, future.key) from exc
    raise exc.with_traceback(future.traceback())


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
