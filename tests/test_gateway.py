"""Runs on a real dask-gateway: the repository's local gateway config, started here on
127.0.0.1, a cluster of two workers made through ``dask_gateway.Gateway`` by
``zagg.cluster.connect``, an aggregation into a store, checked with moczarr."""

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import dask_gateway
import moczarr
import mortie
import numpy as np
import pytest
from gateway_server import listening, local_gateway

from zagg import hive
from zagg.cluster.clients import ClusterError, connect
from zagg.sources.synthetic import DEFAULT_REGION, synthetic_photons

POINTS, CHUNK, SEED, CELL_ORDER = 120_000, 30_000, 4, 12
NOTEBOOKS = Path(__file__).resolve().parent.parent / "notebooks"
CONFIG_TEXT = f"""\
data_source:
  coordinates: {{latitude: lat_ph, longitude: lon_ph}}
  variables: [h_ph]
  synthetic: {{points: {POINTS}, seed: {SEED}, chunk_size: {CHUNK}}}
aggregation:
  variables:
    count: {{function: count}}
    h_max: {{function: max, source: h_ph}}
    h_tdigest: {{function: tdigest, source: h_ph}}
output:
  dataset: {{short_name: GW, version: '1'}}
  grid: {{parent_order: 7, child_order: {CELL_ORDER}}}
"""


@pytest.fixture(scope="module")
def gateway(tmp_path_factory):
    with local_gateway(tmp_path_factory.mktemp("gateway") / "server.log") as (url, proc):
        yield url, proc


@pytest.fixture(scope="module")
def truth():
    """Points per cell of the config's synthetic photons, keyed by mortie alone."""
    ds = synthetic_photons(POINTS, tuple(DEFAULT_REGION), chunk_size=CHUNK, seed=SEED)
    lat, lon = ds["lat_ph"].values, ds["lon_ph"].values
    ok = np.isfinite(lat) & np.isfinite(lon) & (np.abs(lat) <= 90)
    cells, counts = np.unique(
        mortie.geo2mort(lat[ok], lon[ok], order=CELL_ORDER), return_counts=True
    )
    return dict(zip(cells.tolist(), counts.tolist(), strict=True))


def _check_store(root: str, truth: dict, leaves_written: int) -> None:
    """The independent reader sees every leaf stamped with intact content hashes, and the
    points per cell mortie counts."""
    assert moczarr.read_manifest(root)["cell_order"] == CELL_ORDER
    leaves = hive.walk_leaves(root)
    assert len(leaves) == leaves_written > 1
    cells = 0
    for leaf, _ in leaves:
        stamp = moczarr.read_commit(root, leaf)
        assert moczarr.hash_arrays(root, leaf) == stamp["content_hashes"]["arrays"]
        cells += stamp["cells_with_data"]
    assert cells == len(truth)
    mz = moczarr.open_hive(root)
    count = mz["count"].values
    assert int(count.sum()) == sum(truth.values())
    assert int((count > 0).sum()) == len(truth)


def test_a_run_on_two_gateway_workers_writes_the_store_moczarr_reads(gateway, truth, tmp_path):
    import zagg

    url, server = gateway
    cfg = tmp_path / "cfg.yaml"
    cfg.write_text(CONFIG_TEXT)
    with connect(gateway=url, workers=2, threads=1, memory_limit="1GiB") as client:
        client.wait_for_workers(2, timeout=120)
        info = client.scheduler_info(n_workers=-1)["workers"].values()
        assert sorted((w["nthreads"], w["memory_limit"]) for w in info) == [(1, 2**30)] * 2
        # the deployment profile reached the workers through the gateway's options
        env = client.run(
            lambda: (
                {
                    k: os.environ.get(k)
                    for k in (
                        "MALLOC_ARENA_MAX",
                        "MALLOC_MMAP_THRESHOLD_",
                        "RAYON_NUM_THREADS",
                        "OMP_NUM_THREADS",
                    )
                },
                "zagg.cluster.preload" in sys.modules,
            )
        )
        assert (
            list(env.values())
            == [
                (
                    {
                        "MALLOC_ARENA_MAX": "1",
                        "MALLOC_MMAP_THRESHOLD_": "16777216",
                        "RAYON_NUM_THREADS": "1",
                        "OMP_NUM_THREADS": "1",
                    },
                    True,
                )
            ]
            * 2
        )
        summary = zagg.run(
            cfg, store=str(tmp_path / "store"), scheduler=client, progress=False, timings=True
        )
        # both workers took part: each ran some of the chunk reductions
        ran = client.run(
            lambda dask_worker: sum(1 for k in dask_worker.state.log if "reduce-chunk" in str(k))
        )
        assert all(n > 0 for n in ran.values()), ran
        # the gateway, its proxy, scheduler and workers listen on 127.0.0.1 only
        assert {ip for ip, _ in listening(server.pid)} == {"127.0.0.1"}
        assert client.dashboard_link.startswith(f"{url}/clusters/")
        name = client.cluster.name
    assert summary.stages.counts["key + reduce"] == POINTS // CHUNK
    _check_store(str(tmp_path / "store"), truth, summary.leaves_written)
    # closing the client shut its cluster down
    with dask_gateway.Gateway(url) as gw:
        deadline = time.monotonic() + 30
        while gw.list_clusters() and time.monotonic() < deadline:
            time.sleep(0.2)
        assert name not in {c.name for c in gw.list_clusters(status="running")}
        assert gw.list_clusters() == []


def test_the_cli_runs_on_a_gateway(gateway, truth, tmp_path):
    url, _ = gateway
    cfg = tmp_path / "cfg.yaml"
    cfg.write_text(CONFIG_TEXT)
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "zagg",
            "run",
            str(cfg),
            "--store",
            str(tmp_path / "store"),
            "--gateway",
            url,
            "--workers",
            "2",
            "--threads",
            "1",
            "--memory-limit",
            "1GiB",
            "--quiet",
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr
    leaves = int(re.search(r"\((\d+) leaves written\)", out.stdout).group(1))
    assert re.search(r"^time in tasks .* on 2 threads", out.stdout, re.M), out.stdout
    _check_store(str(tmp_path / "store"), truth, leaves)


def test_options_the_gateway_does_not_offer_are_refused_by_name(gateway):
    url, _ = gateway
    with pytest.raises(
        ClusterError,
        match=r"offers no cluster option 'image' \(for image\); "
        r"it offers: environment, worker_cores, "
        r"worker_memory",
    ):
        connect(gateway=url, gateway_options={"image": "org/zagg:1"})
    with pytest.raises(ClusterError, match=r"refuses worker_cores=100000"):
        connect(gateway=url, threads=100_000)


def test_an_unreachable_gateway_is_reported_with_the_fix(tmp_path):
    """One line and exit status 2 from the command line. (In a child process: dask-gateway's
    failed request to a closed port leaves CPython 3.11.7's ast module in a state where
    the next ast.parse of the process raises SystemError, which would hit pytest.)"""
    from gateway_server import free_port

    cfg = tmp_path / "cfg.yaml"
    cfg.write_text(CONFIG_TEXT)
    url = f"http://127.0.0.1:{free_port()}"
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "zagg",
            "run",
            str(cfg),
            "--store",
            str(tmp_path / "s"),
            "--gateway",
            url,
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 2, out.stderr
    assert out.stderr.startswith(f"zagg: error: cannot reach a dask-gateway at '{url}'")
    assert "Traceback" not in out.stderr and not (tmp_path / "s").exists()


def test_the_archive_notebook_runs_on_a_gateway_cluster(gateway, tmp_path, monkeypatch):
    """notebooks/season_from_the_archive.ipynb as a hub user runs it: ``ZAGG_GATEWAY_URL``
    set, the granules searched and read from the local stand-in of NASA's archive by the
    gateway's workers (which get the archive's addresses and token through the cluster's
    environment option), the store a path every worker reaches."""
    import nbformat
    from jupyter_client.manager import KernelManager
    from nbclient import NotebookClient

    url, _ = gateway
    name = "season_from_the_archive.ipynb"
    nb = nbformat.read(NOTEBOOKS / name, as_version=4)
    store = tmp_path / "season-store"
    for cell in nb.cells:  # the gateway's workers run in folders of their own
        cell.source = cell.source.replace('STORE = "season-store"', f"STORE = {str(store)!r}")
    assert any(str(store) in c.source for c in nb.cells)
    monkeypatch.setenv("ZAGG_GATEWAY_URL", url)
    kernel = KernelManager(kernel_name="python3", transport="ipc", ip=str(tmp_path / "kernel"))
    NotebookClient(
        nb, km=kernel, timeout=600, resources={"metadata": {"path": str(tmp_path)}}
    ).execute()
    client_cell = next(c for c in nb.cells if c.cell_type == "code" and "connect(" in c.source)
    shown = "".join(o.get("data", {}).get("text/plain", "") for o in client_cell.outputs)
    # the gateway's cluster (its scheduler speaks TLS through the gateway; a local one TCP)
    assert "'tls://127.0.0.1:" in shown and "processes=2" in shown, shown
    # the store the gateway's workers wrote is whole: every leaf's content hashes verify
    leaves = hive.walk_leaves(str(store))
    assert leaves
    for leaf, _ in leaves:
        stamp = moczarr.read_commit(str(store), leaf)
        assert moczarr.hash_arrays(str(store), leaf) == stamp["content_hashes"]["arrays"]
    assert int(moczarr.open_hive(str(store))["count"].values.sum()) > 0
    assert (tmp_path / "season-map.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
