"""The store-root config record (``aggregation.yaml``) and the refusals it makes precise."""

import copy
import sys

import pytest
import yaml
from test_run import REGION, config

import zagg
from zagg import hive
from zagg.engine.manifest import differences, semantic_core
from zagg.engine.write import to_hive
from zagg.pipeline.run import run
from zagg.sources.synthetic import synthetic_photons

SECRET = "wJalrXUtnFEMI-not-a-real-secret"


@pytest.fixture(scope="module")
def photons():
    return synthetic_photons(20_000, REGION, chunk_size=10_000, seed=3).compute()


def _tree(store):
    return {p.relative_to(store): p.read_bytes() for p in store.rglob("*") if p.is_file()}


def _changed():
    cfg = copy.deepcopy(config())
    cfg["aggregation"]["variables"]["h_max"]["function"] = "min"
    cfg["data_source"]["filters"][0]["value"] = 3
    return cfg


def test_the_record_is_the_config_that_made_the_store(tmp_path, photons):
    cfg = config()
    cfg["data_source"]["input"] = "s3://bucket/points.zarr"  # read elsewhere; not read here
    cfg["data_source"]["storage_options"] = {"key": "AKIDEXAMPLE", "secret": SECRET}
    store = tmp_path / "s"
    to_hive(zagg.aggregate(photons, cfg), store)
    text = (store / "aggregation.yaml").read_text()
    assert text.startswith("# The configuration of the zagg run that made this store")
    assert SECRET not in text and "AKIDEXAMPLE" not in text
    recorded = yaml.safe_load(text)
    assert recorded["data_source"]["storage_options"] == {"key": "***", "secret": "***"}
    expected = copy.deepcopy(cfg)
    expected["data_source"]["storage_options"] = {"key": "***", "secret": "***"}
    assert recorded == expected
    # the record's semantic core is the one the manifest's hash digests
    manifest = hive.read_manifest(str(store))
    core = semantic_core(recorded, manifest["dataset"], True)
    assert hive.semantic_hash(core) == manifest["semantic_hash"]


def test_a_changed_config_is_refused_naming_each_setting(tmp_path, photons):
    store = tmp_path / "s"
    to_hive(zagg.aggregate(photons, config()), store)
    before = _tree(store)
    with pytest.raises(hive.ManifestConflictError) as err:
        to_hive(zagg.aggregate(photons, _changed()), store)
    message = str(err.value)
    assert (
        "differs from the one the store was made with (its aggregation.yaml) at "
        "aggregation.variables.h_max.function (existing 'max', new 'min'); "
        "data_source.filters (existing [{"
    ) in message
    assert "'value': 2" in message and "'value': 3" in message
    assert "semantic_hash (existing '" in message and "choose a new one" in message
    assert "covers the config's data_source" not in message  # the precise sentence replaced it
    assert _tree(store) == before  # nothing written, the record included


def test_run_names_the_setting_before_its_cluster_starts(tmp_path, photons, monkeypatch):
    store = tmp_path / "s"
    to_hive(zagg.aggregate(photons, config()), store)

    def no_cluster(*args, **kwargs):
        raise AssertionError("a cluster was started for a run the store refuses")

    monkeypatch.setattr(sys.modules["zagg.pipeline.run"], "cluster_for", no_cluster)
    cfg = config()
    cfg["output"]["dataset"]["version"] = "2"
    cfg["output"]["grid"]["sharded"] = False
    with pytest.raises(hive.ManifestConflictError) as err:
        run(cfg, store=str(store), source=photons, progress=False)
    message = str(err.value)
    assert "dataset (existing {'short_name': 'TEST', 'version': '1'}" in message
    assert (
        "at output.dataset.version (existing '1', new '2'); output.grid.sharded "
        "(existing True, new False)."
    ) in message


def test_packaging_keys_are_not_differences(tmp_path, photons):
    store = tmp_path / "s"
    to_hive(zagg.aggregate(photons, config()), store)
    record = (store / "aggregation.yaml").read_bytes()
    cfg = config()
    cfg["data_source"]["input"] = "s3://bucket/elsewhere.zarr"
    cfg["data_source"]["storage_options"] = {"anon": True}
    to_hive(zagg.aggregate(photons, cfg), store)
    assert (store / "aggregation.yaml").read_bytes() == record  # the maker's record stays


def test_without_a_matching_record_the_refusal_stays_general(tmp_path, photons):
    store = tmp_path / "s"
    to_hive(zagg.aggregate(photons, config()), store)
    generic = "The semantic hash covers the config's data_source, aggregation"
    # a record edited after the fact no longer hashes to the manifest: not trusted
    edited = yaml.safe_load((store / "aggregation.yaml").read_text())
    edited["aggregation"]["variables"]["h_max"]["function"] = "min"
    (store / "aggregation.yaml").write_text(yaml.safe_dump(edited))
    with pytest.raises(hive.ManifestConflictError, match=generic):
        to_hive(zagg.aggregate(photons, _changed()), store)
    for broken in ("[unclosed", "just text", "output: [1, 2]"):
        (store / "aggregation.yaml").write_text(broken)
        with pytest.raises(hive.ManifestConflictError, match=generic):
            to_hive(zagg.aggregate(photons, _changed()), store)
    # a store made before the record existed: general refusal, and a matching run adds it
    (store / "aggregation.yaml").unlink()
    with pytest.raises(hive.ManifestConflictError, match=generic):
        to_hive(zagg.aggregate(photons, _changed()), store)
    to_hive(zagg.aggregate(photons, config()), store)
    assert yaml.safe_load((store / "aggregation.yaml").read_text()) == config()


def test_an_unreadable_record_keeps_the_refusal(tmp_path, photons, monkeypatch):
    store = tmp_path / "s"
    to_hive(zagg.aggregate(photons, config()), store)
    real = hive.StoreRoot.read_bytes

    def denied(self, key):
        if key == "aggregation.yaml":
            raise PermissionError("access denied")
        return real(self, key)

    monkeypatch.setattr(hive.StoreRoot, "read_bytes", denied)
    with pytest.raises(
        hive.ManifestConflictError, match="The semantic hash covers the config's data_source"
    ):
        to_hive(zagg.aggregate(photons, _changed()), store)


def test_differences_walks_nested_settings():
    old = {
        "aggregation": {"variables": {"a": {"function": "max"}, "b": {"function": "sum"}}},
        "dataset": {"short_name": "X", "version": "1"},
        "grid": {"sharded": True},
    }
    new = copy.deepcopy(old)
    new["aggregation"]["variables"]["a"]["function"] = "min"
    del new["aggregation"]["variables"]["b"]
    new["aggregation"]["variables"]["c"] = {"function": "count"}
    new["grid"]["sharded"] = False
    assert differences(old, new) == [
        ("aggregation.variables.a.function", "max", "min"),
        ("aggregation.variables.b", {"function": "sum"}, ...),
        ("aggregation.variables.c", ..., {"function": "count"}),
        ("output.grid.sharded", True, False),
    ]
    assert differences(old, copy.deepcopy(old)) == []
    # tuples and lists are the same setting, as in the hash
    assert differences({"v": (1, 2)}, {"v": [1, 2]}) == []
    assert differences({"v": [1, 2]}, {"v": [2, 1]}) == [("v", [1, 2], [2, 1])]


def test_a_refusal_lists_at_most_five_settings(tmp_path, photons):
    store = tmp_path / "s"
    to_hive(zagg.aggregate(photons, config()), store)
    cfg = config()
    cfg["aggregation"]["variables"] = {f"n{i}": {"function": "count"} for i in range(6)}
    with pytest.raises(hive.ManifestConflictError) as err:
        to_hive(zagg.aggregate(photons, cfg), store)
    message = str(err.value)
    assert message.count("(existing ") == 1 + 5  # the hash, then five settings
    assert "; and 5 more." in message
