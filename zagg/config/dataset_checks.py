"""Checks of a Dataset against the config that will read it, before any work: every
variable the config names is present, and each has the shape and dtype it is read as.
Every refusal is a :class:`~zagg.config.ConfigError` naming the config key."""

from __future__ import annotations

import difflib

from zagg.checks import predicate
from zagg.checks.validation import ConfigError, fail
from zagg.config.model import Config


def check_dataset(config: Config, ds) -> None:
    """Refuse a Dataset that lacks a variable ``config`` reads, naming the key, or holds
    one in a shape or dtype it cannot be read as (:func:`check_shapes`)."""
    ds_src = config.data_source
    wanted = [
        ("data_source.coordinates.latitude", ds_src.latitude),
        ("data_source.coordinates.longitude", ds_src.longitude),
    ]
    if ds_src.time:
        wanted.append(("data_source.time", ds_src.time))
    wanted += [
        (f"data_source.filters[{i}].variable", f.variable) for i, f in enumerate(ds_src.filters)
    ]
    wanted += [
        (f"aggregation.variables.{n}.source", f.source)
        for n, f in config.fields.items()
        if f.source
    ]
    wanted = [(p, ds_src.dataset_variable(n)) for p, n in wanted]
    wanted += [(f"data_source.variables.{n}", v) for n, (v, _) in ds_src.columns.items()]
    have = set(ds.variables)
    for path, name in wanted:
        if name not in have:
            hint = difflib.get_close_matches(name, sorted(map(str, have)), n=1)
            did = f" (did you mean '{hint[0]}'?)" if hint else ""
            raise ConfigError(
                f"config key '{path}': variable {name!r} is not in the Dataset{did}; "
                f"it has: {', '.join(sorted(map(str, have)))}"
            )
    check_points(wanted, ds)
    check_shapes(config, ds)


def check_points(wanted, ds) -> None:
    """Refuse coordinates that are not 1-D numbers, and a variable read (``wanted``: config
    key, Dataset variable; the latitude first, the longitude second) that does not run
    along the points' dimension (the latitude's)."""
    (lat_path, lat), (lon_path, lon) = wanted[:2]
    for path, name in ((lat_path, lat), (lon_path, lon)):
        v = ds.variables[name]
        if v.ndim != 1:
            fail(path, f"{name!r} has dims {v.dims}: a coordinate holds one value per point (1-D)")
        if v.dtype.kind not in "iuf":
            fail(
                path,
                f"{name!r} has dtype {v.dtype}, not numbers: coordinates are degrees; "
                f"convert it (e.g. ds[{name!r}].astype('float64') when it holds numbers "
                "written as text) and read that",
            )
    dim = ds.variables[lat].dims[0]
    for path, name in wanted[1:]:
        dims = ds.variables[name].dims
        if not dims or dims[0] != dim:
            fail(
                path,
                f"{name!r} has dims {dims}, but the points run along {dim!r} (the latitude's "
                f"dimension): every variable zagg reads needs one value per point along "
                f"{dim!r}; read a variable of the points, or put it on their dimension",
            )


def check_shapes(config: Config, ds) -> None:
    """Refuse a variable whose shape or dtype does not fit how the config reads it: a
    column of a variable that is not 2-D or has no such column, a 2-D variable read
    where one value per point is needed, or non-numbers (dates, text) filtered or
    aggregated."""
    src = config.data_source

    def column_of(path, var, col):
        v = ds.variables[var]
        if v.ndim != 2:
            fail(
                path,
                f"column {col} of {var!r}, which has dims {v.dims}: only a 2-D "
                "(points, columns) variable has columns; drop 'column'",
            )
        if not 0 <= col < v.shape[1]:
            fail(
                path,
                f"column {col} of {var!r}, which has {v.shape[1]} columns (0..{v.shape[1] - 1})",
            )

    def per_point(path, declared):
        var, col = src.columns.get(declared, (declared, None))
        v = ds.variables[var]
        if col is None and v.ndim != 1:
            fail(
                path,
                f"{declared!r} is the Dataset variable {var!r} of dims {v.dims}, "
                "but one value per point is read here; declare one of its columns in "
                f"data_source.variables (e.g. {declared}_0: {{variable: {var}, "
                "column: 0}) and read that",
            )

    def numeric(path, declared):
        var = src.dataset_variable(declared)
        dtype = ds.variables[var].dtype
        if dtype.kind not in "biuf":
            fail(
                path,
                f"{declared!r} has dtype {dtype}, which zagg cannot read as numbers;"
                f" add a numeric copy to the Dataset (e.g. seconds since an epoch: "
                f"ds[{var!r}].astype('datetime64[ns]').astype('int64') / 1e9) and "
                "read that",
            )

    for name, (var, col) in src.columns.items():
        if col is not None:
            column_of(f"data_source.variables.{name}.column", var, col)
    for i, f in enumerate(src.filters):
        path = f"data_source.filters[{i}]"
        if f.column is not None:
            column_of(f"{path}.column", src.dataset_variable(f.variable), f.column)
        else:
            per_point(f"{path}.variable", f.variable)
        numeric(f"{path}.variable", f.variable)
    for n, f in config.fields.items():
        path = f"aggregation.variables.{n}"
        if f.function == "composition":
            var, col = src.columns.get(f.source, (f.source, None))
            v = ds.variables[var]
            if col is not None or v.ndim != 2 or v.shape[1] != 5 or v.dtype.kind not in "iu":
                fail(
                    f"{path}.source",
                    f"a composition reads the (points, 5) integer "
                    f"signal confidence (ATL03 signal_conf_ph); {f.source!r} is "
                    f"{v.dtype} of dims {v.dims}" + (f", column {col}" if col is not None else ""),
                )
        elif f.source:
            per_point(f"{path}.source", f.source)
            numeric(f"{path}.source", f.source)
        if f.where:
            for name in predicate.parse(f.where, src.variables).variables:
                per_point(f"{path}.where", name)
                numeric(f"{path}.where", name)
