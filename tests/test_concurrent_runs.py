"""Many writers of one store: the shared store-root objects lose no writer's update (on a
local disk and on S3), one sweep claims a stale lease, a new store's manifest is created
once, a read says when the root coverage misses leaves of the tree, and two ``python -m
zagg run`` processes into one store at once leave a store that lists, reads, pyramids,
mirrors (Icechunk) and verifies whole. ``benchmarks/bench_concurrent.py`` runs the last
twenty times per case."""

import importlib
import subprocess
import sys
import warnings
from concurrent.futures import ThreadPoolExecutor

import pytest
from benches import BENCH
from test_hive_builders import NORTH, OCCUPIED, SOUTH, new_store, write_shard

import zagg
from zagg.hive.coverage import expand_ranges, read_root_coverage, update_root_coverage
from zagg.hive.manifest import build_manifest, read_manifest, update_manifest, write_manifest
from zagg.hive.storage import StoreRoot
from zagg.pyramid import lease
from zagg.read.leaves import IncompleteStoreWarning

#: the benchmark script's runner and checks (``benches`` put its folder on the path)
race = importlib.import_module("bench_concurrent")
assert race.__file__.startswith(str(BENCH))

#: rounds of each case here (benchmarks/bench_concurrent.py runs twenty)
ROUNDS = 1

#: one writer process: adds its own items, one update each, to one shared JSON list
WRITER = """
import json, sys
from zagg.hive.storage import StoreRoot
url, options, me, n = sys.argv[1], json.loads(sys.argv[2]), sys.argv[3], int(sys.argv[4])
root = StoreRoot(url, options or None)
for i in range(n):
    root.update_json(
        "shared.json",
        lambda cur, i=i: {"items": sorted(set((cur or {}).get("items", [])) | {f"{me}-{i}"})},
    )
"""


@pytest.fixture(scope="module")
def serial_s3():
    """storage_options of a local S3 server (moto) that answers one request at a time, with
    a bucket ``concurrent``: moto's threaded server does not make a conditional PUT's
    check and write atomic, as S3 does (see ``bench_concurrent.local_s3``)."""
    pytest.importorskip("moto.server")
    with race.local_s3() as options:
        yield options


def _store(where, request, tmp_path, name):
    """(url, storage_options) of a fresh store on a local disk or on the local S3 server."""
    if where == "local":
        return str(tmp_path / name), None
    return f"s3://concurrent/{tmp_path.name}-{name}", request.getfixturevalue("serial_s3")


@pytest.mark.parametrize("where", ["local", "s3"])
def test_writers_at_once_lose_no_update(tmp_path, where, request):
    """Four processes each add 30 items to one object, one update at a time: all 120
    stand (an unconditional read-modify-write loses some whenever two overlap)."""
    import json

    url, options = _store(where, request, tmp_path, "shared")
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", WRITER, url, json.dumps(options), me, "30"],
            stderr=subprocess.PIPE,
            text=True,
        )
        for me in "abcd"
    ]
    for p in procs:
        _, err = p.communicate(timeout=300)
        assert p.returncode == 0, err[-3000:]
    items = StoreRoot(url, options).read_json("shared.json")["items"]
    assert items == sorted(f"{me}-{i}" for me in "abcd" for i in range(30))


#: one publisher process: lists its own order-4 shards in the root coverage, one at a time
PUBLISHER = """
import json, sys
from zagg.hive.coverage import update_root_coverage
from zagg.hive.storage import StoreRoot
url, options, base, n = sys.argv[1], json.loads(sys.argv[2]), sys.argv[3], int(sys.argv[4])
root = StoreRoot(url, options or None)
for i in range(n):
    digits = "".join(str((i >> (2 * k)) % 4 + 1) for k in range(4))
    assert update_root_coverage(root, [base + digits], 4) is not None
"""


@pytest.mark.parametrize("where", ["local", "s3"])
def test_runs_publishing_at_once_lose_no_shard(tmp_path, where, request):
    """Four processes each list 25 shards of their own in one store's root coverage, one
    update each, all at once: every one of the 100 is listed."""
    import json

    url, options = _store(where, request, tmp_path, "publish")
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", PUBLISHER, url, json.dumps(options), base, "25"],
            stderr=subprocess.PIPE,
            text=True,
        )
        for base in "1234"
    ]
    for p in procs:
        _, err = p.communicate(timeout=300)
        assert p.returncode == 0, err[-3000:]
    listed = set(expand_ranges(read_root_coverage(StoreRoot(url, options))))
    assert len(listed) == 100 and {s[0] for s in listed} == set("1234")


@pytest.mark.parametrize("where", ["local", "s3"])
def test_one_sweep_claims_a_stale_lease(tmp_path, where, request):
    """Eight sweeps find one stale lease at once: exactly one claims it (naming the dead
    sweep), the others are refused naming the claimant; the dead sweep's beat stops it and
    its release leaves the claimant's lease; the holder's beat and release work on its own."""
    url, options = _store(where, request, tmp_path, "lease")
    root = StoreRoot(url, options)
    old = lease.acquire(root, "stage-dead", ttl_s=0)
    assert old.payload["claimed_from"] is None

    def claim(i):
        try:
            return lease.acquire(root, f"stage-{i}")
        except lease.SweepRefused as exc:
            return str(exc)

    with ThreadPoolExecutor(8) as pool:
        got = list(pool.map(claim, range(8)))
    held = [g for g in got if isinstance(g, lease.Lease)]
    assert len(held) == 1 and held[0].payload["claimed_from"] == "stage-dead"
    winner = held[0].run_id
    assert all(f"sweep {winner!r} holds this store" in g for g in got if isinstance(g, str))
    with pytest.raises(lease.SweepRefused, match=f"sweep {winner!r} claimed this sweep's"):
        old.beat()  # the dead sweep wakes: its lease is not its own any more, so it stops
    old.release()
    assert root.read_json(lease.LEASE_KEY)["run_id"] == winner
    held[0].beat()
    assert root.read_json(lease.LEASE_KEY)["heartbeat_at"] == held[0].payload["heartbeat_at"]
    held[0].release()
    assert root.read_json(lease.LEASE_KEY) is None


@pytest.mark.parametrize("where", ["local", "s3"])
def test_a_new_manifest_is_written_once_and_updates_compose(tmp_path, where, request):
    """Eight first runs ensure one manifest at once: one writes it, the others find it;
    then eight writers each record a key of their own in it at once, and all eight stand."""
    url, options = _store(where, request, tmp_path, "manifest")
    root = StoreRoot(url, options)
    manifest = build_manifest(
        dataset={"short_name": "T", "version": "1"}, semantic_hash="s", cell_order=6, shard_order=4
    )
    with ThreadPoolExecutor(8) as pool:
        written = list(pool.map(lambda _: write_manifest(root, manifest), range(8)))
    assert written.count(True) == 1

    def record(i):
        return update_manifest(root, lambda m: m.setdefault(f"k{i}", i) == i)

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(record, range(8)))
    manifest = read_manifest(root)
    assert {k: manifest[k] for k in manifest if k.startswith("k")} == {f"k{i}": i for i in range(8)}
    assert update_manifest(root, lambda m: False) is None  # nothing changed: nothing written


def test_a_read_says_when_the_tree_holds_leaves_the_coverage_misses(tmp_path):
    """Two stamped leaves in two base cells, a root coverage listing one: open_hive warns
    naming the other's directory (and reads the listed one); listing both, it is quiet."""
    root = str(tmp_path)
    new_store(root, "T", "1")
    write_shard(root, NORTH)
    write_shard(root, SOUTH, seed=2)
    update_root_coverage(root, [NORTH], 4)
    with pytest.warns(IncompleteStoreWarning, match=r"leaves under -3/1/ that its root"):
        ds = zagg.open_hive(root)
    assert ds.sizes["cells"] == len(OCCUPIED)  # the listed leaf's cells
    update_root_coverage(root, [SOUTH], 4)
    assert read_root_coverage(root)["ranges"] == [[NORTH, NORTH], [SOUTH, SOUTH]]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        zagg.open_hive(root)


@pytest.mark.parametrize("case", ["disjoint", "same"])
@pytest.mark.parametrize("where", ["local", "s3"])
def test_two_runs_at_once_leave_a_whole_store(tmp_path, where, case, request):
    """Two ``python -m zagg run`` processes start into one fresh store together, each on
    half the shards (``disjoint``) or both on all of them (``same``), with the sweep and the
    Icechunk companion: both exit 0, and the root coverage lists every stamped leaf (both
    runs'), open_hive reads what a walk reads, every declared level counts every point,
    Icechunk's main reads what the hive reads, and verify finds the store intact."""
    import yaml

    options = request.getfixturevalue("serial_s3") if where == "s3" else None
    cfg = tmp_path / "race.yaml"
    cfg.write_text(yaml.safe_dump(race.config(options)))
    shards = race.all_shards()
    assert len(shards) >= 2  # two halves
    logs = tmp_path / "logs"
    logs.mkdir()
    for i in range(ROUNDS):
        store = (
            f"s3://concurrent/{tmp_path.name}-{case}-{i}"
            if options
            else str(tmp_path / f"{case}-{i}")
        )
        race.run_pair(cfg, store, logs, race.plans(case, shards))
        race.check_store(store, options, set(shards))
