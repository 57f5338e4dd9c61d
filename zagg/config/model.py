"""Pipeline configuration: YAML (safe loader) → typed, validated, frozen objects.

Every refusal is a :class:`ConfigError` naming the key path, the bad value and what would
be valid, with a close-match suggestion for misspelt keys. Checks that need the data (a
source variable missing from the Dataset) run in :func:`Config.check_dataset`, called by
``zagg.aggregate``.
"""

from __future__ import annotations

import copy
import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import yaml

from zagg.checks import predicate
from zagg.checks.credentials import parse_storage_options
from zagg.checks.filters import Filter
from zagg.checks.validation import (
    ConfigError,
    check_keys,
    check_name,
    check_order,
    did_you_mean,
    fail,
    parse_bytes,
)
from zagg.checks.yaml_text import load_yaml
from zagg.grid import MAX_ORDER, Grid
from zagg.reducers import records as reducers
from zagg.sources.record import DataSource
from zagg.sources.registry import parse_data_source
from zagg.windows.clock import check_one_clock, clock_of, with_source_clock

#: Attrs keys the store format owns; a config's field attrs may never set them.
SPEC_OWNED_ATTRS = ("ragged", "weights", "composition", "temporal", "located", "times")
#: CF attributes that make readers decode stored values (scale, offset, masking, times)
CF_ENCODING_ATTRS = (
    "scale_factor",
    "add_offset",
    "_FillValue",
    "missing_value",
    "_Unsigned",
    "calendar",
)
DEFAULT_SHARD_MEMORY = 2 * 1024**3

__all__ = [
    "Config",
    "ConfigError",
    "DataSource",
    "FieldSpec",
    "Filter",
    "Grid",
    "Output",
    "load_config",
    "parse_config",
]


class ReadOnlyDict(dict):
    """A dict that refuses changes. A loaded config was validated as a whole, and its
    mapping is what identifies a store (the semantic hash), so editing one in place would
    let the two disagree; edit a copy of ``config.raw`` and load that instead."""

    def _refuse(self, *args, **kwargs):
        raise TypeError(
            "a loaded zagg config is read-only: edit a copy of config.raw and "
            "load it again with zagg.load_config(mapping)"
        )

    __setitem__ = __delitem__ = __ior__ = _refuse
    clear = pop = popitem = setdefault = update = _refuse

    def __reduce__(self):
        return (ReadOnlyDict, (dict(self),))


@dataclass(frozen=True)
class FieldSpec:
    """One output field: ``function`` of ``source`` stored as ``dtype`` with ``fill_value``."""

    name: str
    function: str
    source: str | None
    dtype: str
    fill_value: object
    params: Mapping[str, object] = field(default_factory=dict)
    attrs: Mapping[str, object] = field(default_factory=dict)
    where: str | None = None  # canonical predicate text selecting the rows this field reads
    stratum: Mapping[str, object] | None = None  # {"name": signal|noise, "threshold": int}
    located: bool = False  # a {name}_locations sibling of per-centroid point/area words
    timed: bool = False  # a {name}_times sibling of per-centroid toc time words
    #: the t-digest budget this field's pyramid folds compress at (None: the pyramid's)
    overview_delta: int | None = None

    def __post_init__(self):
        object.__setattr__(self, "params", ReadOnlyDict(self.params))
        object.__setattr__(self, "attrs", ReadOnlyDict(self.attrs))

    @property
    def locations_name(self) -> str:
        return f"{self.name}_locations"

    @property
    def reducer(self) -> reducers.Reducer:
        return reducers.get(self.function)

    @property
    def kind(self) -> str:
        return self.reducer.kind

    def array_attrs(self) -> dict:
        """The zarr array attrs of this field: its CF ``long_name`` and ``units`` (the
        config's attrs, else :meth:`describe`), user attrs, stratum provenance, and the
        spec-owned blocks the writer stamps."""
        long_name, units = self.describe()
        attrs = {"long_name": long_name} | ({"units": units} if units is not None else {})
        attrs.update(copy.deepcopy(dict(self.attrs)))
        if self.stratum:
            attrs["stratum"] = self.stratum["name"]
            attrs["signal_threshold"] = self.stratum["threshold"]
        attrs.update(self.reducer.spec_attrs(self.params))
        if self.located:
            attrs["ragged"]["locations"] = self.locations_name
        if self.timed:
            attrs["times"] = self.times_name
        return attrs

    def describe(self) -> tuple[str, str | None]:
        """``(long_name, units)`` derived from what the source variable measures
        (:mod:`zagg.sources.quantities`) and the reducer: "mean photon height" in "m",
        "signal photon height" for a stratum's digest, "… where q >= 2" for a predicate."""
        from zagg.sources.quantities import quantity

        source = quantity(self.source) if self.source else None
        long_name, units = self.reducer.describe(source, self.params)
        if self.stratum:
            long_name = f"{self.stratum['name']} {long_name}"
        elif self.where:
            long_name = f"{long_name} where {self.where}"
        return long_name, units

    @property
    def times_name(self) -> str:
        return f"{self.name}_times"

    def times_attrs(self) -> dict:
        """Attrs of the timed sibling: its ragged declaration and the spec-owned temporal
        declaration of its words (spec §8.3)."""
        return {
            "ragged": {"spec": "zagg-ragged/1", "element": {"dtype": "uint64", "shape": [-1]}},
            "temporal": {"spec": "zagg-toc/1", "shape": "per-centroid", "grammar": "mortie-toc/1"},
        }

    def locations_attrs(self) -> dict:
        """Attrs of the located sibling: only its own ragged declaration (spec §1.2)."""
        return {"ragged": {"spec": "zagg-ragged/1", "element": {"dtype": "uint64", "shape": [-1]}}}


@dataclass(frozen=True)
class Output:
    store: str | None
    short_name: str
    version: str
    grid: Grid
    store_layout: str = "hive"
    shard_memory_limit: int = DEFAULT_SHARD_MEMORY
    storage_options: Mapping[str, object] = field(default_factory=dict)
    #: the declared leaf resolutions of the pyramid (None: declared off)
    pyramid: tuple[int, ...] | None = None
    #: "stages": build the pyramid ladder after each run (the default under a pyramid);
    #: None: leave it to a later sweep (``output.sweep: false``, or no pyramid)
    sweep: str | None = None
    #: each leaf write makes a new version and moves the leaf's ``current`` pointer
    leaf_versions: bool = True
    #: the store's Icechunk companion (spec §11): None commits it when the icechunk
    #: package is installed, False never, True always (refused when it is missing)
    icechunk: bool | None = None
    #: the companion's retention and manifest-split knobs (zagg.pyramid.icechunk_knobs)
    icechunk_settings: object = None
    #: the time-window schedule (a zagg.windows.Windowing; None: one leaf per shard)
    windowing: object = None
    #: the t-digest budget of the pyramid's folds (``output.pyramid.overview_delta``; None:
    #: each digest field's own, else the format's cap)
    overview_delta: int | None = None
    #: the aggregation state a run may hold at once (``output.memory_budget``): None for
    #: ``auto`` (sized from the cluster), 0 for ``off`` (one pass, however large)
    memory_budget: int | None = None


@dataclass(frozen=True)
class Config:
    """A validated pipeline config. Read-only: ``fields`` refuses edits and ``raw`` is a
    fresh copy of the validated mapping each time (edit that, then load it again)."""

    data_source: DataSource
    fields: Mapping[str, FieldSpec]
    output: Output
    source_mapping: Mapping[str, object] = field(repr=False)

    def __post_init__(self):
        object.__setattr__(self, "fields", ReadOnlyDict(self.fields))
        object.__setattr__(self, "source_mapping", copy.deepcopy(dict(self.source_mapping)))

    @property
    def raw(self) -> dict:
        """The validated config mapping (a copy: editing it changes nothing here)."""
        return copy.deepcopy(self.source_mapping)

    @property
    def grid(self) -> Grid:
        return self.output.grid

    @property
    def clock(self) -> tuple[str, str, str, str] | None:
        """The store's clock, ``(time, epoch, scale, units)``: the data source's, else the
        window schedule's (None: the config declares none)."""
        if self.data_source.clock is not None:
            return self.data_source.clock
        w = self.output.windowing
        return None if w is None else clock_of(w)

    def check_dataset(self, ds) -> None:
        """Refuse a Dataset this config cannot read (see :mod:`zagg.config.dataset_checks`)."""
        from zagg.config.dataset_checks import check_dataset

        check_dataset(self, ds)


_TOP = ("data_source", "aggregation", "output")
_FIELD = (
    "function",
    "source",
    "dtype",
    "fill_value",
    "params",
    "attrs",
    "where",
    "stratum",
    "located",
    "timed",
    "overview_delta",
)
_OUTPUT = (
    "store",
    "store_layout",
    "dataset",
    "grid",
    "shard_memory_limit",
    "storage_options",
    "pyramid",
    "sweep",
    "leaf_versions",
    "icechunk",
    "windowing",
    "memory_budget",
)
_GRID = ("type", "parent_order", "chunk_inner", "child_order", "sharded")


def _check_json(value, path: str) -> None:
    """Refuse attrs that JSON (zarr's attribute format) cannot hold exactly: YAML dates and
    timestamps, NaN and infinities, non-text mapping keys."""
    if isinstance(value, Mapping):
        for k, v in value.items():
            if not isinstance(k, str):
                fail(f"{path}.{k}", f"attribute names must be text, got {k!r}")
            _check_json(v, f"{path}.{k}")
    elif isinstance(value, list | tuple):
        for i, v in enumerate(value):
            _check_json(v, f"{path}[{i}]")
    elif isinstance(value, float):
        if not math.isfinite(value):
            fail(
                path,
                f"{value!r} cannot be stored: attrs are JSON, which has no NaN or "
                "infinity; use null or a number",
            )
    elif not (value is None or isinstance(value, str | int | bool)):
        fail(
            path,
            f"{value!r} ({type(value).__name__}) cannot be stored as a JSON attribute; "
            "quote it to store it as text (e.g. '2024-01-01')",
        )


def _representable(value, dtype: np.dtype) -> bool:
    if dtype.kind == "f":
        if isinstance(value, bool) or not isinstance(value, int | float):
            return False
        return math.isnan(value) or math.isinf(value) or abs(value) <= float(np.finfo(dtype).max)
    if dtype.kind in "iu":
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        if isinstance(value, bool) or not isinstance(value, int):
            return False
        info = np.iinfo(dtype)
        return info.min <= value <= info.max
    return False


def _parse_field(name: str, raw, variables, fields_raw=None) -> FieldSpec:
    path = f"aggregation.variables.{name}"
    check_keys(raw, _FIELD, path, ("function",))
    function = raw["function"]
    if function not in reducers.REGISTRY:
        names = sorted(reducers.REGISTRY)
        fail(
            f"{path}.function",
            f"unknown function {function!r}{did_you_mean(function, names)}; "
            f"valid: {', '.join(names)}",
        )
    red = reducers.get(function)
    source = raw.get("source")
    if source is None and red.needs_source and not red.source_optional:
        fail(
            f"{path}.source",
            f"function {function!r} needs a source variable; set one of: {', '.join(variables)}",
        )
    if source is not None:
        source = check_name(source, f"{path}.source")
        if source not in variables:
            fail(
                f"{path}.source",
                f"{source!r} is not declared in data_source.variables "
                f"({', '.join(variables)}); declare it there first",
            )
    dtype_raw = raw.get("dtype", red.default_dtype)
    try:
        dtype = np.dtype(dtype_raw)
    except TypeError:
        names = [
            f"{k}{b}"
            for k, bits in (
                ("float", (16, 32, 64)),
                ("int", (8, 16, 32, 64)),
                ("uint", (8, 16, 32, 64)),
            )
            for b in bits
        ]
        fail(
            f"{path}.dtype",
            f"{dtype_raw!r} is not a numpy dtype name{did_you_mean(dtype_raw, names)}",
        )
    if dtype.kind not in red.dtype_kinds or dtype.itemsize > 8:
        kinds = {"f": "float16/32/64", "i": "int8..int64", "u": "uint8..uint64"}
        valid = " or ".join(kinds[k] for k in red.dtype_kinds)
        fail(f"{path}.dtype", f"{dtype_raw!r} is not valid for {function!r}; use {valid}")
    if red.kind == "ragged" and dtype != np.float32:
        fail(f"{path}.dtype", f"t-digest payloads are float32 (spec §2.1), got {dtype_raw!r}")
    if red.kind == "ragged":
        if "fill_value" in raw and raw["fill_value"] not in ("", b""):
            fail(
                f"{path}.fill_value",
                f"ragged fields have the fixed fill '' (empty payload), "
                f"got {raw['fill_value']!r}; remove the key",
            )
        fill = b""
    else:
        fill = raw.get("fill_value", red.default_fill(dtype))
        if isinstance(fill, str) and fill.lower() == "nan":
            fill = float("nan")
        if not _representable(fill, dtype):
            fail(
                f"{path}.fill_value",
                f"{fill!r} is not representable in dtype {dtype.name}; "
                f"use a value within the range of {dtype.name}"
                + (" (or NaN)" if dtype.kind == "f" else ""),
            )
        if dtype.kind in "iu":
            fill = int(fill)
        else:
            fill = float(fill)
    params_raw = raw.get("params") or {}
    if params_raw and not red.params:
        fail(f"{path}.params", f"{function!r} takes no params; remove this key")
    check_keys(params_raw, tuple(red.params), f"{path}.params")
    params = {}
    for key, spec in red.params.items():
        if spec.default is reducers.REQUIRED and key not in params_raw:
            fail(f"{path}.params.{key}", f"is required for {function!r} ({spec.valid})")
        v = params_raw.get(key, spec.default)
        if v is None and spec.default is None:
            params[key] = None
            continue
        if isinstance(v, bool) or not isinstance(v, spec.kind) or not spec.check(v):
            fail(f"{path}.params.{key}", f"{v!r} is invalid; expected {spec.valid}")
        params[key] = v
    attrs = raw.get("attrs") or {}
    if not isinstance(attrs, Mapping):
        fail(f"{path}.attrs", f"expected a mapping of attribute names to values, got {attrs!r}")
    _check_json(attrs, f"{path}.attrs")
    for key in attrs:
        if key in CF_ENCODING_ATTRS or (key == "units" and " since " in str(attrs[key])):
            fail(
                f"{path}.attrs.{key}",
                f"'{key}' tells CF readers (xarray, moczarr) to "
                "transform the stored values when they read them, so they would see other "
                "numbers than zagg stored; remove it (the field's fill is set by fill_value)",
            )
        if key in SPEC_OWNED_ATTRS:
            fail(
                f"{path}.attrs.{key}",
                f"'{key}' is owned by the store format and written "
                "by zagg itself; remove it (spec-owned keys: "
                f"{', '.join(SPEC_OWNED_ATTRS)})",
            )
    if function == "tdigest":
        _check_flux(params, f"{path}.params", variables)
    where = raw.get("where")
    if where is not None:
        if not isinstance(where, str) or not where.strip():
            fail(f"{path}.where", f"expected a predicate expression, got {where!r}")
        try:
            where = str(predicate.parse(where, variables))
        except predicate.PredicateError as exc:
            fail(f"{path}.where", str(exc))
    stratum = _parse_stratum(raw.get("stratum"), f"{path}.stratum", where)
    located = raw.get("located", False)
    if not isinstance(located, bool):
        fail(f"{path}.located", f"expected true or false, got {located!r}")
    if located and red.kind != "ragged":
        fail(f"{path}.located", f"only digest (ragged) fields carry locations, not {function!r}")
    timed = raw.get("timed", False)
    if not isinstance(timed, bool):
        fail(f"{path}.timed", f"expected true or false, got {timed!r}")
    if timed and red.kind != "ragged":
        fail(
            f"{path}.timed",
            f"only digest (ragged) fields carry per-centroid times, not {function!r}",
        )
    overview_delta = None
    if raw.get("overview_delta") is not None:
        from zagg.pyramid import declare

        if red.pyramid_fold is None or red.kind != "ragged":
            fail(
                f"{path}.overview_delta",
                f"the pyramid budget is a t-digest field's, not {function!r}'s; drop the key "
                "(or set output.pyramid.overview_delta for every digest field)",
            )
        overview_delta = declare.overview_delta(raw, f"{path}.overview_delta")
    if function == "composition":
        if "fill_value" in raw and raw["fill_value"] != 0:
            fail(
                f"{path}.fill_value",
                f"a composition word's fill is 0 (an unwritten cell "
                f"must read as 'no flags', spec §3), got {raw['fill_value']!r}",
            )
        if source is None:
            fail(
                f"{path}.source",
                "composition needs the (n, 5) signal confidence variable, e.g. signal_conf_ph",
            )
        _check_composition_of(params, f"{path}.params", fields_raw or {})
    return FieldSpec(
        name,
        function,
        source,
        dtype.name,
        fill,
        params,
        dict(attrs),
        where,
        stratum,
        located,
        timed,
        overview_delta,
    )


def _check_flux(params, path: str, variables) -> None:
    """Flux digests name their weight variable and gain; counts digests name neither."""
    if params["weights"] == "flux":
        if params["weight_source"] is None:
            fail(
                f"{path}.weight_source",
                "a flux digest needs the variable holding each "
                f"observation's flux; one of: {', '.join(variables)}",
            )
        if params["weight_source"] not in variables:
            fail(
                f"{path}.weight_source",
                f"{params['weight_source']!r} is not declared in "
                f"data_source.variables ({', '.join(variables)})",
            )
        if params["gain"] is None:
            fail(
                f"{path}.gain",
                "a flux digest must record its calibration (spec §2.0): {name: ..., version: ...}",
            )
    else:
        for key in ("weight_source", "gain"):
            if params[key] is not None:
                fail(
                    f"{path}.{key}",
                    "only a digest with weights: flux takes this; remove it or set weights: flux",
                )


def _parse_stratum(raw, path: str, where) -> dict | None:
    if raw is None:
        return None
    check_keys(raw, ("name", "threshold"), path, ("name", "threshold"))
    if raw["name"] not in ("signal", "noise"):
        fail(f"{path}.name", f"{raw['name']!r} is not a stratum; valid: signal, noise")
    t = raw["threshold"]
    if isinstance(t, bool) or not isinstance(t, int) or not 1 <= t <= 4:
        fail(f"{path}.threshold", f"expected a confidence level 1..4, got {t!r}")
    if where is None:
        fail(
            path,
            "a stratum selects its rows with 'where'; add the predicate that defines "
            f"the {raw['name']} photons",
        )
    return {"name": raw["name"], "threshold": t}


def _check_composition_of(params, path: str, fields_raw: Mapping) -> None:
    of = params["of"]
    target = fields_raw.get(of)
    if not isinstance(target, Mapping) or target.get("function") != "tdigest":
        digests = sorted(
            n
            for n, f in fields_raw.items()
            if isinstance(f, Mapping) and f.get("function") == "tdigest"
        )
        fail(
            f"{path}.of",
            f"{of!r} must name a t-digest field of this config (its weights "
            f"are N_signal); declared digests: {', '.join(digests) or 'none'}",
        )
    if ((target.get("params") or {}).get("weights", "counts")) != "counts":
        fail(
            f"{path}.of",
            f"{of!r} is flux-weighted; a composition word's N_signal is a "
            "photon count, so 'of' must name a counts digest (spec §4.5)",
        )
    stratum = target.get("stratum")
    if isinstance(stratum, Mapping) and stratum.get("threshold") != params["threshold"]:
        fail(
            f"{path}.threshold",
            f"{params['threshold']} differs from the stratum threshold "
            f"{stratum.get('threshold')!r} of {of!r}; they must be equal (spec §3.3)",
        )


def _parse_grid(raw) -> Grid:
    path = "output.grid"
    check_keys(raw, _GRID, path, ("parent_order", "child_order"))
    gtype = raw.get("type", "healpix")
    if gtype != "healpix":
        fail(f"{path}.type", f"{gtype!r} is not supported; the morton hive needs 'healpix'")
    p = check_order(raw["parent_order"], f"{path}.parent_order")
    c = check_order(raw["child_order"], f"{path}.child_order")
    if p > c:
        fail(
            path,
            f"parent_order {p} > child_order {c}; need 0 <= parent_order <= "
            f"chunk_inner <= child_order <= {MAX_ORDER}",
        )
    ci = check_order(raw.get("chunk_inner", min(c, p + 4)), f"{path}.chunk_inner")
    if not p <= ci <= c:
        fail(
            f"{path}.chunk_inner",
            f"{ci} must lie between parent_order {p} and child_order "
            f"{c} (0 <= parent_order <= chunk_inner <= child_order <= {MAX_ORDER})",
        )
    if c > 27:
        fail(f"{path}.child_order", f"cell order {c} is not supported yet; use an order <= 27")
    sharded = raw.get("sharded", True)
    if not isinstance(sharded, bool):
        fail(f"{path}.sharded", f"expected true or false, got {sharded!r}")
    return Grid(p, ci, c, sharded)


def _shard_bytes(grid: Grid, fields: Mapping[str, FieldSpec]) -> int:
    per_cell = 8  # morton
    for f in fields.values():
        per_cell += 8 if f.kind == "ragged" else np.dtype(f.dtype).itemsize
    return 3 * grid.cells_per_shard * per_cell  # values + fill/scatter buffers + encoding


def _parse_output(raw, fields) -> Output:
    check_keys(raw, _OUTPUT, "output", ("dataset", "grid"))
    layout = raw.get("store_layout", "hive")
    if layout != "hive":
        fail("output.store_layout", f"{layout!r} is not supported; use 'hive'")
    store = raw.get("store")
    if store is not None and (not isinstance(store, str) or not store):
        fail("output.store", f"expected a path or s3:// URL, got {store!r}")
    ds = raw["dataset"]
    check_keys(ds, ("short_name", "version"), "output.dataset", ("short_name", "version"))
    short_name = ds["short_name"]
    if not isinstance(short_name, str) or not short_name:
        fail("output.dataset.short_name", f"expected a non-empty string, got {short_name!r}")
    version = ds["version"]
    if isinstance(version, int) and not isinstance(version, bool):
        fail(
            "output.dataset.version",
            f"got the number {version!r}; write the version as "
            f"text, quoted (version: '{version:03d}' or '{version}'): unquoted, 007 reads "
            "as the number 7",
        )
    if not isinstance(version, str) or not version:
        fail("output.dataset.version", f"expected a string such as '007', got {version!r}")
    grid = _parse_grid(raw["grid"])
    limit = parse_bytes(
        raw.get("shard_memory_limit", DEFAULT_SHARD_MEMORY), "output.shard_memory_limit"
    )
    need = _shard_bytes(grid, fields)
    if need > limit:
        fail(
            "output.grid",
            f"one shard of 4^({grid.cell_order}-{grid.shard_order}) = "
            f"{grid.cells_per_shard:,} cells needs about {need / 2**20:,.0f} MiB, over the "
            f"shard_memory_limit of {limit / 2**20:,.0f} MiB; raise parent_order (smaller "
            "shards) or lower child_order, or raise output.shard_memory_limit",
        )
    options = parse_storage_options(raw.get("storage_options"), "output.storage_options")
    pyramid, sweep, overview_delta = _parse_pyramid(raw, grid)
    versions = raw.get("leaf_versions", True)
    if not isinstance(versions, bool):
        fail(
            "output.leaf_versions",
            f"expected true (each write makes a new version of the "
            f"leaf; the default) or false (rewrite leaves in place), got {versions!r}",
        )
    return Output(
        store,
        short_name,
        str(version),
        grid,
        layout,
        limit,
        options,
        pyramid,
        sweep,
        versions,
        *_parse_icechunk(raw.get("icechunk"), grid),
        overview_delta=overview_delta,
        memory_budget=parse_memory_budget(raw.get("memory_budget"), "output.memory_budget"),
    )


def parse_memory_budget(value, path: str) -> int | None:
    """``auto`` (or absent: None, sized from the cluster), ``off`` (0: the run is one pass
    whatever it holds) or a size (bytes, or text such as ``'4GiB'``)."""
    if value is None or value == "auto":
        return None
    if value == "off" or value is False:
        return 0
    if isinstance(value, str) and value.strip().lower() in ("auto", "off"):
        return None if value.strip().lower() == "auto" else 0
    try:
        if isinstance(value, bool) or not isinstance(value, int | str):
            raise ConfigError(path)
        return parse_bytes(value, path)
    except ConfigError:
        fail(path, f"expected auto, off or a size such as '4GiB' or '512MiB', got {value!r}")


def _parse_icechunk(value, grid: Grid) -> tuple:
    """``output.icechunk``: absent (on when the package is installed), true, false, or a
    mapping of its knobs (:func:`zagg.pyramid.icechunk_knobs.parse_settings`)."""
    from zagg.pyramid.icechunk_knobs import parse_settings

    return parse_settings(value, grid.shard_order)


def _parse_pyramid(raw, grid: Grid) -> tuple:
    """``output.pyramid`` (the declared leaf resolutions, spec §4.4–4.5, and the pyramid-wide
    digest budget) and ``output.sweep`` (:mod:`zagg.pyramid.declare`)."""
    from zagg.pyramid import declare

    value = raw.get("pyramid")
    win = raw.get("windowing")
    windowed = isinstance(win, Mapping) and win.get("schedule") != "none"
    res = declare.resolutions(
        value, grid.shard_order, grid.chunk_order, grid.cell_order, windowed=windowed
    )
    delta = declare.overview_delta(value)
    sweep = declare.sweep_mode(raw.get("sweep"), declared=res is not None)
    if sweep and res is None:
        fail(
            "output.sweep",
            "a sweep builds the pyramid ladder, but output.pyramid declares "
            "none; declare a pyramid or drop output.sweep",
        )
    return res, sweep, delta


def parse_config(raw: Mapping) -> Config:
    """Validate a config mapping (as read from YAML) into a :class:`Config`."""
    check_keys(raw, _TOP, "", _TOP)
    source = parse_data_source(raw["data_source"])
    agg = raw["aggregation"]
    check_keys(agg, ("variables",), "aggregation", ("variables",))
    fields_raw = agg["variables"]
    if not isinstance(fields_raw, Mapping) or not fields_raw:
        fail(
            "aggregation.variables",
            f"expected a non-empty mapping of output fields, got {fields_raw!r}",
        )
    fields = {}
    for name, spec in fields_raw.items():
        if not isinstance(name, str) or not name.isidentifier() or name == "morton":
            fail(
                f"aggregation.variables.{name}",
                "field names must be identifiers (letters, digits, underscores) and not 'morton'",
            )
        fields[name] = _parse_field(name, spec, source.variables, fields_raw)
    for f in fields.values():
        if f.located and f.locations_name in fields:
            fail(
                f"aggregation.variables.{f.locations_name}",
                f"the name is taken by the locations sibling of {f.name!r}; rename the field",
            )
    output = _parse_output(raw["output"], fields)
    windowing = _parse_windowing(raw["output"], source, output, fields)
    if windowing is not None:
        output = dataclasses.replace(output, windowing=windowing)
    return Config(source, fields, output, raw)


def _parse_windowing(raw, source: DataSource, output: Output, fields: Mapping):
    """``output.windowing`` (:mod:`zagg.windows.schedule`): the schedule, its time field
    among the declared variables, on the data source's clock when it declares one; and the
    fields that read times, each refused without a clock."""
    from zagg.windows.schedule import parse_windowing

    windowing = parse_windowing(
        with_source_clock(raw.get("windowing"), source.clock),
        source.variables,
        output.grid.shard_order,
    )
    check_one_clock(windowing, source.clock)
    clocked = source.clock is not None or windowing is not None
    time_key = source.time_key
    how = (
        f"declare the clock beside the time variable (data_source.{time_key} with "
        "data_source.epoch, scale and units, as a windowing block gives them) or add an "
        "output.windowing block"
    )
    timed = [f.name for f in fields.values() if f.timed]
    if timed and not clocked:
        fail(
            f"aggregation.variables.{timed[0]}.timed",
            f"per-centroid times are read on the observations' clock, which this config "
            f"does not declare; {how}",
        )
    ranges = [f.name for f in fields.values() if f.function == "time_range"]
    if ranges and not clocked:
        fail(
            f"aggregation.variables.{ranges[0]}.function",
            f"time_range reads its source on the observations' clock, which this config "
            f"does not declare; {how}",
        )
    for f in fields.values():
        if f.timed and f.times_name in fields:
            fail(
                f"aggregation.variables.{f.times_name}",
                f"the name is taken by the times sibling of {f.name!r}; rename the field",
            )
    return windowing


def load_config(source) -> Config:
    """Load a config from a YAML file path, the name of a shipped config (e.g.
    ``"atl03_tdigest"``, see ``python -m zagg configs``), a YAML string, or a mapping."""
    if isinstance(source, Config):
        return source
    if isinstance(source, Mapping):
        return parse_config(source)
    text = None
    if isinstance(source, str) and "\n" not in source and not Path(source).exists():
        from zagg.packaged import find

        shipped = find("config", source)
        if shipped is not None:
            source = shipped
    if isinstance(source, Path) or (
        isinstance(source, str) and "\n" not in source and source.endswith((".yaml", ".yml"))
    ):
        path = Path(source)
        if not path.exists():
            raise ConfigError(f"config file {str(path)!r} does not exist")
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            what = "a directory" if path.is_dir() else "not a readable UTF-8 text file"
            raise ConfigError(
                f"config file {str(path)!r} is {what} ({exc}); give the path of a YAML file"
            ) from exc
    elif isinstance(source, str):
        text = source
    else:
        raise ConfigError(f"cannot load a config from {type(source).__name__}")
    try:
        raw = load_yaml(text)  # a key twice or an alias bomb is refused
    except yaml.YAMLError as exc:
        raise ConfigError(f"config is not valid YAML: {exc}") from exc
    if not isinstance(raw, Mapping):
        if isinstance(source, str) and "\n" not in source and not isinstance(raw, list):
            from zagg.packaged import names

            raise ConfigError(
                f"config {source!r} is neither an existing .yaml/.yml file, the "
                "name of a shipped config nor YAML text of a mapping; give the "
                "path of the config file (ending in .yaml or .yml) or one of: "
                f"{', '.join(names('config'))}"
            )
        raise ConfigError(f"config must be a YAML mapping at the top level, got {raw!r}")
    return parse_config(raw)
