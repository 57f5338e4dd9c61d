"""What a source is: the :class:`Source` record every kind of points registers, and the
:class:`DataSource` a config's ``data_source`` block parses into.

A source is one record (:mod:`zagg.sources.registry` keeps them, as the reducers' registry
keeps theirs). Its fields are everything a run asks of where its points come from:

- ``name``: how the source is called (``DataSource.kind``, the plan's lines);
- ``key``: the ``data_source`` key that names its points (``granules``, ``input``,
  ``synthetic``, ...; None for the fallback, a Dataset handed to ``zagg.aggregate``);
  ``accepts(value)`` optionally narrows the record to some values of that key (a catalog is
  a ``granules`` value ending in ``.json`` or ``.parquet``);
- ``parse(raw, path) -> DataSource``: the whole block validated, every refusal a
  ``ConfigError`` naming the key path; the source's own parsed record goes in
  ``DataSource.settings``;
- ``open(source, shards=None, shard_order=None, only=None) -> xr.Dataset``: the lazy points
  Dataset (one observation dimension), restricted to the shards (decimal ids at
  ``shard_order``) when the source can skip what cannot reach them, and to the read units
  ``only`` (ids, as ``units`` gives them) when given;
- ``units(source, ds) -> list[str] | None``: the ids of the read units the points of ``ds``
  came from, the re-run gate's fingerprints (None: no identity, always rewritten). A Dataset
  whose ``attrs["granules"]`` lists ids is fingerprinted by those, whatever its source;
- ``describe(source) -> str``: the plan's ``inputs`` line;
- ``check(source)``: refusals a run makes before any cluster starts (a missing file);
- ``footprints(source, shard_order, shards) -> list[Footprint] | None``: when the source
  knows before reading which shards each read unit touches (a catalog), the re-run gate
  plans every unit first and the run reads only what it must rewrite; None: known only once
  the points are read;
- ``located``: whether the key's value is a location ``--granules`` may replace (where the
  points are read from is packaging, not identity: the key should be among the store
  spec's ``PACKAGING_SOURCE_KEYS``, as ``granules`` and ``input`` are, so a relocated run
  fills the same store).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from zagg.checks.filters import Filter
from zagg.sources.granule_config import GranuleSource

if TYPE_CHECKING:
    import xarray as xr

__all__ = ["DataSource", "Footprint", "InputFile", "Source"]


@dataclass(frozen=True)
class DataSource:
    """A parsed ``data_source`` block: the aggregation's view of the points (coordinates,
    declared variables, filters, time and clock) and the source reading them (``kind``,
    the registered record's name, and ``settings``, that record's own parsed block)."""

    latitude: str
    longitude: str
    variables: tuple[str, ...]  # declared names fields, filters and predicates may read
    time: str | None = None
    filters: tuple[Filter, ...] = ()
    kind: str = "dataset"  # the registered Source reading the points
    settings: object = field(default=None, repr=False)  # the source's own parsed block
    #: declared name → (Dataset variable, column or None); a column picks one of a 2-D one
    columns: Mapping[str, tuple[str, int | None]] = field(default_factory=dict)
    #: how the time variable counts, ``(time, epoch, scale, units)``
    #: (:mod:`zagg.windows.clock`); None: the source declares no clock
    clock: tuple[str, str, str, str] | None = None
    time_key: str = "time"  # the data_source key naming the time variable (for messages)

    def dataset_variable(self, name: str) -> str:
        return self.columns.get(name, (name, None))[0]

    @property
    def granules(self) -> GranuleSource | None:
        """The HDF5 granule block, when the points are read from granules."""
        return self.settings if isinstance(self.settings, GranuleSource) else None

    @property
    def input(self) -> str | None:
        """The points file or store (``data_source.input``), when one is read."""
        return self.settings.path if isinstance(self.settings, InputFile) else None

    @property
    def synthetic(self) -> Mapping | None:
        """The built-in generator's parameters, when the points are generated."""
        return self.settings if self.kind == "synthetic" else None

    @property
    def storage_options(self) -> Mapping:
        """The s3fs options of the points' location (credentials masked in every repr)."""
        return getattr(self.settings, "storage_options", None) or {}


@dataclass(frozen=True)
class InputFile:
    """A points file or store (``data_source.input``): its path or URL, the s3fs options of
    a URL, and for a columnar file the column holding WKB point geometries (None: the
    coordinates are the latitude and longitude columns)."""

    path: str
    storage_options: Mapping[str, object] = field(default_factory=dict, repr=False)
    geometry: str | None = None


@dataclass(frozen=True)
class Footprint:
    """Where one read unit's points are, known before it is read: its id, the shards (decimal
    ids at the run's shard order) it touches, and its time range on the source's time
    variable (None: not recorded)."""

    id: str
    shards: tuple[str, ...]
    time_range: tuple[float, float] | None = None


def _nothing(source: DataSource) -> None:
    return None


@dataclass(frozen=True)
class Source:
    """One kind of points (see the module docstring for each field's contract)."""

    name: str
    key: str | None
    parse: Callable[[Mapping, str], DataSource]
    open: Callable[..., xr.Dataset]
    units: Callable[[DataSource, xr.Dataset], list[str] | None]
    describe: Callable[[DataSource], str]
    accepts: Callable[[object], bool] | None = None
    check: Callable[[DataSource], None] = _nothing
    footprints: Callable[[DataSource, int, object], list[Footprint] | None] | None = None
    located: bool = False

    def __post_init__(self):
        if not isinstance(self.name, str) or not self.name.isidentifier():
            raise ValueError(f"a source's name must be an identifier, got {self.name!r}")
        if self.key is None and (self.accepts is not None or self.located):
            raise ValueError(f"source {self.name!r}: the fallback (key None) has no location")
