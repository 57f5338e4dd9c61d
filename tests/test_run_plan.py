"""A run's plan (``zagg run --plan``): decided before any cluster starts, it writes nothing,
and with a catalog its re-run verdicts are the ones the run then acts on."""

import shutil
import sys

import pytest
import yaml
from test_granule_run import REGION, C, atl03_config
from test_rerun_runs import catalog, snapshot

import zagg
from zagg.cli.main import main
from zagg.hive.paths import leaf_stem
from zagg.pipeline.plan import plan_run
from zagg.pipeline.run import run
from zagg.sources.write_granules import write_granules


@pytest.fixture(scope="module")
def granules(tmp_path_factory):
    d = tmp_path_factory.mktemp("plan-granules")
    return write_granules(d, 3, product="ATL03", points_per_granule=10_000, region=REGION, seed=7)


@pytest.fixture(scope="module")
def written(tmp_path_factory, granules):
    """A store written from a catalog of the first two granules, that catalog, and one of
    all three."""
    base = tmp_path_factory.mktemp("plan")
    store = base / "s"
    two = catalog(granules[:2], base / "two.json")
    first = run(
        atl03_config(two, store),
        workers=1,
        threads=2,
        progress=False,
        sweep=False,
    )
    assert first.leaves_written >= 1
    return store, two, catalog(granules, base / "three.json")


@pytest.fixture
def no_cluster(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("a cluster was started for a plan")

    monkeypatch.setattr(sys.modules["zagg.pipeline.run"], "cluster_for", refuse)


def test_a_plan_starts_no_cluster_and_writes_nothing(tmp_path, capsys, no_cluster):
    store = tmp_path / "s"
    assert main(["run", "atl03_synthetic", "--store", str(store), "--plan"]) == 0
    out = capsys.readouterr().out.splitlines()
    grid = zagg.load_config("atl03_synthetic").grid
    assert out[0] == "plan (nothing started, nothing written):"
    assert f"store           {store}" in out
    assert "  manifest      none yet: written before the first leaf" in out
    assert (
        f"grid            shards at order {grid.shard_order}, cells at order {grid.cell_order} "
        f"({4 ** (grid.cell_order - grid.shard_order):,} per leaf, "
        f"{4 ** (grid.chunk_order - grid.shard_order):,} inner chunks)"
    ) in out
    assert "shards          wherever the points fall (found while reading)" in out
    assert not store.exists()


def test_a_catalog_plan_holds_the_verdicts_the_run_acts_on(tmp_path, written, granules):
    store, two, three = written
    copy = tmp_path / "s"
    shutil.copytree(store, copy)
    before = snapshot(copy)
    same = plan_run(atl03_config(two, copy), sweep=False)
    assert {v.kind for v in same.verdicts.values()} == {"current"} and not same.todo
    assert same.read_granules == []  # an unchanged re-run opens no granule
    plan = plan_run(atl03_config(three, copy), sweep=False)
    assert snapshot(copy) == before  # not one object written, not one touched
    kinds = {u: v.kind for u, v in plan.verdicts.items()}
    assert "rewrite" in kinds.values()  # the third granule's units
    assert plan.todo == {u for u, k in kinds.items() if k == "rewrite"}
    assert granules[2].name in plan.read_granules
    again = run(atl03_config(three, copy), workers=1, threads=2, progress=False, sweep=False)
    assert {u: v.kind for u, v in again.gate.verdicts.items()} == kinds
    assert {leaf_stem(r["shard_id"], r["window"]) for r in again.records} <= plan.todo
    assert again.units["current"] == len(kinds) - len(plan.todo)


def test_the_printed_plan_counts_the_units_and_refuses_what_the_run_refuses(
    tmp_path, written, capsys, no_cluster
):
    store, _, three = written
    before = snapshot(store)
    config = tmp_path / "c.yaml"
    config.write_text(yaml.safe_dump(atl03_config(three, store)))
    assert main(["run", str(config), "--plan", "--no-sweep"]) == 0
    out = capsys.readouterr().out
    plan = plan_run(atl03_config(three, store), sweep=False)
    n, todo = len(plan.verdicts), len(plan.todo)
    assert (
        f"units           {n} planned from the catalog: {todo} to write, {n - todo} current, "
        "0 refused"
    ) in out
    assert "not built by this run" in out  # --no-sweep: the overviews are left to a sweep
    changed = atl03_config(three, store)
    changed["output"]["grid"]["child_order"] = C + 1
    config.write_text(yaml.safe_dump(changed))
    assert main(["run", str(config), "--plan"]) == 2
    assert "cell_order" in capsys.readouterr().err
    assert snapshot(store) == before
