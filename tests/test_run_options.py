"""Command-line options and the messages around them: ``--shards``, an unknown
``--region``, more threads than cores, a window id given as a number, a batch region
without data, and ``zagg verify``'s progress lines."""

from __future__ import annotations

import io
import json

import numpy as np
import pytest
import yaml
from test_interrupted_runs import plain_config, windowed_config

import zagg
from zagg import hive
from zagg.cli.main import main
from zagg.cluster.clients import cluster_for, usable_cores
from zagg.hive.walk import walk_windows
from zagg.packaged import names
from zagg.pipeline.batch import batch
from zagg.read.inspect import EXIT_INTACT, VerifyProgress, verify_status


@pytest.fixture(scope="module")
def cluster():
    with cluster_for(None, workers=1, threads=2) as c:
        yield c.scheduler_address


@pytest.fixture(scope="module")
def plain(tmp_path_factory, cluster):
    """A small unwindowed store, and its config file."""
    base = tmp_path_factory.mktemp("options")
    config = base / "plain.yaml"
    config.write_text(yaml.safe_dump(plain_config()))
    store = base / "whole"
    assert main(["run", str(config), "--store", str(store), "--scheduler", cluster, "--quiet"]) == 0
    return config, store


def shard_counts(store) -> dict[str, int]:
    """Shard id → the photons its leaf counted."""
    return {
        sid: int(np.asarray(zagg.open_leaf(store, sid)["count"].values).sum())
        for _, sid in hive.walk_leaves(store)
    }


def test_shards_restricts_a_run_to_the_listed_shards(tmp_path, plain, capsys):
    config, whole = plain
    want = shard_counts(whole)
    picked = sorted(want)[1:3]
    assert all(s.startswith("-") for s in picked)  # southern ids: argparse must take them
    cores = usable_cores()
    store = tmp_path / "some"
    argv = ["run", str(config), "--store", str(store), "--shards", ",".join(picked)]
    argv += ["--workers", "1", "--threads", str(cores + 1), "--quiet"]
    assert main(argv) == 0
    assert shard_counts(store) == {s: want[s] for s in picked}
    err = capsys.readouterr().err
    # more threads than cores: said once, clearly, on the command line's own line
    assert (
        f"zagg: warning: 1 worker x {cores + 1} threads = {cores + 1} threads on a "
        f"machine of {cores} core"
    ) in err


@pytest.mark.parametrize(
    "value, message",
    [
        ("-512", r"--shards: -512 is not a shard of this config: its shards are order 9"),
        ("-51x", r"--shards: '-51x' is not a morton decimal area id"),
        (",", r"--shards: no shard id given"),
    ],
)
def test_shards_refuses_ids_that_are_not_shards(tmp_path, plain, capsys, value, message):
    config, _ = plain
    store = tmp_path / "s"
    assert main(["run", str(config), "--store", str(store), "--shards", value]) == 2
    assert capsys.readouterr().err.startswith("zagg: error: ")
    with pytest.raises(zagg.ConfigError, match=message):
        zagg.run(config, store=str(store), shards=value)
    assert not store.exists()  # refused before anything is written


def test_shards_and_a_region_are_one_too_many(tmp_path, plain, capsys):
    config, _ = plain
    argv = ["run", str(config), "--store", str(tmp_path / "s"), "--shards", "-5121132231"]
    assert main([*argv, "--bbox", "-100,-76,-99,-75"]) == 2
    assert "give only one of --region, --bbox and --shards (got --bbox and --shards)" in (
        capsys.readouterr().err
    )


def test_an_unknown_region_lists_the_shipped_ones(tmp_path, plain, capsys):
    config, _ = plain
    argv = ["run", str(config), "--store", str(tmp_path / "s"), "--region", "atlantis"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "--region atlantis: no such GeoJSON file, and no shipped region of that name" in err
    assert f"the shipped regions are {', '.join(names('region'))}" in err
    assert {"pine_island", "thwaites"} <= set(names("region"))
    assert not (tmp_path / "s").exists()


def test_a_window_given_as_a_number_says_how_to_name_it(tmp_path, cluster):
    config = tmp_path / "windowed.yaml"
    config.write_text(yaml.safe_dump(windowed_config()))
    store = tmp_path / "w"
    assert main(["run", str(config), "--store", str(store), "--scheduler", cluster, "--quiet"]) == 0
    label, leaves = sorted(walk_windows(store).items())[0]
    year = int(label)
    with pytest.raises(ValueError, match=rf"window={year} is not text \(it is a int\).*'{year}'"):
        zagg.open_hive(store, window=year)
    with pytest.raises(ValueError, match=r"'2019' for a year, '201906' for a month"):
        zagg.open_leaf(store, leaves[0][1], window=year)
    assert int(zagg.open_hive(store, window=label)["count"].values.sum()) > 0


def test_a_batch_warns_of_a_region_without_data(tmp_path, plain, cluster):
    from distributed import Client

    config, whole = plain
    here = tmp_path / "here.geojson"
    there = tmp_path / "far.geojson"
    for path, (lon0, lat0, lon1, lat1) in (
        (here, (-100.3, -75.7, -99.7, -75.3)),  # the synthetic points' region
        (there, (10.0, 40.0, 10.2, 40.2)),  # no point there
    ):
        ring = [[lon0, lat0], [lon1, lat0], [lon1, lat1], [lon0, lat1], [lon0, lat0]]
        path.write_text(json.dumps({"type": "Polygon", "coordinates": [ring]}))
    out = io.StringIO()
    with Client(cluster) as client:
        summary = batch(
            config, [here, there], store=str(tmp_path / "b"), client=client, progress=False, out=out
        )
    printed = out.getvalue()
    assert "warning: region far holds no data" in printed
    assert "warning: region here" not in printed
    assert [r.region for r in summary.empty] == ["far"] and not summary.failed
    assert "without data    1 region (far): see the warnings above" in summary.lines()


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_verify_shows_its_progress(plain, capsys):
    _, store = plain
    n = len(hive.walk_leaves(store))
    # a short check into a log or pipe says nothing but its report
    assert main(["verify", str(store)]) == 0
    assert capsys.readouterr().err == ""
    # on a terminal: what it lists, how many, and a line kept up to date per leaf
    tty = Terminal()
    report, status = verify_status(store, progress=VerifyProgress(tty))
    assert status == EXIT_INTACT
    text = tty.getvalue()
    assert text.startswith(f"verify: listing the leaves of {store} ...\nverify: {n} leaves")
    assert [f"verify: {i} of {n} checked" for i in range(1, n + 1)] == [
        line for line in text.split("\n")[2].split("\r") if line
    ]
    # in a log, once it has run a while: count lines (here at once), then the last one
    log = io.StringIO()
    verify_status(store, progress=VerifyProgress(log, every_s=0))
    lines = log.getvalue().splitlines()
    assert lines[0] == f"verify: 1 of {n} leaves checked"
    assert lines[-1] == f"verify: {n} of {n} leaves checked" and len(lines) == n
