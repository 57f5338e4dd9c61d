"""``open_icechunk``: one level of a store's Icechunk companion as an xarray Dataset.

A thin helper over the plain way (spec §11) — ``icechunk.Repository.open`` on
``{root}/icechunk/`` with the store root authorized as its virtual chunk container, then
``xarray.open_zarr(session.store, group=str(order), consolidated=False)`` — that also
labels the ``window`` rows from the repo's ``zagg_icechunk.rows`` and attaches
``window_start`` / ``window_end``. Nothing is copied: every chunk read is a byte range of
a leaf, column or overview object. A ``{root}/icechunk/`` that is a plain zarr v3
hierarchy of the same groups (the format's conformance fixture ships it so) is opened
with zarr alone, without the icechunk package.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from zarr.storage import WrapperStore

from zagg.hive import icechunk as ic
from zagg.hive.storage import StoreRoot, as_root
from zagg.pyramid.icechunk import indexed

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
    arrays without dask, which suits the whole-sphere cell axis); other keywords too.
    The root group's attributes ride ``ds.attrs["root_attrs"]`` verbatim; a reference
    that no longer resolves raises :class:`~zagg.hive.icechunk.IcechunkError` when read."""
    import xarray as xr

    root = as_root(store, storage_options)
    if snapshot is not None and tag is not None:
        raise ic.IcechunkError("give snapshot or tag, not both")
    if root.exists(f"{ic.REPO_DIR}/zarr.json"):  # a plain zarr hierarchy, not a repo
        if snapshot is not None or tag is not None:
            raise ic.IcechunkError(
                f"{root.url}/{ic.REPO_DIR} is a plain zarr hierarchy: it has no snapshots "
                "or tags; open it without snapshot= and tag="
            )
        target, snapshot_id = _plain(root), None
    else:
        ic.require("zagg.open_icechunk")
        session = _session(root, snapshot, tag)
        target, snapshot_id = _Resolving(session.store, root.url), session.snapshot_id
    top = xr.open_zarr(target, consolidated=False, chunks=None)
    block = top.attrs.get("zagg_icechunk") or {}
    levels = block.get("levels") or {}
    order = int(block.get("cell_order")) if order is None else int(order)
    if str(order) not in levels:
        raise ic.IcechunkError(
            f"cell order {order} is not a level of {root.url}'s Icechunk repo: its levels "
            f"are {sorted((int(k) for k in levels), reverse=True)}"
        )
    ds = xr.open_zarr(target, group=str(order), consolidated=False, chunks=chunks, **kwargs)
    ds = ds[sorted(ds.data_vars)]  # the repository lists its arrays in no fixed order
    rows = list(block.get("rows") or [])
    coords = {}
    if "window" in ds.dims:
        coords["window"] = rows
        for name in ("window_start", "window_end"):
            if name in top:
                coords[name] = ("window", top[name].values)
    ds = ds.assign_coords(coords)
    ds.attrs["zagg_icechunk"] = {"snapshot": snapshot_id, **block}
    ds.attrs["root_attrs"] = dict(top.attrs)
    return ds


def _session(root: StoreRoot, snapshot: str | None, tag: str | None):
    """A read-only session of the store's repo at main, ``snapshot`` or ``tag``; refused
    in one line when there is no repo, or when its commits never referenced anything (a
    repo whose every commit of references failed would read fill everywhere)."""
    repo = ic.open_repo(root)
    if repo is None:
        raise ic.IcechunkError(
            f"{root.url} has no Icechunk companion ({ic.REPO_DIR}/): a run with "
            "output.icechunk on (the default with the icechunk package installed) writes it"
        )
    if snapshot is not None:
        session = repo.readonly_session(snapshot_id=snapshot)
    elif tag is not None:
        session = repo.readonly_session(tag=tag)
    else:
        session = repo.readonly_session(branch="main")
    if not indexed(repo, session.snapshot_id):
        raise ic.IcechunkError(
            f"{root.url}/{ic.REPO_DIR} holds the store's groups but no reference to its "
            "objects (a commit of references failed: the run summary's icechunk entry "
            "says why); run again, or clear it and run again"
        )
    return session


def _plain(root: StoreRoot):
    """The plain zarr store at ``{root}/icechunk/``, read-only."""
    from zarr.storage import FsspecStore, LocalStore

    if root.is_local:
        return LocalStore(f"{root.path.rstrip('/')}/{ic.REPO_DIR}", read_only=True)
    return FsspecStore.from_url(
        f"{root.url.rstrip('/')}/{ic.REPO_DIR}",
        storage_options=dict(root.storage_options),
        read_only=True,
    )


class _Resolving(WrapperStore):
    """A repo session's store whose failure to resolve a virtual reference (the object
    it names rewritten, moved or gone since the commit) is one line naming the chunk and
    the remedy, never Icechunk's multi-line report, and never fill."""

    def __init__(self, store, url: str):
        super().__init__(store)
        self._url = url

    def _unresolved(self, key: str, exc: Exception) -> ic.IcechunkError:
        first = next((line.strip() for line in str(exc).splitlines() if line.strip()), "")
        return ic.IcechunkError(
            f"{self._url}/{ic.REPO_DIR}: chunk {key} does not resolve ({first}); the hive "
            "object it references changed since the commit: run again to re-index it"
        )

    async def get(self, key, prototype, byte_range=None):
        import icechunk

        try:
            return await self._store.get(key, prototype, byte_range)
        except icechunk.IcechunkError as exc:
            raise self._unresolved(key, exc) from None

    async def get_partial_values(self, prototype, key_ranges):
        import icechunk

        try:
            return await self._store.get_partial_values(prototype, key_ranges)
        except icechunk.IcechunkError as exc:
            keys = ", ".join(k for k, _ in key_ranges)
            raise self._unresolved(keys, exc) from None
