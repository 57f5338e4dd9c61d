"""O11 content hashes (spec §5): the G6 goldens and the recipe's edge cases."""

from __future__ import annotations

import hashlib

import numpy as np
import pytest

from zagg.hive import hashes, semantic_hash
from zagg.hive.semantic import canonical_json

G6_VLEN = "822b6847715093eb2815b6ec25766da1be5d2bfb1ef4671c77546a8bb870b275"
G6_INT64 = "a14ae610ae9aec1f460468f06d3ca4e24695f1d696a82b02e11269b174c48547"
G6_COMBINED = "a5c22ecdce66b2004a5ec5369ccc23a859d59130794f2760627f6ff2520e3711"


def g2_cells() -> np.ndarray:
    cells = np.empty(4, dtype=object)
    cells[:] = [
        np.array([[1, 1]], "<f4").tobytes(),
        b"",
        None,
        np.array([[2, 3], [5, 1]], "<f4").tobytes(),
    ]
    return cells


def test_g6_goldens():
    assert hashes.array_digest(g2_cells()) == G6_VLEN
    assert hashes.array_digest(np.array([1, 0, 0, 3], dtype=np.int64)) == G6_INT64
    record = hashes.content_hashes({"6/h_tdigest": g2_cells(), "6/count": np.array([1, 0, 0, 3])})
    assert record == {
        "arrays": {"6/count": G6_INT64, "6/h_tdigest": G6_VLEN},
        "combined": G6_COMBINED,
    }
    assert list(record["arrays"]) == ["6/count", "6/h_tdigest"]  # recorded key-sorted


def test_combined_is_sorted_digests_joined_by_newline_and_ignores_names():
    expected = hashlib.sha256(f"{G6_VLEN}\n{G6_INT64}".encode("ascii")).hexdigest()
    assert hashes.combined_digest({"z": G6_INT64, "a": G6_VLEN}) == expected == G6_COMBINED
    assert hashes.combined_digest({"other": G6_INT64, "names": G6_VLEN}) == G6_COMBINED


def test_vlen_recipe_is_injective_and_none_is_empty():
    a = np.array([b"ab", b"c"], dtype=object)
    b = np.array([b"a", b"bc"], dtype=object)
    assert hashes.array_digest(a) != hashes.array_digest(b)
    assert hashes.array_digest(np.array([None, b"x"], dtype=object)) == hashes.array_digest(
        np.array([b"", b"x"], dtype=object)
    )
    manual = hashlib.sha256((2).to_bytes(8, "little") + b"ab" + (1).to_bytes(8, "little") + b"c")
    assert hashes.array_digest(a) == manual.hexdigest()


def test_element_normalisation():
    words = np.array([7, 9], dtype="<u8")
    as_array = np.empty(2, dtype=object)
    as_array[:] = [words, words.astype(">u8")]
    as_bytes = np.array([words.tobytes(), words.tobytes()], dtype=object)
    assert hashes.array_digest(as_array) == hashes.array_digest(as_bytes)
    assert hashes.array_digest(np.array(["é"], dtype=object)) == hashes.array_digest(
        np.array(["é".encode()], dtype=object)
    )
    with pytest.raises(TypeError, match="no content-hash recipe"):
        hashes.array_digest(np.array([3.5], dtype=object))


def test_fixed_width_is_little_endian_c_order():
    le = np.arange(6, dtype="<i4").reshape(2, 3)
    assert hashes.array_digest(le.astype(">i4")) == hashes.array_digest(le)
    assert hashes.array_digest(np.asfortranarray(le)) == hashlib.sha256(le.tobytes()).hexdigest()


def test_combined_is_reserved():
    with pytest.raises(ValueError, match="reserved"):
        hashes.content_hashes({"combined": np.zeros(1)})


def test_semantic_hash_canonicalisation():
    a = {"grid": {"child_order": 6, "type": "healpix"}, "fields": ["count", "mean"], "x": None}
    b = {"x": None, "fields": ["count", "mean"], "grid": {"type": "healpix", "child_order": 6}}
    assert semantic_hash(a) == semantic_hash(b)
    assert canonical_json(a) == (
        b'{"fields":["count","mean"],"grid":{"child_order":6,"type":"healpix"},"x":null}'
    )
    assert semantic_hash(a) == hashlib.sha256(canonical_json(a)).hexdigest()
    assert semantic_hash({**a, "x": 1}) != semantic_hash(a)
    assert canonical_json({"t": (1, 2), "s": "é"}) == '{"s":"é","t":[1,2]}'.encode()
    with pytest.raises(ValueError, match="canonical JSON"):
        semantic_hash({"nan": float("nan")})
