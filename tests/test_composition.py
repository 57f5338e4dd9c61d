"""zagg-composition/1 words: golden vectors, quantization, packing and the merge law.

moczarr's reader-side decoders serve as an independent oracle for the bytes we write.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from moczarr.composition import (
    counts_from_composition,
    named_lanes,
    parse_composition_attrs,
    unpack_composition,
)

from zagg.kernels.composition import (
    COMPOSITION_SPEC,
    LANES,
    compose,
    composition_attrs,
    counts,
    merge,
    merge_kway,
    pack,
    pack_cells,
    quantize,
    unpack,
)

GOLDEN = 0xFF000000FF0000FF


def _csr(sizes) -> np.ndarray:
    return np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)


def _ref_quantize(c, n):
    """Float reference: rint is half-even; exact for the N used in these tests."""
    c = np.asarray(c, dtype=np.float64)
    n = np.asarray(n, dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        k = np.clip(np.rint(255.0 * c / n), 0, 255)
    k = np.where(c > 0, np.maximum(k, 1), k)
    return np.where(n > 0, k, 0).astype(np.uint8)


def _ref_pack(conf, offsets, threshold):
    """Brute-force numpy packing: per-cell counts, quantized by the reference."""
    m = len(offsets) - 1
    lanes = np.zeros((m, 8), dtype=np.uint8)
    n_sig = np.zeros(m, dtype=np.int64)
    for c in range(m):
        rows = conf[offsets[c] : offsets[c + 1]].astype(np.int64)
        top = rows.max(axis=1) if len(rows) else np.zeros(0, np.int64)
        sig = rows[top >= threshold]
        top = top[top >= threshold]
        cnt = np.concatenate(
            [(sig >= threshold).sum(axis=0), [(top == lv).sum() for lv in (2, 3, 4)]]
        )
        n_sig[c] = len(sig)
        lanes[c] = _ref_quantize(cnt, len(sig))
    return pack(lanes), n_sig


class TestConstants:
    def test_spec_and_lanes(self):
        assert COMPOSITION_SPEC == "zagg-composition/1"
        assert LANES == (
            "land",
            "ocean",
            "sea_ice",
            "land_ice",
            "inland_water",
            "low",
            "med",
            "high",
        )

    def test_attrs_block_parses_in_moczarr(self):
        block = composition_attrs("h_tdigest_signal", 2)
        assert block == {
            "spec": COMPOSITION_SPEC,
            "lanes": list(LANES),
            "of": "h_tdigest_signal",
            "threshold": 2,
        }
        parsed = parse_composition_attrs({"composition": block})
        assert parsed == {"lanes": LANES, "of": "h_tdigest_signal", "threshold": 2}

    @pytest.mark.parametrize("of, threshold", [("", 2), (None, 2), ("d", 2.0), ("d", True)])
    def test_attrs_block_refuses_bad_values(self, of, threshold):
        with pytest.raises(ValueError):
            composition_attrs(of, threshold)


class TestPackComposition:
    def test_golden_word_pins_lsb_first_byte_order(self):
        conf = np.array([[4, -1, 0, 3, 1]], dtype=np.int8)
        words, n = pack_cells(conf, np.array([0, 1]), 2)
        assert int(words[0]) == GOLDEN
        assert int(words[0]) != 0xFF0000FF000000FF  # MSB-first must not match
        assert n.tolist() == [1]
        assert unpack(words)[0].tolist() == [255, 0, 0, 255, 0, 0, 0, 255]
        assert unpack_composition(words)[0].tolist() == [255, 0, 0, 255, 0, 0, 0, 255]

    def test_empty_signal_stratum_packs_to_zero(self):
        conf = np.array([[1, 0, -1, -2, 1], [4, 4, 4, 4, 4]], dtype=np.int8)
        words, n = pack_cells(conf, np.array([0, 1, 1, 2]), 2)
        assert words[0] == 0 and n[0] == 0  # noise only
        assert words[1] == 0 and n[1] == 0  # no photons at all
        assert int(words[2]) == 0xFF0000FFFFFFFFFF and n[2] == 1

    def test_levels_are_absolute_never_renumbered(self):
        conf = np.array([[3, 0, 0, 0, 0], [4, 0, 0, 0, 0], [2, 2, 0, 0, 0]], dtype=np.int8)
        w3, n3 = pack_cells(conf, np.array([0, 3]), 3)
        assert n3.tolist() == [2]
        assert unpack(w3)[0].tolist() == [255, 0, 0, 0, 0, 0, 128, 128]  # low stays empty
        w1, n1 = pack_cells(np.array([[1, 1, 0, 0, 0]], np.int8), np.array([0, 1]), 1)
        assert n1.tolist() == [1] and unpack(w1)[0].tolist() == [255, 255, 0, 0, 0, 0, 0, 0]

    def test_single_photon_lanes_are_0_or_255(self):
        rng = np.random.default_rng(1)
        conf = rng.integers(-2, 5, size=(500, 5)).astype(np.int8)
        words, n = pack_cells(conf, np.arange(501), 2)
        lanes = unpack(words)
        assert np.all((lanes == 0) | (lanes == 255))
        assert np.all(lanes[n == 0] == 0)

    @pytest.mark.parametrize("threshold", [1, 2, 3, 4])
    def test_matches_brute_force_numpy(self, threshold):
        rng = np.random.default_rng(threshold)
        sizes = rng.integers(0, 40, size=300)
        conf = rng.integers(-2, 5, size=(sizes.sum(), 5)).astype(np.int8)
        off = _csr(sizes)
        words, n = pack_cells(conf, off, threshold)
        ref_words, ref_n = _ref_pack(conf, off, threshold)
        np.testing.assert_array_equal(n, ref_n)
        np.testing.assert_array_equal(words, ref_words)

    def test_select_equals_packing_only_selected_rows(self):
        rng = np.random.default_rng(7)
        sizes = rng.integers(0, 30, size=200)
        conf = rng.integers(-2, 5, size=(sizes.sum(), 5)).astype(np.int8)
        off = _csr(sizes)
        select = rng.random(len(conf)) < 0.4
        cell = np.repeat(np.arange(len(sizes)), sizes)
        sub_off = _csr(np.bincount(cell[select], minlength=len(sizes)))
        expect = pack_cells(conf[select], sub_off, 2)
        got = pack_cells(conf, off, 2, select=select)
        np.testing.assert_array_equal(got[0], expect[0])
        np.testing.assert_array_equal(got[1], expect[1])
        everything = pack_cells(conf, off, 2, select=np.ones(len(conf), dtype=bool))
        np.testing.assert_array_equal(everything[0], pack_cells(conf, off, 2)[0])

    def test_other_integer_dtypes(self):
        conf = np.array([[4, -1, 0, 3, 1]], dtype=np.int16)
        assert int(pack_cells(conf, np.array([0, 1]), 2)[0][0]) == GOLDEN

    @pytest.mark.parametrize(
        "conf, offsets, threshold, select",
        [
            (np.zeros((3, 4), np.int8), [0, 3], 2, None),  # wrong width
            (np.zeros((3, 5), np.float32), [0, 3], 2, None),  # not integer
            (np.zeros((3, 5), np.int8), [0, 2], 2, None),  # offsets do not cover rows
            (np.zeros((3, 5), np.int8), [0, 2, 1, 3], 2, None),  # decreasing
            (np.zeros((3, 5), np.int8), [0, 3], 2.5, None),
            (np.zeros((3, 5), np.int8), [0, 3], 2, np.ones(2, bool)),
            (np.zeros((3, 5), np.int8), [0, 3], 2, np.ones(3, np.int8)),
        ],
    )
    def test_refuses_malformed_input(self, conf, offsets, threshold, select):
        with pytest.raises(ValueError):
            pack_cells(conf, np.asarray(offsets), threshold, select=select)


class TestQuantize:
    def test_g1_vectors(self):
        assert quantize(1, 2) == 128  # half-even of 127.5
        assert quantize(1, 1000) == 1  # presence floor
        assert quantize(0, 1000) == 0
        assert quantize(1, 1) == 255 and quantize(0, 1) == 0
        assert quantize(1, 0) == 0  # empty stratum

    def test_half_even_both_directions(self):
        # 255 * c / N = x.5 exactly with N = 2 * 255 / gcd: 127.5 -> 128, 0.5 -> 0 -> floor 1
        assert quantize(3, 6) == 128
        assert quantize(1, 510) == 1  # 0.5 rounds to 0, floor lifts it
        assert quantize(3, 510) == 2  # 1.5 -> 2
        assert quantize(5, 510) == 2  # 2.5 -> 2
        assert quantize(7, 510) == 4  # 3.5 -> 4

    def test_clips_and_vectorises(self):
        got = quantize(np.array([[0, 5], [10, 11]]), np.array([10, 10]))
        assert got.dtype == np.uint8 and got.tolist() == [[0, 128], [255, 255]]

    def test_matches_float_reference(self):
        rng = np.random.default_rng(3)
        n = rng.integers(1, 100_000, size=20_000)
        c = (rng.random(20_000) * (n + 1)).astype(np.int64)
        np.testing.assert_array_equal(quantize(c, n), _ref_quantize(c, n))

    def test_float_weights_round_half_even(self):
        assert quantize(1, 2.4) == 128 and quantize(1, 2.5) == 128 and quantize(1, 3.5) == 64

    def test_refuses_non_integral_counts(self):
        with pytest.raises(ValueError):
            quantize(1.5, 10)


class TestCountRecovery:
    def test_exact_for_every_n_up_to_254(self):
        rng = np.random.default_rng(11)
        n = np.repeat(np.arange(1, 255), 20)
        lane_counts = (rng.random((n.size, 8)) * (n[:, None] + 1)).astype(np.int64)
        lane_counts[::7, 3] = 1  # exercise the presence floor at every N
        lane_counts[::5, 0] = n[::5]
        words = compose(lane_counts, n)
        np.testing.assert_array_equal(counts(words, n), lane_counts)
        np.testing.assert_array_equal(counts_from_composition(words, n), lane_counts)

    def test_presence_is_exact_at_large_n(self):
        n = np.full(8, 10**6)
        lane_counts = np.diag(np.arange(1, 9))
        lanes = unpack(compose(lane_counts, n))
        np.testing.assert_array_equal(lanes > 0, lane_counts > 0)

    def test_empty_stratum_recovers_zeros(self):
        assert counts(np.array([GOLDEN], np.uint64), 0).tolist() == [[0] * 8]


class TestMoczarrOracle:
    def test_decoders_agree_on_packed_words(self):
        rng = np.random.default_rng(5)
        sizes = rng.integers(0, 300, size=400)
        conf = rng.integers(-2, 5, size=(sizes.sum(), 5)).astype(np.int8)
        words, n = pack_cells(conf, _csr(sizes), 2)
        np.testing.assert_array_equal(unpack(words), unpack_composition(words))
        np.testing.assert_array_equal(counts(words, n), counts_from_composition(words, n))
        named = named_lanes(words, {"composition": composition_attrs("h_signal", 2)})
        assert tuple(named) == LANES
        for i, name in enumerate(LANES):
            np.testing.assert_array_equal(named[name], unpack(words)[:, i])

    def test_pack_unpack_roundtrip(self):
        rng = np.random.default_rng(6)
        words = rng.integers(0, 2**64, size=1000, dtype=np.uint64)
        np.testing.assert_array_equal(pack(unpack(words)), words)
        np.testing.assert_array_equal(pack(unpack_composition(words)), words)


def _lanes_word(*lanes) -> np.uint64:
    return pack(np.array([lanes], dtype=np.uint8))[0]


class TestBinaryMerge:
    def test_g1_merge(self):
        w, n = merge(_lanes_word(255, 0, 0, 0, 0, 0, 0, 0), 1, np.uint64(0), 1)
        assert int(w) == 128 and n == 2

    def test_identity_and_empty_parts(self):
        assert merge(np.uint64(GOLDEN), 5, 0, 0) == (GOLDEN, 5)
        assert merge(0, 0, np.uint64(GOLDEN), 5) == (GOLDEN, 5)
        assert merge(np.uint64(123), -1, np.uint64(GOLDEN), 5) == (GOLDEN, 5)

    def test_presence_floor_on_either_input(self):
        w, n = merge(_lanes_word(1, 0, 0, 0, 0, 0, 0, 0), 1, np.uint64(0), 10**9)
        assert unpack(w)[0, 0] == 1 and n == 10**9 + 1

    def test_symmetric_and_vectorised(self):
        rng = np.random.default_rng(8)
        wa = rng.integers(0, 2**64, size=2000, dtype=np.uint64)
        wb = rng.integers(0, 2**64, size=2000, dtype=np.uint64)
        na, nb = rng.integers(-2, 500, size=(2, 2000))
        ab, n_ab = merge(wa, na, wb, nb)
        ba, n_ba = merge(wb, nb, wa, na)
        both = (na > 0) & (nb > 0)
        np.testing.assert_array_equal(ab[both], ba[both])
        np.testing.assert_array_equal(n_ab[both], na[both] + nb[both])

    def test_matches_float_reference(self):
        rng = np.random.default_rng(9)
        wa = rng.integers(0, 2**64, size=3000, dtype=np.uint64)
        wb = rng.integers(0, 2**64, size=3000, dtype=np.uint64)
        na, nb = rng.integers(1, 10_000, size=(2, 3000))
        la, lb = unpack(wa).astype(float), unpack(wb).astype(float)
        mean = (na[:, None] * la + nb[:, None] * lb) / (na + nb)[:, None]
        expect = np.rint(mean)
        expect = np.where((la > 0) | (lb > 0), np.maximum(expect, 1), expect)
        got, _ = merge(wa, na, wb, nb)
        np.testing.assert_array_equal(unpack(got), expect.astype(np.uint8))


class TestKwayMerge:
    def test_two_parts_equal_binary_merge(self):
        rng = np.random.default_rng(10)
        words = rng.integers(0, 2**64, size=2000, dtype=np.uint64)
        n = rng.integers(-1, 300, size=2000)
        got, n_tot = merge_kway(words, n, np.arange(0, 2001, 2))
        both = (n[0::2] > 0) & (n[1::2] > 0)
        expect, n_exp = merge(words[0::2], n[0::2], words[1::2], n[1::2])
        np.testing.assert_array_equal(got[both], expect[both])
        np.testing.assert_array_equal(n_tot[both], n_exp[both])

    def test_empty_groups_and_skipped_parts(self):
        words = np.array([GOLDEN, 77, 0, 99], dtype=np.uint64)
        n = np.array([3, 0, 0, -4])
        got, n_tot = merge_kway(words, n, np.array([0, 1, 1, 4]))
        assert got.tolist() == [GOLDEN, 0, 0] and n_tot.tolist() == [3, 0, 0]

    def test_matches_counts_of_pooled_photons_for_small_n(self):
        # Folding exact (N <= 254) words of photon subsets once equals packing the union,
        # up to one quantization of the weighted mean.
        rng = np.random.default_rng(12)
        conf = rng.integers(-2, 5, size=(240, 5)).astype(np.int8)
        parts = pack_cells(conf, np.array([0, 17, 60, 61, 150, 240]), 2)
        folded, n_tot = merge_kway(*parts, np.array([0, 5]))
        whole, n_whole = pack_cells(conf, np.array([0, 240]), 2)
        assert n_tot.tolist() == n_whole.tolist()
        diff = unpack(folded).astype(int) - unpack(whole).astype(int)
        assert np.abs(diff).max() <= 1

    @settings(max_examples=200, deadline=None)
    @given(
        st.lists(
            st.tuples(st.integers(0, 2**64 - 1), st.integers(-3, 10**6)),
            min_size=1,
            max_size=20,
        ),
        st.randoms(use_true_random=False),
    )
    def test_permutation_invariant(self, parts, rnd):
        shuffled = list(parts)
        rnd.shuffle(shuffled)
        a = merge_kway(
            np.array([w for w, _ in parts], np.uint64),
            np.array([n for _, n in parts]),
            np.array([0, len(parts)]),
        )
        b = merge_kway(
            np.array([w for w, _ in shuffled], np.uint64),
            np.array([n for _, n in shuffled]),
            np.array([0, len(parts)]),
        )
        assert a[0].tobytes() == b[0].tobytes() and a[1].tolist() == b[1].tolist()
        present = np.zeros(8, dtype=bool)
        for w, n in parts:
            if n > 0:
                present |= unpack(np.uint64(w))[0] > 0
        np.testing.assert_array_equal(unpack(a[0])[0] > 0, present)


class TestLongChains:
    def test_presence_survives_1000_binary_merges(self):
        rng = np.random.default_rng(13)
        words = rng.integers(0, 2**64, size=1000, dtype=np.uint64)
        lanes = unpack(words)
        lanes[rng.random(lanes.shape) < 0.9] = 0  # sparse flags
        lanes[rng.random(lanes.shape) < 0.05] = 1  # many minimal presences
        words = pack(lanes)
        n = rng.integers(1, 10**6, size=1000)
        acc_w, acc_n = np.uint64(0), 0
        for w, k in zip(words, n, strict=True):
            acc_w, acc_n = merge(acc_w, acc_n, w, k)
        assert acc_n == n.sum()
        np.testing.assert_array_equal(unpack(acc_w)[0] > 0, (lanes > 0).any(axis=0))

    def test_presence_survives_kway_cascade(self):
        rng = np.random.default_rng(14)
        words = pack(np.where(rng.random((4**6, 8)) < 0.002, 1, 0).astype(np.uint8))
        n = rng.integers(1, 10**5, size=4**6)
        expect, total = (unpack(words) > 0).any(axis=0), n.sum()
        for _ in range(6):  # fold four children per parent, six levels up
            words, n = merge_kway(words, n, np.arange(0, words.size + 1, 4))
        assert words.size == 1 and n[0] == total
        np.testing.assert_array_equal(unpack(words)[0] > 0, expect)

    def test_single_presence_against_huge_weight(self):
        w, n = np.uint64(0), 0
        w, n = merge(w, n, _lanes_word(0, 0, 0, 0, 0, 0, 1, 0), 1)
        for _ in range(1000):
            w, n = merge(w, n, np.uint64(0), 10**9)
        assert unpack(w)[0].tolist() == [0, 0, 0, 0, 0, 0, 1, 0]
        kw, _ = merge_kway(
            np.array([_lanes_word(0, 0, 0, 0, 0, 0, 1, 0)] + [0] * 1000, np.uint64),
            np.array([1] + [10**9] * 1000),
            np.array([0, 1001]),
        )
        assert unpack(kw)[0].tolist() == [0, 0, 0, 0, 0, 0, 1, 0]
