"""The occupied-cells leaf writer: same bytes and hashes as the dense path, in every batch
size, and clear refusals for malformed cells."""

import numpy as np
import pytest
from builders import fields, grid_orders, pipeline_config, synthetic_source
from leaves import without_versions

from zagg import hive
from zagg.hive import cells, encode
from zagg.hive.layout import RAGGED_SPEC

GRID = {"type": "healpix", "parent_order": 2, "chunk_inner": 4, "child_order": 6, "sharded": True}
SHARD = "121"  # order 2: one digit per order after the base-cell digit
N = 4**4
RAGGED_ATTRS = {
    "ragged": {"spec": RAGGED_SPEC, "element": {"dtype": "float32", "shape": [-1, 2]}},
    "weights": "counts",
}
FIELDS = {
    "count": {"kind": "dense", "dtype": "int64", "fill_value": 0},
    "h_mean": {"kind": "dense", "dtype": "float32", "fill_value": None},
    "h_tdigest": {"kind": "ragged"},
}
ATTRS = {"h_tdigest": RAGGED_ATTRS}


def _arrays(rng, unit=False):
    occupied = np.sort(rng.choice(N, size=40, replace=False))
    count = np.zeros(N, np.int64)
    count[occupied] = rng.integers(1, 9, occupied.size)
    mean = np.full(N, np.nan, np.float32)
    mean[occupied[::2]] = rng.normal(size=occupied[::2].size).astype(np.float32)
    digest = np.empty(N, dtype=object)
    digest.fill(b"")
    for r in occupied[1::3]:
        k = int(count[r])
        weights = np.ones(k)
        weights[0] += 0 if unit else r % 2  # some weighted rows, unless all unit
        rows = np.column_stack([np.sort(rng.normal(size=k)), weights]).astype("<f4")
        digest[r] = rows.tobytes()
    return {"count": count, "h_mean": mean, "h_tdigest": digest}


def _cells_of(arrays, digest_rows=False):
    ragged = cells.ragged_from_objects(arrays["h_tdigest"], lambda i, c: bytes(c))
    if digest_rows:  # the same payloads as float32 mean/weight columns
        rows = ragged.data.view("<f4").reshape(-1, 2)
        weights = None if np.all(rows[:, 1] == 1) else rows[:, 1]
        ragged = cells.digest_rows(ragged.ranks, ragged.offsets // 8, rows[:, 0], weights)
    return {
        "count": cells.dense_from_array(arrays["count"], np.dtype("int64"), 0),
        "h_mean": cells.dense_from_array(arrays["h_mean"], np.dtype("float32"), np.nan),
        "h_tdigest": ragged,
    }


def _tree(root):
    """Every object under ``root`` except those that carry a clock (the manifest, the root
    coverage, the multiscales companion's root document, stats sidecars, Icechunk ref
    carriers, which hold the objects' modification times; stamps are replaced by a
    marker), by path without versions."""
    out = {}
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root)
        clocked = path.name.endswith("stats.json") or path.name.startswith("icechunk_refs")
        clocked = clocked or str(rel) in (
            "morton_hive.json",
            "coverage.moc",
            "multiscales/zarr.json",
        )
        if path.is_file() and not clocked:
            data = path.read_bytes()
            if path.name == "zarr.json" and b"morton_hive_commit" in data:
                data = b"stamp"  # carries the clock (and a versioned leaf's version name)
            out[without_versions(str(rel))] = data
    return out


@pytest.mark.parametrize("digest_rows", [False, "weighted", "unit"])
@pytest.mark.parametrize("batch", [None, 64])
def test_cells_path_writes_the_dense_path_bytes(tmp_path, monkeypatch, batch, digest_rows):
    if batch is not None:  # frame and hash the vlen chunks a few at a time
        monkeypatch.setattr(encode, "BATCH_BYTES", batch)
    arrays = _arrays(np.random.default_rng(3), unit=digest_rows == "unit")
    dense = hive.write_leaf(tmp_path / "a", SHARD, arrays, FIELDS, GRID, attrs=ATTRS)
    sparse = hive.write_leaf_cells(
        tmp_path / "b", SHARD, _cells_of(arrays, digest_rows), FIELDS, GRID, attrs=ATTRS
    )
    assert dense["content_hashes"] == sparse["content_hashes"]
    assert dense["cells_with_data"] == sparse["cells_with_data"] == int((arrays["count"] > 0).sum())
    assert _tree(tmp_path / "a") == _tree(tmp_path / "b")
    # the streamed digests equal §5 over the full decoded arrays
    group = str(GRID["child_order"])
    assert sparse["content_hashes"]["arrays"][f"{group}/count"] == hive.array_digest(
        arrays["count"]
    )
    assert sparse["content_hashes"]["arrays"][f"{group}/h_tdigest"] == hive.array_digest(
        arrays["h_tdigest"]
    )


def test_cells_round_trip_to_dense_and_objects():
    arrays = _arrays(np.random.default_rng(4))
    c = _cells_of(arrays)
    np.testing.assert_array_equal(
        cells.to_dense(c["count"], N, np.dtype("int64"), 0), arrays["count"]
    )
    np.testing.assert_array_equal(
        cells.to_dense(c["h_mean"], N, np.dtype("float32"), np.nan), arrays["h_mean"]
    )
    assert list(cells.to_objects(c["h_tdigest"], N)) == list(arrays["h_tdigest"])


@pytest.mark.parametrize(
    "bad, message",
    [
        (
            lambda c: c.update(count=cells.DenseCells(np.array([5, 3]), np.array([1, 2]))),
            "strictly ascending",
        ),
        (
            lambda c: c.update(count=cells.DenseCells(np.array([N]), np.array([1]))),
            "in \\[0, 256\\)",
        ),
        (
            lambda c: c.update(count=cells.DenseCells(np.array([1]), np.array([1], np.int32))),
            "values are int32, declared int64",
        ),
        (
            lambda c: c.update(
                h_tdigest=cells.RaggedCells(np.array([2]), np.array([0, 5]), np.zeros(5, np.uint8))
            ),
            "not a whole number of 8-byte rows",
        ),
        (lambda c: c.update(h_mean=c["h_tdigest"]), "needs DenseCells"),
        (lambda c: c.pop("count"), "missing \\['count'\\]"),
    ],
)
def test_malformed_cells_refused_before_any_write(tmp_path, bad, message):
    contents = _cells_of(_arrays(np.random.default_rng(5)))
    bad(contents)
    with pytest.raises(ValueError, match=message):
        hive.write_leaf_cells(tmp_path, SHARD, contents, FIELDS, GRID, attrs=ATTRS)
    assert not any(tmp_path.iterdir())


def test_every_shape_of_the_result_writes_the_same_leaves(tmp_path):
    """The lazy sparse result, its computed copy, an edit that changes nothing and the
    dense twin all give the same leaves byte for byte (stamp clock aside)."""
    import dask

    import zagg
    from zagg.engine.write import to_hive
    from zagg.sources.synthetic import synthetic_photons

    cfg = pipeline_config(
        synthetic_source(), fields("count", "h_mean", "h_tdigest"), grid_orders(6, 12), name="T"
    )
    ds = synthetic_photons(60_000, chunk_size=20_000, seed=2)
    with dask.config.set(scheduler="sync"):
        lazy = zagg.aggregate(ds, cfg)
        shapes = {
            "lazy": lazy,
            "computed": lazy.compute(),
            "edited": lazy.assign(count=lazy["count"] + 0),
            "dense": zagg.aggregate(ds, cfg, dense=True),
        }
        written = {name: to_hive(d, tmp_path / name) for name, d in shapes.items()}
    hashes = {name: [r["content_hashes"] for r in s.records] for name, s in written.items()}
    assert written["lazy"].leaves_written > 1
    assert all(h == hashes["lazy"] for h in hashes.values())
    trees = {name: _tree(tmp_path / name) for name in shapes}
    assert all(t == trees["lazy"] for t in trees.values())


@pytest.mark.parametrize("word_sized", [True, False])
def test_vlen_framing_and_digest_for_word_and_odd_sized_payloads(word_sized):
    # payloads whose lengths are all multiples of 4 take the word-copy path; any odd
    # length takes the byte path: both must frame and hash the same way
    import zstandard
    from test_hive_format import decode_vlen_frame, read_index

    rng = np.random.default_rng(11)
    objects = np.empty(N, dtype=object)
    objects.fill(b"")
    for r in rng.choice(N, size=50, replace=False):
        k = int(rng.integers(1, 9)) * (4 if word_sized else 1) + (0 if word_sized else 1)
        objects[r] = rng.integers(0, 256, k, dtype=np.uint8).tobytes()
    ragged = cells.ragged_from_objects(objects, lambda i, c: bytes(c))
    n_inner = 4
    enc = encode.encode_ragged(ragged.ranks, ragged.offsets, ragged.data, N, n_inner)
    assert enc.digest == hive.array_digest(objects)
    shard = bytes(enc.objects[0][1])  # stored as parts, never joined by the writer
    per = N // n_inner
    for k, (off, size) in enumerate(read_index(shard, n_inner)):  # crc-checked
        want = list(objects[k * per : (k + 1) * per])
        if not any(want):
            assert off == size == 2**64 - 1  # absent chunk sentinel
            continue
        got = decode_vlen_frame(zstandard.ZstdDecompressor().decompress(shard[off : off + size]))
        assert got == want


def test_a_shard_object_is_stored_from_its_parts_never_joined(tmp_path):
    """A vlen array's shard object (tens of MB in a full leaf) is handed to the store as
    its compressed chunks, index and crc in order: a local store writes them one after
    another, and the file holds exactly their concatenation."""
    from zagg.hive.parts import Parts, object_bytes, object_size
    from zagg.hive.storage import StoreRoot

    objects = np.empty(N, dtype=object)
    objects.fill(b"")
    objects[[3, N // 2, N - 1]] = [b"abcd", b"efghijkl", b"mnop"]
    ragged = cells.ragged_from_objects(objects, lambda i, c: bytes(c))
    [(index, parts)] = encode.encode_ragged(ragged.ranks, ragged.offsets, ragged.data, N, 4).objects
    assert index == 0 and isinstance(parts, Parts) and len(parts) == 3 + 2  # chunks, index, crc
    whole = b"".join(parts)
    assert bytes(parts) == object_bytes(parts) == whole
    assert object_size(parts) == parts.nbytes == len(whole)
    assert object_size(np.zeros(7, np.uint16)) == 14
    root = StoreRoot(str(tmp_path))
    assert root.write_bytes("a/b/c/0", parts) == len(whole)
    assert (tmp_path / "a/b/c/0").read_bytes() == whole


@pytest.mark.parametrize("kind", ["bytes", "unit rows", "weighted rows"])
def test_payload_objects_are_the_cells_bytes(kind):
    """payloads() makes one bytes object per cell (through a pickle stream it frames
    itself): empty cells, short ones and ones of 256 bytes and more (the two length
    encodings) all come back as the exact slices of the interleaved payload bytes."""
    rng = np.random.default_rng(len(kind))
    if kind == "bytes":
        sizes = np.array([0, 1, 255, 256, 300, 70_000, 0, 8, *rng.integers(0, 600, 300)])
        offsets = np.concatenate(([0], np.cumsum(sizes))).astype(np.int64)
        c = cells.RaggedCells(
            np.arange(sizes.size), offsets, rng.integers(0, 256, offsets[-1]).astype(np.uint8)
        )
    else:
        rows = np.array([0, 1, 31, 32, 33, 9000, *rng.integers(0, 60, 300)])
        offsets = np.concatenate(([0], np.cumsum(rows))).astype(np.int64)
        means = rng.normal(size=offsets[-1]).astype(np.float32)
        weights = None if kind == "unit rows" else rng.random(offsets[-1]).astype(np.float32)
        c = cells.DigestRows(np.arange(rows.size), offsets, means, weights)
    got = c.payloads()
    data, at = c.data.tobytes(), c.offsets
    want = [data[a:b] for a, b in zip(at[:-1], at[1:], strict=True)]
    assert got.dtype == object and len(got) == len(want)
    assert all(type(g) is bytes for g in got) and list(got) == want
    if kind == "unit rows":  # weights come out as float32 1.0
        assert np.all(np.frombuffer(b"".join(got), "<f4")[1::2] == 1.0)
