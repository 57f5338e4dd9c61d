"""Seeing a run while and after it runs: the dashboard's link, distributed's performance
report, and the stage timings of :mod:`zagg.pipeline.timings` for the run summary."""

from __future__ import annotations

import contextlib
import sys

from zagg.cluster.clients import ClusterError


def _needs_bokeh(what: str) -> None:
    try:
        import bokeh  # noqa: F401
    except ImportError:
        raise ClusterError(
            f"{what} needs bokeh: pip install 'zagg[dashboard]' (or bokeh)"
        ) from None


def check_watch(dashboard: bool = False, performance_report: str | None = None) -> None:
    """Refuse, before any cluster starts, what cannot be served or written."""
    if dashboard:
        _needs_bokeh("the dashboard")
    if performance_report is not None:
        _needs_bokeh("a performance report")
        if not str(performance_report).endswith(".html"):
            raise ClusterError(
                f"performance report {performance_report!r}: name an .html "
                "file (the report is one self-contained HTML page)"
            )


def dashboard_link(client) -> str | None:
    """The dashboard's address as a browser reaches it. A local cluster's is served on
    127.0.0.1 (:func:`zagg.cluster.local_cluster`), whatever host its scheduler's address
    names (an in-process scheduler's names the machine's network address)."""
    from urllib.parse import urlsplit

    from distributed import LocalCluster

    link = client.dashboard_link
    if link and isinstance(getattr(client, "cluster", None), LocalCluster):
        parts = urlsplit(link)
        link = parts._replace(netloc=f"127.0.0.1:{parts.port}").geturl()
    return link


class Watch:
    """What :func:`watching` collected; :meth:`finish` puts the stage timings on the
    run's summary."""

    def __init__(self, times=None):
        self.times = times

    def finish(self, summary) -> None:
        if self.times is not None:
            summary.stages = self.times.stages(summary.records)


@contextlib.contextmanager
def watching(
    client, *, dashboard: bool = False, performance_report: str | None = None, timings: bool = True
):
    """Around a run on ``client``: print the dashboard's link (``dashboard``), write
    distributed's performance report to ``performance_report`` (an HTML file), and record
    the tasks' timings (``timings``) for :meth:`Watch.finish`."""
    check_watch(dashboard, performance_report)
    link = dashboard_link(client) if dashboard else None
    if link:
        print(f"dashboard       {link}", file=sys.stderr, flush=True)
    with contextlib.ExitStack() as stack:
        if performance_report is not None:
            from distributed import performance_report as report

            stack.enter_context(report(filename=str(performance_report)))
        times = None
        if timings:
            from zagg.pipeline.timings import TaskTimes

            times = stack.enter_context(TaskTimes(client))
        yield Watch(times)
