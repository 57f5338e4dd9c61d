"""Raster leaves: ``(time, cells)`` bands beside a leaf-local ``time`` axis.

A raster leaf (hive_layout.md "Raster hive stores") stores ``{cell_order}/time`` — int64
microseconds with CF units, or ``uint64`` mortie toc words declared ``zagg-toc/1`` at
``shape: "coordinate"`` (spec §8.1) — the ``morton`` coordinate and one
``(T_leaf, cells)`` array per band. Each leaf's axis is its own acquisitions, so leaves
are joined on the union of their time values (one leaf's rows keep their stored order;
axes that differ are unioned in ascending value order) and a leaf's band is its fill at
the times it lacks. Toc axes also get ``time_start``/``time_end`` coordinates (the words'
decoded envelope, §8.1: a timestamp's two bounds are its instant). Axes of different
encodings never join (§8.1 "Composition").
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import numpy as np
import zarr
from dask.base import tokenize

from zagg.grid import Grid
from zagg.hive import verify as _verify
from zagg.hive.layout import CELL_DIM, MORTON
from zagg.hive.loaders import checked_meta, load_morton
from zagg.hive.schema import TIME, array_meta, check_array, held, schema
from zagg.read import build as _build
from zagg.read import leaves as _leaves


def open_raster(
    root,
    manifest: dict,
    leaves: list,
    arrays: dict,
    grid: Grid,
    group_attrs: dict,
    *,
    dense: bool,
    verify: bool,
    schema_leaf,
):
    """The Dataset of raster ``leaves`` on ``(time, cells)`` (see the module docstring)."""
    import xarray as xr

    group = str(grid.cell_order)
    fields = schema(arrays)
    if not dense:
        leaves = [
            leaf if leaf.ranks is not None else _occupancy(root, leaf, group, fields)
            for leaf in leaves
        ]
        leaves = [leaf for leaf in leaves if leaf.ranks.size]
    recorded = None
    if verify:
        recorded = [_verify.recorded_hashes(leaf.stamp, root.url_of(leaf.rel)) for leaf in leaves]
    with ThreadPoolExecutor(max_workers=_leaves.METADATA_READERS) as pool:
        axes = list(pool.map(lambda leaf: _time_axis(root, leaf, group), leaves))
    if not leaves:
        axes = [_time_axis(root, schema_leaf, group)]
    encodings = {encoding for _, _, encoding in axes}
    if len(encodings) > 1:
        raise ValueError(
            f"{root.url}: leaves store their time axes in different encodings "
            f"({sorted(encodings)}); spec §8.1 forbids joining them"
        )
    time_values, time_attrs, _ = axes[0]
    if any(not np.array_equal(v, time_values) for v, _, _ in axes[1:]):
        time_values = np.unique(np.concatenate([v for v, _, _ in axes]))
    rows = [
        np.searchsorted(time_values, v) if not np.array_equal(v, time_values) else None
        for v, _, _ in axes[: len(leaves)]
    ]
    if dense:
        sizes = (grid.cells_per_shard,) * len(leaves)
    else:
        sizes = tuple(int(leaf.ranks.size) for leaf in leaves)
    chunks = ((time_values.size,), sizes)
    token = tokenize(
        root.url,
        dense,
        verify,
        [(leaf.rel, leaf.stamp, None if dense else leaf.ranks) for leaf in leaves],
    )
    data_vars = {}
    for name, field in fields.items():
        if field.kind != "raster":
            raise ValueError(
                f"{root.url_of(schema_leaf.rel)}: array {group}/{name} is not a "
                "(time, cells) band; a raster leaf holds time, morton and bands"
            )
        tasks = [
            (
                load_band,
                root,
                leaf.prefix,
                group,
                field,
                None if dense else leaf.ranks,
                rows[i],
                time_values.size,
                root.url_of(leaf.rel),
                None if recorded is None else recorded[i],
                leaf.occupied,
            )
            for i, leaf in enumerate(leaves)
        ]
        data = _build.dask_array(name, token, tasks, chunks, field.dtype)
        if not leaves:
            data = data.reshape(time_values.size, 0)
        data_vars[name] = ((TIME, CELL_DIM), data, dict(field.attrs))
    p, c = grid.shard_order, grid.cell_order
    if dense:
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
        morton = _build.dask_array(MORTON, token, tasks, (sizes,), np.uint64)
        cell_ids = morton.map_blocks(_build.nested_of, dtype=np.int64)
    else:
        parts = [_leaves.cell_words(leaf.shard_id, p, c, leaf.ranks) for leaf in leaves]
        morton = np.concatenate(parts) if parts else np.zeros(0, np.uint64)
        cell_ids = _build.nested_of(morton)
        if verify:
            with ThreadPoolExecutor(max_workers=_leaves.METADATA_READERS) as pool:
                list(
                    pool.map(
                        lambda i: load_morton(
                            root,
                            leaves[i].prefix,
                            f"{group}/{MORTON}",
                            leaves[i].shard_id,
                            p,
                            c,
                            root.url_of(leaves[i].rel),
                            recorded[i],
                        ),
                        range(len(leaves)),
                    )
                )
    coords = {
        MORTON: xr.Variable((CELL_DIM,), morton, dict(arrays[MORTON].attrs)),
        _build.CELL_IDS: xr.Variable((CELL_DIM,), cell_ids, _build.cell_ids_attrs(c)),
        **_build.centre_coords(morton, (sizes,), data_vars),
        **_time_coords(time_values, time_attrs),
    }
    ds = xr.Dataset(data_vars, coords=coords)
    if not dense:
        ds = ds.set_xindex(MORTON)
    ds.attrs = dict(group_attrs)
    ds.attrs["zagg"] = _build.zagg_attrs(manifest, grid, leaves, fields, dense=dense)
    ds.attrs["morton_hive"] = {
        k: manifest[k]
        for k in ("spec", "cell_order", "shard_order", "semantic_hash")
        if k in manifest
    }
    ds.attrs["morton_hive"]["store"] = root.url  # where it was read from (plot titles)
    return ds


def _occupancy(root, leaf, group: str, fields: dict):
    """A leaf whose coverage does not list its cells: every cell a band holds a value in
    at some time (a region then does not narrow it)."""
    found = None
    for field in fields.values():
        band = load_band(
            root, leaf.prefix, group, field, None, None, 0, root.url_of(leaf.rel), None, None
        )
        got = held(band, field.fill).any(axis=0)
        found = got if found is None else found | got
    occupied = np.flatnonzero(found).astype(np.int64)
    return _leaves.Leaf(leaf.rel, leaf.shard_id, leaf.stamp, leaf.prefix, occupied, occupied)


def _time_axis(root, leaf, group: str):
    """``(values, attrs, encoding)`` of one leaf's stored time axis."""
    where = root.url_of(leaf.rel)
    doc = root.read_json(f"{leaf.prefix}/{group}/{TIME}/zarr.json")
    if not isinstance(doc, dict) or doc.get("node_type") != "array":
        raise ValueError(
            f"raster leaf {where} has no {group}/{TIME} array: the leaf is damaged; rewrite it"
        )
    arr = array_meta(doc)
    check_array(where, group, TIME, arr)
    if len(arr.shape) != 1:
        raise ValueError(f"{where}: {group}/{TIME} must be 1-D")
    values = np.asarray(
        zarr.open_array(
            root.zarr_store(leaf.prefix, read_only=True), path=f"{group}/{TIME}", mode="r"
        )[...]
    )
    block = arr.attrs.get("temporal")
    if isinstance(block, dict):
        if block.get("shape") != "coordinate":
            raise ValueError(
                f"{where}: {group}/{TIME} declares temporal shape "
                f"{block.get('shape')!r}; a time axis is shape 'coordinate'"
            )
        if values.dtype != np.uint64:
            raise ValueError(
                f"{where}: {group}/{TIME} declares toc words but stores "
                f"{values.dtype}; zagg-toc/1 words are uint64"
            )
        return values, dict(arr.attrs), "toc"
    return values, dict(arr.attrs), "cf"


def _time_coords(values: np.ndarray, attrs: dict) -> dict:
    import xarray as xr

    if isinstance(attrs.get("temporal"), dict):
        import mortie

        start, end = (
            mortie.toc2time(np.asarray(values, np.uint64))
            if values.size
            else (np.zeros(0, np.int64), np.zeros(0, np.int64))
        )
        return {
            TIME: xr.Variable((TIME,), values, attrs),
            "time_start": xr.Variable((TIME,), _datetimes(start)),
            "time_end": xr.Variable((TIME,), _datetimes(end)),
        }
    decoded = xr.decode_cf(xr.Dataset(coords={TIME: xr.Variable((TIME,), values, attrs)}))
    return {TIME: decoded[TIME].variable}


def _datetimes(internal_ns: np.ndarray) -> np.ndarray:
    import mortie

    if not np.size(internal_ns):
        return np.zeros(0, "datetime64[ns]")
    return np.asarray(
        mortie.to_datetime64(np.asarray(internal_ns, np.int64)), dtype="datetime64[ns]"
    )


def load_band(
    root,
    prefix: str,
    group: str,
    field,
    ranks,
    rows,
    n_times: int,
    where: str,
    recorded: dict | None,
    occupied,
) -> np.ndarray:
    """One leaf's ``(time, cells)`` band at ``ranks`` (None: every cell), its rows placed
    at ``rows`` of the joined axis (None: the axis is the leaf's own)."""
    path = f"{group}/{field.name}"
    arr = checked_meta(root, prefix, group, field, where)
    z = zarr.open_array(root.zarr_store(prefix, read_only=True), path=path, mode="r")
    if recorded is not None or ranks is None:
        full = np.asarray(z[...])
        if recorded is not None:
            _verify.check_digest(where, path, full, recorded)
            if occupied is not None:
                _verify.check_covered(
                    where, path, held(full, field.fill).any(axis=0), None, occupied
                )
        block = full if ranks is None else full[:, ranks]
    else:
        per = int(arr.chunks[-1]) if arr.chunks else int(arr.shape[-1])
        ranks = np.asarray(ranks, np.int64)
        wanted, starts = np.unique(ranks // per, return_index=True)
        bounds = np.append(starts, ranks.size)
        parts = [
            np.asarray(z[:, k * per : (k + 1) * per])[:, ranks[bounds[i] : bounds[i + 1]] - k * per]
            for i, k in enumerate(wanted.tolist())
        ]
        block = np.concatenate(parts, axis=1) if parts else np.zeros((arr.shape[0], 0), arr.dtype)
    if rows is None:
        return block
    out = np.full((n_times, block.shape[1]), field.fill, dtype=block.dtype)
    out[rows] = block
    return out
