"""Assemble the read's Dataset: one dask chunk per leaf, the cell coordinates, the attrs.

Sparse (the default): dimension ``cells`` over the occupied cells only, leaves in ascending
shard order; ``morton`` is an in-memory indexed coordinate derived from the coverage (so
``ds.sel(morton=word)`` works), ``cell_ids`` its NESTED HEALPix view (mortie's
``mort2healpix``, never stored) with the attrs xdggs reads, and ``latitude``/``longitude``
the cells' centres (mortie's ``mort2geo``, longitude in [-180, 180)), lazily, one dask
chunk per leaf. Dense: every leaf's ``4^(c−p)``
cells, ``morton`` read from the leaves and checked against the cell law, as the in-memory
leaf contract has it. Data variables keep their zarr dtype and attrs; vlen fields hold raw
payload bytes per cell (``b""`` where empty), word siblings one ``uint64`` array per cell.
"""

from __future__ import annotations

import mortie
import numpy as np

from zagg import grid as _grid
from zagg.grid import Grid
from zagg.hive.layout import CELL_DIM, MORTON
from zagg.hive.loaders import load_field, load_morton
from zagg.hive.schema import Field
from zagg.read.leaves import Leaf

CELL_IDS = "cell_ids"
LATITUDE, LONGITUDE = "latitude", "longitude"  # the cell-centre coordinates of a read


def dask_array(label: str, token: str, tasks: list, chunks: tuple, dtype):
    """A dask array of one plain task tuple per chunk (dask.delayed would tokenize every
    argument of every call, ~20 ms a leaf: minutes of graph building for big stores)."""
    import dask.array as da
    from dask.highlevelgraph import HighLevelGraph

    name = f"zagg-read-{label}-{token}"
    if not tasks:
        return da.from_array(np.zeros((0,) * len(chunks), dtype=dtype), chunks=-1)
    graph = HighLevelGraph.from_collections(
        name, {(name, *_block(i, len(chunks))): t for i, t in enumerate(tasks)}, dependencies=[]
    )
    return da.Array(graph, name, chunks, dtype=dtype)


def _block(i: int, ndim: int) -> tuple:
    return (i,) if ndim == 1 else (0,) * (ndim - 1) + (i,)


def field_tasks(
    root, leaves: list[Leaf], group: str, field: Field, *, dense: bool, recorded: list | None
) -> list:
    return [
        (
            load_field,
            root,
            leaf.prefix,
            group,
            field,
            None if dense else leaf.ranks,
            root.url_of(leaf.rel),
            None if recorded is None else recorded[i],
            leaf.occupied,
        )
        for i, leaf in enumerate(leaves)
    ]


def dataset(
    root,
    manifest: dict,
    leaves: list[Leaf],
    fields: dict[str, Field],
    grid: Grid,
    group_attrs: dict,
    morton_attrs: dict,
    *,
    dense: bool,
    recorded: list | None,
    token: str,
    words: np.ndarray | None,
    derived: bool = False,
):
    """The Dataset of ``leaves``; ``words`` is the sparse morton coordinate (None: dense).
    ``derived``: the leaves store no ``morton`` (windowed leaves), so a dense read derives
    every leaf's coordinate from its id (spec §1.5)."""
    import xarray as xr

    group = str(grid.cell_order)
    if dense:
        chunks = ((grid.cells_per_shard,) * len(leaves),)
    else:
        chunks = (tuple(int(leaf.ranks.size) for leaf in leaves),)
    data_vars = {}
    for name, field in fields.items():
        tasks = field_tasks(root, leaves, group, field, dense=dense, recorded=recorded)
        data_vars[name] = (
            (CELL_DIM,),
            dask_array(name, token, tasks, chunks, field.dtype),
            dict(field.attrs),
        )
    if dense:
        p, c = grid.shard_order, grid.cell_order
        tasks = [
            (
                load_morton,
                root,
                leaf.prefix,
                f"{group}/{MORTON}",
                leaf.shard_id,
                p,
                c,
                root.url_of(leaf.rel),
                None if recorded is None else recorded[i],
            )
            for i, leaf in enumerate(leaves)
        ]
        if derived:
            tasks = [
                (_grid.shard_cell_words, _grid.from_decimal([leaf.shard_id])[0], p, c)
                for leaf in leaves
            ]
        morton = dask_array(MORTON, token, tasks, chunks, np.uint64)
        cell_ids = morton.map_blocks(nested_of, dtype=np.int64)
    else:
        morton = words
        cell_ids = nested_of(words)
    coords = {
        MORTON: xr.Variable((CELL_DIM,), morton, morton_attrs),
        CELL_IDS: xr.Variable((CELL_DIM,), cell_ids, cell_ids_attrs(grid.cell_order)),
        **centre_coords(morton, chunks, data_vars),
    }
    ds = xr.Dataset(data_vars, coords=coords)
    if not dense:
        ds = ds.set_xindex(MORTON)
    ds.attrs = dict(group_attrs)
    ds.attrs["zagg"] = zagg_attrs(manifest, grid, leaves, fields, dense=dense)
    ds.attrs["morton_hive"] = {
        k: manifest[k]
        for k in ("spec", "cell_order", "shard_order", "semantic_hash")
        if k in manifest
    }
    ds.attrs["morton_hive"]["store"] = root.url  # where it was read from (plot titles)
    return ds


def nested_of(words: np.ndarray) -> np.ndarray:
    """NESTED HEALPix ids of same-order morton words (mortie's ``mort2healpix``)."""
    words = np.asarray(words, dtype=np.uint64)
    if words.size == 0:
        return np.zeros(0, dtype=np.int64)
    nested, _order = mortie.mort2healpix(words)
    return np.asarray(nested, dtype=np.int64)


def cell_centres(words: np.ndarray) -> np.ndarray:
    """The centres of morton cells as a ``(2, n)`` float64 array: WGS84 geodetic latitude,
    then longitude in [-180, 180) (mortie's ``mort2geo`` gives it in [0, 360))."""
    words = np.asarray(words, dtype=np.uint64)
    if words.size == 0:
        return np.zeros((2, 0), dtype=np.float64)
    lat, lon = mortie.mort2geo(words)
    lon = (np.asarray(lon, dtype=np.float64) + 180.0) % 360.0 - 180.0
    return np.stack([np.asarray(lat, dtype=np.float64), lon])


#: the attrs of the cell-centre coordinates (CF)
CENTRE_ATTRS = {
    LATITUDE: {
        "standard_name": "latitude",
        "units": "degrees_north",
        "long_name": "cell-centre latitude (WGS84 geodetic)",
    },
    LONGITUDE: {
        "standard_name": "longitude",
        "units": "degrees_east",
        "long_name": "cell-centre longitude, in [-180, 180)",
    },
}


def centre_coords(morton, chunks, taken=()) -> dict:
    """The ``latitude`` and ``longitude`` coordinates of the cells ``morton`` (a numpy or
    dask array of words), computed lazily per chunk (``chunks``: the cells' chunks) from
    the words; a name a data variable already holds (``taken``) is left out."""
    import dask.array as da
    import xarray as xr

    if not isinstance(morton, da.Array):
        words = np.asarray(morton, dtype=np.uint64)
        morton = da.from_array(words, chunks=chunks if words.size else -1)
    both = morton.map_blocks(
        cell_centres, new_axis=0, chunks=((2,), *morton.chunks), dtype=np.float64
    )
    return {
        name: xr.Variable((CELL_DIM,), both[i], dict(CENTRE_ATTRS[name]))
        for i, name in enumerate((LATITUDE, LONGITUDE))
        if name not in taken
    }


def cell_ids_attrs(cell_order: int) -> dict:
    """The xdggs HEALPix convention: NESTED ids at the store's order on WGS84 (authalic
    latitude, as the store's ``dggs.latitude`` records)."""
    return {
        "grid_name": "healpix",
        "level": int(cell_order),
        "indexing_scheme": "nested",
        "ellipsoid": "WGS84",
    }


def zagg_attrs(
    manifest: dict, grid: Grid, leaves: list[Leaf], fields: dict[str, Field], *, dense: bool
) -> dict:
    """The ``zagg`` attrs block of a read (the engine's shape: ``shard_cells`` gives a
    sparse read's cells per leaf)."""
    out = {
        "grid": grid.as_dict(),
        "shards": [leaf.shard_id for leaf in leaves],
        "fields": {
            name: {
                "kind": "ragged" if f.ragged else "dense",
                "dtype": "object" if f.ragged else str(f.dtype),
                "fill_value": b"" if f.ragged else f.fill,
            }
            for name, f in sorted(fields.items())
        },
        "dataset": dict(manifest.get("dataset") or {}),
    }
    if not dense:
        out["shard_cells"] = [int(leaf.ranks.size) for leaf in leaves]
    windows = [leaf.stamp.get("window") for leaf in leaves]
    if any(w is not None for w in windows):  # a windowed read: one window's leaves
        out["window"] = windows[0]
        out["time_ranges"] = [leaf.stamp.get("time_range") for leaf in leaves]
    return out
