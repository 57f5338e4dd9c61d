"""Where runs execute: starting a cluster in the background, and what a run's client
imports before that start."""

import json
import os
import subprocess
import sys
import threading

import dask
import dask.array
import pytest

from zagg.cluster import entered_in_background


class Recorder:
    """A context manager that records its enters and exits; its start can be held or
    made to fail."""

    def __init__(self, *, hold: threading.Event | None = None, fail: bool = False):
        self.hold, self.fail = hold, fail
        self.events = []

    def __enter__(self):
        if self.hold is not None:
            assert self.hold.wait(10), "the body never ran while the start was pending"
        if self.fail:
            raise OSError("no cluster today")
        self.events.append(("enter", threading.current_thread().name))
        return "client"

    def __exit__(self, kind, exc, tb):
        self.events.append(("exit", kind))
        return False


def test_the_body_runs_while_the_start_is_pending():
    body_ran = threading.Event()
    manager = Recorder(hold=body_ran)
    with entered_in_background(manager) as started:
        body_ran.set()  # the start only ends once the body has run
        assert started.result(timeout=10) == "client"
    assert manager.events[0][0] == "enter" and manager.events[0][1].startswith("zagg-start")
    assert manager.events[1] == ("exit", None)


def test_a_failing_body_exits_the_manager_with_its_exception():
    manager = Recorder()
    with pytest.raises(KeyError, match="from the body"):
        with entered_in_background(manager):
            raise KeyError("from the body")
    assert manager.events[-1] == ("exit", KeyError)


def test_a_failed_start_raises_from_the_future_and_is_never_exited():
    manager = Recorder(fail=True)
    with pytest.raises(OSError, match="no cluster today"):
        with entered_in_background(manager) as started:
            started.result()
    assert manager.events == []
    # a body that fails first reports its own error, not the start's
    with pytest.raises(ValueError, match="bad input"):
        with entered_in_background(Recorder(fail=True)):
            raise ValueError("bad input")


HEAVY = ("numba", "mortie", "pandas", "dask", "distributed", "xarray", "scipy", "h5py")


def test_a_run_reaches_its_cluster_start_without_the_heavy_imports(tmp_path):
    """``import zagg``, loading a config and checking the store's manifest import none of
    numba, mortie, dask or xarray (about 2 s), so the CLI starts a run's cluster first and
    its workers import theirs while the client imports the rest."""
    cfg = tmp_path / "cfg.json"
    cfg.write_text(json.dumps({
        "data_source": {"coordinates": {"latitude": "lat", "longitude": "lon"},
                        "variables": ["h"], "input": str(tmp_path / "points.zarr")},
        "aggregation": {"variables": {"count": {"function": "count"},
                                      "h_tdigest": {"function": "tdigest", "source": "h"}}},
        "output": {"dataset": {"short_name": "T", "version": "1"},
                   "grid": {"parent_order": 6, "child_order": 12}},
    }))
    probe = f"""
import json, pathlib, sys
import zagg
from zagg import hive
from zagg.manifests import manifest_for
cfg = zagg.load_config(pathlib.Path({str(cfg)!r}))
probe = {{"grid": cfg.grid.as_dict(), "config": cfg.raw,
          "dataset": {{"short_name": cfg.output.short_name, "version": cfg.output.version}}}}
hive.check_manifest(hive.StoreRoot({str(tmp_path / "store")!r}, {{}}), manifest_for(probe))
print(json.dumps(sorted({{m.split(".")[0] for m in sys.modules}} & set({HEAVY!r}))))
"""
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == []


def test_public_names_are_the_functions_even_after_their_modules_load():
    code = """
import zagg, zagg.aggregate, zagg.run, sys
from zagg import *
assert callable(zagg.aggregate) and zagg.aggregate.__module__ == "zagg.aggregate"
assert callable(zagg.run) and zagg.run.__module__ == "zagg.run"
assert sys.modules["zagg.run"].run is zagg.run and run is zagg.run and to_hive
import zagg.sources.write_granules  # the submodule first, then the name it shares
from zagg.sources import write_granules
assert callable(write_granules) and write_granules.__module__ == "zagg.sources.write_granules"
print(sorted(zagg.__all__))
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout.replace("'", '"')) == sorted(
        ["aggregate", "load_config", "ConfigError", "cdf", "composition_lanes", "open_hive",
         "open_leaf", "open_store", "plot_map", "quantile", "run", "to_hive"])
    import zagg

    with pytest.raises(AttributeError, match="no_such"):
        zagg.no_such  # noqa: B018


def test_workers_of_a_started_cluster_load_their_task_modules_as_they_start():
    """Before any task runs, each worker has imported what its tasks run and has paid
    numba's one-time set-up (a compiled kernel's first call), never xarray or dask.array."""
    from zagg.cluster import client_for

    def state():
        setup = sys.modules.get("zagg.kernels.setup")
        return {"modules": sorted(m for m in ("zagg.aggregate", "zagg.write", "zagg.hive.leaf",
                                              "zagg.preload", "numba", "xarray", "dask.array")
                                  if m in sys.modules),
                "numba ready": bool(setup and setup._first_call.signatures)}

    with client_for(None, workers=1, threads=1) as client:
        seen = list(client.run(state).values())
    assert seen == [{"modules": ["numba", "zagg.aggregate", "zagg.hive.leaf", "zagg.preload",
                                 "zagg.write"], "numba ready": True}]


@pytest.mark.parametrize("args, message", [
    (["--workers", "-1"], "argument --workers: expected a whole number >= 1, got '-1'"),
    (["--workers", "0"], "argument --workers: expected a whole number >= 1, got '0'"),
    (["--threads", "two"], "argument --threads: expected a whole number >= 1, got 'two'"),
    (["--memory-limit", "lots"], "memory limit 'lots' is not a size; use e.g. '4GiB'"),
])
def test_cli_refuses_cluster_settings_that_would_hang_or_fail(args, message):
    """A cluster of -1 workers used to wait forever for one; these stop at once."""
    out = subprocess.run([sys.executable, "-m", "zagg", "run", "configs/atl03_synthetic.yaml",
                          *args], capture_output=True, text=True, timeout=60)
    assert out.returncode == 2 and message in out.stderr and "Traceback" not in out.stderr


def test_python_api_refuses_the_same_settings_before_starting_a_cluster():
    from zagg.cluster import ClusterError, check_knobs, cluster_for

    for knobs in ({"workers": 0}, {"threads": -2}, {"workers": 1.5}, {"memory_limit": "x"},
                  {"memory_limit": 1.5}):
        with pytest.raises(ClusterError), cluster_for(None, **knobs):
            pass
    check_knobs(workers=1, threads=2, memory_limit="2GiB")
    check_knobs(memory_limit=0.5)
    check_knobs(memory_limit="auto")


def test_an_unreachable_scheduler_is_reported_with_the_fix(monkeypatch):
    import socket

    import zagg.cluster as cluster

    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    monkeypatch.setattr(cluster, "CONNECT_TIMEOUT", "2s")
    for address, why in ((f"tcp://127.0.0.1:{port}", "Timed out"),
                         ("notanaddress", "missing port")):
        with pytest.raises(cluster.ClusterError, match=rf"cannot reach a dask scheduler at "
                                                       rf"'{address}' \(.*{why}.*leave "
                                                       r"--scheduler out") as caught:
            with cluster.connected(address):
                pass
        # the failed client is closed even while its error is kept (as a notebook keeps
        # the last one): it must not stay the default every later computation waits on
        assert caught.value.__cause__ is not None
        assert cluster.active_client() is None
        assert dask.config.get("scheduler", None) is None
        assert int(dask.array.ones(4).sum().compute()) == 4


def test_a_run_imports_dask_and_distributed_before_its_cluster_starts_in_the_background(
        tmp_path):
    """Two threads importing one package at once can see each other's half-initialised
    modules (``ImportError: ... partially initialized module 'dask.base'``, seen in about
    half of fresh-process runs): the start thread must find them loaded already."""
    code = f"""
import sys, contextlib
import numpy as np, xarray as xr
import zagg.run
R = sys.modules["zagg.run"]  # (zagg.run the name is the function)
seen = {{}}
real = R.cluster_for

@contextlib.contextmanager
def watched(*args, **kwargs):
    seen["loaded"] = all(m in sys.modules for m in ("dask.base", "distributed"))
    with real(*args, **kwargs) as target:
        yield target

R.cluster_for = watched
n = 500
ds = xr.Dataset({{"lat": ("obs", np.linspace(-60, -59.9, n)),
                 "lon": ("obs", np.linspace(10, 10.1, n)), "h": ("obs", np.ones(n))}})
cfg = {{"data_source": {{"coordinates": {{"latitude": "lat", "longitude": "lon"}},
                         "variables": ["h"]}},
        "aggregation": {{"variables": {{"count": {{"function": "count"}}}}}},
        "output": {{"dataset": {{"short_name": "T", "version": "1"}},
                    "grid": {{"parent_order": 4, "child_order": 8}}}}}}
summary = R.run(cfg, store={str(tmp_path / "s")!r}, source=ds, workers=1, threads=1,
                progress=False)
print(seen["loaded"], summary.points)
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["True", "500"]


def test_one_worker_on_every_core_runs_inside_this_process():
    from zagg.cluster import runs_in_process

    cores = os.cpu_count() or 1
    assert runs_in_process(1, cores) and runs_in_process(1, cores + 2)
    assert not runs_in_process(2, cores)
    assert runs_in_process(1, cores - 1) is (cores == 1)


def test_an_in_process_cluster_shares_this_process_and_listens_on_no_port():
    from zagg.cluster import client_for

    cores = os.cpu_count() or 1
    with client_for(None, workers=1, threads=cores) as client:
        assert client.scheduler.address.startswith("inproc://")
        assert list(client.run(os.getpid).values()) == [os.getpid()]
        assert client.submit(sum, [1, 2, 3]).result() == 6
    with client_for(None, workers=1, threads=cores, processes=True) as client:
        assert client.scheduler.address.startswith("tcp://127.0.0.1:")
        assert list(client.run(os.getpid).values()) != [os.getpid()]
        # a worker process's threads share one malloc arena (zagg.heap), as the CLI's do
        assert list(client.run(os.environ.get, "MALLOC_ARENA_MAX").values()) == ["1"]


@pytest.mark.parametrize("owned", [False, True])
def test_an_in_process_worker_tunes_the_heap_only_of_zaggs_own_process(owned):
    """``python -m zagg`` declares its process zagg's: a worker inside it reuses freed
    buffers as a worker process does. A notebook's or script's heap is left alone."""
    probe = f"""
import ctypes.util, os
from zagg import heap
from zagg.cluster import client_for
if {owned!r}:
    heap.own_process()
with client_for(None, workers=1, threads=os.cpu_count() or 1) as client:
    tuned = list(client.run(lambda: heap._tuned).values())
print(tuned == [{owned!r} and ctypes.util.find_library("c") is not None])
"""
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "True"
