"""Raster (time, cells) leaves, written here with zarr directly per the spec (hive_layout.md
"Raster hive stores", §8.1), open with the right values on a joined time axis."""

from __future__ import annotations

import mortie
import numpy as np
import pytest
import zarr
from test_hive_builders import NORTH, SOUTH, law, new_store

import zagg
from zagg.hive import content_hashes, dggs_attrs, leaf_path, update_root_coverage
from zagg.hive.coverage import box_of_ranks, encode_bitmap_ranks, leaf_envelope
from zagg.read import IntegrityError

pytestmark = pytest.mark.filterwarnings("ignore::zarr.errors.UnstableSpecificationWarning")
US = np.array(
    ["2021-03-14T12:00:31", "2021-03-20T12:00:31", "2021-03-26T12:00:31", "2021-04-01T12:00:31"],
    dtype="datetime64[us]",
)
OCC = {NORTH: np.array([0, 3, 4, 13]), SOUTH: np.array([2, 5, 9, 15])}
ROWS = {NORTH: [0, 1, 2], SOUTH: [1, 2, 3]}  # each leaf's own acquisitions


def band_values(sid: str, name: str) -> np.ndarray:
    """A leaf's (T_leaf, 16) band: fill outside its occupied cells, distinct values inside."""
    rows = ROWS[sid]
    if name == "B04":
        out = np.zeros((len(rows), 16), np.uint16)
        for i, t in enumerate(rows):
            out[i, OCC[sid]] = 1000 * (t + 1) + OCC[sid] + (7 if sid == SOUTH else 0)
        out[1, OCC[sid][0]] = 0  # nodata at one timestep of an occupied cell
    else:
        out = np.full((len(rows), 16), np.nan, np.float32)
        for i, t in enumerate(rows):
            out[i, OCC[sid]] = 0.5 * t - OCC[sid] / 16
    return out


def write_raster_leaf(root: str, sid: str, toc: bool) -> None:
    leaf = f"{root}/{leaf_path(sid)}"
    top = zarr.open_group(leaf, mode="w", zarr_format=3)
    cells = top.create_group("6", attributes=dggs_attrs(6))
    rows = ROWS[sid]
    if toc:
        ns = mortie.from_datetime64(US[rows].astype("datetime64[ns]"))
        words = np.asarray(mortie.time2toc(np.asarray(ns, np.int64)), np.uint64)
        if rows[-1] == 3:  # the last acquisition is a 10 min scene: a range word
            words[-1] = mortie.span2toc(int(ns[-1]), int(ns[-1]) + 600 * 10**9)
        time = cells.create_array(
            "time",
            shape=(len(rows),),
            dtype="uint64",
            fill_value=0,
            dimension_names=["time"],
            attributes={
                "temporal": {"spec": "zagg-toc/1", "shape": "coordinate", "grammar": "mortie-toc/1"}
            },
        )
        time[:] = words
    else:
        time = cells.create_array(
            "time",
            shape=(len(rows),),
            dtype="int64",
            fill_value=0,
            dimension_names=["time"],
            attributes={
                "units": "microseconds since 1970-01-01",
                "calendar": "proleptic_gregorian",
            },
        )
        time[:] = US[rows].astype(np.int64)
    morton = cells.create_array(
        "morton",
        shape=(16,),
        chunks=(4,),
        dtype="uint64",
        fill_value=0,
        dimension_names=["cells"],
        config={"write_empty_chunks": False},
    )
    words = np.zeros(16, np.uint64)
    for k in np.unique(OCC[sid] // 4):
        words[4 * k : 4 * k + 4] = law(sid)[4 * k : 4 * k + 4]
    morton[:] = words
    for name, dtype, fill in (("B04", "uint16", 0), ("B08", "float32", np.nan)):
        arr = cells.create_array(
            name,
            shape=(len(rows), 16),
            chunks=(1, 4),
            dtype=dtype,
            fill_value=fill,
            dimension_names=["time", "cells"],
            attributes={"long_name": f"band {name}"},
            compressors=None,
            config={"write_empty_chunks": False},
        )
        arr[:] = band_values(sid, name)
    hashes = content_hashes({f"6/{n}": np.asarray(a[...]) for n, a in cells.arrays()})
    payload, raw = encode_bitmap_ranks(OCC[sid], 2)
    with open(f"{leaf}/coverage.moc", "wb") as f:
        f.write(payload)
    top.attrs["morton_hive_commit"] = {
        "spec": "morton-hive/1",
        "complete": True,
        "cells_with_data": int(OCC[sid].size),
        "granule_count": 0,
        "written_at": "2026-01-01T00:00:00+00:00",
        "coverage": leaf_envelope(
            box_of_ranks(sid, OCC[sid], 2), 6, bitmap_nbytes=len(payload), raw_nbytes=raw
        ),
        "content_hashes": hashes,
    }


@pytest.fixture(params=[False, True], ids=["cf-time", "toc-time"])
def raster(request, tmp_path):
    root = new_store(tmp_path, "S2", "1")
    for sid in (NORTH, SOUTH):
        write_raster_leaf(root, sid, request.param)
    update_root_coverage(root, [NORTH, SOUTH], 4)
    return root, request.param


def expected(name: str, fill) -> np.ndarray:
    """The joined (4 times, 8 occupied cells) band."""
    out = np.full((4, 8), fill, dtype=band_values(NORTH, name).dtype)
    for j, sid in enumerate((NORTH, SOUTH)):
        out[ROWS[sid], 4 * j : 4 * j + 4] = band_values(sid, name)[:, OCC[sid]]
    return out


def test_a_raster_store_opens_on_time_and_cells(raster):
    root, toc = raster
    ds = zagg.open_hive(root)
    assert ds["B04"].dims == ("time", "cells") and ds.sizes == {"time": 4, "cells": 8}
    assert ds["B04"].data.chunks == ((4,), (4, 4))
    assert ds["B04"].dtype == np.uint16 and ds["B04"].attrs == {"long_name": "band B04"}
    np.testing.assert_array_equal(ds["B04"].values, expected("B04", 0))
    np.testing.assert_array_equal(ds["B08"].values, expected("B08", np.nan))
    np.testing.assert_array_equal(
        ds["morton"].values, np.concatenate([law(s)[OCC[s]] for s in (NORTH, SOUTH)])
    )
    if toc:
        assert (
            ds["time"].dtype == np.uint64 and ds["time"].attrs["temporal"]["spec"] == "zagg-toc/1"
        )
        start, end = ds["time_start"].values, ds["time_end"].values
        true = US.astype("datetime64[ns]")
        np.testing.assert_array_equal(start[:3], true[:3])  # timestamps: exact instants
        np.testing.assert_array_equal(end[:3], true[:3])
        # the range word's envelope conservatively contains [t, t + 10 min) (mortie §10)
        assert true[3] - np.timedelta64(2**31, "ns") < start[3] <= true[3]
        assert end[3] >= true[3] + np.timedelta64(600, "s")
    else:
        np.testing.assert_array_equal(ds["time"].values, US.astype("datetime64[ns]"))
    one = ds.sel(morton=law(SOUTH)[9])
    np.testing.assert_array_equal(one["B04"].values, expected("B04", 0)[:, 6])


def test_dense_and_verified_raster_reads(raster, tmp_path):
    root, _ = raster
    dense = zagg.open_hive(root, dense=True)
    assert dense.sizes == {"time": 4, "cells": 32}
    b04 = dense["B04"].values
    np.testing.assert_array_equal(b04[ROWS[NORTH], :16], band_values(NORTH, "B04"))
    np.testing.assert_array_equal(b04[ROWS[SOUTH], 16:], band_values(SOUTH, "B04"))
    assert (b04[3, :16] == 0).all()  # the north leaf has no fourth acquisition
    np.testing.assert_array_equal(
        zagg.open_hive(root, verify=True)["B04"].values, expected("B04", 0)
    )
    chunk = tmp_path / leaf_path(NORTH) / "6" / "B04" / "c" / "0" / "0"  # time 0, cells 0-3
    blob = bytearray(chunk.read_bytes())
    blob[0] ^= 0x01  # cell 0's low byte
    chunk.write_bytes(bytes(blob))
    assert zagg.open_hive(root)["B04"].values[0, 0] == expected("B04", 0)[0, 0] ^ 1
    with pytest.raises(IntegrityError, match=rf"{NORTH}\.zarr: array 6/B04 does not match"):
        zagg.open_hive(root, verify=True)["B04"].load()


def test_raster_time_axes_of_two_encodings_never_join(tmp_path):
    root = new_store(tmp_path, "S2", "1")
    write_raster_leaf(root, NORTH, toc=False)
    write_raster_leaf(root, SOUTH, toc=True)
    update_root_coverage(root, [NORTH, SOUTH], 4)
    with pytest.raises(ValueError, match=r"different encodings.*§8.1"):
        zagg.open_hive(root)


def test_a_leaf_whose_coverage_lists_no_cells_is_read_from_its_bands(raster, tmp_path):
    """A box-only coverage (no bitmap sidecar) leaves occupancy to the data."""
    import json

    root, _ = raster
    want = zagg.open_hive(root)
    meta = tmp_path / leaf_path(SOUTH) / "zarr.json"
    doc = json.loads(meta.read_text())
    coverage = doc["attributes"]["morton_hive_commit"]["coverage"]
    for key in ("encoding", "sidecar", "nbytes", "raw_nbytes"):
        coverage.pop(key)
    meta.write_text(json.dumps(doc))
    (tmp_path / leaf_path(SOUTH) / "coverage.moc").unlink()
    got = zagg.open_hive(root)
    np.testing.assert_array_equal(got["morton"].values, want["morton"].values)
    np.testing.assert_array_equal(got["B04"].values, want["B04"].values)
