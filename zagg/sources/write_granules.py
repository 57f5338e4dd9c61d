"""Write seeded, deterministic HDF5 granules in the ICESat-2 ATL03 and ATL06 layouts.

Real-format test input for the granule reader and catalog without network access: each
granule is one :func:`zagg.sources.synthetic.photon_chunk` (a pass of six beams over
``region``), split into the beams ``gt1l gt1r gt2l gt2r gt3l gt3r`` and written like the products. The
spacecraft's orientation (``sc_orient``, 0 backward by default, or 1 forward) decides which
tracks the strong beams land on: the left ones backward, the right ones forward, so a
forward granule holds in ``gt1r`` the photons a backward one holds in ``gt1l`` (each beam
group's attributes ``atlas_beam_type`` and ``atlas_spot_number`` say so, as in the products):

ATL03  ``/gtXY/heights/{lat_ph, lon_ph, h_ph, signal_conf_ph (n x 5 int8), delta_time}`` and
       ``/gtXY/geolocation/{reference_photon_lat, reference_photon_lon, ph_index_beg,
       segment_ph_cnt, segment_id}`` over 20 m along-track segments (``ph_index_beg`` is
       1-based, 0 for a segment without photons).
ATL06  ``/gtXY/land_ice_segments/{h_li, latitude, longitude, atl06_quality_summary,
       delta_time, segment_id}``, one row per 20 m segment holding photons, estimated (as in
       the product) over the 40 m window of that segment and the next; ``h_li`` is the mean
       height of the window's medium/high-confidence land-ice photons, or the fill
       3.4028235e38 where it has fewer than 5 of them (off the ice mask, sparse weak beams);
       ``atl06_quality_summary`` is 1 where it has fewer than 10.

Both carry ``/ancillary_data/atlas_sdp_gps_epoch`` (1198800018 GPS s, i.e. 2018-01-01T00:00:00Z)
and ``/orbit_info/{rgt, cycle_number, sc_orient}``. Float datasets carry a ``_FillValue``
attribute as the products do; invalid geolocation (the generator's NaN rows) is written as
that fill. Datasets are chunked 10000 rows along the first axis, gzip level 6, extendible.
Every third granule (index 2, 5, ...) has one seeded beam without data: zero-length datasets
in ATL03, a missing beam group in ATL06 (both happen in real granules).

Names follow the products, ``ATL03_YYYYmmddHHMMSS_ttttccss_006_01.h5`` (start time, reference
ground track, cycle, segment), so distinct passes give distinct names. The same arguments
always give byte-identical files.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import h5py
import numpy as np

from zagg.sources.synthetic import (
    DEFAULT_REGION,
    SHOT_INTERVAL,
    SHOT_SPACING,
    beam_counts,
    beam_rates,
    photon_chunk,
)

__all__ = ["BEAMS", "PRODUCTS", "write_granules"]

BEAMS = ("gt1l", "gt1r", "gt2l", "gt2r", "gt3l", "gt3r")
PRODUCTS = ("ATL03", "ATL06")
ATLAS_SDP_GPS_EPOCH = 1198800018.0  # GPS seconds of 2018-01-01T00:00:00Z
SEGMENT_LENGTH = 20.0  # m
FILL_F4 = np.float32(3.4028235e38)
FILL_F8 = np.float64(1.7976931348623157e308)
HDF5_CHUNK = 10_000
_SEGMENT_ID_BASE = 100_000  # segment_id of the granule's first segment
RELEASE = "006"
_EPOCH = dt.datetime(2018, 1, 1, tzinfo=dt.UTC)
_CYCLE_1_START = 285 * 86400.0  # 2018-10-13, seconds since the epoch
_CYCLE_DAYS = 91
_META_STREAM = 7  # seed-sequence stream for per-granule metadata (rgt, empty beam, ...)
_MIN_SIGNAL = 5  # land-ice signal photons a segment needs for a valid h_li
_GOOD_SIGNAL = 10  # ... and for atl06_quality_summary == 0

_ATTRS = {
    "lat_ph": {"units": "degrees_north", "long_name": "Latitude", "standard_name": "latitude"},
    "lon_ph": {"units": "degrees_east", "long_name": "Longitude", "standard_name": "longitude"},
    "h_ph": {"units": "meters", "long_name": "Photon WGS84 Height"},
    "signal_conf_ph": {
        "units": "counts",
        "long_name": "Photon Signal Confidence",
        "flag_values": np.array([-2, -1, 0, 1, 2, 3, 4], np.int8),
        "flag_meanings": "possible_tep not_considered noise buffer low medium high",
        "description": "columns: land, ocean, sea_ice, land_ice, inland_water",
    },
    "delta_time": {
        "units": "seconds since 2018-01-01",
        "long_name": "Elapsed GPS seconds",
        "standard_name": "time",
    },
    "reference_photon_lat": {"units": "degrees_north", "long_name": "Reference photon latitude"},
    "reference_photon_lon": {"units": "degrees_east", "long_name": "Reference photon longitude"},
    "ph_index_beg": {
        "units": "1",
        "long_name": "Photon Index Begin",
        "description": "1-based index of the segment's first photon; 0: none",
    },
    "segment_ph_cnt": {"units": "counts", "long_name": "Number of photons in segment"},
    "segment_id": {"units": "1", "long_name": "Along-track segment ID number"},
    "h_li": {"units": "meters", "long_name": "Land Ice height"},
    "latitude": {"units": "degrees_north", "long_name": "Latitude", "standard_name": "latitude"},
    "longitude": {"units": "degrees_east", "long_name": "Longitude", "standard_name": "longitude"},
    "atl06_quality_summary": {
        "units": "1",
        "long_name": "ATL06_Quality_Summary",
        "flag_values": np.array([0, 1], np.int8),
        "flag_meanings": "best_quality potential_problem",
    },
}


def write_granules(
    directory,
    n_granules: int,
    *,
    product: str = "ATL03",
    points_per_granule: int = 100_000,
    region=DEFAULT_REGION,
    seed: int = 0,
    noise_fraction: float = 0.2,
    first: int = 0,
    sc_orient=0,
) -> list[Path]:
    """Write ``n_granules`` granules into ``directory`` and return their paths, in name order.

    ``points_per_granule`` is the number of photons of an ATL03 granule before its empty
    beam (if any) is dropped, and the approximate number of segment rows of an ATL06
    granule. Granule ``i`` uses generator chunk ``i`` of ``seed``, so growing ``n_granules``
    keeps the earlier files unchanged; ``first`` writes granules ``first`` to
    ``first + n_granules - 1`` alone (the same files a single call writes, unless two
    granules' names collide: a call renames the later one a second on, and only within
    itself). ``sc_orient`` is the orientation of every granule (0 or 1), or a sequence of
    one per granule written.
    """
    if product not in PRODUCTS:
        raise ValueError(f"product must be one of {', '.join(PRODUCTS)}, got {product!r}")
    if isinstance(n_granules, bool) or not isinstance(n_granules, int) or n_granules < 0:
        raise ValueError(f"n_granules must be a non-negative integer, got {n_granules!r}")
    if (
        isinstance(points_per_granule, bool)
        or not isinstance(points_per_granule, int)
        or points_per_granule < 1
    ):
        raise ValueError(
            f"points_per_granule must be a positive integer, got {points_per_granule!r}"
        )
    region = tuple(float(v) for v in region)
    if len(region) != 4 or not (
        -180.0 <= region[0] < region[2] <= 180.0 and -90.0 <= region[1] < region[3] <= 90.0
    ):
        raise ValueError(f"region must be (lon_min, lat_min, lon_max, lat_max), got {region!r}")
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    n_photons = points_per_granule
    if product == "ATL06":  # photons whose segments give about points_per_granule rows
        photons_per_shot = float(beam_rates(noise_fraction)[1].sum())
        n_photons = int(
            np.ceil(
                points_per_granule / len(BEAMS) * SEGMENT_LENGTH / SHOT_SPACING * photons_per_shot
            )
        )
    paths, names = [], set()
    if isinstance(first, bool) or not isinstance(first, int) or first < 0:
        raise ValueError(f"first must be a non-negative integer, got {first!r}")
    orients = [sc_orient] * n_granules if isinstance(sc_orient, int) else list(sc_orient)
    if len(orients) != n_granules or any(o not in (0, 1) for o in orients):
        raise ValueError(
            f"sc_orient must be 0, 1 or a sequence of one of them per granule, got {sc_orient!r}"
        )
    for i in range(first, first + n_granules):
        orient = orients[i - first]
        photons = photon_chunk(seed, i, n_photons, region, noise_fraction)
        beams = _split_beams(photons, n_photons, noise_fraction)
        meta = np.random.default_rng([seed, _META_STREAM, i])
        rgt = int(meta.integers(1, 1388))
        region_no = int(meta.integers(1, 15))
        empty = int(meta.integers(len(BEAMS))) if i % 3 == 2 else None
        t_start = float(np.nanmin(photons["delta_time"])) if n_photons else 0.0
        t_end = float(np.nanmax(photons["delta_time"])) if n_photons else 0.0
        cycle = max(1, 1 + int((t_start - _CYCLE_1_START) // (_CYCLE_DAYS * 86400)))
        name = _granule_name(product, t_start, rgt, cycle, region_no, names)
        names.add(name)
        path = directory / name
        with h5py.File(path, "w") as f:
            _write_ancillary(f, product, rgt, cycle, t_start, t_end, orient)
            for b, beam in enumerate(BEAMS):
                data = beams[b]
                if orient == 1:  # forward: the strong beams land on the right tracks
                    beam = BEAMS[b ^ 1]
                if b == empty:
                    if product == "ATL06":
                        continue  # the beam group is absent
                    data = {k: v[:0] for k, v in data.items()}
                if product == "ATL03":
                    _write_atl03_beam(f, beam, data, t_start)
                else:
                    _write_atl06_beam(f, beam, data, t_start)
                _beam_attrs(f[beam], b, orient)
        paths.append(path)
    return sorted(paths)


def _granule_name(
    product: str, t_start: float, rgt: int, cycle: int, region_no: int, taken: set
) -> str:
    """``ATL03_YYYYmmddHHMMSS_ttttccss_006_01.h5``; a second later if the name is taken."""
    stamp = _EPOCH + dt.timedelta(seconds=int(t_start))
    while True:
        name = (
            f"{product}_{stamp:%Y%m%d%H%M%S}_{rgt:04d}{cycle % 100:02d}{region_no:02d}"
            f"_{RELEASE}_01.h5"
        )
        if name not in taken:
            return name
        stamp += dt.timedelta(seconds=1)


def _split_beams(photons: dict, n: int, noise_fraction: float) -> list[dict]:
    counts = beam_counts(n, noise_fraction)
    ends = np.cumsum(counts)
    starts = ends - counts
    return [{k: v[s:e] for k, v in photons.items()} for s, e in zip(starts, ends, strict=True)]


def _dataset(group, name: str, data: np.ndarray, fill=None) -> None:
    data = np.asarray(data)
    chunks = (HDF5_CHUNK,) + data.shape[1:]
    if fill is not None:
        data = np.where(np.isnan(data), fill, data).astype(data.dtype)
    d = group.create_dataset(
        name,
        data=data,
        chunks=chunks,
        maxshape=(None,) + data.shape[1:],
        compression="gzip",
        compression_opts=6,
        fillvalue=fill if fill is not None else None,
    )
    for key, value in _ATTRS.get(name, {}).items():
        d.attrs[key] = value
    if fill is not None:
        d.attrs["_FillValue"] = np.asarray([fill], dtype=data.dtype)


def _beam_attrs(group, b: int, orient: int) -> None:
    """The products' beam attributes: strong or weak, and the ATLAS spot (backward, gt1l
    is spot 1 ... gt3r spot 6; forward, gt3r is spot 1 ... gt1l spot 6)."""
    group.attrs["atlas_beam_type"] = "strong" if b % 2 == 0 else "weak"
    track = BEAMS.index(group.name.strip("/"))
    group.attrs["atlas_spot_number"] = str(track + 1 if orient == 0 else 6 - track)


def _write_ancillary(
    f: h5py.File, product: str, rgt: int, cycle: int, t0: float, t1: float, orient: int = 0
):
    f.attrs["short_name"] = product
    f.attrs["title"] = f"Synthetic ICESat-2 {product} granule (zagg.sources.write_granules)"
    anc = f.create_group("ancillary_data")
    epoch = anc.create_dataset("atlas_sdp_gps_epoch", data=np.array([ATLAS_SDP_GPS_EPOCH]))
    epoch.attrs["units"] = "seconds since 1980-01-06T00:00:00.000000Z"
    epoch.attrs["description"] = "GPS seconds between the GPS epoch and the ATLAS SDP epoch"
    for key, t in (("data_start_utc", t0), ("data_end_utc", t1)):
        text = (_EPOCH + dt.timedelta(seconds=t)).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        anc.create_dataset(key, data=np.array([text.encode()]))
    orbit = f.create_group("orbit_info")
    orbit.create_dataset("rgt", data=np.array([rgt], np.int16))
    orbit.create_dataset("cycle_number", data=np.array([cycle], np.int8))
    orbit.create_dataset("sc_orient", data=np.array([orient], np.int8))


def _segments(delta_time: np.ndarray, t_start: float) -> np.ndarray:
    """20 m along-track segment index of each photon, counted from the granule start."""
    shot = np.rint((delta_time - t_start) / SHOT_INTERVAL)
    return np.floor(shot * SHOT_SPACING / SEGMENT_LENGTH).astype(np.int64)


def _write_atl03_beam(f: h5py.File, beam: str, data: dict, t_start: float) -> None:
    heights = f.create_group(f"{beam}/heights")
    _dataset(heights, "lat_ph", data["lat_ph"], FILL_F8)
    _dataset(heights, "lon_ph", data["lon_ph"], FILL_F8)
    _dataset(heights, "h_ph", data["h_ph"], FILL_F4)
    _dataset(heights, "signal_conf_ph", data["signal_conf_ph"])
    _dataset(heights, "delta_time", data["delta_time"], FILL_F8)

    seg = _segments(data["delta_time"], t_start)
    first = int(seg[0]) if seg.size else 0
    cnt = np.bincount(seg - first).astype(np.int32) if seg.size else np.zeros(0, np.int32)
    beg = np.where(cnt > 0, np.cumsum(cnt) - cnt + 1, 0).astype(np.int32)
    ref_lat = np.full(cnt.size, np.nan)
    ref_lon = np.full(cnt.size, np.nan)
    has = cnt > 0
    mid = beg[has] - 1 + cnt[has] // 2  # the segment's middle photon
    ref_lat[has] = data["lat_ph"][mid]
    ref_lon[has] = data["lon_ph"][mid]
    idx = np.arange(cnt.size)
    ok = np.isfinite(ref_lat)
    if ok.any() and not ok.all():  # segments without a photon: interpolate along track
        ref_lat[~ok] = np.interp(idx[~ok], idx[ok], ref_lat[ok])
        ref_lon[~ok] = np.interp(idx[~ok], idx[ok], ref_lon[ok])
    geo = f.create_group(f"{beam}/geolocation")
    _dataset(geo, "reference_photon_lat", ref_lat, FILL_F8)
    _dataset(geo, "reference_photon_lon", ref_lon, FILL_F8)
    _dataset(geo, "ph_index_beg", beg)
    _dataset(geo, "segment_ph_cnt", cnt.astype(np.int32))
    _dataset(geo, "segment_id", (_SEGMENT_ID_BASE + first + idx).astype(np.int32))


def _write_atl06_beam(f: h5py.File, beam: str, data: dict, t_start: float) -> None:
    """One row per 20 m segment holding photons; like the product, each row's estimate uses
    the 40 m window made of the segment and the next one."""
    seg = _segments(data["delta_time"], t_start)
    first = int(seg.min()) if seg.size else 0
    seg = seg - first
    size = int(seg.max()) + 2 if seg.size else 1
    lat, lon = data["lat_ph"], data["lon_ph"]
    ok = np.isfinite(lat) & np.isfinite(lon)
    signal = data["signal_conf_ph"][:, 3] >= 3  # medium/high land-ice confidence

    def window(weights):
        per_segment = np.bincount(seg, weights=weights, minlength=size)
        return per_segment[:-1] + per_segment[1:]

    rows = np.flatnonzero(np.bincount(seg, minlength=size)[:-1])
    n_all, n_ok, n_sig = (window(w)[rows] for w in (np.ones(seg.size), ok, signal))
    with np.errstate(invalid="ignore", divide="ignore"):
        seg_lat = window(np.where(ok, lat, 0.0))[rows] / n_ok
        seg_lon = window(np.where(ok, lon, 0.0))[rows] / n_ok
        seg_t = window(data["delta_time"])[rows] / n_all
        h_li = (window(np.where(signal, data["h_ph"], 0.0))[rows] / n_sig).astype(np.float32)
    h_li[n_sig < _MIN_SIGNAL] = np.nan  # written as the fill value
    quality = (n_sig < _GOOD_SIGNAL).astype(np.int8)
    lis = f.create_group(f"{beam}/land_ice_segments")
    _dataset(lis, "h_li", h_li, FILL_F4)
    _dataset(lis, "latitude", seg_lat, FILL_F8)
    _dataset(lis, "longitude", seg_lon, FILL_F8)
    _dataset(lis, "atl06_quality_summary", quality)
    _dataset(lis, "delta_time", seg_t, FILL_F8)
    _dataset(lis, "segment_id", (_SEGMENT_ID_BASE + first + rows).astype(np.int32))
