"""The built-in sources as :class:`~zagg.sources.record.Source` records: a Dataset handed
in (the fallback), the built-in generator, a zarr/netCDF input, HDF5 granules and granule
catalogs. (Columnar inputs are :mod:`zagg.sources.parquet`.)

Each record's ``open`` loads its reader on first use, so parsing a config never imports
h5py, and a worker generating synthetic points never imports the granule reader.
"""

from __future__ import annotations

import os

from zagg.checks.validation import ConfigError
from zagg.sources.granule_config import is_catalog, parse_granule_source
from zagg.sources.points_config import parse_points
from zagg.sources.record import DataSource, Footprint, Source
from zagg.windows.clock import source_clock

__all__ = ["CATALOG", "DATASET", "GRANULES", "INPUT", "NO_INPUT", "SYNTHETIC", "SYNTHETIC_ID"]

#: the read unit the built-in generator is (its parameters are in the semantic hash)
SYNTHETIC_ID = "synthetic"
NO_INPUT = (
    "config key 'data_source': no input given; set 'input' (a zarr store, netCDF or Parquet "
    "file) or 'synthetic' (the built-in generator), or pass a Dataset to "
    "zagg.aggregate (or zagg.run(..., source=ds)) yourself"
)


def no_input(source: DataSource, **_) -> None:
    raise ConfigError(NO_INPUT)


def input_name(source: DataSource, ds=None) -> list[str]:
    """An input file's read unit: the file's name."""
    return [os.path.basename(str(source.input).rstrip("/"))]


def check_input(source: DataSource) -> None:
    """A local input must exist before any cluster starts (a URL is checked when opened)."""
    path = source.input
    if "://" not in path and not os.path.exists(path):
        raise ConfigError(
            f"config key 'data_source.input': {path!r} does not exist; "
            "give the path of a zarr store, netCDF or Parquet file with the points"
        )


DATASET = Source(
    name="dataset",
    key=None,
    parse=lambda raw, path: parse_points(raw, path, "dataset"),
    open=no_input,
    units=lambda source, ds: None,
    describe=lambda source: "a Dataset passed in",
    check=no_input,
)


def open_synthetic(source: DataSource, **_):
    from zagg.sources.synthetic import DEFAULT_REGION, synthetic_photons

    s = source.synthetic
    return synthetic_photons(
        int(s["points"]),
        tuple(s.get("region") or DEFAULT_REGION),
        chunk_size=int(s.get("chunk_size", 1_000_000)),
        seed=int(s.get("seed", 0)),
        noise_fraction=float(s.get("noise_fraction", 0.2)),
    )


def describe_synthetic(source: DataSource) -> str:
    s = source.synthetic
    region = s.get("region")
    return f"the built-in generator: {int(s['points']):,} points" + (
        f" in {list(region)}" if region else ""
    )


SYNTHETIC = Source(
    name="synthetic",
    key="synthetic",
    parse=lambda raw, path: parse_points(raw, path, "synthetic"),
    open=open_synthetic,
    units=lambda source, ds: [SYNTHETIC_ID],
    describe=describe_synthetic,
)


def open_input(source: DataSource, **_):
    from zagg.sources.inputs import open_input

    return open_input(source.input, source.storage_options)


INPUT = Source(
    name="input",
    key="input",
    parse=lambda raw, path: parse_points(raw, path, "input"),
    open=open_input,
    units=input_name,
    describe=lambda source: f"{source.input}",
    check=check_input,
    located=True,
)


# -- HDF5 granules ---------------------------------------------------------------------
def parse_granules(raw, path: str = "data_source", kind: str = "granules") -> DataSource:
    """A granule block: the aggregation sees ``latitude``, ``longitude``, the declared
    variables and ``time`` (from ``delta_time``), and the block's filters."""
    granules = parse_granule_source(raw, path)
    names = tuple(v.name for v in granules.variables) + granules.point_names
    time = "time" if granules.delta_time else None
    return DataSource(
        "latitude",
        "longitude",
        names + ((time,) if time else ()),
        time,
        granules.filters,
        kind,
        granules,
        clock=source_clock(raw, time, "delta_time", path),
        time_key="delta_time",
    )


def open_granules(source: DataSource, *, shards=None, shard_order=None, only=None):
    """A granule source's points (:func:`zagg.sources.granules.open_for_source`)."""
    from zagg.sources.granules import open_for_source

    return open_for_source(source.granules, shards=shards, shard_order=shard_order, only=only)


def granule_ids(source: DataSource, ds) -> list[str] | None:
    """Granules are fingerprinted by the ids their Dataset lists (``attrs["granules"]``)."""
    ids = ds.attrs.get("granules")
    return [str(g) for g in ids] if ids else None


def describe_granules(source: DataSource) -> str:
    where = source.granules.granules
    if not isinstance(where, str):
        return f"{len(where):,} granule files listed in the config"
    kind = "a catalog" if source.granules.is_catalog else "granule files"
    return f"{kind}: {where}"


def check_granules(source: DataSource) -> None:
    """Local granules must be there before any cluster starts: a missing directory, or a
    glob or catalog that lists none, is refused as the run's read would refuse it (an
    ``s3://`` prefix is listed when opened)."""
    where = source.granules.granules
    if isinstance(where, str) and where.startswith("s3://"):
        return
    from zagg.sources.granules import list_granules

    list_granules(source.granules)


GRANULES = Source(
    name="granules",
    key="granules",
    parse=parse_granules,
    open=open_granules,
    units=granule_ids,
    describe=describe_granules,
    check=check_granules,
    located=True,
)


def catalog_footprints(source: DataSource, shard_order: int, shards=None):
    """Per catalogued granule the shards its footprint touches and its ``delta_time`` range;
    None when the footprints are coarser than the shards."""
    import numpy as np

    from zagg import grid as G
    from zagg.sources.catalog import select
    from zagg.sources.granules import catalog_entries

    catalog = catalog_entries(source.granules)
    if catalog.order < shard_order:
        return None
    if shards is not None:
        catalog = select(catalog, shards, shard_order=shard_order)
    out = []
    for e in catalog:
        if not e.footprint:
            continue
        words = np.unique(G.ancestor(G.from_decimal(list(e.footprint)), shard_order))
        span = None
        if e.delta_time_min is not None and e.delta_time_max is not None:
            span = (e.delta_time_min, e.delta_time_max)
        out.append(Footprint(e.id, tuple(G.to_decimal(words)), span))
    return out


CATALOG = Source(
    name="catalog",
    key="granules",
    accepts=lambda value: isinstance(value, str) and is_catalog(value),
    parse=lambda raw, path: parse_granules(raw, path, "catalog"),
    open=open_granules,
    units=granule_ids,
    describe=describe_granules,
    footprints=catalog_footprints,
    check=check_granules,
    located=True,
)
