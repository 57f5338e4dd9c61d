"""The ``data_source`` block of a granule config, validated into a :class:`GranuleSource`.

Every refusal is a :class:`~zagg.checks.validation.ConfigError` naming the key path, the bad value
and what would be valid; see ``docs/granules.md`` for the keys.
"""

from __future__ import annotations

import re
import string
from collections.abc import Mapping
from dataclasses import dataclass, field

from zagg.checks.credentials import StorageOptions, parse_storage_options
from zagg.checks.filters import Filter, parse_filters
from zagg.checks.validation import check_keys, fail, parse_bytes
from zagg.sources.archive_query import Search, parse_search
from zagg.sources.beams import BEAM_SELECTIONS, POINT_VARIABLES, is_beam
from zagg.sources.chunks import FetchSettings
from zagg.sources.readplan import ReadPlan, parse_read_plan

__all__ = [
    "CATALOG_SUFFIXES",
    "GRANULE_SUFFIXES",
    "GranuleSource",
    "GranuleVariable",
    "is_catalog",
    "parse_granule_source",
]

GRANULE_SUFFIXES = (".h5", ".hdf5", ".he5")
CATALOG_SUFFIXES = (".json", ".parquet")

RESERVED_NAMES = ("latitude", "longitude", "time", "granule")
ON_ERROR = ("fail", "skip")

_KEYS = (
    "granules",
    "groups",
    "coordinates",
    "variables",
    "filters",
    "delta_time",
    "epoch",  # the clock of delta_time (epoch, scale, units): zagg.windows.clock
    "scale",
    "units",
    "on_error",
    "storage_options",
    "read_plan",
    "reads",
    "beams",
)
_READS = ("metadata_block_size", "max_gap", "request_size", "concurrency")
_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


@dataclass(frozen=True)
class GranuleVariable:
    """One Dataset variable ``name`` read from the HDF5 ``path`` (one ``column`` if 2-D)."""

    name: str
    path: str
    column: int | None = None


@dataclass(frozen=True)
class GranuleSource:
    """A validated granule ``data_source`` block (paths keep their ``{group}`` placeholder)."""

    granules: str | tuple[str, ...] | Search  # a search of NASA's archive is a catalog
    groups: tuple[str, ...] | None
    latitude: str
    longitude: str
    variables: tuple[GranuleVariable, ...] = ()
    filters: tuple[Filter, ...] = ()
    delta_time: str | None = None
    on_error: str = "fail"
    storage_options: StorageOptions = field(default_factory=StorageOptions, repr=False)
    config_key: str = "data_source"  # where the block sits in the config, for messages
    read_plan: ReadPlan | None = None  # the along-track index a shard-restricted run uses
    reads: FetchSettings = field(default_factory=FetchSettings)
    #: which beams each granule contributes by its orientation: strong, weak or all
    beams: str = "all"

    @property
    def point_names(self) -> tuple[str, ...]:
        """The per-point variables from the granules' metadata (:mod:`zagg.sources.beams`)
        this source offers beside its declared ones: ``rgt`` and ``cycle``, and with beam
        groups (``gt1l`` ... ``gt3r``) ``beam``, ``spot`` and ``strong``; a declared
        variable of the same name is read from its path instead."""
        beams = bool(self.groups) and all(is_beam(g) for g in self.groups)
        declared = {v.name for v in self.variables}
        return tuple(
            n for n in POINT_VARIABLES if n not in declared and (beams or n in ("rgt", "cycle"))
        )

    @property
    def names(self) -> tuple[str, ...]:
        """The variables of the opened Dataset, in order (``granule`` excepted)."""
        return (
            "latitude",
            "longitude",
            *(v.name for v in self.variables),
            *(("time",) if self.delta_time else ()),
        )

    @property
    def is_catalog(self) -> bool:
        """Whether the granules are listed by a catalog: a catalog file or a search."""
        if isinstance(self.granules, Search):
            return True
        return isinstance(self.granules, str) and is_catalog(self.granules)

    @property
    def where(self):
        """The granules' location as records show it: the path, the list, or the search
        (``{"search": {...}}``)."""
        if isinstance(self.granules, Search):
            return {"search": self.granules.as_dict()}
        return self.granules if isinstance(self.granules, str) else list(self.granules)

    def items(self) -> tuple[tuple[str, str, int | None], ...]:
        """(name, path template, column) of everything read per group, coordinates first."""
        out = [("latitude", self.latitude, None), ("longitude", self.longitude, None)]
        out += [(v.name, v.path, v.column) for v in self.variables]
        if self.delta_time:
            out.append(("time", self.delta_time, None))
        return tuple(out)


def parse_granule_source(raw: Mapping, path: str = "data_source") -> GranuleSource:
    """Validate a granule ``data_source`` block; every refusal is a ``ConfigError``."""
    if isinstance(raw, Mapping) and "time" in raw:
        fail(
            f"{path}.time",
            "granule sources set the time variable with 'delta_time' (an "
            "HDF5 path such as '/{group}/heights/delta_time'); replace 'time' by it",
        )
    for key in ("input", "synthetic"):
        if isinstance(raw, Mapping) and key in raw:
            fail(f"{path}.{key}", f"give either 'granules' or '{key}', not both")
    check_keys(raw, _KEYS, path, ("granules", "coordinates"))
    granules = _parse_location(raw["granules"], f"{path}.granules")
    groups = _parse_groups(raw.get("groups"), f"{path}.groups")
    grouped = groups is not None

    coords = raw["coordinates"]
    check_keys(coords, ("latitude", "longitude"), f"{path}.coordinates", ("latitude", "longitude"))
    lat = _template(coords["latitude"], f"{path}.coordinates.latitude", grouped)
    lon = _template(coords["longitude"], f"{path}.coordinates.longitude", grouped)

    variables = _parse_variables(raw.get("variables"), f"{path}.variables", grouped)
    delta_time = raw.get("delta_time")
    if delta_time is not None:
        delta_time = _template(delta_time, f"{path}.delta_time", grouped)
    beams = _parse_beams(raw.get("beams", "all"), f"{path}.beams", groups)
    offered = GranuleSource(granules, groups, lat, lon, variables).point_names
    declared = [v.name for v in variables] + (["time"] if delta_time else []) + list(offered)
    filters = _parse_granule_filters(raw.get("filters"), declared, f"{path}.filters")

    on_error = raw.get("on_error", "fail")
    if on_error not in ON_ERROR:
        fail(
            f"{path}.on_error",
            f"{on_error!r} is not valid; use 'fail' (stop at the first "
            "unreadable granule) or 'skip' (leave it out and record it)",
        )
    options = parse_storage_options(raw.get("storage_options"), f"{path}.storage_options")
    plan = parse_read_plan(
        raw.get("read_plan"), f"{path}.read_plan", lambda v, p: _template(v, p, grouped)
    )
    if (
        plan is not None
        and plan.kind == "segments"
        and not grouped
        and any("{group}" in t for _, t in plan.items())
    ):
        fail(
            f"{path}.read_plan",
            "the 'atl03' preset names '/{group}/geolocation/...' "
            "paths, which need data_source.groups; list the groups or give the index "
            "paths yourself",
        )
    reads = _parse_reads(raw.get("reads"), f"{path}.reads")
    return GranuleSource(
        granules,
        groups,
        lat,
        lon,
        variables,
        filters,
        delta_time,
        on_error,
        options,
        path,
        plan,
        reads,
        beams,
    )


def _parse_beams(value, path: str, groups) -> str:
    """``data_source.beams``: strong, weak or all (the default); strong or weak needs beam
    groups, whose strength each granule's orientation decides."""
    if value not in BEAM_SELECTIONS:
        fail(path, f"{value!r} is not valid; use strong, weak or all")
    if value != "all":
        named = [g for g in groups or () if not is_beam(g)]
        if not groups or named:
            fail(
                path,
                f"{value} beams are picked among the ICESat-2 ground tracks, but "
                + (
                    f"the group {named[0]!r} is not one (gt1l ... gt3r)"
                    if named
                    else "data_source.groups is not set"
                )
                + "; list the groups [gt1l, gt1r, gt2l, gt2r, gt3l, gt3r] or set beams: all",
            )
    return value


def _parse_reads(value, path: str) -> FetchSettings:
    """``data_source.reads``: how granule bytes are fetched (sizes in bytes or '1MiB')."""
    if value is None:
        return FetchSettings()
    check_keys(value, _READS, path)
    out = {}
    for key in ("metadata_block_size", "max_gap", "request_size"):
        if key in value:
            v = value[key]
            out[key] = 0 if key == "max_gap" and v == 0 else parse_bytes(v, f"{path}.{key}")
    c = value.get("concurrency")
    if c is not None:
        if isinstance(c, bool) or not isinstance(c, int) or not 1 <= c <= 256:
            fail(
                f"{path}.concurrency",
                f"expected a whole number of requests in flight 1..256, got {c!r}",
            )
        out["concurrency"] = c
    return FetchSettings(**out)


def _parse_location(value, path: str) -> str | tuple[str, ...] | Search:
    what = (
        "a local directory, a glob, an s3://bucket/prefix/, a catalog file (.json or "
        ".parquet), a list of granule files or {search: {...}} (NASA's archive)"
    )
    if isinstance(value, Mapping):
        check_keys(value, ("search",), path, ("search",))
        return parse_search(value["search"], f"{path}.search")
    if isinstance(value, list):
        if not value:
            fail(path, f"the list of granule files is empty; give {what}")
        for i, v in enumerate(value):
            if not isinstance(v, str) or not v.strip():
                fail(f"{path}[{i}]", f"expected a granule file path or URL, got {v!r}")
            if is_catalog(v):
                fail(f"{path}[{i}]", f"{v!r} is a catalog; give it alone, not in a list")
        return tuple(value)
    if not isinstance(value, str) or not value.strip():
        fail(path, f"expected {what}, got {value!r}")
    if "://" in value and not value.startswith(("s3://", "file://")):
        fail(path, f"{value!r}: only local paths and s3:// URLs are supported")
    return value


def _parse_groups(value, path: str) -> tuple[str, ...] | None:
    if value is None:
        return None
    if isinstance(value, str) or not isinstance(value, list) or not value:
        fail(
            path,
            f"expected a non-empty list of group names such as [gt1l, gt1r, gt2l, gt2r, "
            f"gt3l, gt3r], got {value!r}",
        )
    for i, g in enumerate(value):
        if (
            not isinstance(g, str)
            or not g.strip()
            or "/" in g
            or g in (".", "..")
            or "{" in g
            or "}" in g
        ):
            fail(
                f"{path}[{i}]",
                f"expected an HDF5 group name (no '/', braces or dots-only), got {g!r}",
            )
    dup = sorted({g for g in value if value.count(g) > 1})
    if dup:
        fail(path, f"{dup} listed more than once; list each group once")
    return tuple(value)


def _template(value, path: str, grouped: bool) -> str:
    """A validated HDF5 path template, normalised to start with '/'."""
    if not isinstance(value, str) or not value.strip():
        fail(
            path,
            f"expected an HDF5 dataset path such as '/{{group}}/heights/lat_ph', got {value!r}",
        )
    try:
        parts = list(string.Formatter().parse(value))
    except ValueError as exc:
        fail(path, f"{value!r} has unbalanced braces ({exc}); the only placeholder is '{{group}}'")
    fields = [(f, spec, conv) for _, f, spec, conv in parts if f is not None]
    for f, spec, conv in fields:
        if f != "group" or spec or conv:
            fail(
                path, f"{value!r} uses the placeholder {{{f}}}; the only placeholder is '{{group}}'"
            )
    if grouped and not fields:
        fail(
            path,
            f"{value!r} does not contain '{{group}}'; with data_source.groups set, "
            "every path must name its group, e.g. '/{group}/heights/h_ph'",
        )
    if not grouped and fields:
        fail(
            path,
            f"{value!r} uses '{{group}}' but data_source.groups is not set; list the "
            "groups, e.g. groups: [gt1l, gt1r, gt2l, gt2r, gt3l, gt3r]",
        )
    norm = "/" + value.strip("/")
    if any(c in ("", ".", "..") for c in norm[1:].split("/")):
        fail(
            path,
            f"{value!r} has an empty, '.' or '..' component; give an absolute HDF5 "
            "path such as '/{group}/heights/h_ph'",
        )
    return norm


def _parse_variables(value, path: str, grouped: bool) -> tuple[GranuleVariable, ...]:
    if value is None:
        return ()
    if not isinstance(value, Mapping):
        fail(
            path,
            f"expected a mapping of variable name to HDF5 path (or to {{path, "
            f"column}}), e.g. {{h_ph: '/{{group}}/heights/h_ph'}}, got {value!r}",
        )
    out = []
    for name, spec in value.items():
        p = f"{path}.{name}"
        if not isinstance(name, str) or not _NAME_RE.match(name):
            fail(p, "variable names must be identifiers (letters, digits, underscores)")
        if name in RESERVED_NAMES:
            fail(
                p,
                f"{name!r} is reserved for the Dataset's own variables "
                f"({', '.join(RESERVED_NAMES)}); choose another name",
            )
        column = None
        if isinstance(spec, Mapping):
            check_keys(spec, ("path", "column"), p, ("path",))
            column = spec.get("column")
            if column is not None and (
                isinstance(column, bool) or not isinstance(column, int) or column < 0
            ):
                fail(
                    f"{p}.column",
                    f"expected a non-negative column index of the 2-D dataset, got {column!r}",
                )
            spec = spec["path"]
            p = f"{p}.path"
        out.append(GranuleVariable(name, _template(spec, p, grouped), column))
    return tuple(out)


def _parse_granule_filters(value, declared, path: str) -> tuple[Filter, ...]:
    if isinstance(value, list):
        for i, f in enumerate(value):
            if isinstance(f, Mapping) and "column" in f:
                fail(
                    f"{path}[{i}].column",
                    "granule filters take no column; declare the "
                    "column as its own variable, e.g. variables: {land_ice_conf: {path: "
                    "'/{group}/heights/signal_conf_ph', column: 3}}, and filter on that name",
                )
            check_keys(f, ("variable", "op", "value"), f"{path}[{i}]", ("variable", "op", "value"))
    return parse_filters(value, tuple(declared), path)


def is_catalog(location: str) -> bool:
    """Whether a granule location names a catalog file (by its suffix)."""
    return location.lower().endswith(CATALOG_SUFFIXES)
