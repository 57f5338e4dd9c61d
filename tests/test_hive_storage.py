"""Store-root primitives the re-run discipline rests on, locally and on S3."""

import time

import pytest

from zagg.hive.storage import StoreRoot


@pytest.fixture(params=["local", "s3"])
def root(request, tmp_path):
    if request.param == "local":
        return StoreRoot(tmp_path / "store")
    options, fs = request.getfixturevalue("moto_s3")
    bucket = f"storage-{time.monotonic_ns()}"
    fs.mkdir(bucket)
    return StoreRoot(f"s3://{bucket}/store", options)


def test_create_writes_only_when_absent(root):
    assert root.create("a/claim.json", b"first") is True
    assert root.create("a/claim.json", b"second") is False
    assert root.read_bytes("a/claim.json") == b"first"
    root.delete("a/claim.json")
    assert root.read_bytes("a/claim.json") is None
    root.delete("a/claim.json")  # absent: nothing to do
    assert root.create("a/claim.json", b"third") is True


def test_touch_keeps_bytes_and_moves_the_modification_time(root):
    root.write_bytes("x/obj", b"payload")
    before = root.fs.info(root._full("x/obj"))
    time.sleep(1.1)
    assert root.touch(["x/obj", "x/absent"]) == (1, 0)
    after = root.fs.info(root._full("x/obj"))
    assert root.read_bytes("x/obj") == b"payload"
    stamp = {"local": "mtime", "s3": "LastModified"}["local" if root.is_local else "s3"]
    assert after[stamp] > before[stamp]
    if not root.is_local:
        assert after["ETag"] == before["ETag"]


def test_list_keys_lists_every_object_under_a_prefix(root):
    for key in ("p/a", "p/q/b", "p/q/r/c", "other/d"):
        root.write_bytes(key, b"1")
    assert root.list_keys("p") == ["p/a", "p/q/b", "p/q/r/c"]
    assert root.list_keys("nothing") == []
