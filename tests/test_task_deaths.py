"""A task that dies, of any exception, ends the run promptly with one line; a longitude
far out of range is keyed as its angle instead of crashing mortie. Each run is a child
process bounded by its own timeout, so a hang fails the test rather than the suite."""

import subprocess
import sys

import numpy as np
import pytest
import xarray as xr

#: a run over a points source whose third chunk calls mortie with a longitude of 1e30
#: degrees, bypassing zagg's keying: a Rust panic (pyo3's PanicException, a BaseException
#: that is no Exception) inside a task
PANICKING_RUN = """
import sys
import dask, dask.array as da, numpy as np, xarray as xr
import zagg

def chunk(i):
    if i == 2:
        import mortie
        mortie.geo2mort(np.zeros(1), np.array([1e30]), order=19)
    return np.full(500, -100.0 + i * 1e-3)

def main():
    lon = da.concatenate(
        [da.from_delayed(dask.delayed(chunk)(i), (500,), float) for i in range(4)]
    )
    ds = xr.Dataset({
        "lat": ("obs", da.full(2000, -75.0, chunks=500)),
        "lon": ("obs", lon),
        "h": ("obs", da.ones(2000, chunks=500)),
    })
    cfg = {
        "data_source": {"coordinates": {"latitude": "lat", "longitude": "lon"}, "variables": ["h"]},
        "aggregation": {"variables": {"count": {"function": "count"}}},
        "output": {"dataset": {"short_name": "T", "version": "1"},
                   "grid": {"parent_order": 6, "child_order": 12}},
    }
    where = sys.argv[2]
    try:
        if where == "synchronous":
            with dask.config.set(scheduler="synchronous"):
                zagg.aggregate(ds, cfg)
        else:
            zagg.run(cfg, source=ds, store=sys.argv[1], scheduler=where, progress=False)
    except zagg.errors.ZaggError as exc:
        print(type(exc).__name__, exc)
        sys.exit(2)

if __name__ == "__main__":
    main()
"""

#: a bound well above any run here, only there to turn a hang into a failure
HANG = 300


@pytest.mark.parametrize("where", ["cluster", "synchronous"])
def test_a_task_dying_of_a_panic_ends_the_run_with_one_line(tmp_path, worker_process, where):
    script = tmp_path / "panicking_run.py"
    script.write_text(PANICKING_RUN)
    target = worker_process if where == "cluster" else where
    result = subprocess.run(
        [sys.executable, str(script), str(tmp_path / "store"), target],
        capture_output=True,
        text=True,
        timeout=HANG,
    )
    assert result.returncode == 2, result.stderr[-2000:]
    assert result.stdout.count("\n") == 1
    assert result.stdout.startswith("TaskDied a ")
    assert "died of PanicException: nested index" in result.stdout
    assert "run the same command again" in result.stdout


def test_the_task_death_line_names_the_stage_and_the_cause():
    from zagg.engine.progress import TaskDied, died

    class Panic(BaseException):
        pass

    assert died(Panic("boom")) and not died(ValueError("x"))
    assert not died(KeyboardInterrupt()) and not died(SystemExit(1))
    line = str(TaskDied.of(Panic("boom\nsecond line"), ("reduce-chunk-0a1b2c3d", 4)))
    assert line.startswith("a 'reduce-chunk' task died of Panic: boom (a crash inside")
    assert "\n" not in line


def test_a_run_with_longitudes_far_out_of_range_keys_them_and_exits(tmp_path, worker_process):
    import zagg
    from zagg import grid as G

    n = 1000
    rng = np.random.default_rng(0)
    lat = rng.uniform(-75.5, -74.5, n)
    lon = rng.uniform(-100.5, -99.5, n)
    hostile = lon.copy()
    hostile[:4] = [1e30, -1e300, 1e5, float(2**62)]  # each crashed mortie's kernel
    hostile[4:200] += 33 * 360.0  # keyed into cells far away when passed through
    xr.Dataset({"lat": ("obs", lat), "lon": ("obs", hostile), "h": ("obs", lat * 0)}).to_zarr(
        tmp_path / "points.zarr", zarr_format=3, consolidated=False
    )
    (tmp_path / "run.yaml").write_text(
        "data_source:\n"
        "  coordinates: {latitude: lat, longitude: lon}\n"
        "  variables: [h]\n"
        f"  input: {tmp_path / 'points.zarr'}\n"
        "aggregation:\n  variables:\n    count: {function: count}\n"
        f"output:\n  store: {tmp_path / 'store'}\n"
        '  dataset: {short_name: T, version: "1"}\n'
        "  grid: {type: healpix, parent_order: 6, child_order: 12}\n"
    )
    result = subprocess.run(
        [sys.executable, "-m", "zagg", "run", str(tmp_path / "run.yaml"), "--quiet",
         "--scheduler", worker_process, "--no-sweep"],
        capture_output=True, text=True, timeout=HANG,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-2000:]
    store = zagg.open_hive(str(tmp_path / "store")).load()
    # every point is keyed, each in the cell of its longitude's canonical spelling
    words = G.cell_words(lat, hostile, 12)[0]
    np.testing.assert_array_equal(words[4:200], G.cell_words(lat[4:200], lon[4:200], 12)[0])
    cells, counts = np.unique(words, return_counts=True)
    np.testing.assert_array_equal(store["morton"].values, cells)
    np.testing.assert_array_equal(store["count"].values, counts)


def rust_panic(*_):
    """What mortie's kernel does with a longitude of 1e30 degrees passed to it unwrapped."""
    import mortie

    mortie.geo2mort(np.zeros(1), np.array([1e30]), order=19)


def test_a_granule_whose_reading_crashes_a_library_is_a_failed_granule():
    from zagg.sources.census import _caught
    from zagg.sources.errors import GranuleError, crashed

    got = _caught(rust_panic, None, "/data/ATL03_x.h5")
    assert isinstance(got, GranuleError)
    assert str(got).startswith(
        "granule /data/ATL03_x.h5: reading it crashed a library (PanicException: nested index"
    )
    assert str(got).endswith("or set data_source.on_error: skip to leave it out")
    assert crashed("x", ValueError("a bug")) is None and crashed("x", KeyboardInterrupt()) is None


def test_a_task_that_keeps_killing_its_workers_is_one_line():
    from types import SimpleNamespace

    from distributed.scheduler import KilledWorker

    from zagg.engine.progress import TaskDied, died

    exc = KilledWorker(("write-leaf-0a1b", 2), SimpleNamespace(address="tcp://127.0.0.1:1"), 3)
    assert died(exc)
    assert str(TaskDied.of(exc, ("write-leaf-0a1b", 2))) == (
        "a 'write-leaf' task was tried on 4 workers and each died running it: a worker out "
        "of memory (give workers more --memory-limit, or fewer --threads) or a crash in a "
        "library; the store keeps only complete leaves: run the same command again to "
        "finish it"
    )
