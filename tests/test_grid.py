"""Grid goldens: mortie keying, the spec §1.5 cell-coordinate law, decimal ids, hive paths."""

import mortie
import numpy as np
import pytest

from zagg import grid as G

NORTH_9 = mortie.geo2mort(np.array([60.5]), np.array([45.0]), order=9)[0]
SOUTH_9 = mortie.geo2mort(np.array([-75.0]), np.array([-100.0]), order=9)[0]


def test_point_words_are_mortie_authalic_point_words():
    w, ok = G.point_words([-75.0, 60.5], [-100.0, 45.0])
    assert ok.all()
    assert w[0] == np.uint64(12757625241683908284)  # MORTIE.md golden
    assert mortie.is_point(w).all() and (mortie.orders_of(w) == 29).all()


def test_nonfinite_and_out_of_range_points_are_not_keyed():
    w, ok = G.point_words([np.nan, 10.0, 91.0, -90.0], [0.0, np.inf, 0.0, 0.0])
    np.testing.assert_array_equal(ok, [False, False, False, True])
    assert (w[:3] == 0).all() and w[3] != 0


@pytest.mark.parametrize("order", [0, 1, 5, 9, 19, 27, 28, 29])
def test_ancestor_equals_clip2order(order):
    rng = np.random.default_rng(order)
    w, _ = G.point_words(rng.uniform(-89, 89, 5000), rng.uniform(-180, 180, 5000))
    np.testing.assert_array_equal(G.ancestor(w, order), mortie.clip2order(order, w))


@pytest.mark.parametrize("order", [0, 9, 19, 27, 28, 29])
def test_cell_words_are_the_ancestors_of_point_words(order):
    """Keying straight at the cell order gives the point word's ancestor, also on the
    base-cell boundaries (lat ±41.81°, lon multiples of 90°), at the poles and on a lattice
    of round coordinates, and refuses exactly the points point_words refuses."""
    rng = np.random.default_rng(order)
    z = np.degrees(np.arcsin(2 / 3))
    lat = np.concatenate(
        [
            rng.uniform(-90, 90, 200_000),
            np.repeat([-90, -z, 0, z, 90], 9),
            np.repeat(np.arange(-89.5, 90, 0.5), 8),
            [np.nan, 91.0, 10.0],
        ]
    )
    lon = np.concatenate(
        [
            rng.uniform(-180, 180, 200_000),
            np.tile(np.arange(-180, 181, 45), 5),
            np.tile(np.arange(-180, 180, 45.0), 359),
            [0.0, 0.0, np.inf],
        ]
    )
    w, ok = G.point_words(lat, lon)
    c, c_ok = G.cell_words(lat, lon, order)
    np.testing.assert_array_equal(c_ok, ok)
    np.testing.assert_array_equal(c[ok], G.ancestor(w[ok], order))
    assert (c[~ok] == 0).all()


@pytest.mark.parametrize("shard", [NORTH_9, SOUTH_9], ids=["north", "south"])
def test_cell_law_matches_mortie_children_at_c19_p9(shard):
    words = G.shard_cell_words(shard, 9, 19)
    children = mortie.generate_morton_children(shard, 19)
    assert words.shape == (1_048_576,)
    np.testing.assert_array_equal(words, children)
    assert words[0] == shard + np.uint64(10)  # word[0] = shard word + (c - p)
    assert int(words[1]) - int(words[0]) == 4_194_304  # stride 2^(60 - 2c)
    assert int(words[-1]) - int(words[0]) == 4_398_042_316_800  # 1,048,575 * 4,194,304


def test_southern_progression_is_unsigned():
    words = G.shard_cell_words(SOUTH_9, 9, 19)
    assert int(words[0]) >> 63 == 1  # bit 63 set: never view as int64
    assert words.dtype == np.uint64 and np.all(np.diff(words) == np.uint64(4_194_304))


def test_stride_at_order_6_is_2_to_48():
    assert G.stride(6) == 281_474_976_710_656


def test_cell_rank_inverts_the_law():
    words = G.shard_cell_words(SOUTH_9, 9, 14)
    np.testing.assert_array_equal(G.cell_rank(words, SOUTH_9, 9, 14), np.arange(4**5))


def test_decimal_roundtrip_and_prefix_ancestry():
    w = mortie.geo2mort(np.array([-75.0, 60.5]), np.array([-100.0, 45.0]), order=19)
    ids = G.to_decimal(w)
    assert ids == ["-51211411411321131211", "14141444444411114441"]
    np.testing.assert_array_equal(G.from_decimal(ids), w)
    shard_ids = G.to_decimal(G.ancestor(w, 9))
    assert all(c.startswith(s) for c, s in zip(ids, shard_ids, strict=True))


def test_hive_paths_and_leaf_names():
    assert G.hive_path("-5112333") == "-5/1/1/2/3/3/3/-5112333.zarr"
    assert G.hive_path("-31123") == "-3/1/1/2/3/-31123.zarr"
    assert G.hive_path("11213", window="2019") == "1/1/2/1/3/11213_2019.zarr"
    assert G.parse_leaf_name("11213_2019.zarr") == ("11213", "2019")
    assert G.parse_leaf_name("-5112333.zarr") == ("-5112333", None)
    assert G.id_order("-5121141141") == 9


@pytest.mark.parametrize(
    "bad", ["", "7", "-0", "15", "1/2", "..", "-5112333p", "11a", "1 2", "1" + "1" * 30]
)
def test_bad_ids_are_refused(bad):
    with pytest.raises(ValueError, match="morton decimal area id|deeper than order"):
        G.hive_path(bad)


def test_window_labels_are_validated():
    with pytest.raises(ValueError, match="window label"):
        G.leaf_name("11213", "all")
    with pytest.raises(ValueError, match="window label"):
        G.leaf_name("11213", "../x")


def test_pin_threads_sets_rayon(monkeypatch):
    monkeypatch.delenv("RAYON_NUM_THREADS", raising=False)
    G.pin_threads(1)
    import os

    assert os.environ["RAYON_NUM_THREADS"] == "1"


def test_ancestor_id_is_the_id_of_the_ancestor_word():
    ids = ["-5121141141", "4123", "61"]
    for cell_id in ids:
        order = G.id_order(cell_id)
        for k in range(order + 1):
            expect = G.to_decimal(G.ancestor(G.from_decimal([cell_id]), k))[0]
            assert G.ancestor_id(cell_id, k) == expect
    assert G.ancestor_id("-5121141141", 3) == "-5121"
