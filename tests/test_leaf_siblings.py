"""What a versioned leaf shares with other writers: its pointer, its sidecars and its column
are written under the leaf's claim, one writer at a time, so two writers racing on one leaf
leave siblings that describe the current version whole."""

from __future__ import annotations

import json
import threading
import time

import pytest
from test_hive_builders import NORTH, new_store, write_shard

from zagg.hive import claims, read_stamp, read_stats
from zagg.hive.storage import StoreRoot
from zagg.hive.versions import new_run_id, new_version


def _wait_for(predicate, timeout=30.0):
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


def test_racing_writers_publish_a_leaf_and_its_siblings_one_at_a_time(tmp_path):
    """Two writers of one leaf, held at its claim (here) once their versions are stamped:
    the pointer does not move until the claim is given back; then each publishes in turn,
    and the sidecar and the derived objects are those of the version left current."""
    root = StoreRoot(str(new_store(tmp_path)))
    leaf = write_shard(root, NORTH, version=new_version(new_run_id()))[0]["path"]
    first = _current(root, leaf)
    derived: list[str] = []
    records: dict[str, dict] = {}

    def writer(name: str, seed: int) -> None:
        records[name], _ = write_shard(
            root,
            NORTH,
            seed=seed,
            version=new_version(new_run_id()),
            derived=lambda rec: derived.append(rec["version"]),
        )

    threads = [threading.Thread(target=writer, args=(n, s)) for n, s in (("a", 1), ("b", 2))]
    with claims.holding(root, leaf, "the-test"):
        for t in threads:
            t.start()
        _wait_for(lambda: _stamped_versions(root, leaf) == 3)  # both versions are stamped
        time.sleep(0.2)
        assert _current(root, leaf) == first  # but neither is published yet
        assert not derived
    for t in threads:
        t.join(30)
    current = _current(root, leaf)
    last = next(r for r in records.values() if r["version"] == current)
    assert sorted(derived) == sorted(r["version"] for r in records.values())
    assert derived[-1] == current  # the last to publish wrote the siblings last
    assert read_stats(root, NORTH)["content_hashes"] == last["content_hashes"]
    assert records["a"]["content_hashes"] != records["b"]["content_hashes"]
    assert not root.exists(claims.claim_key(leaf))  # given back


def _stamped_versions(root, leaf):
    return sum(
        read_stamp(root, f"{leaf}/{d}") is not None
        for d in root.list_dir(leaf)[0]
        if d.startswith("run-")
    )


def _current(root, leaf):
    stamp = read_stamp(root, leaf)
    return None if stamp is None else stamp.get("current")


def test_a_claim_past_its_ttl_is_taken_over_and_a_live_one_is_waited_for(tmp_path):
    root = StoreRoot(str(tmp_path / "s"))
    leaf = "0/1/2.zarr"
    dead = {
        "spec": claims.CLAIM_SPEC,
        "run_id": "dead",
        "token": "x",
        "claimed_at": time.time() - 10,
        "ttl_s": 5.0,
    }
    root.write_bytes(claims.claim_key(leaf), json.dumps(dead).encode())
    t0 = time.monotonic()
    with claims.holding(root, leaf, "mine", ttl_s=5.0) as held:
        assert time.monotonic() - t0 < 5  # stale at once: taken over, not waited for
        assert root.read_json(held.key)["run_id"] == "mine"
        with pytest.raises(claims.LeafHeldError, match="'mine'"):
            claims.claim_leaf(root, leaf, "other")
        got = []

        def wait_then_hold():
            with claims.holding(root, leaf, "other") as claim:
                got.append(root.read_json(claim.key)["run_id"])

        waiter = threading.Thread(target=wait_then_hold)
        waiter.start()
        time.sleep(0.3)
        assert not got  # a live claim is waited for
    waiter.join(10)
    assert got == ["other"]  # taken once given back, and given back in turn
    assert not root.exists(claims.claim_key(leaf))


def test_the_claim_of_a_process_that_is_gone_is_taken_over_at_once(tmp_path):
    """A run killed while it held a claim (its process gone) does not make the next run
    wait out the ttl; a live process's claim, or one from another host, is respected."""
    import subprocess
    import sys

    root = StoreRoot(str(tmp_path / "s"))
    leaf = "0/1/2.zarr"
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()

    def held_by(pid, host=None):
        body = {
            "spec": claims.CLAIM_SPEC,
            "run_id": f"pid-{pid}",
            "token": "x",
            "claimed_at": time.time(),
            "ttl_s": 600.0,
            "host": host or claims.process_host(),
            "pid": pid,
        }
        root.write_bytes(claims.claim_key(leaf), json.dumps(body).encode())

    held_by(gone.pid)
    t0 = time.monotonic()
    with claims.holding(root, leaf, "mine") as held:
        assert time.monotonic() - t0 < 5
        assert root.read_json(held.key)["run_id"] == "mine"
    live = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        held_by(live.pid)
        with pytest.raises(claims.LeafHeldError, match=f"'pid-{live.pid}'"):
            claims.claim_leaf(root, leaf, "other")
    finally:
        live.kill()
        live.wait()
    held_by(gone.pid, host="elsewhere/pid:[1]")
    with pytest.raises(claims.LeafHeldError, match=f"'pid-{gone.pid}'"):
        claims.claim_leaf(root, leaf, "other")


def test_a_local_object_is_replaced_whole(tmp_path):
    """Local writes land whole, like a PUT: a reader polling the key sees the old bytes
    or the new ones, never a part (and no staging file is left behind)."""
    root = StoreRoot(str(tmp_path / "s"))
    old, new = b"a" * 4_000_000, b"b" * 3_000_000
    root.write_bytes("k/zarr.json", old)
    seen = set()
    stop = threading.Event()

    def reader():
        while not stop.is_set():
            data = root.read_bytes("k/zarr.json")
            seen.add((len(data), data[:1], data[-1:]))

    t = threading.Thread(target=reader)
    t.start()
    for _ in range(20):
        root.write_bytes("k/zarr.json", new)
        root.write_bytes("k/zarr.json", old)
    stop.set()
    t.join()
    assert seen <= {(len(old), b"a", b"a"), (len(new), b"b", b"b")}
    assert sorted(p.name for p in (tmp_path / "s" / "k").iterdir()) == ["zarr.json"]
    assert root.create("k/claim.json", b"x") and not root.create("k/claim.json", b"y")
    assert root.read_bytes("k/claim.json") == b"x"
    assert sorted(p.name for p in (tmp_path / "s" / "k").iterdir()) == ["claim.json", "zarr.json"]
