"""The configs the tests run, each shape written once.

``config`` wraps a data source, its fields and a grid into a whole pipeline config (the
dict a YAML file holds). Two sources recur: points named like zagg's synthetic photons
(``lat_ph``, ``lon_ph``, ``h_ph``, ``delta_time``; ``synthetic_source``) and the ATL03
granule layout ``write_granules`` writes (``atl03_source``, ``atl03_config``). Each test
still states what it varies (fields, orders, filters, windows) where it builds its config.
"""

from __future__ import annotations

import copy
import os

import numpy as np

from zagg.sources.write_granules import BEAMS

#: ``zagg.run`` keywords of a local cluster that runs inside the test's own process: one
#: worker whose threads take every core (zagg's default on a 2-core machine). It starts in
#: a fraction of a second, where a worker process pays its imports and numba's set-up each
#: time; tests whose subject is not the cluster's shape run on it
IN_PROCESS = {"workers": 1, "threads": os.cpu_count() or 1}
#: the same cluster asked for on the command line
IN_PROCESS_CLI = ["--workers", "1", "--threads", str(IN_PROCESS["threads"])]

#: the photons' fields by name; ``fields`` copies them so a test may edit its own
FIELDS = {
    "count": {"function": "count"},
    "h_sum": {"function": "sum", "source": "h_ph", "dtype": "float64"},
    "h_mean": {"function": "mean", "source": "h_ph"},
    "h_min": {"function": "min", "source": "h_ph"},
    "h_max": {"function": "max", "source": "h_ph"},
    "h_tdigest": {"function": "tdigest", "source": "h_ph"},
}

#: yearly windows on the photons' GPS ``delta_time`` from the ATLAS epoch
YEARLY = {
    "schedule": "yearly",
    "time_field": "delta_time",
    "epoch": "2018-01-01T00:00:00Z",
    "scale": "gps",
}


def fields(*names: str, **changes: dict) -> dict:
    """Aggregation variables: the named ones from ``FIELDS`` in the order named, each with
    ``changes[name]`` merged in (``h_mean={"dtype": "float64"}``); any other keyword
    declares a field of its own in full, after them."""
    out = {name: {**FIELDS[name], **copy.deepcopy(changes.get(name, {}))} for name in names}
    out.update({k: copy.deepcopy(v) for k, v in changes.items() if k not in names})
    return out


def grid_orders(parent: int, child: int, inner: int | None = None, **more) -> dict:
    """``output.grid``: shard (parent) order, cell (child) order, optional inner chunks."""
    out = {"parent_order": parent, "child_order": child}
    if inner is not None:
        out["chunk_inner"] = inner
    return {**out, **more}


def pipeline_config(
    source: dict, variables: dict, grid: dict, *, name="TEST", version="1", store=None, **output
) -> dict:
    """A whole pipeline config: ``source`` as ``data_source``, ``variables`` aggregated onto
    ``grid``, a dataset ``name``/``version``, an optional store and any other output keys."""
    out = {"dataset": {"short_name": name, "version": version}, "grid": dict(grid), **output}
    if store is not None:
        out["store"] = str(store)
    return {
        "data_source": copy.deepcopy(source),
        "aggregation": {"variables": copy.deepcopy(variables)},
        "output": out,
    }


def synthetic_source(
    *variables: str, points=None, seed=None, region=None, chunk_size=None, **more
) -> dict:
    """``data_source`` over photon-named points (``variables`` default to ``h_ph``); with
    ``points`` the built-in synthetic generator makes them (seeded, in ``region``)."""
    src = {
        "coordinates": {"latitude": "lat_ph", "longitude": "lon_ph"},
        "variables": list(variables or ("h_ph",)),
        **more,
    }
    if points is not None:
        gen = {"points": points, "seed": seed, "chunk_size": chunk_size, "region": region}
        src["synthetic"] = {
            k: (list(v) if k == "region" else v) for k, v in gen.items() if v is not None
        }
    return src


def atl03_source(location, *, variables=None, confidence=None, **extra) -> dict:
    """``data_source`` over ATL03 granules at ``location`` (a folder, glob, list, catalog or
    S3 URL): every beam's photons, their heights and land-ice confidence (column 3 of
    ``signal_conf_ph``), kept where that confidence is at least ``confidence`` if given."""
    src = {
        "granules": [str(p) for p in location] if isinstance(location, list) else str(location),
        "groups": list(BEAMS),
        "coordinates": {
            "latitude": "/{group}/heights/lat_ph",
            "longitude": "/{group}/heights/lon_ph",
        },
        "variables": dict(
            variables
            or {
                "h_ph": "/{group}/heights/h_ph",
                "land_ice_conf": {"path": "/{group}/heights/signal_conf_ph", "column": 3},
            }
        ),
        "delta_time": "/{group}/heights/delta_time",
    }
    if confidence is not None:
        src["filters"] = [{"variable": "land_ice_conf", "op": "ge", "value": confidence}]
    return {**src, **extra}


def fill_as_nan(dset) -> np.ndarray:
    """An HDF5 dataset's values as float64, its declared ``_FillValue`` replaced by NaN."""
    values = dset[:].astype(np.float64)
    fill = dset.attrs.get("_FillValue")
    if fill is not None:
        values[values == np.asarray(fill).ravel()[0]] = np.nan
    return values
