"""Seeded synthetic ICESat-2 ATL03-like photons, generated lazily chunk by chunk.

``synthetic_photons(n_points, region)`` returns a dask-backed :class:`xarray.Dataset` with one
observation dimension ``photon``. Nothing is generated up front: every dask chunk is produced
inside its own task by :func:`photon_chunk`, a pure function of
``(seed, chunk index, chunk length, region, noise_fraction, nan_fraction)``, so a chunk has the
same bytes whether it is computed alone or with the others, and the graph holds a few tasks per
chunk (no data).

Geometry. Each chunk is a stretch of one pass: a near-polar track (heading within 15 degrees of
north or south) with a seeded heading, start point (hence cross-track offset), spacecraft
orientation and start time. ATLAS fires 10 kHz pulses at ~7 km/s ground speed, i.e. one shot
every 0.7 m, split into 3 beam pairs 3.3 km apart, each a strong and a weak beam 90 m apart.
Photons arrive as a Poisson process per beam: strong beams return ~1 signal photon per shot
(so ~0.7 m spacing), weak beams a quarter of that; background photons arrive at one common rate
per beam chosen so that ``noise_fraction`` of all photons are background. Photons of one shot
share position and ``delta_time``. The chunk is laid out beam by beam (strong, weak, strong,
...), each beam in time order, so consecutive rows are nearly always within a few metres (median
0.7 m on strong beams, 1.4 m on weak ones) and fall in the same ~12 m cell. The track is drawn
on an equirectangular plane about the region centre (fine for boxes of a few degrees) and wraps
periodically at the box edges: leaving through one edge re-enters through the opposite one, so
every point stays inside the box (``delta_time`` just carries on across the jump).

Surface. Heights follow a smooth seeded ice-sheet-like surface (about 500-2000 m from a few
plane waves of 25-140 km wavelength, plus cm-dm roughness at 35-120 m) defined on the region's
plane, so overlapping passes agree; see :func:`surface_height`. Signal photons scatter 0.15 m
about it; background photons are uniform within +-250 m of it.

Confidence. ``signal_conf_ph`` has ATL03 semantics per surface type (land, ocean, sea_ice,
land_ice, inland_water): -1 where that surface mask is off, 0 noise, 1 buffer, 2-4 low to high.
Land ice covers the box except a strip along the northern edge where ocean and sea ice masks are
on (the masks overlap, as ATL03's buffered masks do); seeded patches of rock outcrop (land) and
lakes (inland water) lie on the ice. Signal photons score 2-4 (mostly 4) on every active
surface, background photons 0, or 1 when within 15 m of the surface. The value -2 (possible
transmitter echo path photon) is valid but never produced.

Fill values. A fraction ``nan_fraction`` (default 1e-4) of rows have NaN ``lat_ph``/``lon_ph``,
mimicking invalid geolocation in real granules; their other variables stay finite.

Parameters of :func:`synthetic_photons`: ``n_points`` rows in total; ``region`` as
``(lon_min, lat_min, lon_max, lat_max)`` in degrees (no antimeridian crossing; default
:data:`DEFAULT_REGION`, on Pine Island Glacier); ``chunk_size`` rows per chunk; ``seed`` (a
non-negative int); ``noise_fraction`` in [0, 1); ``nan_fraction`` in [0, 1].
"""

from __future__ import annotations

import copy
import functools
import operator
from typing import TYPE_CHECKING

import numpy as np
from dask.base import tokenize
from dask.highlevelgraph import HighLevelGraph
from dask.task_spec import Task, TaskRef

if TYPE_CHECKING:
    import xarray as xr

__all__ = [
    "DEFAULT_REGION",
    "SURFACE_TYPES",
    "photon_chunk",
    "surface_height",
    "synthetic_photons",
]

#: (lon_min, lat_min, lon_max, lat_max): ~110 km x 110 km over Pine Island Glacier, Antarctica.
DEFAULT_REGION = (-102.0, -76.0, -98.0, -75.0)

#: Column order of the ``surface_type`` dimension of ``signal_conf_ph`` (as in ATL03).
SURFACE_TYPES = ("land", "ocean", "sea_ice", "land_ice", "inland_water")

EARTH_RADIUS = 6_371_008.8  # m, mean radius
SHOT_INTERVAL = 1e-4  # s, 10 kHz pulse repetition
SHOT_SPACING = 0.7  # m, ~7 km/s ground speed / 10 kHz
PAIR_SPACING = 3300.0  # m, across track between beam pairs
BEAM_SPACING = 90.0  # m, across track between strong and weak beam of a pair
MAX_HEADING_OFFSET = 15.0  # deg from north/south
SIGNAL_SIGMA = 0.15  # m, single-photon ranging scatter
BACKGROUND_HALF_WINDOW = 250.0  # m, background photons within +- this of the surface
BUFFER_HALF_WIDTH = 15.0  # m, background photons this close to the surface get conf 1
# Signal photons per shot for the six beams in chunk order (strong, weak, strong, ...).
SIGNAL_RATE = np.array([1.0, 0.25, 1.0, 0.25, 1.0, 0.25])
# delta_time of pass starts: 2019-01-01 .. 2024-01-01 in seconds since 2018-01-01T00:00:00Z.
PASS_START_RANGE = (365 * 86400.0, 2191 * 86400.0)

# Per surface type: P(conf == 4) and P(conf >= 3) for a signal photon.
_P_HIGH = np.array([0.75, 0.60, 0.60, 0.85, 0.70])
_P_MED_OR_HIGH = np.array([0.93, 0.85, 0.85, 0.96, 0.90])

_SURFACE_STREAM = 0  # seed-sequence stream for the shared surface and masks
_CHUNK_STREAM = 1  # seed-sequence stream for per-chunk pass parameters and photons


def beam_rates(noise_fraction: float) -> tuple[np.ndarray, np.ndarray]:
    """Signal and total photons per shot for each beam, in chunk order."""
    background = SIGNAL_RATE.sum() * noise_fraction / ((1.0 - noise_fraction) * SIGNAL_RATE.size)
    return SIGNAL_RATE, SIGNAL_RATE + background


def beam_counts(n: int, noise_fraction: float) -> np.ndarray:
    """Rows given to each of the six beams of an ``n``-row chunk (proportional to photon rate)."""
    _, total = beam_rates(noise_fraction)
    counts = np.floor(n * total / total.sum()).astype(np.int64)
    counts[: n - counts.sum()] += 1
    return counts


def _plane(region) -> tuple[float, float, float, float]:
    """Metres per degree of lon and lat, and box width and height (m), about the box centre."""
    lon_min, lat_min, lon_max, lat_max = region
    m_per_deg_lat = float(np.deg2rad(EARTH_RADIUS))
    m_per_deg_lon = m_per_deg_lat * float(np.cos(np.deg2rad(0.5 * (lat_min + lat_max))))
    return (
        m_per_deg_lon,
        m_per_deg_lat,
        (lon_max - lon_min) * m_per_deg_lon,
        (lat_max - lat_min) * m_per_deg_lat,
    )


def _waves(rng: np.random.Generator, wavelengths) -> tuple[np.ndarray, np.ndarray]:
    """Random-direction 2-D wave vectors (cycles per metre) and phases (rad)."""
    angle = rng.uniform(0, 2 * np.pi, len(wavelengths))
    k = np.stack([np.sin(angle), np.cos(angle)], axis=1) / np.asarray(wavelengths, float)[:, None]
    return k, rng.uniform(0, 2 * np.pi, len(wavelengths))


@functools.lru_cache(maxsize=64)
def _surface_model(seed: int) -> dict:
    """Seeded parameters of the surface and of the surface-type patches (shared by all chunks)."""
    rng = np.random.default_rng([seed, _SURFACE_STREAM])
    topo_k, topo_phase = _waves(rng, [140e3, 90e3, 25e3, 120.0, 35.0])
    return {
        "topo": (topo_k, topo_phase, (420.0, 230.0, 70.0, 0.12, 0.04)),
        "land": _waves(rng, [30e3, 22e3]),
        "water": _waves(rng, [14e3, 11e3]),
    }


def _coords(x: np.ndarray, y: np.ndarray) -> tuple:
    """Plane coordinates in float64 and float32 (the latter is enough for km-scale waves)."""
    return x, y, x.astype(np.float32), y.astype(np.float32)


def _sin_wave(xy: tuple, k: np.ndarray, phase: float) -> np.ndarray:
    """sin(2 pi k.(x, y) + phase) as float32, computed in float32 where that is precise."""
    x, y, x32, y32 = xy
    if np.hypot(*k) < 1e-3:  # wavelength over 1 km
        cycles = x32 * np.float32(k[0]) + y32 * np.float32(k[1])
    else:  # short wave: drop whole cycles in float64 first
        cycles = x * k[0] + y * k[1]
        cycles = (cycles - np.rint(cycles)).astype(np.float32)
    return np.sin(cycles * np.float32(2 * np.pi) + np.float32(phase))


def _surface_xy(xy: tuple, model: dict) -> np.ndarray:
    k, phase, amp = model["topo"]
    h = np.full(xy[0].shape, 1250.0)
    for ki, pi, ai in zip(k, phase, amp, strict=True):
        h += ai * _sin_wave(xy, ki, pi)
    return h


def _patches(xy: tuple, waves, threshold: float) -> np.ndarray:
    (k1, k2), (p1, p2) = waves
    return _sin_wave(xy, k1, p1) * _sin_wave(xy, k2, p2) > threshold


def surface_height(lon, lat, seed: int = 0, region=DEFAULT_REGION) -> np.ndarray:
    """Noise-free surface height (m) at ``lon``/``lat``: about 1250 +- 720 m.

    The surface depends on the seed and on the region (it lives on the region's local plane).
    """
    m_lon, m_lat, _, _ = _plane(region)
    x = (np.asarray(lon, float) - region[0]) * m_lon
    y = (np.asarray(lat, float) - region[1]) * m_lat
    x, y = np.broadcast_arrays(x, y)
    return _surface_xy(_coords(x, y), _surface_model(int(seed)))


def _signal_conf(rng, xy, height, model, is_signal, dh) -> np.ndarray:
    """ATL03-style (n, 5) int8 confidence from the surface masks and the photon class."""
    y = xy[1]
    seaward = y > 0.93 * height  # ocean and sea-ice masks along the northern edge
    active = (
        _patches(xy, model["land"], 0.75),  # rock outcrops
        seaward,  # ocean
        seaward,  # sea ice
        y < 0.97 * height,  # land ice
        _patches(xy, model["water"], 0.85),  # lakes
    )
    n = y.size
    u = rng.random(n, dtype=np.float32)
    signal = is_signal.view(np.int8)
    # Background: 1 (buffer) near the surface, else 0; signal: 2 here, raised per column below.
    level = np.where(is_signal, np.int8(2), (np.abs(dh) < BUFFER_HALF_WIDTH).view(np.int8))
    conf = np.empty((n, len(SURFACE_TYPES)), dtype=np.int8)
    for j, mask in enumerate(active):
        raise_by = (u < _P_MED_OR_HIGH[j]).view(np.int8) + (u < _P_HIGH[j]).view(np.int8)
        conf[:, j] = np.where(mask, level + signal * raise_by, np.int8(-1))
    return conf


def photon_chunk(
    seed: int,
    chunk_index: int,
    n: int,
    region: tuple[float, float, float, float] = DEFAULT_REGION,
    noise_fraction: float = 0.2,
    nan_fraction: float = 1e-4,
) -> dict[str, np.ndarray]:
    """Generate one chunk of ``n`` photons: a pure function of its arguments.

    Returns numpy arrays keyed by variable name (see the module docstring for the model).
    """
    lon_min, lat_min, lon_max, lat_max = region
    m_lon, m_lat, width, height = _plane(region)
    rng = np.random.default_rng([seed, _CHUNK_STREAM, chunk_index])

    # Pass: heading, start point (fixes the cross-track offset), orientation, start time.
    heading = np.deg2rad(
        rng.uniform(-MAX_HEADING_OFFSET, MAX_HEADING_OFFSET) + 180.0 * rng.integers(2)
    )
    x0, y0 = rng.uniform(0, width), rng.uniform(0, height)
    strong_side = 1.0 if rng.integers(2) else -1.0  # strong beam left or right within its pair
    t0 = rng.uniform(*PASS_START_RANGE)

    # Photons: per-beam Poisson arrivals in shot units; the shot sets position and time.
    signal_rate, total_rate = beam_rates(noise_fraction)
    counts = beam_counts(n, noise_fraction)
    gaps = rng.standard_exponential(n) / np.repeat(total_rate, counts)
    elapsed = np.cumsum(gaps)
    if n:
        first = np.minimum(np.cumsum(counts) - counts, n - 1)
        elapsed -= np.repeat(elapsed[first] - gaps[first], counts)
    shot = np.floor(elapsed)

    pair_centre = PAIR_SPACING * np.array([-1.0, -1.0, 0.0, 0.0, 1.0, 1.0])
    strong_weak = 0.5 * BEAM_SPACING * strong_side * np.array([1.0, -1.0] * 3)
    cross = pair_centre + strong_weak
    along = shot * SHOT_SPACING
    sin_h, cos_h = np.sin(heading), np.cos(heading)
    x = along * sin_h + np.repeat(x0 + cross * cos_h, counts)
    y = along * cos_h + np.repeat(y0 - cross * sin_h, counts)
    x -= width * np.floor(x / width)  # wrap into the box
    y -= height * np.floor(y / height)

    # Heights and confidence.
    model = _surface_model(seed)
    p_signal = np.repeat((signal_rate / total_rate).astype(np.float32), counts)
    is_signal = rng.random(n, dtype=np.float32) < p_signal
    scatter = rng.standard_normal(n, dtype=np.float32) * np.float32(SIGNAL_SIGMA)
    window = rng.random(n, dtype=np.float32) - np.float32(0.5)
    dh = np.where(is_signal, scatter, window * np.float32(2 * BACKGROUND_HALF_WINDOW))
    xy = _coords(x, y)
    h = (_surface_xy(xy, model) + dh).astype(np.float32)
    conf = _signal_conf(rng, xy, height, model, is_signal, dh)

    lon = np.clip(lon_min + x / m_lon, lon_min, lon_max)
    lat = np.clip(lat_min + y / m_lat, lat_min, lat_max)
    invalid = rng.random(n, dtype=np.float32) < nan_fraction
    lon[invalid] = np.nan
    lat[invalid] = np.nan
    return {
        "lat_ph": lat,
        "lon_ph": lon,
        "h_ph": h,
        "signal_conf_ph": conf,
        "delta_time": t0 + shot * SHOT_INTERVAL,
    }


_VARIABLES = {
    "lat_ph": (
        np.float64,
        {
            "units": "degrees_north",
            "long_name": "Latitude",
            "standard_name": "latitude",
            "valid_min": -90.0,
            "valid_max": 90.0,
        },
    ),
    "lon_ph": (
        np.float64,
        {
            "units": "degrees_east",
            "long_name": "Longitude",
            "standard_name": "longitude",
            "valid_min": -180.0,
            "valid_max": 180.0,
        },
    ),
    "h_ph": (
        np.float32,
        {"units": "meters", "long_name": "Photon WGS84 Height"},
    ),
    "signal_conf_ph": (
        np.int8,
        {
            "units": "counts",
            "long_name": "Photon Signal Confidence",
            "surface_types": list(SURFACE_TYPES),  # column order of the second dimension
            "flag_values": [-2, -1, 0, 1, 2, 3, 4],
            "flag_meanings": "possible_tep not_considered noise buffer low medium high",
            "valid_min": -2,
            "valid_max": 4,
        },
    ),
    "delta_time": (
        np.float64,
        {
            "units": "seconds since 2018-01-01",
            "long_name": "Elapsed GPS seconds",
            "standard_name": "time",
            "description": "GPS seconds since the ATLAS SDP epoch 2018-01-01T00:00:00Z",
        },
    ),
}


def _validate(n_points, region, chunk_size, seed, noise_fraction, nan_fraction):
    if int(n_points) != n_points or n_points < 0:
        raise ValueError(f"n_points must be a non-negative integer, got {n_points!r}")
    if int(chunk_size) != chunk_size or chunk_size < 1:
        raise ValueError(f"chunk_size must be a positive integer, got {chunk_size!r}")
    if int(seed) != seed or seed < 0:
        raise ValueError(f"seed must be a non-negative integer, got {seed!r}")
    lon_min, lat_min, lon_max, lat_max = region
    if not (-180.0 <= lon_min < lon_max <= 180.0 and -90.0 <= lat_min < lat_max <= 90.0):
        raise ValueError(f"region must be (lon_min, lat_min, lon_max, lat_max), got {region!r}")
    if not 0.0 <= noise_fraction < 1.0:
        raise ValueError(f"noise_fraction must be in [0, 1), got {noise_fraction!r}")
    if not 0.0 <= nan_fraction <= 1.0:
        raise ValueError(f"nan_fraction must be in [0, 1], got {nan_fraction!r}")


def synthetic_photons(
    n_points: int,
    region: tuple[float, float, float, float] = DEFAULT_REGION,
    *,
    chunk_size: int = 1_000_000,
    seed: int = 0,
    noise_fraction: float = 0.2,
    nan_fraction: float = 1e-4,
) -> xr.Dataset:
    """Lazy ATL03-like photons over ``region``: ``n_points`` rows on dimension ``photon``.

    Variables: ``lat_ph``, ``lon_ph``, ``delta_time`` (float64), ``h_ph`` (float32) and
    ``signal_conf_ph`` (int8, ``(photon, surface_type)``), chunked ``chunk_size`` along
    ``photon``. The graph has one generator task per chunk plus one selection task per variable
    and chunk; nothing is computed here. See the module docstring for the model.
    """
    import dask.array as da
    import xarray as xr

    _validate(n_points, region, chunk_size, seed, noise_fraction, nan_fraction)
    n_points, chunk_size, seed = int(n_points), int(chunk_size), int(seed)
    region = tuple(float(v) for v in region)
    noise_fraction, nan_fraction = float(noise_fraction), float(nan_fraction)

    lengths = (chunk_size,) * (n_points // chunk_size)
    if n_points % chunk_size or not n_points:
        lengths += (n_points % chunk_size,)
    token = tokenize(n_points, region, chunk_size, seed, noise_fraction, nan_fraction)
    gen_name = f"synthetic-photons-{token}"
    gen_layer = {
        (gen_name, i): Task(
            (gen_name, i),
            photon_chunk,
            seed,
            i,
            n,
            region,
            noise_fraction,
            nan_fraction,
            _data_producer=True,
        )
        for i, n in enumerate(lengths)
    }

    data_vars = {}
    for var, (dtype, attrs) in _VARIABLES.items():
        name = f"{var}-{token}"
        two_d = var == "signal_conf_ph"
        layer = {}
        for i in range(len(lengths)):
            key = (name, i, 0) if two_d else (name, i)
            layer[key] = Task(key, operator.getitem, TaskRef((gen_name, i)), var)
        graph = HighLevelGraph(
            {gen_name: gen_layer, name: layer}, {gen_name: set(), name: {gen_name}}
        )
        chunks = (lengths, (len(SURFACE_TYPES),)) if two_d else (lengths,)
        array = da.Array(graph, name, chunks=chunks, dtype=dtype)
        dims = ("photon", "surface_type") if two_d else ("photon",)
        data_vars[var] = xr.Variable(dims, array, attrs=copy.deepcopy(attrs))

    return xr.Dataset(
        data_vars,
        attrs={
            "generator": "zagg.sources.synthetic.synthetic_photons",
            "title": "Synthetic ATL03-like photons",
            "seed": seed,
            "region": list(region),
            "chunk_size": chunk_size,
            "noise_fraction": noise_fraction,
            "nan_fraction": nan_fraction,
        },
    )
