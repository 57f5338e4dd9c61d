"""``zagg inspect`` shows every object the format defines; ``zagg verify`` checks each
one: leaf columns (every group), overviews of /1 and /2 pyramids, the temporal record,
the multiscales companion, typed ragged arrays, multi-product and grouped roots."""

from __future__ import annotations

import json
import os
import shutil

import pytest
from test_pyramid_store import config
from test_read_pyramid_v1 import build as build_v1
from test_read_ragged2 import relabel
from test_read_roots import regroup
from test_read_temporal import config as timed_config
from test_read_temporal import write as timed_write

import zagg
from zagg.cli.main import main
from zagg.hive import artifact
from zagg.pyramid.sweep import sweep
from zagg.sources.synthetic import synthetic_photons

BOX = (-104, -77, -96, -73)


def cli(capsys, *argv):
    code = main([str(a) for a in argv])
    out, _err = capsys.readouterr()
    return code, out


@pytest.fixture(scope="module")
def swept(tmp_path_factory):
    path = str(tmp_path_factory.mktemp("ins") / "swept")
    points = synthetic_photons(6_000, BOX, seed=3, chunk_size=2_000)
    zagg.to_hive(zagg.aggregate(points, zagg.load_config(config())), path)
    sweep(path)
    return path


def test_inspect_shows_columns_levels_and_the_companion(swept, capsys):
    code, out = cli(capsys, "inspect", swept)
    assert code == 0
    assert "groups 8 (declared, mfr 1), 7 (intermediate, mfr 2), 6 (intermediate, mfr 2)" in out
    assert "multiscales companion: zagg-multiscales/1, members from coverage.moc" in out
    assert "members per order: 5:" in out
    assert "ragged arrays: h_tdigest (zagg-ragged/1" in out
    assert "temporal record: none" in out


def test_verify_checks_every_column_group_and_overview(swept, capsys, tmp_path):
    code, out = cli(capsys, "verify", swept)
    assert code == 0, out
    names = [x for _d, dirs, _f in os.walk(swept) for x in dirs]
    n = names.count("all.pyramid.zarr") + names.count("all.zarr")
    assert names.count("all.pyramid.zarr") == len(zagg.hive.walk_leaves(swept))
    assert f"pyramid artifacts: {n} checked ({n} ok)" in out
    copy = str(tmp_path / "s")
    shutil.copytree(swept, copy)
    sid = zagg.hive.walk_leaves(copy)[0][1]
    chunk = os.path.join(copy, artifact.column_path(sid), "6", "count", "c", "0")
    raw = bytearray(open(chunk, "rb").read())
    raw[0] ^= 1  # an intermediate group's cell
    open(chunk, "wb").write(bytes(raw))
    code, out = cli(capsys, "verify", copy)
    assert code == 1
    assert f"mismatch       {artifact.column_path(sid)}" in out and "6/count" in out
    assert "1 pyramid artifact damaged" in out


def test_a_v1_store_shows_its_levels_and_demotions(tmp_path, capsys):
    path, _ = build_v1(
        synthetic_photons(6_000, BOX, seed=3, chunk_size=2_000), str(tmp_path / "v1")
    )
    code, out = cli(capsys, "inspect", path)
    assert code == 0
    assert "o10  overview" in out
    [line] = [x for x in out.splitlines() if x.strip().startswith("o8 ")]
    assert "(1 demotion records)" in line
    code, out = cli(capsys, "verify", path)
    assert code == 0, out
    n = sum(1 for _d, dirs, _f in os.walk(path) for x in dirs if x == "all.zarr")
    assert f"pyramid artifacts: {n} checked ({n} ok)" in out


def test_the_temporal_record_in_inspect_and_verify(tmp_path, capsys):
    path = tmp_path / "t"
    points = synthetic_photons(8_000, (-100.2, -75.6, -99.8, -75.4), chunk_size=4_000, seed=5)
    timed_write(points.compute(), timed_config(), path)
    code, out = cli(capsys, "inspect", path)
    assert "shards (" in out and "counted from leaf records, 0 coverage only" in out
    assert "observations counted, from root" in out
    code, out = cli(capsys, "verify", path)
    assert code == 0 and "warning" not in out, out
    rec = next(path.rglob("temporal.toc"))
    body = json.loads(rec.read_text())
    body["n_obs"] += 1
    rec.write_text(json.dumps(body))
    code, out = cli(capsys, "verify", path)
    assert code == 0  # unhashed and regenerable-or-not, a bad record reads as absent
    assert "warning:" in out and "damaged temporal record" in out


def test_typed_ragged_arrays_verify_without_the_extension(swept, tmp_path, capsys):
    copy = tmp_path / "typed"
    shutil.copytree(swept, copy)
    relabel(copy)
    code, out = cli(capsys, "verify", copy)
    assert code == 0, out
    code, out = cli(capsys, "inspect", copy)
    assert "h_tdigest (zagg-ragged/2" in out


def test_multi_product_and_grouped_roots(swept, tmp_path, capsys):
    root = tmp_path / "root"
    shutil.copytree(swept, root / "alpha")
    regroup(swept, root / "beta", 2)
    code, out = cli(capsys, "inspect", root)
    assert code == 0
    assert "2 products: alpha, beta" in out
    assert "on a path_grouping 2 tree only the native cells are read" in out
    code, out = cli(capsys, "verify", root / "beta")
    assert code == 0, out
