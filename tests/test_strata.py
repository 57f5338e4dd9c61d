"""Strata, where-predicates and composition words against brute-force numpy, per cell."""

import copy

import moczarr
import mortie
import numpy as np
import pytest
import yaml
from test_hive_builders import chunk_objects

import zagg
from zagg.config.model import ConfigError
from zagg.engine.write import to_hive
from zagg.kernels import composition, tdigest
from zagg.sources.synthetic import synthetic_photons

REGION = (-100.1, -75.55, -99.9, -75.45)
STRATA = yaml.safe_load(open("configs/atl03_strata.yaml"))


def strata_config(located=False, child=17, timed=True):
    cfg = copy.deepcopy(STRATA)
    for name in ("h_tdigest_signal", "h_tdigest_noise"):
        cfg["aggregation"]["variables"][name]["located"] = located
        cfg["aggregation"]["variables"][name]["timed"] = timed
        cfg["aggregation"]["variables"][name]["params"] = {"delta": 100_000}
    cfg["output"]["grid"] = {"parent_order": 9, "child_order": child}
    return cfg


@pytest.fixture(scope="module")
def photons():
    ds = synthetic_photons(60_000, REGION, chunk_size=20_000, seed=9).compute()
    h = ds["h_ph"].values.copy()
    h[::97] = np.nan  # some signal and noise rows without a height
    ds["h_ph"] = ("photon", h)
    return ds


@pytest.fixture(scope="module")
def result(photons):
    return zagg.aggregate(photons, strata_config()).compute()


def brute(photons, c=17):
    lat, lon = photons["lat_ph"].values, photons["lon_ph"].values
    ok = np.isfinite(lat) & np.isfinite(lon)
    conf = photons["signal_conf_ph"].values[ok]
    h = photons["h_ph"].values[ok].astype(np.float64)
    cells = mortie.geo2mort(lat[ok], lon[ok], order=c)
    return cells, conf, h


def test_strata_weights_and_payloads_match_numpy(photons, result):
    cells, conf, h = brute(photons)
    signal = conf.max(axis=1) >= 2
    idx = {int(w): i for i, w in enumerate(result["morton"].values)}
    checked = 0
    for w in np.unique(cells):
        i = idx[int(w)]
        sel = cells == w
        for name, stratum in (("h_tdigest_signal", signal), ("h_tdigest_noise", ~signal)):
            vals = h[sel & stratum]
            vals = np.sort(vals[np.isfinite(vals)].astype(np.float32))
            arr = tdigest.payload_to_array(result[name].values[i])
            np.testing.assert_array_equal(arr[:, 0], vals)
            assert arr[:, 1].sum() == vals.size
        all_w = tdigest.payload_to_array(result["h_tdigest"].values[i])[:, 1].sum()
        sig_w = tdigest.payload_to_array(result["h_tdigest_signal"].values[i])[:, 1].sum()
        noise_w = tdigest.payload_to_array(result["h_tdigest_noise"].values[i])[:, 1].sum()
        assert sig_w + noise_w == all_w  # the strata partition the cell's finite heights
        checked += 1
    assert checked > 100


def test_composition_lanes_match_numpy(photons, result):
    cells, conf, h = brute(photons)
    top = conf.max(axis=1)
    stratum = (top >= 2) & np.isfinite(h)  # the rows of the signal digest
    idx = {int(w): i for i, w in enumerate(result["morton"].values)}
    words = result["composition"].values
    for w in np.unique(cells):
        sel = (cells == w) & stratum
        n = int(sel.sum())
        word = words[idx[int(w)]]
        if n == 0:
            assert word == 0
            continue
        lanes = [(conf[sel, s] >= 2).sum() for s in range(5)]
        lanes += [(top[sel] == lv).sum() for lv in (2, 3, 4)]
        expect = composition.compose(np.array([lanes]), np.array([n]))[0]
        assert word == expect
        got = composition.unpack(np.array([word]))[0]
        assert all((g > 0) == (c > 0) for g, c in zip(got, lanes, strict=True))  # presence
        if n <= 254:  # exact recovery regime
            np.testing.assert_array_equal(
                composition.counts(np.array([word]), np.array([n]))[0], lanes
            )
        weight = tdigest.payload_to_array(result["h_tdigest_signal"].values[idx[int(w)]])[:, 1]
        assert weight.sum() == n  # N_signal is the signal digest's weight


def test_composition_is_chunking_invariant(photons, result):
    other = zagg.aggregate(photons.chunk({"photon": 7_000}), strata_config()).compute()
    np.testing.assert_array_equal(other["composition"].values, result["composition"].values)
    assert list(other["h_tdigest_noise"].values) == list(result["h_tdigest_noise"].values)


def test_store_attrs_and_moczarr_decode_composition(tmp_path, result):
    to_hive(result, tmp_path / "s")
    root = str(tmp_path / "s")
    leaf, sid = zagg.hive.walk_leaves(root)[0]
    store = moczarr.open_leaf(root, sid)
    import zarr

    arr = zarr.open_array(store, path="17/composition", mode="r")
    attrs = moczarr.parse_composition_attrs(dict(arr.attrs))
    assert attrs is not None
    sig = zarr.open_array(store, path="17/h_tdigest_signal", mode="r")
    assert sig.attrs["stratum"] == "signal" and sig.attrs["signal_threshold"] == 2
    words = arr[:]
    filled = words[words != 0]
    lanes = moczarr.named_lanes(filled, dict(arr.attrs))
    assert set(lanes) >= {"land", "land_ice", "high"}
    ours = composition.unpack(filled)
    np.testing.assert_array_equal(np.asarray(lanes["land_ice"]), ours[:, 3])


BAD = [
    (
        "composition of a non-digest",
        ("aggregation.variables.composition.params.of", "count"),
        r"'aggregation.variables.composition.params.of': 'count' must name a t-digest field",
    ),
    (
        "composition threshold differs",
        ("aggregation.variables.composition.params.threshold", 3),
        r"params.threshold': 3 differs from the stratum threshold 2 of 'h_tdigest_signal'",
    ),
    (
        "composition fill",
        ("aggregation.variables.composition.fill_value", 1),
        r"'aggregation.variables.composition.fill_value': a composition word's fill is 0",
    ),
    (
        "stratum name",
        ("aggregation.variables.h_tdigest_signal.stratum.name", "sig"),
        r"stratum.name': 'sig' is not a stratum; valid: signal, noise",
    ),
    (
        "predicate unknown name",
        ("aggregation.variables.h_tdigest_signal.where", "conf_lnd >= 2"),
        r"h_tdigest_signal.where': .*conf_lnd.*conf_land",
    ),
    (
        "predicate injection",
        ("aggregation.variables.h_tdigest_signal.where", "__import__('os').system('x')"),
        r"h_tdigest_signal.where'",
    ),
    (
        "located on a dense field",
        ("aggregation.variables.count.located", True),
        r"'aggregation.variables.count.located': only digest \(ragged\) fields carry locations",
    ),
]


@pytest.mark.parametrize("desc,change,message", BAD, ids=[b[0] for b in BAD])
def test_bad_strata_configs(desc, change, message):
    cfg = strata_config()
    keys = change[0].split(".")
    node = cfg
    for k in keys[:-1]:
        node = node[k]
    node[keys[-1]] = change[1]
    with pytest.raises(ConfigError, match=message):
        zagg.load_config(cfg)


@pytest.fixture(scope="module")
def located_result(photons):
    return zagg.aggregate(photons, strata_config(located=True)).compute()


def test_location_words_are_the_photons_point_words_and_lie_in_their_cell(photons, located_result):
    res = located_result
    lat, lon = photons["lat_ph"].values, photons["lon_ph"].values
    ok = np.isfinite(lat) & np.isfinite(lon)
    h = photons["h_ph"].values[ok]
    conf = photons["signal_conf_ph"].values[ok]
    points = mortie.geo2mort(lat[ok], lon[ok])  # order-29 point words
    cells = zagg.grid.ancestor(points, 17)
    signal = (conf.max(axis=1) >= 2) & np.isfinite(h)
    idx = {int(w): i for i, w in enumerate(res["morton"].values)}
    payloads = res["h_tdigest_signal"].values
    locs = res["h_tdigest_signal_locations"].values
    checked = 0
    for w in np.unique(cells[signal]):
        i = idx[int(w)]
        rows = tdigest.payload_to_array(payloads[i])
        words = np.frombuffer(locs[i], dtype="<u8")
        assert len(words) == len(rows)  # row-aligned sibling
        # loss-free: one point word per photon, the multiset of the cell's signal photons
        np.testing.assert_array_equal(np.sort(words), np.sort(points[(cells == w) & signal]))
        assert mortie.is_point(words).all()
        np.testing.assert_array_equal(mortie.clip2order(17, words), np.full(len(words), w))
        checked += 1
    assert checked > 50
    assert res["h_tdigest_signal"].attrs["ragged"]["locations"] == "h_tdigest_signal_locations"


def test_merged_centroids_carry_common_ancestors_inside_the_cell(photons):
    cfg = strata_config(located=True)
    cfg["aggregation"]["variables"]["h_tdigest_signal"]["params"] = {"delta": 16}
    res = zagg.aggregate(photons.chunk({"photon": 9_000}), cfg).compute()
    merged = 0
    for word, payload, loc in zip(
        res["morton"].values,
        res["h_tdigest_signal"].values,
        res["h_tdigest_signal_locations"].values,
        strict=True,
    ):
        if not payload:
            continue
        rows = tdigest.payload_to_array(payload)
        words = np.frombuffer(loc, dtype="<u8")
        assert len(words) == len(rows)
        orders = mortie.orders_of(words)
        assert (orders >= 17).all()  # never coarser than the cell they were folded in
        np.testing.assert_array_equal(mortie.clip2order(17, words), np.full(len(words), word))
        multi = rows[:, 1] > 1
        assert not mortie.is_point(words[multi]).any()  # merged centroids are area words
        merged += int(multi.sum())
    assert merged > 20


def test_moczarr_reads_location_siblings(tmp_path, located_result):
    to_hive(located_result, tmp_path / "s")
    root = str(tmp_path / "s")
    for _leaf, sid in zagg.hive.walk_leaves(root)[:3]:
        ours = zagg.open_leaf(root, sid).load()
        by_word = {int(w): i for i, w in enumerate(ours["morton"].values)}
        our_locs = ours["h_tdigest_signal_locations"].values
        our_payloads = ours["h_tdigest_signal"].values
        store = moczarr.open_leaf(root, sid)
        n = 0
        for word, values, locs in moczarr.read_ragged(store, "17/h_tdigest_signal", locations=True):
            i = by_word[int(word)]
            np.testing.assert_array_equal(
                np.asarray(locs, dtype=np.uint64), np.frombuffer(our_locs[i], dtype="<u8")
            )
            np.testing.assert_array_equal(
                np.asarray(values), tdigest.payload_to_array(our_payloads[i])
            )
            n += 1
        assert n > 0


def flux_config():
    cfg = strata_config()
    cfg["data_source"]["variables"]["flux"] = "flux"
    cfg["aggregation"]["variables"] = {
        "count": {"function": "count"},
        "h_flux": {
            "function": "tdigest",
            "source": "h_ph",
            "params": {
                "weights": "flux",
                "weight_source": "flux",
                "gain": {"name": "atlas_gain", "version": "2"},
            },
        },
    }
    return cfg


def test_flux_weighted_digest(photons, tmp_path):
    ds = photons.copy()
    rng = np.random.default_rng(1)
    flux = rng.gamma(2.0, 0.7, ds.sizes["photon"]).astype(np.float32)
    flux[::50] = 0.0  # zero-flux photons carry no row
    ds["flux"] = ("photon", flux)
    res = zagg.aggregate(ds.chunk({"photon": 11_000}), flux_config()).compute()
    assert res["h_flux"].attrs["weights"] == "flux"
    assert res["h_flux"].attrs["gain"] == {"name": "atlas_gain", "version": "2"}
    lat, lon = ds["lat_ph"].values, ds["lon_ph"].values
    ok = np.isfinite(lat) & np.isfinite(lon)
    cells = mortie.geo2mort(lat[ok], lon[ok], order=17)
    h, f = ds["h_ph"].values[ok], flux[ok]
    idx = {int(w): i for i, w in enumerate(res["morton"].values)}
    for w in np.unique(cells)[:200]:
        sel = (cells == w) & np.isfinite(h) & (f > 0)
        rows = tdigest.payload_to_array(res["h_flux"].values[idx[int(w)]])
        assert len(rows) == sel.sum()  # loss-free: one row per photon with flux
        assert rows[:, 1].sum() == pytest.approx(f[sel].astype(np.float64).sum(), rel=1e-5)
    to_hive(res, tmp_path / "s")
    leaf, sid = zagg.hive.walk_leaves(tmp_path / "s")[0]
    store = moczarr.open_leaf(str(tmp_path / "s"), sid)
    _arr, element = moczarr.open_ragged(store, "17/h_flux")
    assert "flux" in repr(element) or element is not None
    assert tdigest.check_weights_compatible("flux", "flux") == "flux"
    with pytest.raises(ValueError, match="counts.*flux|flux.*counts"):
        tdigest.check_weights_compatible(None, "flux")


FLUX_BAD = [
    ("h_flux.params.gain", None, r"h_flux.params.gain': a flux digest must record"),
    ("h_flux.params.weight_source", None, r"weight_source': a flux digest needs the variable"),
    (
        "h_flux.params.weights",
        "counts",
        r"h_flux.params.weight_source': only a digest with "
        r"weights: flux",
    ),
]


@pytest.mark.parametrize("key,value,message", FLUX_BAD, ids=[b[0] for b in FLUX_BAD])
def test_bad_flux_configs(key, value, message):
    cfg = flux_config()
    node = cfg["aggregation"]["variables"]
    *path, last = key.split(".")
    for k in path:
        node = node[k]
    if value is None:
        del node[last]
    else:
        node[last] = value
    with pytest.raises(ConfigError, match=message):
        zagg.load_config(cfg)


def test_composition_of_a_flux_digest_is_refused():
    cfg = flux_config()
    cfg["aggregation"]["variables"]["comp"] = {
        "function": "composition",
        "source": "signal_conf_ph",
        "params": {"of": "h_flux", "threshold": 2},
    }
    with pytest.raises(ConfigError, match="'h_flux' is flux-weighted"):
        zagg.load_config(cfg)


@pytest.mark.parametrize("located", [False, True])
def test_strata_leaves_do_not_depend_on_the_chunking_or_the_combine_tree(
    photons, tmp_path, monkeypatch, located
):
    """Composition words, where-selected digests and location siblings: a store reduced
    from other chunks and merged in a deeper tree holds the same bytes."""
    from zagg.engine import combine as collection

    stores = {}
    for label, chunk, fan_in in (("whole", 20_000, 64), ("deep", 7_000, 2)):
        monkeypatch.setattr(collection, "FAN_IN", fan_in)
        leaves = zagg.aggregate(photons.chunk({"photon": chunk}), strata_config(located))
        summary = to_hive(leaves, tmp_path / label)
        stores[label] = {r["shard_id"]: r["content_hashes"] for r in summary.records}
        stores[label + " objects"] = chunk_objects(tmp_path / label)
    assert stores["whole"] == stores["deep"]
    assert stores["whole objects"] == stores["deep objects"]
    names = {k.split("/")[-3] for k in stores["deep objects"]}
    assert {"composition", "h_tdigest_signal"} <= names
    assert located == ("h_tdigest_signal_locations" in names)
