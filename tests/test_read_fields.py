"""Every stored field decodes: located and time words per centroid, composition lanes, and
quantiles and CDFs of the digests (numpy's hazen quantiles on loss-free cells)."""

from __future__ import annotations

import shutil

import dask.array as da
import moczarr
import mortie
import numpy as np
import pytest
import xarray as xr
import zarr
from leaves import data_dir
from moczarr import composition as mcomp
from moczarr import ragged as mragged
from test_strata import REGION, strata_config
from zarr.codecs import VLenBytesCodec, ZstdCodec

import zagg
from zagg import hive
from zagg.kernels import tdigest
from zagg.sources.synthetic import synthetic_photons

pytestmark = pytest.mark.filterwarnings("ignore::zarr.errors.UnstableSpecificationWarning")
C = 17


@pytest.fixture(scope="module")
def photons():
    return synthetic_photons(20_000, REGION, chunk_size=10_000, seed=5).compute()


@pytest.fixture(scope="module")
def aggregated(photons):
    return zagg.aggregate(photons, strata_config(located=True, timed=False)).compute()


@pytest.fixture(scope="module")
def store(tmp_path_factory, aggregated):
    root = str(tmp_path_factory.mktemp("fields") / "s")
    zagg.to_hive(aggregated, root)
    return root


def by_word(ds) -> dict[int, int]:
    return {int(w): i for i, w in enumerate(ds["morton"].values)}


def test_location_words_decode_to_what_was_aggregated(store, aggregated, photons):
    ds = zagg.open_hive(store).compute()
    index = by_word(aggregated)
    lat, lon = photons["lat_ph"].values, photons["lon_ph"].values
    ok = np.isfinite(lat) & np.isfinite(lon)
    points = mortie.geo2mort(lat[ok], lon[ok])
    cells = zagg.grid.ancestor(points, C)
    checked_points = 0
    for name in ("h_tdigest_signal_locations", "h_tdigest_noise_locations"):
        payload = name.removesuffix("_locations")
        for word, words, raw in zip(
            ds["morton"].values, ds[name].values, ds[payload].values, strict=True
        ):
            assert words.dtype == np.uint64 and words.size == len(raw) // 8  # row-aligned
            stored = aggregated[name].values[index[int(word)]]
            np.testing.assert_array_equal(words, np.frombuffer(stored, "<u8"))
            # spec §1.5 containment: every location word lies inside its cell
            if words.size:
                assert (zagg.grid.ancestor(words, C) == word).all()
            # a loss-free centroid of one photon carries that photon's point word
            single = words[mortie.is_point(words)] if words.size else words
            assert np.isin(single, points[cells == word]).all()
            checked_points += single.size
    assert checked_points > 1000
    # moczarr reads the same words, by the payload's locations binding
    sid = ds.attrs["zagg"]["shards"][0]
    theirs = {
        int(w): loc
        for w, _v, loc in mragged.read_ragged(
            moczarr.open_leaf(store, sid), f"{C}/h_tdigest_signal", locations=True
        )
    }
    mine = by_word(ds)
    assert theirs
    for w, loc in theirs.items():
        np.testing.assert_array_equal(ds["h_tdigest_signal_locations"].values[mine[w]], loc)


def add_times(root, sid: str, field: str, grammar="mortie-toc/1") -> dict[int, np.ndarray]:
    """Write a ``{field}_times`` sibling into one leaf per spec §8.3 (zarr directly): one toc
    word per centroid row, bound by the payload's ``times`` attr. Returns the words by cell
    word."""
    leaf = hive.leaf_path(sid)
    group = zarr.open_group(f"{data_dir(root, leaf)}/{C}", mode="r+", zarr_format=3)
    payload = group[field]
    raw = payload[...]
    words = zagg.grid.shard_cell_words(zagg.grid.from_decimal([sid])[0], 9, C)
    t0 = mortie.from_datetime64(np.datetime64("2019-06-01T12:00:00"))
    cells = np.empty(raw.shape[0], dtype=object)
    cells[:] = b""
    out = {}
    for i, cell in enumerate(raw):
        n = len(cell or b"") // 8
        if not n:
            continue
        ns = t0 + i * 10**9 + np.arange(n, dtype=np.int64) * 1000
        toc = np.asarray(mortie.time2toc(ns), dtype="<u8")
        if n > 1:  # an integration window, to mix both word variants in one array
            toc[-1] = mortie.span2toc(int(ns[-1]), int(ns[-1]) + 3_600 * 10**9)
        cells[i] = toc.tobytes()
        out[int(words[i])] = toc
    name = f"{field}_times"
    times = group.create_array(
        name,
        shape=raw.shape,
        chunks=payload.chunks,
        shards=payload.shards,
        dtype="variable_length_bytes",
        fill_value=b"",
        serializer=VLenBytesCodec(),
        compressors=[ZstdCodec(level=3, checksum=False)],
        dimension_names=["cells"],
        attributes={
            "ragged": {"spec": "zagg-ragged/1", "element": {"dtype": "uint64", "shape": [-1]}},
            "temporal": {"spec": "zagg-toc/1", "shape": "per-centroid", "grammar": grammar},
        },
        config={"write_empty_chunks": False},
    )
    times[:] = cells
    payload.attrs["times"] = name
    return out


def test_time_words_decode_to_what_the_leaf_stores(store, tmp_path):
    root = str(tmp_path / "s")
    shutil.copytree(store, root)
    sids = zagg.open_hive(root).attrs["zagg"]["shards"]
    written = {}
    for sid in sids:
        written.update(add_times(root, sid, "h_tdigest_signal"))
    ds = zagg.open_hive(root)
    assert "h_tdigest_signal_times" in ds.data_vars
    got = ds["h_tdigest_signal_times"].values
    index = by_word(ds)
    assert len(written) > 100
    for word, toc in written.items():
        np.testing.assert_array_equal(got[index[word]], toc)
        assert got[index[word]].size == len(ds["h_tdigest_signal"].values[index[word]]) // 8
    # the words decode to the instants written (and the one range to its envelope)
    word = next(w for w, t in written.items() if t.size > 2)
    start, end = mortie.toc2time(got[index[word]])
    assert (start[:-1] == end[:-1]).all() and (end[-1] - start[-1]) >= 3_600 * 10**9
    assert mortie.to_datetime64(start[:1])[0] >= np.datetime64("2019-06-01T12:00:00")
    # moczarr binds the same sibling by the payload's times attr
    theirs = {
        int(w): t
        for w, _v, t in mragged.read_ragged(
            moczarr.open_leaf(root, sids[0]), f"{C}/h_tdigest_signal", times=True
        )
    }
    for w, t in theirs.items():
        np.testing.assert_array_equal(got[index[w]], t)
    # a grammar this reader does not implement is refused by name
    bad = str(tmp_path / "bad")
    shutil.copytree(store, bad)
    add_times(bad, sids[0], "h_tdigest_signal", grammar="mortie-toc/9")
    with pytest.raises(
        ValueError, match="h_tdigest_signal_times declares temporal grammar 'mortie-toc/9'"
    ):
        zagg.open_hive(bad)


def test_composition_lanes(store, photons):
    ds = zagg.open_hive(store)
    lanes = zagg.composition_lanes(ds, "composition")
    assert isinstance(lanes.data, da.Array) and lanes.dims == ("cells", "lane")
    assert list(lanes["lane"].values) == [
        "land",
        "ocean",
        "sea_ice",
        "land_ice",
        "inland_water",
        "low",
        "med",
        "high",
    ]
    assert lanes.dtype == np.uint8
    words = ds["composition"].values
    theirs = mcomp.named_lanes(words, ds["composition"].attrs)
    for j, name in enumerate(lanes["lane"].values):
        np.testing.assert_array_equal(lanes.values[:, j], theirs[str(name)])
    # presence (spec §3.2): a surface lane is > 0 exactly where a signal photon of the cell
    # clears the threshold on that surface
    lat, lon = photons["lat_ph"].values, photons["lon_ph"].values
    ok = np.isfinite(lat) & np.isfinite(lon)
    conf = photons["signal_conf_ph"].values[ok]
    cells = mortie.geo2mort(lat[ok], lon[ok], order=C)
    signal = conf.max(axis=1) >= 2
    index = by_word(ds)
    for s, name in enumerate(["land", "ocean", "sea_ice", "land_ice", "inland_water"]):
        present = np.zeros(ds.sizes["cells"], dtype=bool)
        hit = signal & (conf[:, s] >= 2)
        present[[index[int(w)] for w in np.unique(cells[hit])]] = True
        np.testing.assert_array_equal(lanes.sel(lane=name).values > 0, present)
    fractions = zagg.composition_lanes(ds, "composition", fractions=True)
    np.testing.assert_array_equal(fractions.values, lanes.values / 255.0)
    with pytest.raises(ValueError, match="'count' carries no 'composition' attrs block"):
        zagg.composition_lanes(ds, "count")


def test_composition_golden_word():
    """Spec §3.1: 0xFF000000FF0000FF is land, land_ice and high at 255, LSB lane first."""
    attrs = {
        "composition": {
            "spec": "zagg-composition/1",
            "lanes": ["land", "ocean", "sea_ice", "land_ice", "inland_water", "low", "med", "high"],
            "of": "h_tdigest_signal",
            "threshold": 2,
        }
    }
    ds = xr.Dataset(
        {"composition": (("cells",), np.array([0xFF000000FF0000FF, 0], np.uint64), attrs)}
    )
    lanes = zagg.composition_lanes(ds, "composition").values
    assert list(lanes[0]) == [255, 0, 0, 255, 0, 0, 0, 255] and not lanes[1].any()
    bad = ds.copy()
    bad["composition"].attrs = {
        "composition": dict(attrs["composition"], spec="zagg-composition/2")
    }
    with pytest.raises(ValueError, match="'zagg-composition/2'"):
        zagg.composition_lanes(bad, "composition")


def test_quantiles_are_numpys_hazen_on_loss_free_cells(store, photons):
    """strata_config builds loss-free signal digests (delta 100,000): their quantiles are
    exactly numpy's hazen quantiles of the cell's float32 heights; the CDF inverts them."""
    ds = zagg.open_hive(store)
    qs = [0.0, 0.1, 0.5, 0.9, 1.0]
    got = zagg.quantile(ds, "h_tdigest_signal", qs)
    assert isinstance(got.data, da.Array) and got.dims == ("cells", "quantile")
    assert got.data.chunks[0] == ds["count"].data.chunks[0]
    got = got.values
    lat, lon = photons["lat_ph"].values, photons["lon_ph"].values
    ok = np.isfinite(lat) & np.isfinite(lon)
    cells = mortie.geo2mort(lat[ok], lon[ok], order=C)
    h = photons["h_ph"].values[ok]
    signal = photons["signal_conf_ph"].values[ok].max(axis=1) >= 2
    keep = signal & np.isfinite(h)
    order = np.argsort(cells[keep], kind="stable")
    cw, hv = cells[keep][order], h[keep][order].astype(np.float32).astype(np.float64)
    bounds = (
        np.searchsorted(cw, ds["morton"].values, side="left"),
        np.searchsorted(cw, ds["morton"].values, side="right"),
    )
    checked = 0
    for i, (a, b) in enumerate(zip(*bounds, strict=True)):
        if b == a:
            assert np.isnan(got[i]).all()
            continue
        np.testing.assert_array_equal(got[i], np.quantile(hv[a:b], qs, method="hazen"))
        checked += 1
    assert checked > 100
    median = zagg.quantile(ds, "h_tdigest_signal", 0.5).values
    inside = np.isfinite(median)
    back = zagg.cdf(ds, "h_tdigest_signal", 0.0).values
    assert ((back == 0) | np.isnan(back)).all()  # heights are ~1 km above 0
    at = zagg.cdf(ds, "h_tdigest_signal", [float(np.nanmin(median)) - 1e4, 1e6]).values
    assert (at[inside, 0] == 0).all() and (at[inside, 1] == 1).all()


def test_quantile_and_cdf_equal_zaggs_digest_algebra(store):
    """On compressed digests (the plain h_tdigest, default delta) the vectorised kernels
    give zagg.kernels.tdigest's quantile and cdf exactly, cell by cell."""
    ds = zagg.open_hive(store)
    qs = np.array([0.05, 0.25, 0.5, 0.75, 0.95])
    got = zagg.quantile(ds, "h_tdigest", qs).values
    payloads = ds["h_tdigest"].values
    xs = np.nanmedian(got[:, 2]) + np.array([-2.0, 0.0, 2.0])
    cdfs = zagg.cdf(ds, "h_tdigest", xs)
    assert cdfs.dims == ("cells", "value")
    cdfs = cdfs.values
    for i, p in enumerate(payloads):
        np.testing.assert_array_equal(got[i], tdigest.quantile(p, qs))
        np.testing.assert_array_equal(cdfs[i], tdigest.cdf(p, xs))
    # an in-memory Dataset evaluates at once, with the same values
    loaded = ds.load()
    np.testing.assert_array_equal(zagg.quantile(loaded, "h_tdigest", qs).values, got)
    with pytest.raises(ValueError, match="a number or a list of numbers, got 'x'"):
        zagg.cdf(ds, "h_tdigest", "x")
