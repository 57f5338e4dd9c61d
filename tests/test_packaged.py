"""The configs and regions shipped in the package are found by name from any directory."""

import pathlib

import pytest

from zagg.cli.main import main
from zagg.config.model import ConfigError, load_config
from zagg.sources.regions import region_shards

REPO = pathlib.Path(__file__).parents[1]


def test_a_shipped_config_loads_by_name_from_anywhere(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    by_name = load_config("atl03_synthetic")
    by_path = load_config(REPO / "configs" / "atl03_synthetic.yaml")
    assert by_name.raw == by_path.raw
    assert load_config("atl03_synthetic.yaml").raw == by_path.raw


def test_a_local_file_wins_over_a_shipped_name(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    text = (REPO / "configs" / "atl03_synthetic.yaml").read_text()
    (tmp_path / "atl03_synthetic.yaml").write_text(text.replace("seed: 0", "seed: 5"))
    assert load_config("atl03_synthetic.yaml").raw["data_source"]["synthetic"]["seed"] == 5


def test_an_unknown_name_lists_the_shipped_configs(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError, match="atl03_tdigest"):
        load_config("atl03_nosuch")


def test_a_shipped_region_covers_like_its_file(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    by_name = region_shards(geojson="test_box", order=9)
    assert by_name == region_shards(geojson=REPO / "regions" / "test_box.geojson", order=9)
    assert len(by_name) > 0


def test_configs_command_lists_every_shipped_config_and_region(capsys):
    assert main(["configs"]) == 0
    out = capsys.readouterr().out
    for name in (
        "atl03_synthetic",
        "atl03_tdigest",
        "atl03_strata",
        "atl06_elevation",
        "pine_island",
        "thwaites",
        "test_box",
    ):
        assert f"  {name} " in out
