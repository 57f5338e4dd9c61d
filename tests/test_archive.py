"""From NASA's archive to the store, against local stand-ins (tests/archive_server.py): a
run whose granules are a search writes the leaves a run over the same files on disk
writes, read directly from S3 (with keys that expire while it runs) or over HTTPS; every
refusal is one line, exit status 2, and nothing written; no secret enters a task graph.

The archive server fronts moto's S3 with a proxy that honours only the keys it issued, and
only until they expire (moto itself accepts any keys): the closest local stand-in for
NSIDC's bucket, whose temporary keys expire after an hour.
"""

from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest
import yaml
from builders import IN_PROCESS, atl03_source, fields, grid_orders, pipeline_config

import zagg
from zagg import hive
from zagg.pipeline.run import run
from zagg.sources.write_granules import write_granules

HERE = Path(__file__).resolve().parent
REGION = (-100.2, -75.6, -99.8, -75.4)  # inside the shipped pine_island region
P, C = 8, 12
SPAN = ["2019-01-01", "2024-12-31"]
EXPIRE_S = 20
LATENCY_S = 0.3  # each S3 request's delay: the S3 run outlives several sets of keys


@pytest.fixture(scope="module")
def granules(tmp_path_factory):
    """Six granules over Pine Island, and one far away that no search here finds."""
    d = tmp_path_factory.mktemp("archive-granules")
    near = write_granules(d, 6, points_per_granule=40_000, region=REGION, seed=11)
    far = write_granules(d, 1, points_per_granule=2_000, region=(10.0, 40.0, 11.0, 41.0), seed=12)
    return d, near, far


@pytest.fixture(scope="module")
def archive(granules):
    """The archive server's JSON line; it serves the granules, 2 records a page, issues
    S3 keys that expire after EXPIRE_S seconds, and answers S3 after LATENCY_S."""
    folder, _, _ = granules
    proc = subprocess.Popen(
        [sys.executable, str(HERE / "archive_server.py"), "--granules", str(folder)]
        + ["--expire-s", str(EXPIRE_S), "--page-size", "2", "--latency-s", str(LATENCY_S)],
        stdout=subprocess.PIPE,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
        text=True,
    )
    try:
        line = proc.stdout.readline()
        assert line, f"the archive server exited with {proc.wait()}"
        yield json.loads(line)
    finally:
        proc.kill()
        proc.wait()


@pytest.fixture
def env(archive, monkeypatch):
    """This process under the archive server's variables (the in-process cluster's
    workers are threads of it, so they log in with the same environment)."""
    for name in ("AWS_REGION", "AWS_DEFAULT_REGION", "EARTHDATA_USERNAME", "EARTHDATA_PASSWORD"):
        monkeypatch.delenv(name, raising=False)
    for k, v in archive["env"].items():
        monkeypatch.setenv(k, v)
    return archive


def search_block(archive, **more) -> dict:
    return {
        "search": {
            "short_name": archive["short_name"],
            "version": archive["version"],
            "region": "pine_island",
            "temporal": SPAN,
            **more,
        }
    }


def config(granules, store) -> dict:
    source = atl03_source("placeholder", confidence=3)
    source["granules"] = granules if isinstance(granules, dict | list) else str(granules)
    cfg = pipeline_config(
        source, fields("count", "h_tdigest"), grid_orders(P, C), name="ATL03", store=store
    )
    return cfg


def hashes(store) -> dict:
    root = hive.StoreRoot(str(store))
    return {
        sid: hive.read_stamp(root, leaf)["content_hashes"] for leaf, sid in hive.walk_leaves(store)
    }


@pytest.fixture(scope="module")
def cluster():
    """One in-process cluster for the module's runs (its workers are threads of this
    process, so they read the environment a test sets, as a worker reads its own)."""
    from distributed import Client, LocalCluster

    with (
        LocalCluster(
            n_workers=1,
            threads_per_worker=IN_PROCESS["threads"],
            processes=False,
            dashboard_address="127.0.0.1:0",
            silence_logs=50,
        ) as lc,
        Client(lc) as client,
    ):
        yield client


@pytest.fixture(scope="module")
def local_hashes(granules, tmp_path_factory, cluster):
    """The leaves of a run over the searched granules straight from disk."""
    _, near, _ = granules
    store = tmp_path_factory.mktemp("local") / "store"
    run(config([str(p) for p in near], store), progress=False, scheduler=cluster)
    found = hashes(store)
    assert found
    return found


def issued(archive) -> int:
    with urllib.request.urlopen(f"{archive['data_url']}/_issued", timeout=10) as r:
        return json.load(r)["issued"]


def test_a_search_over_s3_with_expiring_keys_writes_the_leaves_of_a_local_run(
    env, tmp_path, local_hashes, cluster
):
    before = issued(env)
    store = tmp_path / "s3-store"
    summary = run(config(search_block(env, access="s3"), store), progress=False, scheduler=cluster)
    assert summary.failed_granules == [] and summary.granules == 6
    assert hashes(store) == local_hashes
    # keys are replaced once half their life is left, so a third set is issued no sooner
    # than a whole life after the first: the run outlived its first keys, without a failure
    assert issued(env) - before >= 3


def test_a_search_over_https_writes_the_leaves_of_a_local_run(env, tmp_path, local_hashes, cluster):
    store = tmp_path / "https-store"
    block = search_block(env, access="https")
    summary = run(config(block, store), progress=False, scheduler=cluster)
    assert summary.failed_granules == [] and summary.granules == 6
    assert hashes(store) == local_hashes


def test_auto_access_reads_s3_only_in_the_archives_region(env, monkeypatch):
    from zagg.sources.archive_access import ARCHIVE_KEY
    from zagg.sources.archive_query import parse_search
    from zagg.sources.archive_search import search_catalog

    found = search_catalog(parse_search(search_block(env)["search"]))
    assert found.storage_options[ARCHIVE_KEY]["access"] == "https"
    monkeypatch.setenv("AWS_REGION", "us-west-2")
    found = search_catalog(parse_search(search_block(env)["search"]))
    assert found.storage_options[ARCHIVE_KEY]["access"] == "s3"


def write_config(tmp_path, block) -> tuple[Path, Path]:
    store = tmp_path / "store"
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(config(block, store)))
    return path, store


def cli(*argv) -> int:
    from zagg.cli.main import main

    return main([str(a) for a in argv])


@pytest.mark.parametrize(
    "case",
    [
        "wrong token",
        "wrong token over HTTPS",
        "wrong password",
        "expired token",
        "no result",
        "unreachable catalogue",
    ],
)
def test_refusals_are_one_line_exit_2_and_write_nothing(
    case, env, tmp_path, cluster, monkeypatch, capsys
):
    block = search_block(env, access="s3")
    said = {
        "wrong token": "refused the Earthdata token (HTTP 401: ",
        "wrong token over HTTPS": "the archive refused to read http://",
        "wrong password": "Earthdata Login refused the username and password",
        "expired token": "the Earthdata token in EARTHDATA_TOKEN expired at",
        "no result": "found no granule for ATL03 version 006 over pine_island from "
        "2010-01-01T00:00:00Z to 2010-12-31T23:59:59Z",
        "unreachable catalogue": "the CMR search at http://127.0.0.1:9/search did not answer",
    }[case]
    if case.startswith("wrong token"):
        monkeypatch.setenv("EARTHDATA_TOKEN", "not-a-token")
        if case.endswith("HTTPS"):
            block["search"]["access"] = "https"
    elif case == "wrong password":
        monkeypatch.delenv("EARTHDATA_TOKEN")
        monkeypatch.setenv("EARTHDATA_USERNAME", env["username"])
        monkeypatch.setenv("EARTHDATA_PASSWORD", "not-the-password")
    elif case == "expired token":
        monkeypatch.setenv("EARTHDATA_TOKEN", env["expired_token"])
    elif case == "no result":
        block["search"]["temporal"] = ["2010-01-01", "2010-12-31"]
    else:
        monkeypatch.setenv("ZAGG_CMR_URL", "http://127.0.0.1:9/search")  # nothing listens
    path, store = write_config(tmp_path, block)
    assert cli("run", path, "--scheduler", cluster.scheduler.address, "--quiet") == 2
    out, err = capsys.readouterr()
    assert err.count("\n") == 1 and err.startswith("zagg: error: ") and said in err, err
    for secret in (env["env"]["EARTHDATA_TOKEN"], env["password"], env["expired_token"]):
        assert secret not in out + err
    assert not store.exists()


def test_a_username_and_password_log_in_for_a_token(env, tmp_path, cluster, monkeypatch):
    monkeypatch.delenv("EARTHDATA_TOKEN")
    monkeypatch.setenv("EARTHDATA_USERNAME", env["username"])
    monkeypatch.setenv("EARTHDATA_PASSWORD", env["password"])
    block = search_block(env, access="https", rgts=[int(env["granules"][0].split("_")[2][:4])])
    summary = run(config(block, tmp_path / "store"), progress=False, scheduler=cluster)
    assert summary.granules == 1 and summary.failed_granules == []


def test_no_secret_enters_a_task_graph(env):
    from zagg.sources.archive_login import s3_keys
    from zagg.sources.granules import open_for_config

    for access in ("s3", "https"):
        cfg = zagg.load_config(config(search_block(env, access=access), "unused"))
        ds = open_for_config(cfg)
        graph = pickle.dumps(dict(ds.__dask_graph__()))
        # the readers' tasks carry where to log in, never what with
        assert f"{env['data_url']}/s3credentials".encode() in graph
        secrets = [env["env"]["EARTHDATA_TOKEN"]]
        if access == "s3":
            url = f"{env['data_url']}/s3credentials"
            keys = s3_keys(url)
            secrets += [keys.key, keys.secret, keys.token]
        for secret in secrets:
            assert secret.encode() not in graph


def test_catalog_search_writes_a_catalog_a_run_reads_unchanged(
    env, granules, tmp_path, cluster, local_hashes, capsys, monkeypatch
):
    _, near, _ = granules
    search = tmp_path / "search.yaml"
    search.write_text(yaml.safe_dump(search_block(env)))
    assert cli("catalog", "--search", search, tmp_path / "found.json") == 0
    out = capsys.readouterr().out
    assert out.startswith(f"catalog {tmp_path / 'found.json'}: 6 granules (")
    doc = json.loads((tmp_path / "found.json").read_text())
    entries = {g["id"]: g for g in doc["granules"]}
    assert sorted(entries) == [p.name for p in near]
    for p in near:
        e = entries[p.name]
        assert e["size"] == p.stat().st_size and e["rows"] is None
        assert e["href"].startswith("s3://") and e["href"].endswith("/" + p.name)
        assert e["time_start"] < e["time_end"] and e["footprint"]
    assert doc["source"]["search"]["region"] == "pine_island"
    # a catalog a search wrote is a catalog: a run reads it as it reads any other (here in
    # place of the config's search: no search is made)
    monkeypatch.setenv("ZAGG_CMR_URL", "http://127.0.0.1:9/search")  # nothing listens
    store = tmp_path / "store"
    cfg = config(search_block(env, temporal=["2019-01-02", "2024-12-31"]), store)
    summary = run(cfg, catalog=str(tmp_path / "found.json"), progress=False, scheduler=cluster)
    assert summary.granules == 6 and hashes(store) == local_hashes


def test_plan_lists_what_the_search_found_before_reading(env, granules, tmp_path, capsys):
    from dask.utils import format_bytes

    _, near, _ = granules
    path, store = write_config(tmp_path, search_block(env, access="https"))
    total = format_bytes(sum(p.stat().st_size for p in near))
    assert cli("run", path, "--plan") == 0
    out = capsys.readouterr().out
    line = next(x for x in out.splitlines() if x.startswith("inputs"))
    assert line.startswith(
        "inputs          a search of NASA's archive (ATL03 version 006 over pine_island "
        "from 2019-01-01T00:00:00Z to 2024-12-31T23:59:59Z): 6 granules, "
    ), line
    assert line.endswith(f"6 granules, {total}, read over HTTPS")
    assert "planned from the catalog" in out and not store.exists()


@pytest.mark.parametrize(
    "block, said",
    [
        ({"version": "006"}, "search.short_name': is required but missing"),
        ({"short_name": "ATL03", "version": 6}, "search.version': 6 is a number; quote it"),
        ({"short_name": "ATL03", "region": "atlantis"}, "search.region': atlantis: no such"),
        ({"short_name": "ATL03", "bbox": [1, 2, 3]}, "search.bbox': expected [west, south"),
        (
            {"short_name": "ATL03", "region": "pine_island", "bbox": [1, 2, 3, 4]},
            "give one of region, bbox and polygon, not region and bbox",
        ),
        ({"short_name": "ATL03", "temporal": ["2019-12-31", "2019-01-01"]}, "is after the end"),
        ({"short_name": "ATL03", "temporal": ["last year", "now"]}, "is not an ISO 8601 time"),
        ({"short_name": "ATL03", "rgts": [0]}, "search.rgts[0]': expected a reference ground"),
        ({"short_name": "ATL03", "access": "ftp"}, "search.access': 'ftp' is not one of auto"),
        ({"short_name": "ATL03", "limit": 3}, "search.limit': unknown key"),
    ],
)
def test_a_bad_search_block_is_refused_naming_its_key(block, said):
    cfg = config({"search": block}, "unused")
    with pytest.raises(zagg.ConfigError) as err:
        zagg.load_config(cfg)
    assert said in str(err.value), str(err.value)


def test_the_query_is_cmrs_own():
    from zagg.sources.archive_query import cmr_parameters, parse_search

    search = parse_search(
        {
            "short_name": "ATL03",
            "version": "006",
            "bbox": [170, -10, -170, 10],
            "temporal": ["2019-01-01", "2019-03-31T12:00:00Z"],
            "cycles": [3],
            "rgts": [1234, 56],
        }
    )
    assert cmr_parameters(search) == [
        ("short_name", "ATL03"),
        ("version", "006"),
        ("temporal", "2019-01-01T00:00:00Z,2019-03-31T12:00:00Z"),
        ("bounding_box", "170,-10,-170,10"),
        ("readable_granule_name[]", "ATL03_??????????????_005603??_*"),
        ("readable_granule_name[]", "ATL03_??????????????_123403??_*"),
        ("options[readable_granule_name][pattern]", "true"),
    ]


def test_each_worker_process_logs_in_by_itself(env, tmp_path, local_hashes):
    """Workers in processes of their own, started with the archive's variables as a
    deployment gives them: each asks the credentials endpoint for its own keys."""
    from distributed import Client, LocalCluster

    from zagg.sources.archive_login import keys_held

    before = issued(env)
    with (
        LocalCluster(
            n_workers=2,
            threads_per_worker=1,
            processes=True,
            host="127.0.0.1",
            dashboard_address="127.0.0.1:0",
            silence_logs=50,
        ) as lc,
        Client(lc) as client,
    ):
        pids = set(client.run(os.getpid).values())
        assert len(pids) == 2 and os.getpid() not in pids
        store = tmp_path / "store"
        summary = run(
            config(search_block(env, access="s3"), store), progress=False, scheduler=client
        )
        held = client.run(keys_held)
    assert summary.failed_granules == [] and hashes(store) == local_hashes
    url = f"{env['data_url']}/s3credentials"
    assert sorted(held.values()) == [[url], [url]]  # each worker fetched keys for itself
    assert issued(env) - before >= 3  # this process's keys, and each worker's own
