"""zagg-ragged/2 (spec §1.6, §6): a typed vlen-ndarray array carries its element in its
data type and no ``ragged`` attrs block, over chunk bytes identical to /1's. A /1 store's
ragged arrays relabelled as /2 (metadata only) decode to the same values and hashes."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from test_pyramid_store import config

import zagg
from zagg.sources.synthetic import synthetic_photons


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    points = synthetic_photons(8_000, (-104, -77, -96, -73), seed=3, chunk_size=2_000)
    path = tmp_path_factory.mktemp("r2") / "s"
    zagg.to_hive(zagg.aggregate(points, zagg.load_config(config(pyramid=False))), str(path))
    return path


def _serializers(codecs):
    for c in codecs:
        if c.get("name") == "sharding_indexed":
            yield from _serializers(c["configuration"]["codecs"])
        elif c.get("name") == "vlen-bytes":
            yield c


def relabel(path: Path, name: str = "vlen-ndarray", extra_codec: bool = False) -> int:
    """Rewrite every ragged array's ``zarr.json`` as zagg-ragged/2: the typed data type,
    the typed serializer, no ``ragged`` block; no chunk object is touched."""
    n = 0
    for meta_path in path.rglob("zarr.json"):
        meta = json.loads(meta_path.read_text())
        if meta.get("data_type") != "variable_length_bytes":
            continue
        block = meta["attributes"].pop("ragged")
        element = block["element"]
        meta["data_type"] = {
            "name": name,
            "configuration": {"dtype": element["dtype"], "shape": [None, *element["shape"][1:]]},
        }
        for codec in _serializers(meta["codecs"]):
            codec["name"] = "vlen-ndarray"
            codec.pop("configuration", None)
        if extra_codec:
            meta["codecs"].append({"name": "crc32c"})
        meta_path.write_text(json.dumps(meta))
        n += 1
    return n


@pytest.mark.parametrize("name", ["vlen-ndarray", "ndarray"])  # the spec's, the package's
def test_a_relabelled_store_decodes_identically(store, tmp_path, name):
    copy = tmp_path / "s2"
    shutil.copytree(store, copy)
    assert relabel(copy, name) > 0
    before, after = zagg.open_hive(store).compute(), zagg.open_hive(copy, verify=True).compute()
    assert list(after.data_vars) == list(before.data_vars)
    for var in before.data_vars:
        a, b = after[var].values, before[var].values
        if a.dtype == object:  # payload bytes, or one word array per cell
            assert all(np.array_equal(x, y) for x, y in zip(a, b, strict=True)), var
        else:
            np.testing.assert_array_equal(a, b, err_msg=var)
    for var in ("h_tdigest", "h_tdigest_signal"):
        assert (
            "ragged"
            not in json.loads(next(copy.rglob(f"{var}/zarr.json")).read_text())["attributes"]
        )
        assert after[var].attrs["ragged"]["spec"] == "zagg-ragged/2"
        assert after[var].attrs["ragged"]["element"] == {"dtype": "float32", "shape": [-1, 2]}
    np.testing.assert_array_equal(
        zagg.quantile(after, "h_tdigest", 0.5).values,
        zagg.quantile(before, "h_tdigest", 0.5).values,
    )


def test_a_typed_array_the_own_decoder_cannot_read_names_the_extension(store, tmp_path):
    copy = tmp_path / "s2"
    shutil.copytree(store, copy)
    relabel(copy, extra_codec=True)
    with pytest.raises(ValueError, match="install zarr-vlen-ndarray to read this store"):
        zagg.open_hive(copy)


def test_a_typed_array_that_keeps_a_ragged_block_is_refused(store, tmp_path):
    copy = tmp_path / "s2"
    shutil.copytree(store, copy)
    relabel(copy)
    meta_path = next(copy.rglob("h_tdigest/zarr.json"))
    meta = json.loads(meta_path.read_text())
    meta["attributes"]["ragged"] = {
        "spec": "zagg-ragged/1",
        "element": {"dtype": "float32", "shape": [-1, 2]},
    }
    meta_path.write_text(json.dumps(meta))
    with pytest.raises(ValueError, match="which /2 retires"):
        zagg.open_hive(copy).compute()
