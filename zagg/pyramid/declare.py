"""The pyramid declaration: ``output.pyramid`` → the ``zagg-pyramid/2`` ladder (spec §4.4–4.5).

The config names leaf resolutions only (``overviews``: an int or a strictly descending,
consecutive list strictly between the shard and cell orders; default: the grid's chunk
order when strictly interior). Everything coarser is the fixed every-order ladder: with
``d = base - shard_order`` every order ``k`` from ``shard_order - 1`` down to 0 carries
one level at cell order ``k + d``. From that and each field's reducer this module derives
the manifest's pyramid block (the fully expanded level list and the composability map),
its ``multiscales`` mirror (§4.9), and the leaf column's groups and their fold sources
(§4.6). Pure functions of the config: the writer, the sweep and the manifest agree by
construction.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from zagg.checks.validation import check_keys, fail
from zagg.grid import Grid

PYRAMID_V2 = "zagg-pyramid/2"
PYRAMID_OFF = {"spec": "zagg-pyramid/1", "overview": {"orders": []}}
MULTISCALES_SPEC = "zagg-multiscales/1"
#: a leaf column's groups at or above ``shard_order + RAW_MEMBER_DEPTH`` fold from the
#: leaf's raw cells; the coarser ones fold flat from that boundary group (spec §4.6)
RAW_MEMBER_DEPTH = 2
FOLD_REGIME = {"fold_source": "cascade", "exact_levels": 1}
_KEYS = ("overviews", "overview_delta", "all_time")
#: the digest budget of the pyramid's folds when neither the field nor the pyramid names
#: one (the format's overview cap)
DEFAULT_OVERVIEW_DELTA = 128
_LEGACY = ("orders", "spacing", "exact_levels", "fold_source", "summarize")


@dataclass(frozen=True)
class Declaration:
    """A resolved ``zagg-pyramid/2`` declaration of one store."""

    shard_order: int
    cell_order: int
    resolutions: tuple[int, ...]  # declared leaf resolutions, descending
    fields: Mapping[str, dict] = field(default_factory=dict)  # the §4.5 composability map
    #: a windowed store: per-window columns and overviews, and the ``all.zarr`` fold of
    #: the windows at every ladder node (``overview.all_time: true``)
    windowed: bool = False
    #: whether the ladder nodes carry the all-time fold (a windowed store's manifest may
    #: record false from before the fold was required: its windows are then not folded)
    all_time: bool = True

    @property
    def base(self) -> int:
        """The coarsest declared leaf resolution."""
        return self.resolutions[-1]

    @property
    def depth(self) -> int:
        """``d``: a ladder node of order k carries cells of order k + d."""
        return self.base - self.shard_order

    def ladder(self) -> list[tuple[int, int]]:
        """``(node order, cell order)`` of every level above the shard, finest first."""
        return [(k, k + self.depth) for k in range(self.shard_order - 1, -1, -1)]

    def levels(self) -> list[dict]:
        """The manifest's fully expanded level entries (leaf entry first)."""
        out = [{"node": self.shard_order, "cells": list(self.resolutions)}]
        return out + [{"node": k, "cells": [r]} for k, r in self.ladder()]

    def composable(self) -> list[str]:
        """Fields that appear above the native resolution (class other than none)."""
        return [n for n, e in self.fields.items() if e["class"] != "none"]

    def column_groups(self) -> list[int]:
        """The leaf column's resolution groups: the declared resolutions, every ladder
        rung inside the leaf's footprint and the node-order member, finest first."""
        return list(range(self.resolutions[0], self.shard_order - 1, -1))

    @property
    def boundary(self) -> int | None:
        """The raw-fold boundary group, when the column folds its coarser groups from it."""
        b = self.shard_order + RAW_MEMBER_DEPTH
        return b if b < self.cell_order and b <= self.resolutions[0] else None

    def group_source(self, r: int) -> int:
        """The order a column group folds from: the leaf's cells, or the boundary group."""
        b = self.boundary
        return self.cell_order if b is None or r >= b else b

    def group_mfr(self, r: int) -> int:
        """merges_from_raw of column group ``r``: 1 from raw, 2 from the boundary group."""
        return 1 if self.group_source(r) == self.cell_order else 2

    def level_mfr(self, k: int) -> int:
        """merges_from_raw of the ladder level at node order ``k``: a gather keeps the
        gathered column group's, a merge is one more than its children's."""
        r = k + self.depth
        if r >= self.shard_order:
            return self.group_mfr(r)
        return self.level_mfr(k + 1) + 1

    def block(self) -> dict:
        """The manifest's ``pyramid`` block."""
        return {
            "spec": PYRAMID_V2,
            "overviews": self.levels(),
            "overview": {
                "all_time": self.windowed and self.all_time,
                **FOLD_REGIME,
                "fields": {n: dict(e) for n, e in self.fields.items()},
            },
        }

    def multiscales(self, short_name: str | None) -> list[dict]:
        """The §4.9 ``multiscales`` mirror of :meth:`block`."""
        datasets = [
            {
                "order": e["node"],
                "cells": list(e["cells"]),
                "artifact": "column" if e["node"] == self.shard_order else "overview",
            }
            for e in self.levels()
        ]
        return [
            {
                "spec": MULTISCALES_SPEC,
                "name": short_name,
                "base": {"order": self.shard_order, "cells": [self.cell_order]},
                "datasets": datasets,
                "order2res": {str(d["order"]): list(d["cells"]) for d in datasets},
                "fields": {n: e["class"] for n, e in self.fields.items()},
                "fold": dict(FOLD_REGIME),
            }
        ]


def resolutions(
    value, p: int, ci: int, c: int, where: str = "output.pyramid", *, windowed: bool = False
) -> tuple | None:
    """The declared leaf resolutions of an ``output.pyramid`` value (None: declared off),
    refusing, by key, every rule of spec §4.4–4.5 (``windowed``: the store declares a
    window schedule, whose pyramid always carries the all-time fold)."""
    if value is False:
        return None
    if isinstance(value, Mapping) and "all_time" in value:
        check_all_time(value["all_time"], windowed, f"{where}.all_time")
    if value is None or value is True:
        if p < ci < c and ci <= 2 * p + 1:
            return (ci,)
        if value is True:
            fail(
                where,
                f"the default pyramid is one resolution at the chunk order {ci}, which "
                f"must lie strictly between parent_order {p} and child_order {c} and be at "
                f"most 2 * parent_order + 1 = {2 * p + 1}; spell overviews: [...]",
            )
        return None
    if not isinstance(value, Mapping):
        fail(where, f"expected false, true or a mapping with 'overviews', got {value!r}")
    legacy = sorted(set(value) & set(_LEGACY))
    if legacy:
        fail(
            f"{where}.{legacy[0]}",
            "the zagg-pyramid/1 schedule keys (orders, spacing, "
            "exact_levels, fold_source, ...) are not supported: declare the leaf "
            "resolutions with overviews (the ladder above the shard is fixed)",
        )
    check_keys(value, _KEYS, where, ())
    raw = value.get("overviews", ci if p < ci < c else None)
    if raw is None:
        fail(
            f"{where}.overviews",
            f"no default: the chunk order {ci} is not strictly between "
            f"parent_order {p} and child_order {c}; give the leaf resolutions",
        )
    items = [raw] if isinstance(raw, int) and not isinstance(raw, bool) else raw
    if (
        not isinstance(items, list)
        or not items
        or not all(isinstance(r, int) and not isinstance(r, bool) for r in items)
    ):
        fail(
            f"{where}.overviews",
            f"expected an integer or a non-empty list of integers, got {raw!r}",
        )
    for r in items:
        if not p < r < c:
            fail(
                f"{where}.overviews",
                f"{r} is not strictly between parent_order {p} and "
                f"child_order {c} (a member at the shard order is the column's own "
                "aggregate, one at the cell order is the base data)",
            )
    if any(b >= a for a, b in zip(items, items[1:], strict=False)):
        fail(f"{where}.overviews", f"{items} must be strictly descending")
    missing = sorted(set(range(items[-1], items[0] + 1)) - set(items), reverse=True)
    if missing:
        fail(
            f"{where}.overviews",
            f"{items} is not consecutive: missing {missing}; the "
            "leaf resolutions form one contiguous tier",
        )
    base = items[-1]
    if base > 2 * p + 1:
        fail(
            f"{where}.overviews",
            f"base {base} (the coarsest resolution) exceeds "
            f"2 * parent_order + 1 = {2 * p + 1}: the ladder's order-0 cells (order "
            f"{base - p}) would lie below the shard order and leave the leaf column tier "
            f"gapped; declare a base of at most {2 * p + 1}",
        )
    return tuple(items)


def overview_delta(value, where: str = "output.pyramid.overview_delta") -> int | None:
    """The digest budget a mapping's ``overview_delta`` names (``output.pyramid``'s, or a
    field's): None when absent."""
    if not isinstance(value, Mapping) or value.get("overview_delta") is None:
        return None
    d = value["overview_delta"]
    if not isinstance(d, int) or isinstance(d, bool) or not 16 <= d <= 1_000_000:
        fail(where, f"expected an integer from 16 to 1000000, got {d!r}")
    return d


def field_map(fields: Mapping[str, Mapping], delta: int | None = None) -> dict[str, dict]:
    """The §4.5 composability map of a fields block (``{name: {function, params, dtype,
    fill_value, ...}}``, located and timed siblings included and skipped): each field's
    class from its reducer's fold, with the method and array form an overview needs."""
    from zagg.reducers import records as reducers

    located = {f.get("locations_of") for f in fields.values() if f.get("locations_of")}
    timed = {f.get("times_of") for f in fields.values() if f.get("times_of")}
    entries = {}
    for name, f in fields.items():
        if f.get("locations_of") or f.get("times_of"):
            continue
        red = reducers.get(f["function"])
        law = red.pyramid_fold
        if law is None:
            entries[name] = {"class": "none"}
            continue
        params = dict(f.get("params") or {})
        if red.kind == "ragged":
            entry = {
                "class": red.pyramid_class,
                "method": law.method,
                "dtype": "float32",
                "inner_shape": [2],
                "delta": int(params.get("delta") or 0),
            }
            # the field's own budget, else the pyramid's, else the format's overview cap
            entry["overview_delta"] = int(
                f.get("overview_delta") or delta or DEFAULT_OVERVIEW_DELTA
            )
            if params.get("weights", "counts") != "counts":
                entry["weights"] = params["weights"]
                entry["gain"] = dict(params.get("gain") or {})
            if name in located:  # the words are the points' order-29 words (spec §2.2)
                entry["location"] = "coordinates"
            if name in timed:  # a toc word per centroid at every level (spec §8.3)
                entry["temporal"] = "per-centroid"
        else:
            entry = {"class": red.pyramid_class, "method": law.method}
            if red.pyramid_class == "exact":
                entry["nan_policy"] = "skip"
            entry["dtype"] = str(f["dtype"])
            entry["fill_value"] = _json_fill(f.get("fill_value"))
            if law.needs_divisor:
                entry["of"] = params.get("of")
                if params.get("threshold") is not None:
                    entry["threshold"] = int(params["threshold"])
        entry["function"] = f["function"]  # the reducer whose fold the sweep applies
        entries[name] = entry
    for name, entry in entries.items():  # a packed word needs a counts-weighted divisor
        if entry["class"] == "packed":
            of = entries.get(entry.get("of")) or {}
            if of.get("class") != "approximate" or of.get("weights", "counts") != "counts":
                entries[name] = {"class": "none"}
    return entries


def check_all_time(value, windowed: bool, where: str = "output.pyramid.all_time") -> None:
    """``all_time`` (spec §4.5): a windowed pyramid always folds its windows into
    ``all.zarr``, so only ``true`` is accepted, and only beside ``output.windowing``."""
    if not windowed:
        fail(
            where,
            "the all-time fold is a windowed store's (an unwindowed store's ladder is "
            "already all-time); drop the key or add output.windowing",
        )
    if value is not True:
        fail(
            where,
            f"a windowed store's pyramid folds its windows into all.zarr at every "
            f"ladder node, so all_time must be true (got {value!r}); drop the key, or set "
            "output.pyramid: false for no pyramid",
        )


def _json_fill(fill):
    if isinstance(fill, float) and fill != fill:
        return "NaN"
    return fill


def declaration(
    grid: Grid, fields: Mapping[str, Mapping], config_pyramid, *, windowed: bool = False
) -> Declaration | None:
    """The resolved declaration of a grid, a fields block and a raw ``output.pyramid``
    value (``windowed``: the store declares ``output.windowing``)."""
    res = resolutions(
        config_pyramid, grid.shard_order, grid.chunk_order, grid.cell_order, windowed=windowed
    )
    return declared(grid, res, fields, overview_delta(config_pyramid), windowed=windowed)


def declared(
    grid: Grid,
    res: tuple[int, ...] | None,
    fields: Mapping[str, Mapping],
    delta: int | None = None,
    *,
    windowed: bool = False,
) -> Declaration | None:
    """The declaration of already validated leaf resolutions ``res`` (None: declared off)
    and pyramid-wide digest budget ``delta``, with the fields block's composability map."""
    if res is None:
        return None
    return Declaration(grid.shard_order, grid.cell_order, res, field_map(fields, delta), windowed)


def manifest_keys(decl: Declaration | None, short_name: str | None) -> dict:
    """The manifest's ``pyramid`` block and (for a /2 declaration) its ``multiscales``
    mirror."""
    if decl is None:
        return {"pyramid": {"spec": PYRAMID_OFF["spec"], "overview": {"orders": []}}}
    return {"pyramid": decl.block(), "multiscales": decl.multiscales(short_name)}


def of_manifest(manifest: Mapping) -> Declaration | None:
    """The /2 declaration a store's manifest records (None: declared off or /1)."""
    block = manifest.get("pyramid")
    if not isinstance(block, Mapping) or block.get("spec") != PYRAMID_V2:
        return None
    p = int(manifest["shard_order"])
    entries = block.get("overviews") or []
    leaf = [e for e in entries if int(e["node"]) == p]
    if not leaf:
        return None
    res = tuple(sorted((int(r) for r in leaf[0]["cells"]), reverse=True))
    fields = dict(((block.get("overview") or {}).get("fields")) or {})
    known = ("exact", "approximate", "packed", "none")
    fields = {
        n: (e if e.get("class") in known else {"class": "none"}) for n, e in fields.items()
    }  # an unknown class token reads as non-composable
    windowed = manifest.get("temporal") is not None
    all_time = bool((block.get("overview") or {}).get("all_time"))
    return Declaration(
        p, int(manifest["cell_order"]), res, fields, windowed, all_time or not windowed
    )


def sweep_mode(value, declared: bool = True, where: str = "output.sweep") -> str | None:
    """``output.sweep``: whether a run chains the sweep after its leaves, so that every
    level the manifest declares is built. Absent: ``"stages"`` whenever a pyramid is
    ``declared`` (a run builds what it declares); ``"stages"`` or true: chain it; false:
    leave the ladder for a later ``zagg sweep`` (the manifest then records only the leaf
    columns as built)."""
    if value is None:
        return "stages" if declared else None
    if value is False:
        return None
    if value is not True and value != "stages":
        fail(
            where,
            f"expected 'stages' or true (build the pyramid ladder after the run; the "
            f"default) or false (sweep later with zagg sweep), got {value!r}",
        )
    return "stages"
