"""HDF5 granules (ICESat-2 ATL03/ATL06 and similar layouts) as one lazy points Dataset.

The ``data_source`` block of a granule config names where the granules are (a directory, a
glob, an ``s3://`` prefix or a catalog file), the beam groups, and the HDF5 paths of the
coordinates and variables with ``{group}`` standing for the group; see ``docs/granules.md``.
:func:`parse_granule_source` validates that block into a :class:`GranuleSource`;
:func:`open_granules` turns it into a Dataset on one dimension ``obs`` whose dask chunks are
the read units (granule × group × row range, on storage-chunk boundaries), each read inside
its own task without h5py (:mod:`zagg.sources.chunks`), so reads run on every core. At open
time only metadata is read (dataset shapes, dtypes, attributes, where each storage chunk
lies), which is also when a corrupt file or a missing path is refused, naming the granule and
the path; under a read plan (:mod:`zagg.sources.readplan`) and a run's shards, the product's
along-track index is read too, to pick the rows the shards need. :func:`skip_damaged` leaves
out granules found damaged mid-read under ``on_error: skip``.
"""

from __future__ import annotations

import dataclasses
import glob as globmod
import math
import os
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import dask
import numpy as np
from dask.base import tokenize

if TYPE_CHECKING:
    import xarray as xr

from zagg.checks.credentials import StorageOptions
from zagg.checks.validation import ConfigError
from zagg.errors import ZaggWarning
from zagg.sources import beams
from zagg.sources.archive_access import is_archive, preflight
from zagg.sources.archive_query import Search
from zagg.sources.chunks import FetchSettings
from zagg.sources.errors import GranuleError, GranuleReadError, crashed
from zagg.sources.granule_config import (
    CATALOG_SUFFIXES,
    GRANULE_SUFFIXES,
    GranuleSource,
    GranuleVariable,
    parse_granule_source,
)
from zagg.sources.readplan import ShardCover, blocks
from zagg.sources.scan import (
    GroupShape,
    Scan,
    granule_id,
    group_prefix,
    hdf5_path,
    item_key,
    local_path,
    open_h5,
    s3_filesystem,
    scan,
    stamp_size,
)

__all__ = [
    "CATALOG_SUFFIXES",
    "GRANULE_SUFFIXES",
    "FetchSettings",
    "GranuleError",
    "GranuleReadError",
    "GranuleSource",
    "GranuleVariable",
    "StorageOptions",
    "granule_id",
    "hdf5_path",
    "list_granules",
    "open_for_config",
    "open_for_source",
    "open_granules",
    "open_h5",
    "parse_granule_source",
    "skip_damaged",
    "wants_processes",
]

DEFAULT_CHUNK = 2_000_000  # rows per dask chunk at most (a multiple of ATL03's 10000)
TIME_ATTRS = {
    "units": "seconds since 2018-01-01T00:00:00Z",
    "long_name": "GPS seconds since the ATLAS SDP epoch",
    "description": "the granules' delta_time, kept as float64 seconds; UTC is "
    "2018-01-01T00:00:00Z plus this (GPS-UTC = 18 s is inside the epoch)",
}


# --------------------------------------------------------------------------- locations


def list_granules(source: GranuleSource) -> list[str]:
    """Hrefs of the granules a source names, sorted by granule id (a catalog keeps its
    order). Refuses an empty listing and two granules with the same id."""
    loc, key = source.granules, f"{source.config_key}.granules"
    if isinstance(loc, tuple):
        hrefs = [local_path(h) for h in loc]
    elif source.is_catalog:
        hrefs = [e.href for e in catalog_entries(source)]
    elif loc.startswith("s3://"):
        hrefs = _list_s3(loc, source.storage_options, key)
    else:
        hrefs = _list_local(local_path(loc), key)
    if not hrefs:
        raise _config_error(
            key,
            f"no granule files ({', '.join(GRANULE_SUFFIXES)}) found at "
            f"{loc!r}; check the path or the glob",
        )
    if not source.is_catalog:
        hrefs = sorted(hrefs, key=granule_id)
    ids = [granule_id(h) for h in hrefs]
    dup = sorted({i for i in ids if ids.count(i) > 1})
    if dup:
        raise _config_error(
            key,
            f"granule ids (file names) must be unique, but {dup[0]!r} "
            "appears more than once; narrow the glob or the list",
        )
    return hrefs


def catalog_entries(source: GranuleSource):
    """The entries of the catalog file a source names (refused as its config key), or
    of what its search of NASA's archive finds."""
    from zagg.sources.catalog import CatalogError, read_catalog

    if isinstance(source.granules, Search):
        from zagg.sources.archive_search import search_catalog

        return search_catalog(source.granules)
    try:
        return read_catalog(source.granules, storage_options=source.storage_options)
    except CatalogError as exc:
        raise _config_error(f"{source.config_key}.granules", str(exc)) from None


def _list_local(loc: str, key: str) -> list[str]:
    """The granule files of a local directory or glob. A symlink is listed even when its
    target is gone: dropping it would lose a granule without a word, so it is read like a
    missing file named in a list (a failed granule under ``on_error: skip``, a refusal
    under ``fail``), naming it."""
    if any(c in loc for c in "*?["):
        found = globmod.glob(loc, recursive=True)
        return [
            p
            for p in found
            if p.lower().endswith(GRANULE_SUFFIXES) and (os.path.isfile(p) or os.path.islink(p))
        ]
    path = Path(loc)
    if path.is_dir():
        return [
            str(p)
            for p in path.iterdir()
            if p.suffix.lower() in GRANULE_SUFFIXES and (p.is_file() or p.is_symlink())
        ]
    if path.is_file():
        return [str(path)]
    raise _config_error(
        key,
        f"{loc!r} does not exist; give a directory, a glob, an s3:// "
        "prefix, a catalog file or a list of granule files (or pass --granules)",
    )


def _list_s3(loc: str, options: StorageOptions, key: str) -> list[str]:
    try:
        fs = s3_filesystem(options)
        bare = loc[len("s3://") :]
        if any(c in bare for c in "*?["):
            found = fs.glob(bare)
        elif bare.lower().endswith(GRANULE_SUFFIXES):
            found = [bare] if fs.exists(bare) else []
        else:
            found = fs.find(bare.rstrip("/") + "/")
    except Exception as exc:  # s3fs raises many kinds; name the place, never the credentials
        raise _config_error(key, f"cannot list {loc!r}: {options.redact(str(exc))}") from None
    return ["s3://" + p for p in found if p.lower().endswith(GRANULE_SUFFIXES)]


def _config_error(key: str, msg: str) -> ConfigError:
    return ConfigError(f"config key '{key}': {msg}")


# --------------------------------------------------------------------------- reading


def wants_processes(ds) -> bool:
    """Whether reading the granule Dataset ``ds`` (from :func:`open_granules`) needs worker
    processes of one thread each to use every core.

    Granule data are read without h5py (:mod:`zagg.sources.chunks`): threads of one process
    fetch and inflate chunks in parallel, so zagg's default cluster (threads, in one process
    on small machines) reads on every core. Only datasets that h5py must decode itself
    (filters other than deflate and shuffle, compact or external layouts: counted in
    ``ds.attrs["h5py_datasets"]``) serialise on h5py's lock, and only then do processes
    read faster.
    """
    return bool(ds.attrs.get("h5py_datasets"))


def open_for_config(cfg, *, shards=None, only=None) -> xr.Dataset:
    """The granules of a config (``cfg.data_source.granules``) for a run over ``shards``
    (decimal ids or words at the shard order; None: every shard), see
    :func:`open_for_source`."""
    return open_for_source(
        cfg.data_source.granules, shards=shards, shard_order=cfg.grid.shard_order, only=only
    )


def open_for_source(src: GranuleSource, *, shards=None, shard_order=None, only=None):
    """The granules of ``src`` for a run over ``shards`` (at ``shard_order``): a catalog
    keeps only the granules touching them, and a read plan reads only the rows that can
    reach them. ``only`` (granule ids) keeps just those granules."""
    if not (src.is_catalog or src.read_plan is not None):
        shards = None  # neither footprints nor an index to restrict the read with
    return open_granules(
        src,
        shards=shards,
        only=only,
        shard_order=shard_order if shards is not None else None,
    )


def skip_damaged(ds, use: Callable, reopen: Callable | None = None):
    """``use(ds)``, leaving out granules found damaged while reading, under ``on_error:
    skip``.

    A chunk that cannot be decoded is found only when it is read, after the Dataset's rows
    are fixed. When ``use`` fails with a :class:`GranuleReadError` and ``ds`` was opened by
    :func:`open_granules` with ``on_error: skip``, the granule is recorded in
    ``failed_granules`` like one that cannot be opened, the granules are opened again
    without it (``reopen(skip)`` if given, else as ``ds`` was opened) and ``use`` runs
    again, so no row of a damaged granule reaches the result. Otherwise the error
    propagates, naming the granule, path and rows.
    """
    recipe = ds.encoding.get("zagg_granules") if hasattr(ds, "encoding") else None
    skipped: list[dict] = []
    while True:
        try:
            return use(ds)
        except GranuleReadError as exc:
            if (
                recipe is None
                or recipe["source"].on_error != "skip"
                or exc.granule in {s["granule"] for s in skipped}
                or exc.granule not in ds.attrs.get("granules", [])
            ):
                raise
            skipped.append({"granule": exc.granule, "error": str(exc)})
            warnings.warn(
                f"granule {exc.granule!r} is damaged and left out of the run "
                f"(on_error: skip): {exc}",
                ZaggWarning,
                stacklevel=2,
            )
            if reopen is not None:
                ds = reopen(skipped)
            else:
                ds = open_granules(recipe["source"], **recipe["kwargs"], skip=skipped)


def open_granules(
    source,
    *,
    shards=None,
    shard_order: int | None = None,
    chunk_size: int = DEFAULT_CHUNK,
    skip=(),
    only=None,
) -> xr.Dataset:
    """Open the granules of ``source`` as a lazy Dataset on dimension ``obs``.

    ``source`` is a :class:`GranuleSource` or a raw ``data_source`` mapping. Variables:
    ``latitude``, ``longitude``, one per declared variable (2-D for a whole 2-D dataset,
    on dims ``(obs, {name}_column)``), ``time`` (float64 seconds since
    2018-01-01T00:00:00Z) when ``delta_time`` is set, and ``granule`` (int32 index into
    ``attrs["granules"]``). Rows run granule by granule (in id order) and group by group (in
    the configured order); every dask chunk is one read unit: at most ``chunk_size`` rows of
    one granule and group, beginning and ending on storage-chunk boundaries.

    ``shards`` (decimal ids or words, all at ``shard_order``) restricts what is read: with a
    catalog only granules whose footprint touches them are opened, and with a read plan
    (``data_source.read_plan``) only the rows whose segments can reach them are read. A
    catalogued granule whose file size differs from its entry's is refused with a
    ``CatalogError`` (rebuild the catalog), whatever ``on_error`` says. ``skip`` lists
    granules already found damaged (``{granule, error}``, see :func:`skip_damaged`): they
    are left out and recorded in ``attrs["failed_granules"]``. ``only`` (granule ids, e.g.
    those a re-run must read again) keeps just those granules.
    """
    if isinstance(chunk_size, bool) or not isinstance(chunk_size, int) or chunk_size < 1:
        raise ValueError(f"chunk_size must be a positive integer, got {chunk_size!r}")
    opened = scan_granules(source, shards=shards, shard_order=shard_order, skip=skip, only=only)
    ds = granules_dataset(opened, chunk_size)
    ds.encoding["zagg_granules"]["kwargs"].update(
        {"shards": shards, "shard_order": shard_order, "only": only}
    )
    return ds


@dataclass(frozen=True)
class Scanned:
    """The granules of a source as open time found them: their scans (readable ones, in
    id order) and those left out (``{granule, error}``)."""

    source: GranuleSource
    scans: tuple[Scan, ...]
    failed: tuple[dict, ...]


def granules_dataset(
    opened: Scanned, chunk_size: int = DEFAULT_CHUNK, pack: bool = False
) -> xr.Dataset:
    """The lazy Dataset over scanned granules (see :func:`open_granules`), with what
    reopens them in its encoding (:func:`skip_damaged`, runs in shard groups); ``pack``
    makes each dask chunk a run of read units of up to ``chunk_size`` rows."""
    failed = [dict(f) for f in opened.failed]
    ds = _dataset(opened.source, list(opened.scans), failed, chunk_size, pack)
    ds.encoding["zagg_granules"] = {
        "source": opened.source,
        "scanned": opened,
        "kwargs": {"chunk_size": chunk_size},
    }
    return ds


def scan_granules(source, *, shards=None, shard_order=None, skip=(), only=None) -> Scanned:
    """Open and scan the granules of ``source`` (arguments as :func:`open_granules`)."""
    if not isinstance(source, GranuleSource):
        source = parse_granule_source(source)
    skip = [dict(s) for s in skip]
    failed: list[dict] = []
    sizes: dict[str, int] = {}  # href -> bytes, as the catalog recorded them
    if source.is_catalog:
        from zagg.sources.catalog import select

        catalog = catalog_entries(source)
        if is_archive(catalog.storage_options):  # read as the archive's catalog says
            source = dataclasses.replace(source, storage_options=catalog.storage_options)
        if shards is not None:
            catalog = select(catalog, shards, shard_order=shard_order)
        failed += [dict(f) for f in catalog.failed]
        hrefs = []
        sizes = {e.href: e.size for e in catalog if e.size is not None}
        for e in catalog:
            if e.rows and not e.footprint:
                msg = (
                    f"granule {e.id!r}: its coordinates ({source.latitude}, "
                    f"{source.longitude}) are all NaN or fill (catalog footprint is empty)"
                )
                if source.on_error == "fail":
                    raise GranuleError(msg + "; fix or remove the granule, or set on_error: skip")
                failed.append({"granule": e.id, "error": msg})
            else:
                hrefs.append(e.href)
    else:
        if shards is not None and source.read_plan is None:
            raise _config_error(
                f"{source.config_key}.granules",
                "selecting granules by "
                "shards needs their footprints: build a catalog with "
                "zagg.sources.catalog.build_catalog and write_catalog, then "
                "point this key at the .json or .parquet file (or set "
                f"{source.config_key}.read_plan to read only the rows the "
                "shards need)",
            )
        hrefs = list_granules(source)
    skipped = {s["granule"] for s in skip}
    hrefs = [h for h in hrefs if granule_id(h) not in skipped]
    if only is not None:
        keep = set(only)
        hrefs = [h for h in hrefs if granule_id(h) in keep]
    failed += skip

    if hrefs and is_archive(source.storage_options):
        preflight(hrefs[0], source.storage_options)  # a refused login: one line, nothing read
    cover = None
    if shards is not None and source.read_plan is not None:
        cover = shard_cover(shards, shard_order, source.read_plan.margin)
    scans = _scan_all(source, hrefs, failed, cover)
    _check_sizes(source, scans, sizes)
    return Scanned(source, tuple(scans), tuple(failed))


def shard_cover(shards, shard_order: int | None, margin: float) -> ShardCover:
    """The :class:`ShardCover` of ``shards`` (decimal ids or words, all at ``shard_order``)."""
    from zagg import grid as G

    ids = [shards] if isinstance(shards, str | np.integer | int) else list(shards)
    words = (
        G.from_decimal(ids) if ids and isinstance(ids[0], str) else np.asarray(ids, dtype=np.uint64)
    )
    orders = np.unique(words & np.uint64(63)) if words.size else np.zeros(0, np.uint64)
    if orders.size > 1 or (
        shard_order is not None and orders.size and int(orders[0]) != shard_order
    ):
        raise ValueError(
            f"shards must all be cells at the shard order {shard_order}, got "
            f"orders {orders.tolist()}"
        )
    order = int(orders[0]) if orders.size else int(shard_order or 0)
    return ShardCover(words, order, margin)


def _check_sizes(source: GranuleSource, scans: list[Scan], sizes: Mapping[str, int]) -> None:
    """Refuse a granule whose file size is not the one its catalog entry records: it was
    replaced after the catalog was built, so its footprint (and times) may be wrong."""
    from zagg.sources.catalog import CatalogError

    for s in scans:
        want, got = sizes.get(s.href), stamp_size(s.href, s.stamp)
        if want is not None and got is not None and want != got:
            raise CatalogError(
                f"granule {granule_id(s.href)!r} ({s.href}) is {got} bytes but the catalog "
                f"{source.granules!r} recorded {want}: the file changed after the catalog was "
                "built, so its footprint and times may be wrong; rebuild the catalog "
                "(python -m zagg catalog ..., or build_catalog and write_catalog)"
            )


def _scan_all(
    source: GranuleSource, hrefs: list[str], failed: list[dict], cover: ShardCover | None = None
) -> list[Scan]:
    def safe(href):
        try:
            return scan(source, href, cover)
        except GranuleError as exc:
            return exc
        except BaseException as exc:  # a crash a distributed gather could not carry
            if crashed(href, exc) is None:
                raise
            return crashed(href, exc)

    results = dask.compute(*[dask.delayed(safe)(h) for h in hrefs]) if hrefs else ()
    scans = []
    for href, res in zip(hrefs, results, strict=True):
        if isinstance(res, GranuleError):
            if source.on_error == "fail":
                raise res
            failed.append({"granule": granule_id(href), "error": str(res)})
        else:
            scans.append(res)
    if source.groups and scans:
        present = {g.group for s in scans for g in s.groups}
        missing = [g for g in source.groups if g not in present]
        prefix = group_prefix(source.latitude)
        if len(missing) == len(source.groups):
            raise _config_error(
                f"{source.config_key}.groups",
                f"none of the groups {missing} "
                f"is in any of the {len(scans)} granule(s) (no {prefix!r}); check "
                "the names (ICESat-2 beams are gt1l gt1r gt2l gt2r gt3l gt3r) "
                "and the coordinate paths",
            )
        if missing and len(scans) > 1 and source.beams == "all":
            warnings.warn(
                f"{source.config_key}.groups: {missing} are in none of the "
                f"{len(scans)} granules (no {prefix!r}); a misspelt group name reads "
                "nothing",
                ZaggWarning,
                stacklevel=3,
            )
    if hrefs and not scans:
        first = failed[0]["error"] if failed else ""
        raise GranuleError(
            f"none of the {len(hrefs)} granule(s) could be read; first error: {first}"
        )
    return scans


def packed(sizes: list[int], most: int) -> list[int]:
    """Consecutive ``sizes`` summed into runs of at most ``most`` (a size over it alone)."""
    out: list[int] = []
    for n in sizes:
        if out and out[-1] + n <= most:
            out[-1] += n
        else:
            out.append(n)
    return out or [0]


def read_blocks(shape: GroupShape, chunk_size: int) -> list[tuple[int, int]]:
    """The read units of one scanned group: its needed rows (all of them without a read
    plan) in storage-chunk-aligned blocks of at most ``chunk_size`` rows."""
    runs = shape.runs if shape.runs is not None else ((0, shape.rows),)
    return blocks(runs, shape.rows, _align(shape.layouts.values()), max(chunk_size, 1))


def _align(layouts) -> int:
    """Rows a read unit's bounds are multiples of: the storage chunks' rows of every
    dataset read (their least common multiple, or the largest when that grows too big)."""
    rows = sorted({lay.chunk_rows for lay in layouts if lay.chunks})
    if not rows:
        return 1
    lcm = math.lcm(*rows)
    return lcm if lcm <= 4 * rows[-1] else rows[-1]


def _width(template: str, name: str, scans: list[Scan]) -> int | None:
    """Columns of the datasets at ``template`` (None: 1-D), refusing granules or groups
    that store it with different numbers of columns."""
    seen: dict[int | None, str] = {}
    for s in scans:
        for g in s.groups:
            lay = g.layouts.get(hdf5_path(template, g.group))
            if lay is not None:
                seen.setdefault(
                    lay.shape[1] if len(lay.shape) == 2 else None,
                    f"{granule_id(s.href)} {lay.path}",
                )
    if len(seen) > 1:
        (w1, at1), (w2, at2) = list(seen.items())[:2]
        raise GranuleError(
            f"{item_key(name)} ({template!r}) is stored with "
            f"{w1 or 'no'} columns in {at1} but {w2 or 'no'} in {at2}; every "
            "granule and group must store it alike"
        )
    return next(iter(seen), None)


POINT_ATTRS = {
    "beam": {
        "long_name": "ground track of the row's beam (gt1l 10, gt1r 20, ... gt3r 60)",
        "source_path": "group name",
    },
    "spot": {
        "long_name": "ATLAS spot of the row's beam (1..6; odd spots are strong)",
        "source_path": "/orbit_info/sc_orient",
    },
    "strong": {
        "long_name": "1 where the row's beam is strong, 0 where weak",
        "source_path": "/orbit_info/sc_orient",
    },
    "rgt": {"long_name": "reference ground track", "source_path": "/orbit_info/rgt"},
    "cycle": {"long_name": "orbital cycle", "source_path": "/orbit_info/cycle_number"},
}


def point_values(source: GranuleSource, units) -> dict[str, list[int]]:
    """Per read unit the value of each per-point variable the source offers
    (:attr:`GranuleSource.point_names`) that every granule's metadata gives: ``rgt`` and
    ``cycle`` from ``/orbit_info``, ``beam`` from the group's name, ``spot`` and ``strong``
    from the group and the granule's orientation. A variable some granule lacks the
    metadata of is left out of the Dataset."""
    out = {}
    orbits = [s.orbit for _, s, *_ in units]
    for name in source.point_names:
        if name == "beam":
            out[name] = [beams.beam_code(g.group) for _, _, g, *_ in units]
        elif name in ("spot", "strong"):
            if any(o.sc_orient not in (beams.BACKWARD, beams.FORWARD) for o in orbits):
                continue
            rule = beams.spot if name == "spot" else beams.strong
            out[name] = [int(rule(g.group, s.orbit.sc_orient)) for _, s, g, *_ in units]
        else:
            values = [getattr(o, name) for o in orbits]
            if None not in values:
                out[name] = values
    return out


def _dataset(
    source: GranuleSource,
    scans: list[Scan],
    failed: list[dict],
    chunk_size: int,
    pack: bool = False,
) -> xr.Dataset:
    """The lazy Dataset over ``scans``: per path template one array whose chunks are the
    read units (granule x group x row range), or with ``pack`` runs of consecutive units
    of up to ``chunk_size`` rows in all (many short units, as a shard group reads, cost a
    task each otherwise); variables are those arrays or columns of them, and ``granule``
    an index that never touches a file."""
    import xarray as xr

    from zagg.sources.granule_arrays import GranuleRows, Piece, TemplateArray, lazy

    items = source.items()
    dtypes: dict[str, str] = {name: np.dtype(np.float64).str for name, _, _ in items}
    attrs: dict[str, dict] = {}
    for i, s in enumerate(scans):
        for name, dt in s.dtypes.items():
            dtypes[name] = dt if i == 0 else np.result_type(dtypes[name], dt).str
        for name, a in s.attrs.items():
            attrs.setdefault(name, a)
    # one array per template (variables reading columns of one dataset share it)
    templates: dict[str, str] = {}  # template -> the first name reading it
    for name, template, _ in items:
        templates.setdefault(template, name)
    t_dtype = {
        t: np.result_type(*[dtypes[n] for n, tt, _ in items if tt == t]).str for t in templates
    }
    t_width = {t: _width(t, templates[t], scans) for t in templates}

    units = []  # (contributing index, scan, group shape, start, stop)
    contributing: list[str] = []
    h5py_paths: set[str] = set()
    for s in scans:
        groups = [g for g in s.groups if g.rows > 0 and (g.runs is None or g.runs)]
        if groups:
            contributing.append(granule_id(s.href))
        for g in groups:
            for start, stop in read_blocks(g, chunk_size):
                units.append((len(contributing) - 1, s, g, start, stop))
            h5py_paths |= {p for p, lay in g.layouts.items() if lay.fallback}
    if h5py_paths:
        warnings.warn(
            f"{len(h5py_paths)} HDF5 dataset(s) are stored with filters or layouts "
            f"only h5py decodes (e.g. {sorted(h5py_paths)[0]}): they are read "
            "through h5py, one read at a time per process",
            ZaggWarning,
            stacklevel=3,
        )
    sizes = [b - a for *_, a, b in units] or [0]
    chunks = packed(sizes, chunk_size) if pack else sizes

    token = tokenize(
        source.granules,
        source.groups,
        items,
        dtypes,
        source.storage_options,
        source.reads,
        [(s.href, s.stamp, s.groups) for s in scans],
        chunk_size,
        pack,
    )
    fail_nan = source.on_error == "fail"
    arrays = {}
    planned = {}
    for template, first in templates.items():
        pieces, fills, nbytes = [], {}, 0
        for _, s, g, start, stop in units:
            hpath = hdf5_path(template, g.group)
            layout = g.layouts[hpath]
            entries = g.index[hpath]
            if entries.size:
                keep = (entries[:, 0] < stop) & (entries[:, 0] + layout.chunk_rows > start)
                entries = entries[keep]
                nbytes += int(entries[:, 3].sum())
            elif layout.fallback is None and layout.chunks is None:
                nbytes += (stop - start) * layout.row_bytes
            fills[hpath] = layout.nan_fill
            pieces.append(Piece(s.href, granule_id(s.href), hpath, start, stop, layout, entries))
        planned[template] = nbytes
        reader = TemplateArray(
            pieces,
            t_dtype[template],
            t_width[template],
            fills,
            source.storage_options,
            source.reads,
            coordinate=template in (source.latitude, source.longitude),
            fail_all_nan=fail_nan,
        )
        if not units:
            import dask.array as da

            arrays[template] = da.zeros((0,) + reader.shape[1:], dtype=reader.dtype)
        else:
            arrays[template] = lazy(reader, chunks, f"read-granules-{first}-{token}")

    data_vars = {}
    for name, template, column in items:
        arr = arrays[template]
        if column is not None:
            arr = arr[:, column]
        dims = ("obs",) if arr.ndim == 1 else ("obs", f"{name}_column")
        arr = arr.astype(dtypes[name]) if arr.dtype != np.dtype(dtypes[name]) else arr
        a = dict(TIME_ATTRS) if name == "time" else dict(attrs.get(name, {}))
        a["source_path"] = template
        if column is not None:
            a["column"] = column
        a["stored_bytes_read"] = planned[template]
        data_vars[name] = xr.Variable(dims, arr, attrs=a)
    rows = GranuleRows(sizes if units else [], [u[0] for u in units])
    import dask.array as da

    index = lazy(rows, chunks, f"granule-index-{token}") if units else da.zeros(0, dtype=np.int32)
    data_vars["granule"] = xr.Variable(
        "obs", index, attrs={"long_name": "index of the row's granule in attrs['granules']"}
    )
    for name, values in point_values(source, units).items():
        dtype = np.dtype(beams.DTYPES[name])
        arr = (
            lazy(GranuleRows(sizes, values, dtype), chunks, f"{name}-{token}")
            if units
            else da.zeros(0, dtype=dtype)
        )
        data_vars[name] = xr.Variable("obs", arr, attrs=dict(POINT_ATTRS[name]))
    where = source.where
    return xr.Dataset(
        data_vars,
        attrs={
            "source": "zagg.sources.granules",
            "granule_source": where,
            "groups": list(source.groups or []),
            "granules": contributing,
            "failed_granules": failed,
            "index_bytes_read": int(sum(s.index_bytes for s in scans)),
            "h5py_datasets": len(h5py_paths),
        },
    )
