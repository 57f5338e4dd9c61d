"""What a versioned leaf shares with other writers: its sidecars and its column are written
under the leaf's claim, and only by the writer whose version the pointer names, so two
writers racing on one leaf leave siblings that describe the current version whole."""

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


def test_the_writer_superseded_before_its_siblings_leaves_them_to_the_current_one(tmp_path):
    """Writer A's pointer lands, then B's, while both wait for the claim (held here): A then
    finds it no longer current and writes no sibling; B writes its sidecars and its derived
    objects, once."""
    root = StoreRoot(str(new_store(tmp_path)))
    leaf = write_shard(root, NORTH, version=new_version(new_run_id()))[0]["path"]
    first = _current(root, leaf)
    derived: list[str] = []
    records: dict[str, dict] = {}

    def writer(name: str, seed: int) -> None:
        version = new_version(new_run_id())
        records[name], _ = write_shard(root, NORTH, seed=seed, version=version,
                                       derived=lambda rec: derived.append(rec["version"]))

    with claims.holding(root, leaf, "the-test"):
        a = threading.Thread(target=writer, args=("a", 1))
        a.start()
        _wait_for(lambda: _current(root, leaf) != first)  # A's pointer landed
        a_version = _current(root, leaf)
        b = threading.Thread(target=writer, args=("b", 2))
        b.start()
        _wait_for(lambda: _current(root, leaf) != a_version)  # then B's
    a.join(30)
    b.join(30)
    assert records["a"]["superseded"] is True and "superseded" not in records["b"]
    assert derived == [records["b"]["version"]]  # the column step ran once, for B
    assert read_stamp(root, leaf)["current"] == records["b"]["version"]
    stats = read_stats(root, NORTH)
    assert stats["content_hashes"] == records["b"]["content_hashes"]
    assert records["a"]["content_hashes"] != records["b"]["content_hashes"]
    assert not root.exists(claims.claim_key(leaf))  # given back


def _current(root, leaf):
    stamp = read_stamp(root, leaf)
    return None if stamp is None else stamp.get("current")


def test_a_claim_past_its_ttl_is_taken_over_and_a_live_one_is_waited_for(tmp_path):
    root = StoreRoot(str(tmp_path / "s"))
    leaf = "0/1/2.zarr"
    dead = {"spec": claims.CLAIM_SPEC, "run_id": "dead", "token": "x",
            "claimed_at": time.time() - 10, "ttl_s": 5.0}
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
    assert sorted(p.name for p in (tmp_path / "s" / "k").iterdir()) == ["claim.json",
                                                                         "zarr.json"]
