"""Region batches: ``zagg batch CONFIG regions...`` runs one region after another into one
store; each region writes only its shards, a failing region is reported and skipped."""

import json
import re
import subprocess
import sys

import moczarr
import mortie
import numpy as np

from zagg import grid as G
from zagg import hive
from zagg.sources.regions import region_shards
from zagg.sources.synthetic import DEFAULT_REGION, synthetic_photons

POINTS, SEED, PARENT, CHILD = 150_000, 5, 11, 15
CONFIG = f"""\
data_source:
  coordinates: {{latitude: lat_ph, longitude: lon_ph}}
  variables: [h_ph]
  synthetic: {{points: {POINTS}, seed: {SEED}}}
aggregation:
  variables:
    count: {{function: count}}
output:
  dataset: {{short_name: BATCH, version: '1'}}
  grid: {{parent_order: {PARENT}, child_order: {CHILD}}}
"""


def _box(path, lon0, lat0, lon1, lat1):
    ring = [[lon0, lat0], [lon1, lat0], [lon1, lat1], [lon0, lat1], [lon0, lat0]]
    path.write_text(json.dumps({"type": "Polygon", "coordinates": [ring]}))
    return path


def test_a_batch_writes_each_regions_shards_and_reports_every_region(tmp_path):
    cfg = tmp_path / "cfg.yaml"
    cfg.write_text(CONFIG)
    west = _box(tmp_path / "west.geojson", -99.46, -75.40, -99.37, -75.31)
    east = _box(tmp_path / "east.geojson", -99.19, -75.26, -99.09, -75.17)
    broken = tmp_path / "broken.geojson"
    broken.write_text("{not json")
    store = tmp_path / "store"
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "zagg",
            "batch",
            str(cfg),
            str(west),
            str(broken),
            str(east),
            "--store",
            str(store),
            "--workers",
            "1",
            "--threads",
            "2",
            "--quiet",
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 1, out.stderr  # one region failed
    lines = out.stdout.splitlines()
    per_region = [s for s in lines if s.startswith("region ")]
    assert [s.split(":")[0] for s in per_region] == ["region west", "region broken", "region east"]
    assert per_region[1].startswith("region broken: failed: ")
    assert "regions done    2, 1 failed (broken)" in lines

    # the store holds the shards of both regions that hold points, and nothing else
    ds = synthetic_photons(POINTS, tuple(DEFAULT_REGION), chunk_size=1_000_000, seed=SEED)
    lat, lon = ds["lat_ph"].values, ds["lon_ph"].values
    ok = np.isfinite(lat) & np.isfinite(lon)
    cells = mortie.geo2mort(lat[ok], lon[ok], order=CHILD)
    shard_of = np.asarray(G.to_decimal(mortie.clip2order(PARENT, cells)))
    wanted = set(region_shards(geojson=west, order=PARENT)) | set(
        region_shards(geojson=east, order=PARENT)
    )
    inside = np.isin(shard_of, sorted(wanted))
    assert 0 < inside.sum() < ok.sum()  # the regions keep some of the points, not all
    written = {sid for _, sid in hive.walk_leaves(str(store))}
    assert written == set(np.unique(shard_of[inside]).tolist())
    for region, line in (("west", per_region[0]), ("east", per_region[2])):
        mine = set(region_shards(geojson=tmp_path / f"{region}.geojson", order=PARENT))
        leaves = int(re.search(r"(\d+) leaves written", line).group(1))
        assert leaves == len(mine & written) > 0
    mz = moczarr.open_hive(str(store))
    assert int(mz["count"].values.sum()) == int(inside.sum())
    assert int((mz["count"].values > 0).sum()) == np.unique(cells[inside]).size

    # the same batch again: every region's shards are current, nothing is written
    again = subprocess.run(
        [
            sys.executable,
            "-m",
            "zagg",
            "batch",
            str(cfg),
            str(west),
            str(east),
            "--store",
            str(store),
            "--workers",
            "1",
            "--threads",
            "2",
            "--quiet",
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert again.returncode == 0, again.stderr
    redo = [s for s in again.stdout.splitlines() if s.startswith("region ")]
    assert len(redo) == 2 and all(" 0 leaves written" in s for s in redo), redo
    assert {sid for _, sid in hive.walk_leaves(str(store))} == written


def test_a_batch_without_regions_is_refused():
    out = subprocess.run(
        [sys.executable, "-m", "zagg", "batch", "atl03_synthetic"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 2 and "the following arguments are required: regions" in out.stderr
