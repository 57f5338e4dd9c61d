"""The ``data_source`` block of points that are already points: a Dataset handed to
``zagg.aggregate``, a points file or store (``input``: zarr, netCDF, Parquet/GeoParquet) or
the built-in generator (``synthetic``), validated into a
:class:`~zagg.sources.record.DataSource`.

Coordinates and variables name the Dataset's variables (or a columnar file's columns);
every refusal is a :class:`~zagg.checks.validation.ConfigError` naming the key path.
"""

from __future__ import annotations

from collections.abc import Mapping

from zagg.checks.credentials import parse_storage_options
from zagg.checks.filters import parse_filters
from zagg.checks.validation import check_keys, check_name, fail
from zagg.sources.record import DataSource, InputFile
from zagg.windows.clock import source_clock

__all__ = ["COLUMNAR_SUFFIXES", "is_columnar", "parse_points"]

KEYS = (
    "coordinates",
    "variables",
    "time",
    "epoch",
    "scale",
    "units",
    "filters",
    "input",
    "synthetic",
    "storage_options",
)
SYNTHETIC_KEYS = ("points", "region", "seed", "chunk_size", "noise_fraction")
#: an ``input`` read as columns (Parquet, GeoParquet), by its suffix
COLUMNAR_SUFFIXES = (".parquet", ".geoparquet", ".parq")


def is_columnar(path) -> bool:
    """Whether an ``input`` names a Parquet or GeoParquet file (or a directory of them,
    written ``name.parquet/``)."""
    return isinstance(path, str) and path.rstrip("/").lower().endswith(COLUMNAR_SUFFIXES)


def parse_points(raw, path: str = "data_source", kind: str = "dataset") -> DataSource:
    """The block of a Dataset, input file or generator (``kind``: the registered source)."""
    check_keys(raw, KEYS, path, ("coordinates", "variables"))
    coords = raw["coordinates"]
    inp = raw.get("input")
    columnar = is_columnar(inp)
    allowed = ("latitude", "longitude", "geometry") if columnar else ("latitude", "longitude")
    check_keys(coords, allowed, f"{path}.coordinates")
    geometry = None
    if "geometry" in coords:
        if "latitude" in coords or "longitude" in coords:
            fail(
                f"{path}.coordinates",
                "give either 'geometry' (a column of WKB points) or 'latitude' and "
                "'longitude', not both",
            )
        geometry = check_name(coords["geometry"], f"{path}.coordinates.geometry")
        lat, lon = "latitude", "longitude"  # the decoded points' variables
    else:
        for key in ("latitude", "longitude"):
            if key not in coords:
                fail(f"{path}.coordinates.{key}", "is required but missing")
        lat = check_name(coords["latitude"], f"{path}.coordinates.latitude")
        lon = check_name(coords["longitude"], f"{path}.coordinates.longitude")
    variables, columns = parse_variables(raw["variables"], f"{path}.variables")
    time = raw.get("time")
    if time is not None:
        time = check_name(time, f"{path}.time")
    clock = source_clock(raw, time, "time")
    if clock is not None and time not in variables:
        fail(
            f"{path}.time",
            f"{time!r} is not declared in {path}.variables "
            f"({', '.join(variables)}); the clock is read from a variable the run reads, "
            "so declare it there",
        )
    filters = parse_filters(raw.get("filters"), variables, f"{path}.filters")
    if inp is not None and (not isinstance(inp, str) or not inp):
        fail(
            f"{path}.input",
            f"expected a path or URL of a zarr store, netCDF file or Parquet file, got {inp!r}",
        )
    synthetic = parse_synthetic(raw.get("synthetic"), f"{path}.synthetic")
    if inp is not None and synthetic is not None:
        fail(path, "give either 'input' or 'synthetic', not both")
    options = parse_storage_options(raw.get("storage_options"), f"{path}.storage_options")
    if options and (inp is None or "://" not in inp):
        fail(
            f"{path}.storage_options",
            "only an input URL (s3://...) takes storage "
            f"options; remove them or give {path}.input as a URL",
        )
    settings = synthetic
    if inp is not None:
        settings = InputFile(inp, options, geometry)
    return DataSource(
        lat,
        lon,
        variables,
        time,
        filters,
        kind,
        settings,
        columns,
        clock=clock,
    )


def parse_variables(raw, path: str = "data_source.variables") -> tuple[tuple[str, ...], dict]:
    """``variables`` as a list of Dataset variable names, or a mapping of declared names to
    a Dataset variable name or ``{variable, column}`` (one column of a 2-D variable)."""
    if isinstance(raw, list):
        names = tuple(check_name(v, f"{path}[{i}]") for i, v in enumerate(raw))
        dup = {v for v in names if names.count(v) > 1}
        if dup:
            fail(path, f"{sorted(dup)} listed more than once")
        return names, {}
    if not isinstance(raw, Mapping) or not raw:
        fail(
            path,
            f"expected a list of variable names or a mapping of names to variables, got {raw!r}",
        )
    columns = {}
    for name, spec in raw.items():
        p = f"{path}.{name}"
        if not isinstance(name, str) or not name.isidentifier() or name.startswith("__"):
            fail(p, "declared names must be identifiers (letters, digits, underscores)")
        if isinstance(spec, str):
            columns[name] = (check_name(spec, p), None)
            continue
        check_keys(spec, ("variable", "column"), p, ("variable",))
        column = spec.get("column")
        if column is not None and (
            isinstance(column, bool) or not isinstance(column, int) or column < 0
        ):
            fail(f"{p}.column", f"expected a non-negative column index, got {column!r}")
        columns[name] = (check_name(spec["variable"], f"{p}.variable"), column)
    return tuple(columns), {k: v for k, v in columns.items() if v != (k, None)}


def parse_synthetic(raw, path: str = "data_source.synthetic") -> dict | None:
    """The built-in generator's parameters (:func:`zagg.sources.synthetic.synthetic_photons`)."""
    if raw is None:
        return None
    check_keys(raw, SYNTHETIC_KEYS, path, ("points",))
    out = dict(raw)
    for key, lo in (("points", 1), ("chunk_size", 1), ("seed", 0)):
        v = raw.get(key)
        if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < lo):
            fail(f"{path}.{key}", f"expected an integer >= {lo}, got {v!r}")
    region = raw.get("region")
    if region is not None:
        ok = (
            isinstance(region, list)
            and len(region) == 4
            and all(isinstance(x, int | float) and not isinstance(x, bool) for x in region)
        )
        if not ok or not (region[0] < region[2] and -90 <= region[1] < region[3] <= 90):
            fail(
                f"{path}.region",
                f"expected [lon_min, lat_min, lon_max, lat_max] with "
                f"min < max and latitudes within -90..90, got {region!r}",
            )
    nf = raw.get("noise_fraction")
    if nf is not None and (
        isinstance(nf, bool) or not isinstance(nf, int | float) or not 0 <= nf < 1
    ):
        fail(f"{path}.noise_fraction", f"expected a number in [0, 1), got {nf!r}")
    return out
