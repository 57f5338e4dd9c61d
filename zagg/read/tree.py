"""``open_store``: a store root as an ``xarray.DataTree``, one node per product.

Following spec reader_concepts.md "The DataTree view": the root node holds no data, only
``attrs["morton_hive_store"]`` (the root and its product roster); each child is the
Dataset :func:`zagg.read.open_hive` returns for that product. A multi-product root is a
directory of stores (``{name}/morton_hive.json``, names ``[a-z0-9_-]{1,192}`` that are not
a base component such as ``-5``); a bare store (its manifest at the root) is the one-child
form, the child named from the manifest's dataset ``short_name`` (lowercased), the roster
empty and ``bare: True``. A product node holds its data directly; resolution (pyramid
order) nodes become its children once a store carries overviews.
"""

from __future__ import annotations

import re
import warnings
from typing import TYPE_CHECKING, Any

from zagg.errors import ZaggWarning
from zagg.hive.paths import MANIFEST_KEY
from zagg.hive.storage import StoreRoot, as_root
from zagg.read.leaves import manifest_of
from zagg.read.open import open_hive

if TYPE_CHECKING:
    import xarray as xr

_PRODUCT_RE = re.compile(r"^[a-z0-9_-]{1,192}$")
_BASE_RE = re.compile(r"^-?[1-6]$")


RESERVED = ("multiscales", "icechunk")  # store-root companions, never products


def list_products(root: StoreRoot) -> list[str]:
    """The product names of a multi-product root (sorted; empty for a bare store). A
    directory carrying a manifest under a reserved name is reported and left out."""
    dirs, files = root.list_dir("")
    if MANIFEST_KEY in files:
        return []
    out = []
    for d in dirs:
        if not _PRODUCT_RE.match(d) or _BASE_RE.match(d):
            continue
        if root.read_bytes(f"{d}/{MANIFEST_KEY}") is None:
            continue
        if d in RESERVED:
            warnings.warn(
                f"{root.url_of(d)} holds a product manifest under the reserved name {d!r} "
                "(the store-root companion's): it is not opened as a product; rename it",
                ZaggWarning,
                stacklevel=3,
            )
            continue
        out.append(d)
    return out


def open_store(
    store: str | StoreRoot,
    storage_options: dict[str, Any] | None = None,
    *,
    products: list[str] | None = None,
    **open_kwargs,
) -> xr.DataTree:
    """Open a store root (multi-product or bare) as a DataTree, one child per product.

    ``products`` opens only those products; ``open_kwargs`` (``region=``, ``bbox=``,
    ``cells=``, ``dense=``, ``verify=``) are passed to every product's :func:`open_hive`.
    """
    import xarray as xr

    root = as_root(store, storage_options)
    roster = list_products(root)
    store_attrs: dict[str, Any] = {"store_root": root.url, "products": roster}
    if roster:
        names = roster
        if products is not None:
            unknown = sorted(set(products) - set(roster))
            if unknown or not products:
                raise ValueError(
                    f"{root.url} has no product {unknown[0] if unknown else '[]'!r}"
                    f"; its products: {', '.join(roster)}"
                )
            names = [n for n in roster if n in products]
        nodes = {
            n: _node(StoreRoot(root.url_of(n), root.storage_options), open_kwargs) for n in names
        }
    else:
        manifest = manifest_of(root)  # raises naming the root when it is no store at all
        if products is not None:
            raise ValueError(
                f"{root.url} is a bare store with no named products; open it without products="
            )
        name = str((manifest.get("dataset") or {}).get("short_name") or "product").lower()
        store_attrs.update(bare=True, node=name)
        nodes = {name: _node(root, open_kwargs)}
    tree = xr.DataTree.from_dict({f"/{name}": ds for name, ds in nodes.items()})
    tree.attrs["morton_hive_store"] = store_attrs
    return tree


def _node(root: StoreRoot, open_kwargs: dict):
    from zagg.pyramid.companion import read_companion

    ds = open_hive(root, **open_kwargs)
    companion = read_companion(root, manifest_of(root))
    if companion is not None:  # the ladder as plain zarr groups, for multiscale tools
        ds.attrs["zagg_multiscales"] = companion
    semantic = ds.attrs.get("morton_hive", {}).get("semantic_hash")
    if semantic is not None:
        ds.attrs["semantic_hash"] = semantic
    return ds
