"""``open_icechunk``: one level of a store's Icechunk companion as an xarray Dataset.

A thin helper over the plain way (spec §11) — ``icechunk.Repository.open`` on
``{root}/icechunk/`` with the store root authorized as its virtual chunk container, then
``xarray.open_zarr(session.store, group=str(order), consolidated=False)`` — that also
labels the ``window`` rows from the repo's ``zagg_icechunk.rows`` and attaches
``window_start`` / ``window_end``. Nothing is copied: every chunk read is a byte range of
a leaf, column or overview object.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from zagg.hive import icechunk as ic
from zagg.hive.storage import as_root

if TYPE_CHECKING:
    import xarray as xr


def open_icechunk(
    store,
    order: int | None = None,
    *,
    snapshot: str | None = None,
    tag: str | None = None,
    storage_options: dict[str, Any] | None = None,
    chunks=None,
    **kwargs,
) -> xr.Dataset:
    """The level of cell order ``order`` (default: the base) of the store's Icechunk
    repository, at the ``main`` branch, or at ``snapshot`` (an id from the repo's
    ancestry) or ``tag``. ``chunks`` passes to :func:`xarray.open_zarr` (None: lazy
    arrays without dask, which suits the whole-sphere cell axis); other keywords too."""
    import xarray as xr

    root = as_root(store, storage_options)
    repo = ic.open_repo(root)
    if repo is None:
        raise FileNotFoundError(
            f"{root.url} has no Icechunk companion ({ic.REPO_DIR}/): a run with "
            "output.icechunk on (the default with the icechunk package installed) writes it"
        )
    if snapshot is not None and tag is not None:
        raise ValueError("give snapshot or tag, not both")
    if snapshot is not None:
        session = repo.readonly_session(snapshot_id=snapshot)
    elif tag is not None:
        session = repo.readonly_session(tag=tag)
    else:
        session = repo.readonly_session(branch="main")
    top = xr.open_zarr(session.store, consolidated=False, chunks=None)
    block = top.attrs.get("zagg_icechunk") or {}
    levels = block.get("levels") or {}
    order = int(block.get("cell_order")) if order is None else int(order)
    if str(order) not in levels:
        raise ValueError(
            f"cell order {order} is not a level of {root.url}'s Icechunk repo: its levels "
            f"are {sorted((int(k) for k in levels), reverse=True)}"
        )
    ds = xr.open_zarr(session.store, group=str(order), consolidated=False, chunks=chunks, **kwargs)
    ds = ds[sorted(ds.data_vars)]  # the repository lists its arrays in no fixed order
    rows = list(block.get("rows") or [])
    coords = {"window": rows}
    for name in ("window_start", "window_end"):
        if name in top:
            coords[name] = ("window", top[name].values)
    ds = ds.assign_coords(coords)
    ds.attrs["zagg_icechunk"] = {"snapshot": session.snapshot_id, **block}
    return ds
