"""The registry of sources: every kind of points is one :class:`~zagg.sources.record.Source`
record (its fields and their contracts: :mod:`zagg.sources.record`), registered here as the
reducers are in theirs.

A config's ``data_source`` block is parsed by the record it selects
(:func:`parse_data_source`): the record whose ``key`` the block holds, those with an
``accepts`` test on the key's value tried first (a catalog before plain granules, a Parquet
input before zarr/netCDF), the latest registered first among equals; a block holding none of
the records' keys is a Dataset handed in (the ``dataset`` record). A run then asks only the
record (:func:`of`): ``open`` for the points, ``units`` for the re-run gate's fingerprints,
``footprints`` for planning units before reading, ``describe`` and ``check`` for the plan.

Adding a source is one module: define its record and register it::

    from zagg.sources.record import DataSource, Source
    from zagg.sources.registry import register

    register(Source(name="mine", key="mine", parse=..., open=..., units=..., describe=...))

Import that module before a config naming its key is loaded (a plug-in is registered when
its module runs); on a cluster of worker processes, the functions its Dataset's tasks call
must live in a module the workers can import too. A source reading HDF5 granules it finds
elsewhere (an archive's search) can build on the granule record's pieces:
:func:`zagg.sources.builtin.parse_granules` for the block and
:func:`zagg.sources.granules.open_for_source` with the granules it found.

The built-ins (:mod:`zagg.sources.builtin`, :mod:`zagg.sources.parquet`) are registered when
this module is imported.
"""

from __future__ import annotations

from collections.abc import Mapping

from zagg.checks.validation import fail
from zagg.sources import archive_source, builtin, parquet
from zagg.sources.record import DataSource, Source

__all__ = ["REGISTRY", "get", "of", "parse_data_source", "register", "select", "unregister"]

REGISTRY: dict[str, Source] = {}


def register(source: Source, *, replace: bool = False) -> Source:
    """Make ``source`` available to configs (``data_source.<source.key>``). Refuses to shadow
    a registered name unless ``replace``."""
    if not isinstance(source, Source):
        raise TypeError(f"register() needs a Source, got {type(source).__name__}")
    if source.name in REGISTRY and not replace:
        raise ValueError(
            f"a source named {source.name!r} is already registered; pick another name or "
            "pass replace=True"
        )
    if source.key is None and any(
        s.key is None and s.name != source.name for s in REGISTRY.values()
    ):
        raise ValueError("only one source may be the fallback (key None)")
    REGISTRY.pop(source.name, None)
    REGISTRY[source.name] = source
    return source


def unregister(name: str) -> None:
    """Remove a registered source (a test's plug-in, say)."""
    REGISTRY.pop(name, None)


def get(name: str) -> Source:
    """The registered source ``name``."""
    try:
        return REGISTRY[name]
    except KeyError:
        raise KeyError(
            f"no source named {name!r} is registered; registered: {', '.join(REGISTRY)}"
        ) from None


def of(source: DataSource) -> Source:
    """The record reading a parsed data source's points."""
    return get(source.kind)


def select(raw: Mapping) -> Source:
    """The record a data_source block selects (see the module docstring)."""
    candidates = list(reversed(REGISTRY.values()))
    candidates.sort(key=lambda s: s.accepts is None)  # stable: latest first within each
    for s in candidates:
        if s.key is not None and s.key in raw and (s.accepts is None or s.accepts(raw[s.key])):
            return s
    return next(s for s in REGISTRY.values() if s.key is None)


def parse_data_source(raw, path: str = "data_source") -> DataSource:
    """Validate a ``data_source`` block by the source it selects."""
    if not isinstance(raw, Mapping):
        fail(path, f"expected a mapping, got {type(raw).__name__} {raw!r}")
    source = select(raw)
    return source.parse(raw, path)


for _source in (
    builtin.DATASET,
    builtin.SYNTHETIC,
    builtin.INPUT,
    parquet.PARQUET,
    builtin.GRANULES,
    builtin.CATALOG,
    archive_source.SEARCH,
):
    register(_source)
