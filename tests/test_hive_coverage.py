"""Coverage: the tier-0 box, the bitmap sidecar, and the root ranges MOC (G7–G9)."""

from __future__ import annotations

import json

import mortie
import numpy as np
import pytest
import zstandard
from moczarr.coverage import decode_bitmap as moczarr_decode_bitmap
from moczarr.coverage import ranges_words

from zagg import grid
from zagg.hive import coverage, read_root_coverage, refresh_root_coverage, update_root_coverage
from zagg.hive.storage import StoreRoot

pytestmark = pytest.mark.filterwarnings("ignore::zarr.errors.UnstableSpecificationWarning")


def box_covers(members, shard_id, occupied, depth) -> bool:
    """Every occupied cell lies under some box member (string prefix = ancestor)."""
    cells = [coverage.rank_id(shard_id, int(r), depth) for r in np.flatnonzero(occupied)]
    return all(any(cell.startswith(m) for m in members) for cell in cells)


@pytest.mark.parametrize("shard_id", ["11213", "-31123"])
def test_box_is_a_small_cover_of_random_occupancy(shard_id):
    rng = np.random.default_rng(7)
    for depth in (1, 2, 3, 5):
        for density in (0.002, 0.05, 0.5, 1.0):
            occupied = rng.random(4**depth) < density
            if not occupied.any():
                occupied[rng.integers(4**depth)] = True
            slots = coverage.box(shard_id, occupied, depth)
            members = [m for m in slots if m is not None]
            assert len(slots) == 4 and 1 <= len(members) <= 4
            assert slots[len(members) :] == [None] * (4 - len(members))  # nulls trail
            assert all(isinstance(m, str) and m.startswith(shard_id) for m in members)
            assert box_covers(members, shard_id, occupied, depth)
            # each member is tight: its own occupied cells have it as deepest common ancestor
            for m in members:
                under = [
                    w
                    for w in grid.from_decimal(
                        [
                            coverage.rank_id(shard_id, int(r), depth)
                            for r in np.flatnonzero(occupied)
                        ]
                    )
                    if grid.to_decimal(w)[0].startswith(m)
                ]
                tight = mortie.common_ancestor(np.asarray(under, dtype=np.uint64))
                assert grid.to_decimal(tight)[0] == m


def test_box_example_g8():
    shard, depth = "-4211322", 6  # order 6 shard, cell order 12
    occupied = np.zeros(4**depth, dtype=bool)
    for tail in ("111111", "144444", "411111", "444444"):
        rank = int("".join(str(int(d) - 1) for d in tail), 4)
        occupied[rank] = True
    assert coverage.box(shard, occupied, depth) == ["-42113221", "-42113224", None, None]
    single = np.zeros(4**depth, dtype=bool)
    single[5] = True
    assert coverage.box(shard, single, depth) == [
        coverage.rank_id(shard, 5, depth),
        None,
        None,
        None,
    ]
    assert coverage.box(shard, np.ones(1, dtype=bool), 0) == [shard, None, None, None]
    with pytest.raises(ValueError, match="no occupied cell"):
        coverage.box(shard, np.zeros(16, dtype=bool), 2)


def test_bitmap_round_trip_msb_first_and_sizes():
    depth = 6
    occupied = np.zeros(4**depth, dtype=bool)
    occupied[[0, 7, 9, 4095]] = True
    payload, raw_size = coverage.encode_bitmap(occupied)
    assert raw_size == coverage.raw_bitmap_size(depth) == 512  # G7
    raw = zstandard.ZstdDecompressor().decompressobj().decompress(payload)
    assert len(raw) == 512
    assert raw[0] == 0b1000_0001 and raw[1] == 0b0100_0000 and raw[-1] == 0b0000_0001
    np.testing.assert_array_equal(coverage.decode_bitmap(payload, depth), occupied)
    shard = "-4211322"
    words = grid.from_decimal([coverage.rank_id(shard, r, depth) for r in (0, 7, 9, 4095)])
    np.testing.assert_array_equal(moczarr_decode_bitmap(payload, shard, 12), np.sort(words))
    small, size = coverage.encode_bitmap(np.array([False, True, False, True]))
    assert size == coverage.raw_bitmap_size(1) == 1
    assert zstandard.ZstdDecompressor().decompressobj().decompress(small) == bytes([0b0101_0000])


def test_bitmap_corruption_raises():
    payload, _ = coverage.encode_bitmap(np.ones(64, dtype=bool))
    with pytest.raises(ValueError, match="exactly 32 bytes"):
        coverage.decode_bitmap(payload, 4)  # right stream, wrong depth
    with pytest.raises(ValueError, match="not a valid zstd stream"):
        coverage.decode_bitmap(payload[:-3], 3)
    with pytest.raises(ValueError, match="not a valid zstd stream"):
        coverage.decode_bitmap(b"garbage!", 3)


def test_root_ranges_golden_g9():
    ids = ["-4211321", "-4211322", "-4211323", "-4211324", "5112333"]
    env = coverage.root_envelope(ids, 6, generated_at="2026-07-10T22:59:35+00:00")
    assert env == {
        "spec": "morton-moc/1",
        "encoding": "ranges",
        "order": 6,
        "source": "dispatcher",
        "generated_at": "2026-07-10T22:59:35+00:00",
        "ranges": [["5112333", "5112333"], ["-4211321", "-4211324"]],
    }
    assert sorted(coverage.expand_ranges(env)) == sorted(ids)
    np.testing.assert_array_equal(ranges_words(env), np.sort(grid.from_decimal(ids)))
    # runs never cross base cells, and a gap splits a run
    assert coverage.ranges(["14", "21", "22", "24"], 1) == [
        ["14", "14"],
        ["21", "22"],
        ["24", "24"],
    ]
    with pytest.raises(ValueError, match="not the MOC order"):
        coverage.ranges(["5112333", "511233"], 6)


def test_update_root_coverage_unions_and_is_fail_open(tmp_path, monkeypatch):
    root = str(tmp_path)
    first = update_root_coverage(root, ["-4211321", "-4211322"], 6)
    assert first["ranges"] == [["-4211321", "-4211322"]]
    second = update_root_coverage(root, ["-4211324", "5112333"], 6)
    assert second["ranges"] == [
        ["5112333", "5112333"],
        ["-4211321", "-4211322"],
        ["-4211324", "-4211324"],
    ]
    on_disk = json.loads((tmp_path / "coverage.moc").read_text())
    assert on_disk == second and read_root_coverage(root) == second
    # an object at another order or an unusable one is replaced
    with pytest.warns(UserWarning, match="at order 6, not 3"):
        update_root_coverage(root, ["5112"], 3)
    (tmp_path / "coverage.moc").write_text("{not json")
    assert read_root_coverage(root) is None
    assert update_root_coverage(root, ["5112"], 3)["ranges"] == [["5112", "5112"]]

    def broken(self, key, payload):
        raise OSError("bucket unreachable")

    monkeypatch.setattr(StoreRoot, "write_bytes", broken)
    with pytest.warns(UserWarning, match="not updated: bucket unreachable"):
        assert update_root_coverage(root, ["5113"], 3) is None


def test_refresh_rebuilds_from_stamped_leaves(tmp_path):
    from test_hive_builders import NORTH, SOUTH, new_store, write_shard

    root = str(tmp_path)
    new_store(root, "T", "1")
    write_shard(root, NORTH)
    write_shard(root, SOUTH, seed=2)
    env = refresh_root_coverage(root)
    assert env["source"] == "refresh"
    assert env["ranges"] == [[NORTH, NORTH], [SOUTH, SOUTH]]
