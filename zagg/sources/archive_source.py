"""A search of NASA's archive as a registered source: ``data_source.granules: {search:
{...}}``.

A search is a catalog (:mod:`zagg.sources.archive_search`): it parses as a granule block
whose location is the :class:`~zagg.sources.archive_query.Search`, opens and fingerprints
its granules as any granule source does, and gives the re-run gate their footprints before
anything is read, as a catalog file does. Its check runs the search before any cluster
starts, so an empty result or an unreachable catalogue is one line and nothing is written;
its plan line says what the search found.
"""

from __future__ import annotations

from collections.abc import Mapping

from zagg.sources.builtin import catalog_footprints, granule_ids, open_granules, parse_granules
from zagg.sources.record import DataSource, Source

__all__ = ["SEARCH", "describe_search", "found"]


def found(source: DataSource):
    """The catalog of what the source's search finds (asked once per process)."""
    from zagg.sources.archive_search import search_catalog

    return search_catalog(source.granules.granules)


def describe_search(source: DataSource) -> str:
    """The plan's ``inputs`` line: the query, what it found and how it will be read."""
    from dask.utils import format_bytes

    from zagg.sources.archive_access import ARCHIVE_KEY
    from zagg.sources.archive_query import describe

    catalog = found(source)
    sizes = [e.size for e in catalog]
    size = format_bytes(sum(sizes)) if None not in sizes else "size unknown"
    access = catalog.storage_options[ARCHIVE_KEY]["access"]
    how = "directly from S3" if access == "s3" else "over HTTPS"
    return (
        f"a search of NASA's archive ({describe(source.granules.granules)}): "
        f"{len(catalog):,} granules, {size}, read {how}"
    )


SEARCH = Source(
    name="search",
    key="granules",
    accepts=lambda value: isinstance(value, Mapping) and "search" in value,
    parse=lambda raw, path: parse_granules(raw, path, "search"),
    open=open_granules,
    units=granule_ids,
    describe=describe_search,
    check=found,
    footprints=catalog_footprints,
    located=True,  # --catalog (a catalog the search wrote, say) or --granules replace it
)
