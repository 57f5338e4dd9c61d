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
            f"root is {store}: give that path\n"
        )
