"""Where runs execute: local clusters zagg starts, clusters it is given, and what a run's
client imports before its cluster starts."""

import json
import os
import subprocess
import sys
import warnings

import dask
import dask.array
import pytest

HEAVY = ("numba", "mortie", "pandas", "dask", "distributed", "xarray", "scipy", "h5py")


def test_a_run_reaches_its_cluster_start_without_the_heavy_imports(tmp_path):
    """``import zagg``, loading a config and checking the store's manifest import none of
    numba, mortie, dask or xarray, so a run refuses a bad config or an incompatible store
    at once, before it pays for any of them."""
    cfg = tmp_path / "cfg.json"
    cfg.write_text(
        json.dumps(
            {
                "data_source": {
                    "coordinates": {"latitude": "lat", "longitude": "lon"},
                    "variables": ["h"],
                    "input": str(tmp_path / "points.zarr"),
                },
                "aggregation": {
                    "variables": {
                        "count": {"function": "count"},
                        "h_tdigest": {"function": "tdigest", "source": "h"},
                    }
                },
                "output": {
                    "dataset": {"short_name": "T", "version": "1"},
                    "grid": {"parent_order": 6, "child_order": 12},
                },
            }
        )
    )
    probe = f"""
import json, pathlib, sys
import zagg
from zagg import hive
from zagg.config.store import StoreSpec
from zagg.engine.manifest import manifest_for
cfg = zagg.load_config(pathlib.Path({str(cfg)!r}))
spec = StoreSpec.of(cfg)
hive.check_manifest(hive.StoreRoot({str(tmp_path / "store")!r}, {{}}), manifest_for(spec))
print(json.dumps(sorted({{m.split(".")[0] for m in sys.modules}} & set({HEAVY!r}))))
"""
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == []


def test_public_names_are_the_functions_even_after_their_modules_load():
    code = """
import zagg
import zagg.engine.aggregate
import zagg.pipeline.run
import sys
from zagg import *
assert callable(zagg.aggregate) and zagg.aggregate.__module__ == "zagg.engine.aggregate"
assert callable(zagg.run) and zagg.run.__module__ == "zagg.pipeline.run"
assert sys.modules["zagg.pipeline.run"].run is zagg.run and run is zagg.run and to_hive
import zagg.sources.write_granules  # the submodule first, then the name it shares
from zagg.sources import write_granules
assert callable(write_granules) and write_granules.__module__ == "zagg.sources.write_granules"
print(sorted(zagg.__all__))
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout.replace("'", '"')) == sorted(
        [
            "aggregate",
            "brief_warnings",
            "load_config",
            "ConfigError",
            "cdf",
            "composition_lanes",
            "open_column",
            "open_hive",
            "open_icechunk",
            "open_leaf",
            "open_level",
            "open_pyramid",
            "open_store",
            "open_temporal",
            "plot_map",
            "quantile",
            "run",
            "sweep",
            "to_hive",
            "ZaggWarning",
        ]
    )
    import zagg

    with pytest.raises(AttributeError, match="no_such"):
        zagg.no_such  # noqa: B018


def test_workers_of_a_started_cluster_load_their_task_modules_as_they_start():
    """Before any task runs, each worker has imported what its tasks run, has paid
    numba's one-time set-up (a compiled kernel's first call) and shows zagg's warnings as
    one line each."""
    from zagg.cluster.clients import client_for

    def state():
        setup = sys.modules.get("zagg.kernels.setup")
        return {
            "modules": sorted(
                m
                for m in (
                    "zagg.engine.aggregate",
                    "zagg.engine.write",
                    "zagg.hive.leaf",
                    "zagg.cluster.preload",
                    "numba",
                )
                if m in sys.modules
            ),
            "numba ready": bool(setup and setup._first_call.signatures),
            "brief warnings": hasattr(warnings.showwarning, "zagg_previous"),
        }

    with client_for(None, workers=1, threads=1) as client:
        seen = list(client.run(state).values())
    assert seen == [
        {
            "modules": [
                "numba",
                "zagg.cluster.preload",
                "zagg.engine.aggregate",
                "zagg.engine.write",
                "zagg.hive.leaf",
            ],
            "numba ready": True,
            "brief warnings": True,
        }
    ]


@pytest.mark.parametrize(
    "args, message",
    [
        (["--workers", "-1"], "argument --workers: expected a whole number >= 1, got '-1'"),
        (["--workers", "0"], "argument --workers: expected a whole number >= 1, got '0'"),
        (["--threads", "two"], "argument --threads: expected a whole number >= 1, got 'two'"),
        (["--memory-limit", "lots"], "memory limit 'lots' is not a size; use e.g. '4GiB'"),
    ],
)
def test_cli_refuses_cluster_settings_that_would_hang_or_fail(args, message):
    """A cluster of -1 workers used to wait forever for one; these stop at once."""
    out = subprocess.run(
        [sys.executable, "-m", "zagg", "run", "configs/atl03_synthetic.yaml", *args],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 2 and message in out.stderr and "Traceback" not in out.stderr


def test_python_api_refuses_the_same_settings_before_starting_a_cluster():
    from zagg.cluster.clients import ClusterError, check_knobs, cluster_for

    for knobs in (
        {"workers": 0},
        {"threads": -2},
        {"workers": 1.5},
        {"memory_limit": "x"},
        {"memory_limit": 1.5},
    ):
        with pytest.raises(ClusterError), cluster_for(None, **knobs):
            pass
    check_knobs(workers=1, threads=2, memory_limit="2GiB")
    check_knobs(memory_limit=0.5)
    check_knobs(memory_limit="auto")


def test_an_unreachable_scheduler_is_reported_with_the_fix(monkeypatch):
    import socket

    import zagg.cluster.clients as cluster

    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    monkeypatch.setattr(cluster, "CONNECT_TIMEOUT", "2s")
    for address, why in (
        (f"tcp://127.0.0.1:{port}", "Timed out"),
        ("notanaddress", "missing port"),
    ):
        with pytest.raises(
            cluster.ClusterError,
            match=rf"cannot reach a dask scheduler at "
            rf"'{address}' \(.*{why}.*leave "
            r"--scheduler out",
        ) as caught:
            with cluster.connected(address):
                pass
        # the failed client is closed even while its error is kept (as a notebook keeps
        # the last one): it must not stay the default every later computation waits on
        assert caught.value.__cause__ is not None
        assert cluster.active_client() is None
        assert dask.config.get("scheduler", None) is None
        assert int(dask.array.ones(4).sum().compute()) == 4


def test_one_worker_on_every_core_runs_inside_this_process():
    from zagg.cluster.clients import runs_in_process

    cores = os.cpu_count() or 1
    assert runs_in_process(1, cores) and runs_in_process(1, cores + 2)
    assert not runs_in_process(2, cores)
    assert runs_in_process(1, cores - 1) is (cores == 1)


def test_an_in_process_cluster_shares_this_process_and_listens_on_no_port():
    from zagg.cluster.clients import client_for

    cores = os.cpu_count() or 1
    with client_for(None, workers=1, threads=cores) as client:
        assert client.scheduler.address.startswith("inproc://")
        assert list(client.run(os.getpid).values()) == [os.getpid()]
        assert client.submit(sum, [1, 2, 3]).result() == 6
    with client_for(None, workers=1, threads=cores, processes=True) as client:
        assert client.scheduler.address.startswith("tcp://127.0.0.1:")
        assert list(client.run(os.getpid).values()) != [os.getpid()]
        # a worker process starts with the deployment profile's environment
        env = list(
            client.run(
                lambda: {
                    k: os.environ.get(k)
                    for k in ("MALLOC_ARENA_MAX", "MALLOC_TRIM_THRESHOLD_", "RAYON_NUM_THREADS")
                }
            ).values()
        )
        assert env == [
            {
                "MALLOC_ARENA_MAX": "1",
                "MALLOC_TRIM_THRESHOLD_": "67108864",
                "RAYON_NUM_THREADS": str(cores),
            }
        ]


def test_a_cluster_zagg_did_not_start_is_used_as_it_is(tmp_path):
    """A run on a cluster given to it (a shared dask-gateway cluster, say) registers
    nothing on it and leaves its workers' environment and plugins as they were."""
    import numpy as np
    import xarray as xr
    from distributed import Client, LocalCluster

    import zagg

    n = 2_000
    ds = xr.Dataset(
        {
            "lat": ("obs", np.linspace(-60, -59.9, n)),
            "lon": ("obs", np.linspace(10, 10.1, n)),
            "h": ("obs", np.ones(n)),
        }
    )
    cfg = {
        "data_source": {"coordinates": {"latitude": "lat", "longitude": "lon"}, "variables": ["h"]},
        "aggregation": {"variables": {"count": {"function": "count"}}},
        "output": {
            "dataset": {"short_name": "T", "version": "1"},
            "grid": {"parent_order": 4, "child_order": 8},
        },
    }
    with (
        LocalCluster(
            n_workers=1, threads_per_worker=1, processes=False, dashboard_address=None
        ) as cluster,
        Client(cluster) as client,
    ):
        before = client.run(lambda dask_worker: sorted(dask_worker.plugins))
        summary = zagg.run(
            cfg, store=str(tmp_path / "s"), source=ds, scheduler=client, progress=False
        )
        after = client.run(lambda dask_worker: sorted(dask_worker.plugins))
        assert client.status == "running"  # the caller's client stays open
    assert summary.points == n
    assert after == before


def test_a_default_run_listens_on_no_address_but_loopback(tmp_path):
    """No dashboard unless asked for; schedulers and workers zagg starts bind 127.0.0.1."""
    import psutil

    from zagg.cluster.clients import client_for

    def listening() -> set[str]:
        me = psutil.Process()
        procs = [me, *me.children(recursive=True)]
        found = set()
        for proc in procs:
            try:
                conns = proc.net_connections(kind="inet")
            except psutil.Error:
                continue
            found |= {c.laddr.ip for c in conns if c.status == psutil.CONN_LISTEN}
        return found

    before = listening()
    for kw in ({}, {"processes": True, "workers": 2, "threads": 1}):
        with client_for(None, **kw):
            new = listening() - before
            assert new <= {"127.0.0.1"}, new


def test_the_shipped_profile_configures_workers_of_a_cluster_of_ones_own(tmp_path):
    """``DASK_CONFIG=$(zagg profile --path)``: workers of any dask cluster started with it
    get the profile's environment (here a LocalCluster that zagg does not start)."""
    from zagg.cluster.profile import PROFILE

    code = """
import os
from distributed import Client, LocalCluster
if __name__ == "__main__":
    with LocalCluster(n_workers=1, threads_per_worker=1, processes=True,
                      dashboard_address="127.0.0.1:0", host="127.0.0.1") as cluster:
        with Client(cluster) as client:
            env = client.run(lambda: {k: os.environ.get(k) for k in (
                "MALLOC_ARENA_MAX", "MALLOC_MMAP_THRESHOLD_", "OMP_NUM_THREADS")})
    print(list(env.values()))
"""
    script = tmp_path / "probe.py"
    script.write_text(code)
    out = subprocess.run(
        [sys.executable, str(script)],
        capture_output=True,
        text=True,
        env={**os.environ, "DASK_CONFIG": str(PROFILE)},
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == str(
        [{"MALLOC_ARENA_MAX": "1", "MALLOC_MMAP_THRESHOLD_": "16777216", "OMP_NUM_THREADS": "1"}]
    )
    cli = subprocess.run(
        [sys.executable, "-m", "zagg", "profile", "--path"], capture_output=True, text=True
    )
    assert cli.stdout.strip() == str(PROFILE)
