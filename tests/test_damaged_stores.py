"""Damaged stores: ``verify`` and ``inspect`` name the damage in one line each and keep going,
and a rerun heals a leaf whose commit stamp was torn.

One small two-leaf store is written with the CLI; every test damages its own copy the way
a crash, a bad disk or a stray edit would (flipped bytes, truncated objects, deleted
root objects) and checks the report lines and exit codes.
"""

import json
import re
import shutil

import pytest
import yaml
import zarr
from builders import IN_PROCESS_CLI, fields, grid_orders, pipeline_config, synthetic_source

from zagg import hive
from zagg.cli.main import main
from zagg.hive.coverage import root_envelope

CONFIG = pipeline_config(
    # four chunks = four short tracks, which land in two order-8 shards
    synthetic_source(points=20_000, seed=1, chunk_size=4_000, region=(-100.2, -75.6, -99.8, -75.4)),
    fields("count", "h_mean", "h_tdigest"),
    grid_orders(8, 12),
)
CLI = [*IN_PROCESS_CLI, "--quiet"]


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """(config path, store) of a run of CONFIG: two stamped leaves and the root coverage."""
    base = tmp_path_factory.mktemp("damaged")
    cfg = base / "cfg.yaml"
    cfg.write_text(yaml.safe_dump(CONFIG))
    store = base / "store"
    assert main(["run", str(cfg), "--store", str(store), *CLI]) == 0
    assert len(hive.walk_leaves(store)) == 2 and (store / "coverage.moc").exists()
    # the intact store verifies; this first check in the process also pays the readers'
    # one-time set-up, so no later check runs long enough to print its progress lines
    assert main(["verify", str(store), "--quiet"]) == 0
    return cfg, store


@pytest.fixture
def store(built, tmp_path):
    copy = tmp_path / "store"
    shutil.copytree(built[1], copy)
    return copy


def leaves(store):
    return [leaf for leaf, _ in hive.walk_leaves(store)]


def data_dir(store, leaf):
    """Where a leaf's arrays are: its current version's directory when it is versioned."""
    stamp = hive.read_stamp(hive.StoreRoot(store), leaf)
    return store / leaf / stamp["current"] if stamp.get("current") else store / leaf


#: verify's progress on stderr, which a slow machine prints after a few seconds
PROGRESS = re.compile(r"verify: \d+ of \d+ leaves checked")


def run_cli(capsys, *argv):
    """Exit status, stdout lines and stderr (without verify's progress lines) of one CLI
    command (a traceback fails the test)."""
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    err = "".join(line for line in err.splitlines(True) if not PROGRESS.fullmatch(line.strip()))
    return code, out.splitlines(), err


def line_with(lines, *parts):
    found = [line for line in lines if all(p in line for p in parts)]
    assert len(found) == 1, (parts, lines)
    return found[0]


def truncate(path, keep=None):
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2 if keep is None else keep])


def flip(path, at):
    data = bytearray(path.read_bytes())
    data[at] ^= 0xFF
    path.write_bytes(bytes(data))


# -- damaged leaf arrays -------------------------------------------------------------------
CRC = "a shard index fails its crc32c checksum: the object is corrupt or truncated"
# zarr 3.4 refuses a shard shorter than its index before it checks the index's crc32c
SHORT = (
    "a shard is shorter than its index: the object is corrupt or truncated"
    if tuple(int(p) for p in zarr.__version__.split(".")[:2]) >= (3, 4)
    else CRC
)
DAMAGES = {
    # the last 20 bytes of a sharded object are its (offset, nbytes) index and crc32c
    "flipped shard index": ("12/count/c/0", lambda p: flip(p, -10), "12/count", CRC),
    "truncated dense object": ("12/count/c/0", truncate, "12/count", SHORT),
    "truncated t-digest object": ("12/h_tdigest/c/0", truncate, "12/h_tdigest", CRC),
    "truncated array zarr.json": (
        "12/count/zarr.json",
        truncate,
        "12/count",
        "zarr.json does not parse (JSONDecodeError",
    ),
}


@pytest.mark.parametrize("damage", list(DAMAGES))
def test_verify_reports_an_unreadable_array_and_checks_the_other_leaf(store, capsys, damage):
    key, harm, array, reason = DAMAGES[damage]
    bad, good = leaves(store)
    harm(data_dir(store, bad) / key)
    code, lines, err = run_cli(capsys, "verify", store)
    assert code == 1 and err == ""
    line = line_with(lines, "unreadable", bad)
    assert line.split()[0] == "unreadable" and f"unreadable: {array} ({reason}" in line
    assert not any(good in line for line in lines)  # the intact leaf verifies: no line
    assert "  1 ok, 1 unreadable" in lines
    assert lines[-1] == "verification FAILED: 1 of 2 leaves damaged"


def test_verify_reports_every_damaged_leaf(store, capsys):
    first, second = leaves(store)
    flip(data_dir(store, first) / "12/h_mean/c/0", -3)
    truncate(data_dir(store, second) / "12/h_tdigest/zarr.json")
    code, lines, _ = run_cli(capsys, "verify", store)
    assert code == 1
    assert "12/h_mean" in line_with(lines, "unreadable", first)
    assert "12/h_tdigest (zarr.json does not parse" in line_with(lines, "unreadable", second)
    assert lines[-1] == "verification FAILED: 2 of 2 leaves damaged"


def test_an_unreadable_cell_group_hides_its_arrays_without_calling_them_missing(store, capsys):
    bad, _ = leaves(store)
    truncate(data_dir(store, bad) / "12/zarr.json")
    code, lines, _ = run_cli(capsys, "verify", store)
    line = line_with(lines, "unreadable", bad)
    assert code == 1 and "unreadable: 12 (zarr.json does not parse" in line
    assert "missing" not in line


# -- a torn commit stamp ---------------------------------------------------------------------
def test_a_truncated_stamp_reads_as_debris_with_a_warning(store, capsys):
    torn, good = leaves(store)
    truncate(store / torn / "zarr.json")
    code, lines, err = run_cli(capsys, "verify", store)
    assert code == 3 and err == ""  # intact, but not complete: a rerun finishes it
    line = line_with(lines, "debris", torn)
    assert line.split()[0] == "debris" and "(warning: " in line
    assert f"{torn}/zarr.json is not valid JSON" in line and "read as unstamped debris" in line
    assert "  1 debris, 1 ok" in lines and "verified: all stamped leaves intact" in lines
    assert lines[-1].startswith("incomplete: debris is left; run the same command again")

    code, lines, err = run_cli(capsys, "inspect", store)
    assert code == 0 and err == ""
    assert "leaves: 1 stamped, 1 debris (1 with an unreadable stamp)" in lines
    line = line_with(lines, torn, "DEBRIS")
    assert "warning: " in line and "is not valid JSON" in line
    assert line_with(lines, good, "cells_with_data=")


def test_a_store_with_only_debris_is_not_called_intact(store, capsys):
    for leaf in leaves(store):
        truncate(store / leaf / "zarr.json")
    code, lines, _ = run_cli(capsys, "verify", store)
    assert code == 3 and "intact" not in "\n".join(lines)
    assert lines[-2].startswith("no committed leaves yet: 2 leaves, all debris")
    assert lines[-1].startswith("incomplete: debris is left")


def test_a_rerun_rewrites_a_leaf_whose_stamp_is_torn(built, store, capsys):
    cfg, original = built
    torn, _ = leaves(store)
    truncate(store / torn / "zarr.json")
    assert main(["run", str(cfg), "--store", str(store), *CLI]) == 0
    capsys.readouterr()
    healed = hive.read_stamp(hive.StoreRoot(store), torn)
    expected = hive.read_stamp(hive.StoreRoot(original), torn)
    assert healed["content_hashes"] == expected["content_hashes"]
    code, lines, _ = run_cli(capsys, "verify", store)
    assert code == 0 and lines[-2:] == ["  2 ok", "verified: all stamped leaves intact"]


def test_the_writer_does_not_clear_a_torn_leaf_that_holds_versions(built, tmp_path):
    from zagg.hive.leaf import _check_clearable

    cfg = dict(CONFIG, output={**CONFIG["output"], "leaf_versions": False})
    path = tmp_path / "legacy.yaml"
    path.write_text(yaml.safe_dump(cfg))
    store = tmp_path / "legacy"
    assert main(["run", str(path), "--store", str(store), *CLI]) == 0
    torn, good = leaves(store)
    assert data_dir(store, good) == store / good  # an unversioned leaf
    root = hive.StoreRoot(store)
    _check_clearable(root, good)  # a stamped, unversioned leaf may be replaced
    truncate(store / torn / "zarr.json")
    _check_clearable(root, torn)  # debris may be cleared
    (store / torn / "run-20260101T000000Z").mkdir()
    with pytest.raises(
        ValueError,
        match=r"is not valid JSON.*version prefixes "
        r"\['run-20260101T000000Z'\]",
    ):
        _check_clearable(root, torn)
    versioned = hive.StoreRoot(built[1])
    with pytest.raises(ValueError, match="is a versioned leaf"):
        _check_clearable(versioned, leaves(built[1])[0])


# -- the manifest -----------------------------------------------------------------------------
def test_verify_fails_a_store_without_its_manifest(store, capsys):
    (store / "morton_hive.json").unlink()
    code, lines, _ = run_cli(capsys, "verify", store)
    assert code == 1
    line = line_with(lines, "manifest", "MISSING")
    assert f"{store}/morton_hive.json does not exist" in line
    assert "  2 ok" in lines and lines[-1] == "verification FAILED: the manifest is missing"


def test_verify_and_inspect_name_a_truncated_manifest(store, capsys):
    truncate(store / "morton_hive.json")
    code, lines, _ = run_cli(capsys, "verify", store)
    assert code == 1
    line = line_with(lines, "manifest", "UNREADABLE")
    assert line.startswith(
        f"  manifest       UNREADABLE: {store}/morton_hive.json is not valid JSON"
    )
    assert lines[-1] == "verification FAILED: the manifest is unreadable"
    code, out, err = run_cli(capsys, "inspect", store)
    assert code == 2 and out == []
    assert err.startswith(
        f"zagg: error: cannot inspect {store}: its manifest is unusable: "
        f"{store}/morton_hive.json is not valid JSON"
    )


def test_a_store_with_only_its_manifest_has_no_leaves_yet(store, capsys, tmp_path):
    only = tmp_path / "only-manifest"  # what a run that finds no points leaves
    only.mkdir()
    shutil.copy(store / "morton_hive.json", only)
    code, lines, _ = run_cli(capsys, "verify", only)
    assert code == 0 and lines[0] == f"verify {only}: 0 leaves"
    assert lines[-1].startswith("no leaves yet: the store holds only its manifest")
    assert "exit status 0" in lines[-1] and not any("FAILED" in line for line in lines)
    empty = tmp_path / "empty"
    empty.mkdir()
    code, lines, _ = run_cli(capsys, "verify", empty)
    assert code == 1 and "not a hive store" in line_with(lines, "manifest", "MISSING")


def test_a_path_that_does_not_exist_is_named_as_such(tmp_path, capsys):
    gone = tmp_path / "nonexistent"
    for command in ("inspect", "verify"):
        code, out, err = run_cli(capsys, command, gone)
        assert code == 2 and out == []
        assert err == f"zagg: error: {gone} does not exist\n"


# -- a run that stopped before its root coverage ----------------------------------------------
def test_verify_warns_when_the_root_coverage_is_missing(store, capsys):
    (store / "coverage.moc").unlink()
    code, lines, _ = run_cli(capsys, "verify", store)
    assert code == 3
    assert lines[-1].startswith("incomplete: the last run did not finish")
    verdict = lines.index("verified: all stamped leaves intact")
    assert lines[verdict + 1] == (
        "WARNING: the root coverage.moc is missing, although 2 leaves are stamped;"
    )
    assert "probably did not finish" in lines[verdict + 2] and "rerun" in lines[verdict + 2]
    code, lines, _ = run_cli(capsys, "inspect", store)
    assert code == 0 and line_with(lines, "WARNING: the root coverage.moc is missing")


def test_verify_warns_when_the_root_coverage_misses_a_stamped_leaf(store, capsys):
    (first, _), (_, second) = hive.walk_leaves(store)
    hive.StoreRoot(store).write_json("coverage.moc", root_envelope([second], 8))
    code, lines, _ = run_cli(capsys, "verify", store)
    assert code == 3 and "verified: all stamped leaves intact" in lines
    sid = hive.walk_leaves(store)[0][1]
    line = line_with(lines, "WARNING")
    assert line == (
        f"WARNING: the root coverage.moc does not list 1 of the 2 leaves stamped "
        f"(e.g. shard {sid});"
    )
    assert first.endswith(f"{sid}.zarr")


def test_an_intact_store_has_no_warning(store, capsys):
    code, lines, _ = run_cli(capsys, "verify", store)
    assert code == 0 and lines == [
        f"verify {store}: 2 leaves",
        "  2 ok",
        "verified: all stamped leaves intact",
    ]
    assert json.loads((store / "morton_hive.json").read_text())["shard_order"] == 8
