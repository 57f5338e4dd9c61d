"""A default ``zagg run`` of every shipped config builds every level its manifest declares.

Each shipped config runs from the shell as shipped (its grid, fields and default pyramid),
only pointed at a small region: synthetic photons for the synthetic configs, a couple of
small written granules for the granule ones. Every declared level then opens with zagg's
``open_level`` and with moczarr's, holding every point the leaves hold.
"""

import json

import moczarr
import numpy as np
import pytest
import yaml

from zagg.cli.main import main
from zagg.config.model import load_config
from zagg.hive.walk import walk_windows
from zagg.read.levels import levels, open_level
from zagg.read.open import open_hive
from zagg.sources.write_granules import write_granules

REGION = (-100.2, -75.6, -99.9, -75.45)  # a few order-9 shards
CONFIGS = (
    "atl03_strata",
    "atl03_strata_granules",
    "atl03_synthetic",
    "atl03_tdigest",
    "atl03_yearly",
    "atl06_elevation",
)


@pytest.fixture(scope="module")
def granules(tmp_path_factory):
    d = tmp_path_factory.mktemp("shipped-granules")
    return {
        product: write_granules(
            d / product, 2, product=product, points_per_granule=8_000, region=REGION, seed=4
        )
        for product in ("ATL03", "ATL06")
    }


def shipped(name: str, tmp_path, granules) -> dict:
    """The shipped config ``name``, reading a small region."""
    raw = load_config(name).raw
    source = raw["data_source"]
    if "granules" in source:
        product = "ATL06" if "land_ice_segments" in json.dumps(source) else "ATL03"
        source["granules"] = str(granules[product][0].parent)
    else:
        synthetic = dict(source.get("synthetic") or {})
        synthetic.update(points=20_000, region=list(REGION), chunk_size=10_000)
        source["synthetic"] = synthetic
    raw["output"]["store"] = str(tmp_path / "store")
    return raw


def _count(ds) -> int:
    return int(np.nansum(ds["count"].values))


@pytest.mark.parametrize("name", CONFIGS)
def test_a_default_run_of_a_shipped_config_opens_at_every_declared_level(name, tmp_path, granules):
    raw = shipped(name, tmp_path, granules)
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(raw))
    assert main(["run", str(path), "--workers", "1", "--threads", "2", "--quiet"]) == 0
    store = raw["output"]["store"]
    manifest = json.loads((tmp_path / "store" / "morton_hive.json").read_text())
    table = levels(manifest)
    assert len(table) > 2  # the shipped default pyramid is declared
    windowed = manifest.get("temporal") is not None
    windows = sorted(walk_windows(store)) if windowed else [None]
    totals = {w: _count(open_hive(store, window=w)) for w in windows}
    assert all(t > 0 for t in totals.values())
    for order, entry in table.items():
        overview = entry["artifact"] == "overview"
        # a windowed store's overviews are read per window and as the all-time fold
        for w in windows + (["all"] if windowed and overview else []):
            want = sum(totals.values()) if w == "all" else totals[w]
            assert _count(open_level(store, order, window=w)) == want, (order, w)
            if w == "all":
                mz = moczarr.open_level(store, order, all_time=True)
            else:
                mz = moczarr.open_level(store, order, window=w)
            assert mz is not None and _count(mz) == want, (order, w)
    # every declared level records what built it
    assert all("actuals" in e for e in manifest["pyramid"]["overviews"])


def test_no_sweep_leaves_the_ladder_declared_and_records_only_the_columns(tmp_path, granules):
    raw = shipped("atl03_synthetic", tmp_path, granules)
    path = tmp_path / "cfg.yaml"
    path.write_text(yaml.safe_dump(raw))
    assert main(["run", str(path), "--no-sweep", "--workers", "1", "--quiet"]) == 0
    store = tmp_path / "store"
    manifest = json.loads((store / "morton_hive.json").read_text())
    entries = manifest["pyramid"]["overviews"]
    assert entries[0]["node"] == 9 and entries[0]["actuals"]["regime"] == "leaf-column"
    assert len(entries) == 10 and not any("actuals" in e for e in entries[1:])
    assert _count(open_level(store, 13)) == _count(open_hive(store))
    with pytest.raises(ValueError, match="zagg sweep"):
        open_level(store, 12)
    # output.sweep: false says the same in the config
    raw["output"]["sweep"] = False
    raw["output"]["store"] = str(tmp_path / "other")
    path.write_text(yaml.safe_dump(raw))
    assert main(["run", str(path), "--workers", "1", "--quiet"]) == 0
    other = json.loads((tmp_path / "other" / "morton_hive.json").read_text())
    assert [("actuals" in e) for e in other["pyramid"]["overviews"]] == [True] + [False] * 9
