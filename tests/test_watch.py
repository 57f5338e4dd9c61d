"""Seeing a run: stage timings from the tasks' own timings, distributed's performance
report, the dashboard's link, and sockets on loopback only."""

import re
import subprocess
import sys
import time

import numpy as np
import pytest
import xarray as xr
from gateway_server import listening

import zagg

N = 4_000


def points() -> xr.Dataset:
    rng = np.random.default_rng(3)
    return xr.Dataset(
        {
            "lat": ("obs", rng.uniform(-60.0, -59.0, N)),
            "lon": ("obs", rng.uniform(10.0, 11.0, N)),
            "h": ("obs", rng.normal(size=N)),
        }
    ).chunk({"obs": 1_000})


CONFIG = {
    "data_source": {"coordinates": {"latitude": "lat", "longitude": "lon"}, "variables": ["h"]},
    "aggregation": {
        "variables": {"count": {"function": "count"}, "h_max": {"function": "max", "source": "h"}}
    },
    "output": {
        "dataset": {"short_name": "T", "version": "1"},
        "grid": {"parent_order": 6, "child_order": 10},
    },
}


def test_a_run_writes_a_performance_report_and_says_where_time_went(tmp_path):
    ds = points()
    report = tmp_path / "run.html"
    summary = zagg.run(
        CONFIG,
        store=str(tmp_path / "s"),
        source=ds,
        workers=1,
        threads=1,
        progress=False,
        performance_report=str(report),
    )
    html = report.read_text(encoding="utf-8")
    assert html.startswith("<!DOCTYPE html>") and "Dask Performance Report" in html
    stages = summary.stages
    # one reduce-chunk task per input chunk, one write-leaf task per shard
    assert stages.counts["key + reduce"] == len(ds.chunks["obs"]) == 4
    assert stages.counts["write"] == summary.shards == summary.leaves_written > 1
    assert stages.compute["write"] >= stages.leaf_objects > 0
    assert stages.leaf_objects == pytest.approx(
        sum(r["timings"]["total_s"] for r in summary.records)
    )
    lines = summary.lines()
    i = next(k for k, s in enumerate(lines) if s.startswith("time in tasks"))
    assert re.fullmatch(r"time in tasks   \d+\.\d s on 1 threads \([\d,]+ tasks\)", lines[i])
    assert re.match(
        rf"  write +\d+\.\d s +\d+\.\d % +{summary.shards} tasks  \(leaf objects",
        next(s for s in lines[i:] if s.startswith("  write")),
    )


def test_a_cluster_given_to_a_run_gets_no_task_stream_unless_asked(tmp_path):
    """zagg registers nothing on a cluster it did not start: no scheduler plugin, no
    stage timings."""
    from distributed import Client, LocalCluster

    with (
        LocalCluster(
            n_workers=1, threads_per_worker=1, processes=False, dashboard_address=None
        ) as cluster,
        Client(cluster) as client,
    ):
        plugins = set(cluster.scheduler.plugins)
        summary = zagg.run(
            CONFIG, store=str(tmp_path / "s"), source=points(), scheduler=client, progress=False
        )
        assert set(cluster.scheduler.plugins) == plugins and summary.stages is None
        summary = zagg.run(
            CONFIG,
            store=str(tmp_path / "t"),
            source=points(),
            scheduler=client,
            progress=False,
            timings=True,
        )
        assert summary.stages.counts["write"] == summary.shards


def test_a_performance_report_must_be_an_html_file(tmp_path):
    from zagg.cluster.clients import ClusterError

    with pytest.raises(ClusterError, match="name an .html file"):
        zagg.run(
            CONFIG,
            store=str(tmp_path / "s"),
            source=points(),
            progress=False,
            performance_report=str(tmp_path / "report.txt"),
        )
    assert not (tmp_path / "s").exists()


@pytest.mark.parametrize(
    "flags", [[], ["--dashboard"], ["--dashboard", "--workers", "2", "--threads", "1"]]
)
def test_a_cli_run_listens_on_loopback_only(tmp_path, flags):
    """Every socket a run's processes listen on, sampled while it runs, is on 127.0.0.1;
    with --dashboard (the default cluster, in this process on a machine of 1 or 2 cores, or
    worker processes) the link printed is where it listens."""
    cfg = tmp_path / "cfg.yaml"
    cfg.write_text(
        "data_source:\n  coordinates: {latitude: lat_ph, longitude: lon_ph}\n"
        "  variables: [h_ph]\n  synthetic: {points: 50000, seed: 1}\n"
        "aggregation:\n  variables:\n    count: {function: count}\n"
        "output:\n  dataset: {short_name: T, version: '1'}\n"
        "  grid: {parent_order: 6, child_order: 12}\n"
    )
    proc = subprocess.Popen(
        [sys.executable, "-m", "zagg", "run", str(cfg), "--store", str(tmp_path / "s"), *flags],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    seen: set = set()
    while proc.poll() is None:
        seen |= listening(proc.pid)
        time.sleep(0.05)
    out, err = proc.communicate()
    assert proc.returncode == 0, err
    assert {ip for ip, _ in seen} <= {"127.0.0.1"}, seen
    assert "leaves written" in out
    link = re.search(r"^dashboard +(\S+)$", err, re.M)
    if "--dashboard" in flags:
        assert link and re.fullmatch(r"http://127\.0\.0\.1:\d+/status", link.group(1))
        port = int(re.search(r":(\d+)/", link.group(1)).group(1))
        assert ("127.0.0.1", port) in seen
    else:
        assert link is None
