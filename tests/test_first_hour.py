"""What a new user meets in the first hour, following the README and docs: options that
take southern ids, ``--plan`` against the run, refusals a script can notice, sub-folders of
a store, lazy names, the help, the run summary's hint at ``zagg gc``, cell centres on read
results, the strata demo's map and a ``coverage.toc`` above the pinned order."""

from __future__ import annotations

import argparse
import importlib
import pkgutil

import pytest
from builders import fields, grid_orders, pipeline_config, synthetic_source

import zagg
from zagg.cli.main import _joined_negative_values, build_parser, main
from zagg.engine.write import to_hive
from zagg.lazy import LazyPackage
from zagg.sources.synthetic import synthetic_photons

REGION = (-100.2, -75.6, -99.8, -75.4)  # a few order-8 shards


def config(store=None, **more):
    return pipeline_config(
        synthetic_source("h_ph", "signal_conf_ph"),
        fields("count", "h_mean", "h_tdigest"),
        grid_orders(8, 12, inner=10),
        store=store,
        sweep=False,
        **more,
    )


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    """A small store written by to_hive (no cluster)."""
    path = tmp_path_factory.mktemp("s") / "store"
    photons = synthetic_photons(40_000, REGION, chunk_size=20_000, seed=3).compute()
    to_hive(zagg.aggregate(photons, config()), path)
    return path


def parsed(argv):
    parser = build_parser()
    return parser.parse_args(_joined_negative_values(parser, argv))


# -- 1. a leading minus ------------------------------------------------------------------
@pytest.mark.parametrize(
    "argv, dest, value",
    [
        (["sweep", "S", "--scope", "-5112,-5113"], "scope", "-5112,-5113"),
        (["sweep", "S", "--sco", "-5112,-5113"], "scope", "-5112,-5113"),
        (["run", "C", "--shards", "-51211,-51212"], "shards", "-51211,-51212"),
        (["run", "C", "--bbox", "-102,-76,-98,-75"], "bbox", "-102,-76,-98,-75"),
        (["run", "C", "--bbox", "-.5,-76,-98,-75"], "bbox", "-.5,-76,-98,-75"),
        (["demo", "--seed", "-3"], "seed", -3),
        (["gc", "S", "--keep", "-1"], "keep", -1),
    ],
)
def test_every_option_that_takes_a_value_takes_a_leading_minus(argv, dest, value):
    assert getattr(parsed(argv), dest) == value


def test_a_flag_before_a_negative_value_stays_a_flag():
    # --quiet takes no value, so a following id is not joined to it (and is refused)
    with pytest.raises(SystemExit):
        parsed(["run", "C", "--quiet", "-5112,-5113"])


# -- 5. lazy names -----------------------------------------------------------------------
def _lazy_packages():
    out = []
    for info in pkgutil.walk_packages(zagg.__path__, "zagg."):
        if info.ispkg:
            module = importlib.import_module(info.name)
            if isinstance(module, LazyPackage):
                out.append(module)
    return [zagg, *out]


def test_every_lazy_public_name_resolves():
    packages = _lazy_packages()
    names = {p.__name__ for p in packages}
    assert {"zagg", "zagg.config", "zagg.hive", "zagg.sources", "zagg.pyramid"} <= names
    for package in packages:
        for name in package.__all__:
            value = getattr(package, name)
            assert getattr(value, "__name__", name) == name or not callable(value), (
                package.__name__,
                name,
            )
    from zagg.checks.validation import ConfigError as home

    assert zagg.config.ConfigError is home and zagg.ConfigError is home


# -- 6. the help -------------------------------------------------------------------------
def _subparsers(parser):
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return action.choices
    return {}


def test_every_option_and_positional_of_every_subcommand_has_help():
    parser = build_parser()
    missing = [a.dest for a in parser._actions if not a.help]
    for name, sub in _subparsers(parser).items():
        missing += [
            f"{name} {a.option_strings or a.dest}"
            for a in sub._actions
            if not isinstance(a, argparse._HelpAction) and not (a.help or "").strip()
        ]
    assert missing == []


def test_version(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["--version"])
    assert exc.value.code == 0
    assert capsys.readouterr().out.split()[-1] == zagg.__version__


@pytest.mark.parametrize(
    "argv0, prog",
    [("/venv/bin/zagg", "zagg"), ("/src/zagg/__main__.py", "python -m zagg")],
)
def test_usage_names_the_program_as_invoked(monkeypatch, argv0, prog):
    monkeypatch.setattr("sys.argv", [argv0])
    assert build_parser().format_usage().startswith(f"usage: {prog} ")


def test_configs_wraps_descriptions_instead_of_cutting_them(capsys):
    from zagg.packaged import find, summary

    assert main(["configs"]) == 0
    out = capsys.readouterr().out
    assert "…" not in out
    whole = summary(find("config", "atl03_synthetic"), width=10_000)
    assert len(whole) > 80
    block = out.split("  atl03_synthetic")[1].split("\n  atl03_")[0]
    assert " ".join(block.split()) == whole


def test_inspect_prints_the_summary_and_the_manifest_only_on_request(store, capsys):
    assert main(["inspect", str(store)]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert lines[0] == f"store {store}"
    assert '"semantic_hash"' not in out and len(lines) < 60
    assert any(line.startswith("leaves: ") for line in lines)
    assert main(["inspect", str(store), "--manifest"]) == 0
    full = capsys.readouterr().out
    import json

    manifest = json.loads((store / "morton_hive.json").read_text())
    assert f'"semantic_hash": "{manifest["semantic_hash"]}"' in full
    assert full.index("leaves: ") < full.index('"semantic_hash"')


# -- 4. a folder inside a store ----------------------------------------------------------
@pytest.mark.parametrize("command", ["verify", "inspect", "gc", "sweep"])
def test_a_folder_inside_a_store_names_the_store_root(store, capsys, command):
    inside = next(p for p in store.iterdir() if p.is_dir() and not p.name.startswith("."))
    deeper = next((p for p in inside.iterdir() if p.is_dir()), inside)
    for folder in {inside, deeper}:
        assert main([command, str(folder)]) == 2
        err = capsys.readouterr().err
        assert err == (
            f"zagg: error: no store here ({folder} is a folder inside a store); the store "
            f"root is {store}\n"
        )


# -- 2. --plan is the run's plan ---------------------------------------------------------
def test_plan_applies_the_memory_budget(tmp_path, capsys):
    import yaml

    cfg = tmp_path / "c.yaml"
    gen = synthetic_source("h_ph", points=1000, seed=1, region=list(REGION))
    cfg.write_text(
        yaml.safe_dump(pipeline_config(gen, fields("count"), grid_orders(8, 12), sweep=False))
    )
    base = ["run", str(cfg), "--store", str(tmp_path / "s"), "--plan"]
    assert main([*base, "--memory-budget", "3GiB"]) == 0
    assert "memory          budget 3.00 GiB;" in capsys.readouterr().out
    assert main([*base, "--memory-budget", "off"]) == 0
    assert "memory          budget off: one pass" in capsys.readouterr().out
    assert main(base) == 0
    assert "memory          budget auto (" in capsys.readouterr().out


def test_plan_refuses_a_granule_directory_that_is_not_there(tmp_path, capsys):
    import yaml
    from test_granule_run import atl03_config

    cfg = tmp_path / "c.yaml"
    cfg.write_text(yaml.safe_dump(atl03_config(str(tmp_path / "nowhere"), str(tmp_path / "s"))))
    assert main(["run", str(cfg), "--plan"]) == 2
    err = capsys.readouterr().err
    assert err == (
        f"zagg: error: config key 'data_source.granules': {str(tmp_path / 'nowhere')!r} does "
        "not exist; give a directory, a glob, an s3:// prefix, a catalog file or a list of "
        "granule files (or pass --granules)\n"
    )
    assert not (tmp_path / "s").exists()
    # the run refuses it with the same line, before any cluster starts
    assert main(["run", str(cfg), "--workers", "1", "--quiet"]) == 2
    assert capsys.readouterr().err == err


# -- 3. a granule that disappears --------------------------------------------------------
@pytest.fixture(scope="module")
def four_granules(tmp_path_factory):
    from zagg.sources.write_granules import write_granules

    d = tmp_path_factory.mktemp("four-granules")
    # tracks far enough apart that most order-8 shards are fed by one granule alone
    wide = (-101.0, -75.8, -99.0, -75.2)
    return write_granules(d, 4, product="ATL03", points_per_granule=6_000, region=wide, seed=5)


def _recorded(store) -> dict[str, set[str]]:
    import json

    from zagg import hive

    return {
        sid: set(json.loads((store / leaf).parent.joinpath("granules.json").read_text())["ids"])
        for leaf, sid in hive.walk_leaves(store)
    }


def _sole_feeder(recorded) -> str:
    """A granule that alone fed some shard, preferably one that fed a shared shard too."""
    alone = sorted({next(iter(ids)) for ids in recorded.values() if len(ids) == 1})
    assert alone, recorded
    shared = [g for g in alone if any(g in ids and len(ids) > 1 for ids in recorded.values())]
    return (shared or alone)[0]


@pytest.mark.parametrize("with_catalog", [False, True])
def test_the_shards_of_a_granule_that_disappears_are_refused_and_named(
    tmp_path, four_granules, capsys, with_catalog
):
    import json
    import shutil

    import yaml
    from test_granule_run import atl03_config

    from zagg.pipeline.reruns import EXIT_REFUSED
    from zagg.sources.catalog import build_catalog, write_catalog

    def source(paths, name):
        d = tmp_path / name
        d.mkdir()
        for p in paths:
            shutil.copy(p, d / p.name)
        if not with_catalog:
            return str(d)
        cfg = atl03_config([str(d / p.name) for p in paths])
        write_catalog(
            build_catalog(zagg.load_config(cfg).data_source.granules, order=8), d / "cat.json"
        )
        return str(d / "cat.json")

    store = tmp_path / "s"
    first = tmp_path / "first.yaml"
    first.write_text(yaml.safe_dump(atl03_config(source(four_granules, "all"), str(store))))
    cli = ["--workers", "1", "--threads", "2", "--quiet"]
    assert main(["run", str(first), *cli]) == 0
    recorded = _recorded(store)
    gone = _sole_feeder(recorded)
    expect = {sid for sid, ids in recorded.items() if gone in ids}
    assert any(recorded[sid] == {gone} for sid in expect)  # a shard only it fed
    before = {p: p.read_bytes() for p in store.rglob("*.zarr/zarr.json")}
    rest = [p for p in four_granules if p.name != gone]
    again = tmp_path / "again.yaml"
    again.write_text(yaml.safe_dump(atl03_config(source(rest, "rest"), str(store))))
    capsys.readouterr()
    # the plan names them too, and exits as the run will
    assert main(["run", str(again), "--plan"]) == (EXIT_REFUSED if with_catalog else 0)
    capsys.readouterr()
    assert main(["run", str(again), *cli]) == EXIT_REFUSED
    out = capsys.readouterr().out
    assert f"0 rewritten, {len(expect)} refused" in out and gone in out
    [refusals] = store.glob("refusals_*.json")
    body = json.loads(refusals.read_text())
    assert {r["shard_key"] for r in body["refused"]} == expect
    assert all(gone in r["missing_granules"] for r in body["refused"])
    assert {p: p.read_bytes() for p in store.rglob("*.zarr/zarr.json")} == before
    # allowed, the run exits 0
    assert main(["run", str(again), *cli, "--allow-contraction"]) == 0


# -- 7. superseded versions in the summary ----------------------------------------------
def test_a_rewrite_says_how_much_superseded_data_the_store_holds(tmp_path):
    import os

    from zagg import hive

    photons = synthetic_photons(20_000, REGION, chunk_size=10_000, seed=4).compute()
    cells = zagg.aggregate(photons, config())
    store = tmp_path / "s"
    first = to_hive(cells, store)
    assert first.superseded == (0, 0)
    assert not [line for line in first.lines() if "zagg gc" in line]

    def size(path):
        return sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(path) for f in fs)

    before = {
        leaf: hive.read_stamp(hive.StoreRoot(str(store)), leaf)["current"]
        for leaf, _ in hive.walk_leaves(store)
    }
    old_bytes = sum(size(store / leaf / version) for leaf, version in before.items())
    again = to_hive(cells, store)
    assert again.superseded == (len(before), old_bytes) and old_bytes > 0
    [line] = [line for line in again.lines() if line.startswith("superseded")]
    assert line == (
        f"superseded      {old_bytes:,} bytes ({old_bytes / 2**20:.1f} MiB) in {len(before)} "
        f"earlier version(s) of the leaves written; zagg gc {store} removes them"
    )


# -- 8. cell centres on read results -----------------------------------------------------
@pytest.mark.parametrize("dense", [False, True])
def test_reads_carry_the_cell_centres_lazily_with_longitudes_in_pm180(store, dense):
    import dask.array as da
    import mortie
    import numpy as np

    ds = zagg.open_hive(store, dense=dense)
    for name in ("latitude", "longitude"):
        assert isinstance(ds[name].data, da.Array)  # computed only when asked for
        assert ds[name].dims == ("cells",) and ds[name].dtype == np.float64
    assert ds["latitude"].attrs["units"] == "degrees_north"
    assert ds["longitude"].attrs["units"] == "degrees_east"
    words = ds["morton"].values
    lat, lon = mortie.mort2geo(words)
    np.testing.assert_array_equal(ds["latitude"].values, lat)
    np.testing.assert_array_equal(ds["longitude"].values, lon - 360.0)  # the box is at -100°
    assert (ds["longitude"].values >= -180).all() and (ds["longitude"].values < 180).all()
    # one leaf read alike
    sid = ds.attrs["zagg"]["shards"][0]
    leaf = zagg.open_leaf(store, sid)
    np.testing.assert_array_equal(
        leaf["longitude"].values, (mortie.mort2geo(leaf["morton"].values)[1] + 180) % 360 - 180
    )


def test_cell_centres_wrap_longitude_into_pm180():
    import mortie
    import numpy as np

    from zagg.read.build import cell_centres

    words = mortie.geo2mort([-75.0, 60.5, 0.0, 10.0], [-100.0, 45.0, 179.99, -179.99], order=19)
    lat, lon = cell_centres(words)
    np.testing.assert_allclose(lat, [-75.0, 60.5, 0.0, 10.0], atol=1e-3)
    np.testing.assert_allclose(lon, [-100.0, 45.0, 179.99, -179.99], atol=1e-3)
    assert cell_centres(np.zeros(0, np.uint64)).shape == (2, 0)


# -- 9. the strata demo's map ------------------------------------------------------------
def test_the_strata_demo_maps_its_strata_and_composition(tmp_path, capsys):
    from zagg.cli.demo import demo, plot_map

    out = demo(store=str(tmp_path / "d"), points=60_000, workers=1, product="strata")
    assert out["map"] == str(tmp_path / "d.png") and (tmp_path / "d.png").stat().st_size > 10_000
    titles = plot_map(str(tmp_path / "d"), str(tmp_path / "again.png"), product="strata")
    assert titles == [
        "(a) signal photon height, median",
        "(b) noise photon height, median",
        "(c) fraction flagged high",
    ]
    assert plot_map(str(tmp_path / "d"), str(tmp_path / "t.png")) == [
        "(a) number of points",
        "(b) photon height, median",
    ]


# -- 10. a coverage.toc above the pinned temporal order ----------------------------------
@pytest.mark.parametrize("where", ["object", "shard"])
def test_a_coverage_toc_above_the_pinned_order_is_refused_like_the_counts(tmp_path, where):
    import json

    from test_read_temporal import spec_uncounted_store

    from zagg.read.temporal import parse_cover

    _word, _words, cover = spec_uncounted_store(tmp_path / "u")
    path = tmp_path / "u" / "coverage.toc"
    obj = json.loads(path.read_text())
    assert 3 in {a.size for a in parse_cover(obj, 4, "c")["11213"][:1]}  # as written: read
    if where == "object":
        obj["temporal_order"] = 25
    else:
        obj["shards"]["11213"]["temporal_order"] = 25
    path.write_text(json.dumps(obj))
    with pytest.warns(UserWarning, match="temporal_order 25 is above the pin 24"):
        assert parse_cover(obj, 4, "c") == {}
    with pytest.warns(UserWarning, match="temporal_order 25 is above the pin 24"):
        ds = zagg.open_temporal(tmp_path / "u")
    assert ds["cover"].values[0].size == 0  # the refused cover is left out
    # the root counts block refuses the same value with the same words
    moc_path = tmp_path / "u" / "coverage.moc"
    moc = json.loads(moc_path.read_text())
    moc["temporal"]["counts"]["temporal_order"] = 25
    moc_path.write_text(json.dumps(moc))
    with pytest.warns(UserWarning, match="temporal_order 25 is above the pin 24"):
        zagg.open_temporal(tmp_path / "u")


def test_a_folder_inside_an_s3_store_names_the_store_root(moto_s3, capsys):
    options, fs = moto_s3
    fs.mkdir("inside")
    photons = synthetic_photons(10_000, REGION, chunk_size=10_000, seed=3).compute()
    to_hive(zagg.aggregate(photons, config()), "s3://inside/a/s", storage_options=options)
    cli = [f"--storage-option={k}={v}" for k, v in options.items()]
    for folder in ("s3://inside/a/s/-5", "s3://inside/a/s/-5/1/2"):
        assert main(["verify", folder, *cli]) == 2
        assert capsys.readouterr().err == (
            f"zagg: error: no store here ({folder} is a folder inside a store); the store "
            "root is s3://inside/a/s\n"
        )
    assert main(["verify", "s3://inside/a/s", "--quiet", *cli]) == 0


def test_the_help_documents_the_refusal_exit_status():
    commands = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    helps = {a.dest: a.help for a in commands._choices_actions}
    assert "exit status 4: it refused shards" in helps["run"]
    assert "exit status 1 when a region failed, else 4 when one refused shards" in helps["batch"]
