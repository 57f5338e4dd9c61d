"""Faults a user meets get one line naming the object, key or file and the fix: a full
disk, an object store that cannot be reached, text where coordinates belong, a variable
off the points' dimension, sizes no machine has."""

import errno
import subprocess
import sys

import numpy as np
import pytest
import xarray as xr
from builders import atl03_source

import zagg
from zagg.config.model import ConfigError, load_config
from zagg.hive.storage import StoreIOError, StoreRoot, io_fault

CONFIG = {
    "data_source": {"coordinates": {"latitude": "lat", "longitude": "lon"}, "variables": ["h"]},
    "aggregation": {
        "variables": {"count": {"function": "count"}, "h_mean": {"function": "mean", "source": "h"}}
    },
    "output": {
        "dataset": {"short_name": "T", "version": "1"},
        "grid": {"parent_order": 6, "child_order": 12},
    },
}


def points(n=100, **replace):
    rng = np.random.default_rng(0)
    data = {
        "lat": ("obs", rng.uniform(-75.5, -74.5, n)),
        "lon": ("obs", rng.uniform(-100.5, -99.5, n)),
        "h": ("obs", rng.normal(size=n)),
    }
    return xr.Dataset({**data, **replace})


def one_line(result) -> str:
    assert result.returncode == 2, result.stderr[-2000:]
    assert result.stderr.startswith("zagg: error: ") and result.stderr.count("\n") == 1
    assert "Traceback" not in result.stderr
    return result.stderr


# ---------------------------------------------------------------------------- the store


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/dev/full is Linux's")
def test_a_full_disk_names_the_object_and_the_rerun(tmp_path):
    # a real ENOSPC from the kernel: /dev/full refuses every write as a full disk does
    with pytest.raises(OSError) as err:
        with open("/dev/full", "wb", buffering=0) as f:
            f.write(b"leaf bytes")
    assert err.value.errno == errno.ENOSPC
    root = StoreRoot(str(tmp_path / "store"))
    fault = io_fault(root, "-5/1/-51.zarr/zarr.json", err.value)
    assert isinstance(fault, StoreIOError) and isinstance(fault, OSError)
    assert str(fault) == (
        f"cannot write {tmp_path}/store/-5/1/-51.zarr/zarr.json: the disk is full (No space "
        "left on device); free space on it or give the store another location, then run "
        "the same command again: the store keeps the leaves already stamped, readers skip "
        "any leaf left without its stamp, and the re-run writes the rest"
    )
    # other faults keep their own exceptions: a missing file, a bug
    assert io_fault(root, "k", FileNotFoundError(errno.ENOENT, "gone")) is None
    assert io_fault(root, "k", ValueError("a bug")) is None


def closed_port() -> int:
    """A port on 127.0.0.1 nothing listens on (bound, then released)."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_an_unreachable_object_store_is_one_line_naming_the_store(tmp_path):
    xr.Dataset(points().data_vars).to_zarr(tmp_path / "in.zarr", zarr_format=3, consolidated=False)
    endpoint = f"http://127.0.0.1:{closed_port()}"
    (tmp_path / "run.yaml").write_text(
        "data_source:\n"
        "  coordinates: {latitude: lat, longitude: lon}\n"
        "  variables: [h]\n"
        f"  input: {tmp_path / 'in.zarr'}\n"
        "aggregation:\n  variables:\n    count: {function: count}\n"
        "output:\n  store: s3://bucket/store\n"
        f"  storage_options: {{endpoint_url: '{endpoint}', key: AKIDX, secret: local-secret}}\n"
        '  dataset: {short_name: T, version: "1"}\n'
        "  grid: {type: healpix, parent_order: 6, child_order: 12}\n"
    )
    result = subprocess.run(
        [sys.executable, "-m", "zagg", "run", str(tmp_path / "run.yaml"), "--quiet"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    line = one_line(result)
    assert line.startswith(
        "zagg: error: cannot reach the object store for s3://bucket/store "
        f'(EndpointConnectionError: Could not connect to the endpoint URL: "{endpoint}/bucket'
    )
    assert "check the endpoint (storage_options' endpoint_url)" in line
    assert "local-secret" not in line


def test_a_failing_object_store_write_names_the_object():
    # a connection error under a write, as s3fs raises it
    botocore = pytest.importorskip("botocore.exceptions")
    root = StoreRoot("s3://bucket/store", {"endpoint_url": "http://127.0.0.1:9"})
    exc = botocore.EndpointConnectionError(endpoint_url="http://127.0.0.1:9/bucket/store/k")
    fault = io_fault(root, {"-5/a": b"", "-5/b": b""}, exc)
    assert str(fault).startswith(
        "cannot reach the object store for s3://bucket/store/-5/a (and 1 more) "
        '(EndpointConnectionError: Could not connect to the endpoint URL: "http://127.0.0.1:9/'
    )
    assert io_fault(root, "k", PermissionError("denied")) is None


# ------------------------------------------------------------------------- the points


def test_text_in_a_coordinate_is_refused_naming_the_key():
    ds = points(lat=("obs", np.array(["-75.1", "n/a"] * 50)))
    with pytest.raises(ConfigError) as err:
        zagg.aggregate(ds, CONFIG)
    assert str(err.value) == (
        "config key 'data_source.coordinates.latitude': 'lat' has dtype <U5, not numbers: "
        "coordinates are degrees; convert it (e.g. ds['lat'].astype('float64') when it holds "
        "numbers written as text) and read that"
    )


def test_a_variable_off_the_points_dimension_is_refused_naming_the_key():
    ds = points(h=("other", np.zeros(7)))
    with pytest.raises(ConfigError) as err:
        zagg.aggregate(ds, CONFIG)
    assert str(err.value) == (
        "config key 'aggregation.variables.h_mean.source': 'h' has dims ('other',), but the "
        "points run along 'obs' (the latitude's dimension): every variable zagg reads needs "
        "one value per point along 'obs'; read a variable of the points, or put it on their "
        "dimension"
    )
    with pytest.raises(ConfigError, match="coordinates.longitude': 'lon' has dims"):
        zagg.aggregate(points(lon=(("obs", "two"), np.zeros((100, 2)))), CONFIG)


def test_text_in_a_coordinate_is_one_line_on_the_command_line(tmp_path, worker_process):
    ds = points(lat=("obs", np.array(["-75.1", "n/a"] * 50)))
    ds.to_zarr(tmp_path / "in.zarr", zarr_format=3, consolidated=False)
    (tmp_path / "run.yaml").write_text(
        "data_source:\n"
        "  coordinates: {latitude: lat, longitude: lon}\n"
        "  variables: [h]\n"
        f"  input: {tmp_path / 'in.zarr'}\n"
        "aggregation:\n  variables:\n    count: {function: count}\n"
        f"output:\n  store: {tmp_path / 'store'}\n"
        '  dataset: {short_name: T, version: "1"}\n'
        "  grid: {type: healpix, parent_order: 6, child_order: 12}\n"
    )
    result = subprocess.run(
        [sys.executable, "-m", "zagg", "run", str(tmp_path / "run.yaml"), "--quiet",
         "--scheduler", worker_process],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert one_line(result).startswith(
        "zagg: error: config key 'data_source.coordinates.latitude': 'lat' has dtype "
    )


# ------------------------------------------------------------------------------ sizes

HUGE = ["inf", "1e400", "Infinity", "1e18GiB", 2**70]


@pytest.mark.parametrize("value", HUGE)
def test_sizes_no_machine_has_are_refused_not_overflowed(value, tmp_path):
    with pytest.raises(ConfigError, match=r"config key 'output.memory_budget': expected auto"):
        load_config({**CONFIG, "output": {**CONFIG["output"], "memory_budget": value}})
    for knob in ("request_size", "max_gap"):
        src = atl03_source(tmp_path, reads={knob: value})
        with pytest.raises(ConfigError) as err:
            load_config({**CONFIG, "data_source": src})
        assert str(err.value) == (
            f"config key 'data_source.reads.{knob}': {value!r} is not a usable size: at most "
            "9223372036854775807 bytes (8 EiB)"
        )


def test_a_huge_memory_budget_on_the_command_line_is_one_line(tmp_path):
    result = subprocess.run(
        [sys.executable, "-m", "zagg", "run", "atl03_synthetic", "--memory-budget", "1e400",
         "--store", str(tmp_path / "s")],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert result.returncode == 2
    assert result.stderr.strip().endswith(
        "argument --memory-budget: config key 'memory_budget': expected auto, off or a size "
        "such as '4GiB' or '512MiB', got '1e400'"
    )
    assert "Traceback" not in result.stderr
