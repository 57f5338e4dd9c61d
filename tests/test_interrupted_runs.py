"""A run killed at any point, then the same command again, leaves the store an
uninterrupted run leaves: the same cells for zagg's reader and moczarr, the same root
coverage (and a windowed store's temporal coverage) and pyramid, and ``zagg verify`` exits 0.

Each killed run is a child ``python -m zagg run`` on its own cluster, stopped on cue by
watching its store (its manifest before any leaf, half of its leaf stamps, all of its leaf
stamps); the re-run is the same command line on a shared cluster.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
import warnings
from pathlib import Path

import moczarr
import numpy as np
import pytest
import yaml
from builders import YEARLY, fields, grid_orders, pipeline_config, synthetic_source
from icechunk_checks import repo_matches_hive

import zagg
from zagg import hive
from zagg.cli.main import main
from zagg.cluster.clients import cluster_for, usable_cores
from zagg.hive.coverage import expand_ranges, root_envelope
from zagg.read.inspect import EXIT_INTACT, verify_status
from zagg.read.leaves import IncompleteStoreWarning

REGION = [-100.3, -75.7, -99.7, -75.3]


def plain_config() -> dict:
    """Unwindowed, a pyramid declared and swept after the leaves."""
    return pipeline_config(
        synthetic_source(points=100_000, seed=4, chunk_size=6_000, region=REGION),
        fields("count", "h_mean"),
        grid_orders(9, 14, inner=12),
        name="SYN",
        sweep="stages",
    )


def windowed_config() -> dict:
    """Yearly windows with a timed digest: leaves carry temporal records, so the root's
    temporal section and ``coverage.toc`` are built from every leaf."""
    cfg = plain_config()
    cfg["data_source"]["variables"] = ["h_ph", "delta_time"]
    cfg["aggregation"]["variables"]["h_tdigest"] = {
        "function": "tdigest",
        "source": "h_ph",
        "timed": True,
        "params": {"delta": 16},
    }
    out = cfg["output"]
    out.pop("sweep")
    out["pyramid"] = False
    out["windowing"] = dict(YEARLY)
    return cfg


def stamps(store: Path) -> list[Path]:
    """The leaf pointers (root ``zarr.json`` of ``{id}.zarr`` or ``{id}_{window}.zarr``)."""
    return [p for p in store.glob("-*/**/-*.zarr/zarr.json")]


def _as_at_a_terminal() -> None:
    """A killed run's process: Ctrl-C interrupts it as at a terminal (a shell running the
    suite in the background ignores SIGINT, and its children inherit that), and it runs
    at a lower priority than the watcher, which on a busy machine (another test beside
    this one) still looks often enough to kill each run while its cue holds."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    os.nice(10)


def killed_runs(kills: list[tuple[Path, Path, int, object]], budget=120) -> list[int]:
    """Start one ``python -m zagg run CONFIG --store STORE`` per ``(config, store, signal,
    cue)`` at once, each on its own cluster (one worker of a thread per core, which runs in
    the command's process), and send each its signal once ``cue(store)``
    holds; returns how many leaf pointers each store held at its kill."""
    env = {**os.environ, "PYTHONPATH": str(Path(zagg.__file__).parents[1])}
    children = [
        subprocess.Popen(
            [sys.executable, "-m", "zagg", "run", str(config), "--store", str(store)]
            + ["--workers", "1", "--threads", str(usable_cores()), "--quiet"],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            preexec_fn=_as_at_a_terminal,
        )
        for config, store, _, _ in kills
    ]
    at_kill: list[int | None] = [None] * len(kills)
    deadline = time.monotonic() + budget
    try:
        while any(n is None for n in at_kill):
            assert time.monotonic() < deadline, "a run never reached its cue"
            for i, ((_, store, sig, cue), child) in enumerate(zip(kills, children, strict=True)):
                if at_kill[i] is not None or not cue(store):
                    continue
                at_kill[i] = len(stamps(store))
                assert child.poll() is None, f"the run ended before its cue: {child.stderr.read()}"
                child.send_signal(sig)
            time.sleep(0.005)
        for child in children:
            child.wait(budget)
    finally:
        for child in children:
            if child.poll() is None:
                child.kill()
                child.wait()
    for (_, store, _, _), child in zip(kills, children, strict=True):
        assert child.returncode in (130, -signal.SIGKILL), (
            f"{store.name}: exit {child.returncode}: {child.stderr.read()}"
        )
    return at_kill


def rerun(config: Path, store: Path, address: str) -> None:
    argv = ["run", str(config), "--store", str(store), "--scheduler", address, "--quiet"]
    assert main(argv) == 0


def cells(store: Path, windowed: bool) -> dict:
    """What each reader sees: per window (None unwindowed), cell words → count."""
    out = {}
    for window in windows_of(store) if windowed else [None]:
        ours = zagg.open_hive(store, window=window)
        theirs = moczarr.open_hive(str(store), window=window)
        pairs = zip(ours["morton"].values.tolist(), ours["count"].values.tolist(), strict=True)
        seen = dict(pairs)
        # moczarr reads every cell of the leaves it finds: the occupied ones hold a count
        counts = np.asarray(theirs["count"].values)
        held = counts > 0
        words = np.asarray(theirs["morton"].values)[held]
        assert dict(zip(words.tolist(), counts[held].tolist(), strict=True)) == seen
        out[window] = seen
    return out


def windows_of(store: Path) -> list[str]:
    return sorted({p.name.split("_")[1][: -len(".zarr")] for p in store.glob("-*/**/*_*.zarr")})


def root_objects(store: Path) -> dict:
    """The store-root objects a run finishes, without their write times and run ids."""

    def plain(value):
        if isinstance(value, dict):
            return {
                k: plain(v)
                for k, v in value.items()
                if k not in ("generated_at", "run_id", "written_at")
            }
        if isinstance(value, list):
            return [plain(v) for v in value]
        return value

    found = {}
    for name in ("coverage.moc", "coverage.toc", "morton_hive.json"):
        p = store / name
        if p.exists():
            found[name] = plain(json.loads(p.read_text()))
    return found


def overviews(store: Path) -> list[str]:
    return sorted(str(p.parent.relative_to(store)) for p in store.glob("**/all*.zarr/zarr.json"))


@pytest.fixture(scope="module")
def cluster():
    with cluster_for(None, workers=1, threads=2) as c:
        yield c.scheduler_address


@pytest.fixture(scope="module")
def clean(tmp_path_factory, cluster) -> dict[str, tuple[Path, Path]]:
    """kind → (config file, the store an uninterrupted run of it writes), for the plain and
    the windowed config; tests that change a store change a copy of it."""
    base = tmp_path_factory.mktemp("clean")
    out = {}
    for kind, raw in (("plain", plain_config()), ("windowed", windowed_config())):
        config = base / f"{kind}.yaml"
        config.write_text(yaml.safe_dump(raw))
        rerun(config, base / kind, cluster)
        out[kind] = (config, base / kind)
    return out


def _before_leaves(store: Path) -> bool:
    return (store / "morton_hive.json").exists()


def _some_leaves(total: int):
    def _some_leaves(store: Path) -> bool:
        return len(stamps(store)) >= total // 2

    return _some_leaves


def _all_leaves(total: int):
    def _all_leaves(store: Path) -> bool:
        return len(stamps(store)) >= total

    return _all_leaves


def test_a_killed_run_run_again_leaves_the_store_an_uninterrupted_run_leaves(
    tmp_path, cluster, clean
):
    """An unwindowed run with a chained sweep killed before its leaves (SIGINT), during
    them (SIGKILL) and after them (SIGINT), and a windowed one with timed leaves killed
    during them (SIGKILL); then the same command again."""
    cases = {}
    for kind, (config, store) in clean.items():
        total = len(stamps(store))
        want = cells(store, kind == "windowed")
        assert total >= 6 and sum(len(c) for c in want.values()) > 200
        cases[kind] = (config, store, total, want)
    assert overviews(cases["plain"][1])
    kills, bounds = [], []
    for kind, (config, _, total, _) in cases.items():
        points = [  # (signal, cue, leaves stamped at the kill: at least, at most)
            (signal.SIGKILL, _some_leaves(total), total // 2, total - 1),
            (signal.SIGINT, _all_leaves(total), total, total),
        ]
        if kind == "plain":  # (a windowed run's leaves are written as an unwindowed one's)
            points.insert(0, (signal.SIGINT, _before_leaves, 0, 0))
        else:
            points.pop()
        for sig, cue, lo, hi in points:
            kills.append((config, tmp_path / kind / f"{sig}-{cue.__name__}", sig, cue))
            bounds.append((kind, lo, hi))
    at_kill = killed_runs(kills)
    for (config, store, sig, cue), n, (kind, lo, hi) in zip(kills, at_kill, bounds, strict=True):
        _, whole, total, want = cases[kind]
        what = f"{kind}, {signal.Signals(sig).name} at {cue.__name__}: {n} of {total} leaves"
        assert lo <= n <= hi, what
        rerun(config, store, cluster)
        assert cells(store, kind == "windowed") == want, what
        assert root_objects(store) == root_objects(whole), what
        assert overviews(store) == overviews(whole), what
        report, status = verify_status(store)
        assert status == EXIT_INTACT, f"{what}\n{report}"
        repo_matches_hive(store)  # the Icechunk companion's latest snapshot reads the hive


def test_an_unchanged_rerun_reports_the_cells_the_store_holds(tmp_path, cluster):
    config = tmp_path / "plain.yaml"
    config.write_text(yaml.safe_dump(plain_config()))
    store = tmp_path / "s"
    first = zagg.run(config, store=str(store), scheduler=cluster, progress=False)
    held = int((zagg.open_hive(store)["count"].values > 0).sum())
    assert first.cells_with_data == first.cells_written == held > 0
    again = zagg.run(config, store=str(store), scheduler=cluster, progress=False)
    assert again.leaves_written == 0 and again.units["current"] == first.leaves_written
    assert again.cells_with_data == held and again.cells_written == 0
    assert f"cells with data {held:,} (0 in the 0 leaves written)" in again.lines()


def test_open_hive_warns_of_an_incomplete_store(tmp_path, cluster, clean):
    (plain, whole_a), (windowed, whole_b) = clean["plain"], clean["windowed"]
    a, b = tmp_path / "a", tmp_path / "b"
    shutil.copytree(whole_a, a)  # two stores of uninterrupted runs
    shutil.copytree(whole_b, b)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a complete store opens without a word
        whole = zagg.open_hive(a)
        zagg.open_hive(b, window=windows_of(b)[0])
    # what a run killed before its root objects leaves: no root coverage, or one without
    # the shards it wrote
    (a / "coverage.moc").unlink()
    with pytest.warns(IncompleteStoreWarning, match=rf"{a} is incomplete: .*Run the same zagg run"):
        walked = zagg.open_hive(a)
    assert walked.sizes == whole.sizes  # the walk still finds every leaf
    moc = json.loads((b / "coverage.moc").read_text())
    listed = expand_ranges(moc)
    (b / "coverage.moc").write_text(json.dumps(root_envelope(listed[1:], moc["order"])))
    with pytest.warns(IncompleteStoreWarning, match="does not list 1 of its shards"):
        zagg.open_hive(b, windows="all")
    rerun(plain, a, cluster)  # the same command again completes both
    rerun(windowed, b, cluster)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        zagg.open_hive(a)
        zagg.open_hive(b, windows="all")


def test_a_run_resumed_on_s3_lists_its_current_leaves_at_the_root(tmp_path, cluster, moto_s3):
    """On an object store alike: half the leaves stamped (whole, with their sidecars and
    columns), the other half and every root object but the manifest never written (what a
    run killed mid-write leaves there), then the same run again."""
    options, fs = moto_s3
    fs.mkdir("resumed")
    raw = plain_config()
    # five leaves, not ten: every object costs the local S3 server a request
    raw["data_source"]["synthetic"]["points"] = 20_000
    raw["output"]["storage_options"] = dict(options)
    clean, store = "s3://resumed/clean", "s3://resumed/killed"
    zagg.run(raw, store=clean, scheduler=cluster, progress=False)
    zagg.run(raw, store=store, scheduler=cluster, progress=False)
    root = hive.StoreRoot(store, options)
    leaves = sorted(hive.walk_leaves(root))
    for rel, _ in leaves[: len(leaves) // 2]:  # these were never written
        node = rel.rsplit("/", 1)[0]
        for key in root.list_keys(node):
            if "/all.zarr" not in key:
                fs.rm(f"resumed/killed/{key}")
    for key in ("coverage.moc", *[k for k in root.list_keys("-5") if "/all.zarr/" in k]):
        fs.rm(f"resumed/killed/{key}")
    again = zagg.run(raw, store=store, scheduler=cluster, progress=False)
    assert again.units["current"] == len(leaves) - len(leaves) // 2
    assert again.leaves_written == len(leaves) // 2

    def seen(url):
        ds = zagg.open_hive(url, options)
        return dict(zip(ds["morton"].values.tolist(), ds["count"].values.tolist(), strict=True))

    assert seen(store) == seen(clean)
    for key in ("coverage.moc", "morton_hive.json"):
        ours, theirs = (json.loads(fs.cat(f"resumed/{s}/{key}")) for s in ("killed", "clean"))
        assert same_but_times_and_runs(ours, theirs), key
    report, status = verify_status(store, options)
    assert status == EXIT_INTACT, report
    repo_matches_hive(store, options)  # the Icechunk companion's latest snapshot too


def same_but_times_and_runs(a, b) -> bool:
    drop = ("generated_at", "run_id", "written_at")
    if isinstance(a, dict) and isinstance(b, dict):
        keys = (set(a) | set(b)) - set(drop)
        return all(k in a and k in b and same_but_times_and_runs(a[k], b[k]) for k in keys)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(map(same_but_times_and_runs, a, b))
    return a == b


def test_a_sweep_killed_before_its_finisher_is_completed_by_the_next_run(tmp_path, cluster, clean):
    """The leaves done and some of the ladder folded, but the manifest's actuals never
    written and the coarsest overview missing: the same run again (every leaf current)
    folds only what is missing and records every level's actuals as an uninterrupted run
    does."""
    config, whole = clean["plain"]
    store = tmp_path / "s"
    shutil.copytree(whole, store)  # a store of an uninterrupted run
    manifest = json.loads((store / "morton_hive.json").read_text())
    for entry in manifest["pyramid"]["overviews"]:
        entry.pop("actuals", None)
    (store / "morton_hive.json").write_text(json.dumps(manifest))
    for top in store.glob("-*/all.zarr"):
        shutil.rmtree(top)
    again = zagg.run(config, store=str(store), scheduler=cluster, progress=False)
    assert again.leaves_written == 0 and again.sweep.folded == 1
    assert root_objects(store) == root_objects(whole)
    assert overviews(store) == overviews(whole)
