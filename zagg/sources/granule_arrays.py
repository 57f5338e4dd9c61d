"""The lazy arrays of an opened granule Dataset: one per HDF5 path template, one dask chunk
per read unit (granule × group × row range).

Each array is a small array-like (:class:`TemplateArray`) holding, per read unit, where its
rows are stored (the dataset's :class:`~zagg.sources.chunks.Layout` and the entries of the
storage chunks it covers), handed to ``dask.array.from_array`` with one chunk per read
unit. Reading a chunk is self-contained: it fetches the unit's byte ranges and decodes them
(:func:`zagg.sources.chunks.read_direct`), so it runs in any worker process or thread and
can be fused with its consumer. Variables reading columns of one 2-D dataset are column
selections of one array, so the dataset's chunks are read and decompressed once per unit.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from zagg.checks.credentials import StorageOptions
from zagg.errors import ZaggWarning
from zagg.sources.chunks import ChunkError, FetchSettings, Layout, read_direct
from zagg.sources.errors import ArchiveError, GranuleReadError

__all__ = ["GranuleRows", "Piece", "TemplateArray", "lazy"]


@dataclass(frozen=True)
class Piece:
    """One read unit of one template: rows ``start:stop`` of HDF5 dataset ``hpath`` of
    granule ``href``, stored as ``layout`` in the chunks of ``entries``."""

    href: str
    granule: str
    hpath: str
    start: int
    stop: int
    layout: Layout
    entries: np.ndarray


def _read_piece(p: Piece, options: StorageOptions, settings: FetchSettings) -> np.ndarray:
    """Rows of one piece in the stored dtype; every failure a GranuleReadError naming the
    granule, path and rows."""
    try:
        if p.layout.fallback is None:
            return read_direct(p.href, p.layout, p.entries, p.start, p.stop, options, settings)[0]
        from zagg.sources.scan import open_h5

        with open_h5(p.href, options, settings.metadata_block_size) as f:
            return np.asarray(f[p.hpath][p.start : p.stop])
    except ArchiveError:  # the archive refused this process's login: not a damaged granule
        raise
    except ChunkError as exc:
        a, b = exc.rows
        what = f"its storage chunk of rows {a}:{min(b, p.layout.rows)} cannot be decoded ({exc})"
    except Exception as exc:
        what = f"reading failed ({type(exc).__name__}: {exc})"
    msg = options.redact(
        f"granule {p.granule!r} ({p.href}): HDF5 path {p.hpath!r} rows {p.start}:{p.stop}: "
        f"{what}; the file is damaged or unreachable: fetch it again, or set "
        "data_source.on_error: skip to leave such granules out of the run"
    )
    raise GranuleReadError(msg, p.granule, p.href)


def _fill_as_nan(arr: np.ndarray, fill) -> np.ndarray:
    if arr.dtype.kind == "f" and fill is not None and np.isfinite(fill):
        hit = arr == arr.dtype.type(fill)
        if hit.any():
            if not arr.flags.writeable:
                arr = arr.copy()
            arr[hit] = np.nan
    return arr


class TemplateArray:
    """An array-like over every read unit of one path template: ``shape`` (rows, or rows ×
    columns for a 2-D dataset) and ``dtype`` as the Dataset declares them; indexing reads
    the units it touches. ``fills`` maps an HDF5 path to its float ``_FillValue`` (read as
    NaN). ``coordinate``: refuse (``fail_all_nan``) or warn about a unit whose values are
    all non-finite, since none of its points can be placed."""

    def __init__(
        self,
        pieces: list[Piece],
        dtype,
        width: int | None,
        fills: Mapping,
        storage_options: Mapping,
        settings: FetchSettings,
        coordinate: bool = False,
        fail_all_nan: bool = True,
    ):
        self.pieces = pieces
        self.bounds = np.cumsum([0] + [p.stop - p.start for p in pieces]).astype(np.int64)
        self.dtype = np.dtype(dtype)
        self.width = width
        self.shape = (int(self.bounds[-1]),) + (() if width is None else (width,))
        self.ndim = len(self.shape)
        self.fills = dict(fills)
        self.options = StorageOptions(storage_options or {})
        self.settings = settings
        self.coordinate = coordinate
        self.fail_all_nan = fail_all_nan

    def __len__(self) -> int:
        return self.shape[0]

    def read(self, i: int, start: int | None = None, stop: int | None = None) -> np.ndarray:
        """Rows ``start:stop`` (relative to the unit) of unit ``i``, as the Dataset's
        dtype with float fill values as NaN."""
        p = self.pieces[i]
        lo = p.start + (start or 0)
        hi = p.start + (p.stop - p.start if stop is None else stop)
        if (lo, hi) != (p.start, p.stop):
            p = Piece(p.href, p.granule, p.hpath, lo, hi, p.layout, p.entries)
        arr = _read_piece(p, self.options, self.settings)
        arr = _fill_as_nan(arr.astype(self.dtype, copy=False), self.fills.get(p.hpath))
        if self.width is not None and (arr.ndim != 2 or arr.shape[1] != self.width):
            raise GranuleReadError(
                f"granule {p.granule!r} ({p.href}): HDF5 path {p.hpath!r} has shape "
                f"{arr.shape[1:]} per row, expected ({self.width},)",
                p.granule,
                p.href,
            )
        if self.coordinate and hi > lo and not np.isfinite(arr).any():
            msg = (
                f"granule {p.granule!r} ({p.href}): coordinates at HDF5 path {p.hpath!r} "
                f"rows {lo}:{hi} are all NaN or fill; no point there can be placed"
            )
            if self.fail_all_nan:
                raise GranuleReadError(
                    msg + "; fix or remove the granule, or set on_error: skip", p.granule, p.href
                )
            warnings.warn(
                msg + "; its rows are dropped as invalid coordinates", ZaggWarning, stacklevel=2
            )
        return arr

    def __getitem__(self, key) -> np.ndarray:
        key = key if isinstance(key, tuple) else (key,)
        rows = key[0] if key else slice(None)
        rest = key[1:]
        if not isinstance(rows, slice):  # integer or fancy row indexing: read, then pick
            return np.concatenate(
                [self.read(i) for i in range(len(self.pieces))]
                or [np.zeros((0,) + self.shape[1:], self.dtype)]
            )[key]
        a, b, step = rows.indices(self.shape[0])
        parts = []
        first = int(np.searchsorted(self.bounds, a, side="right")) - 1
        for i in range(max(first, 0), len(self.pieces)):
            lo, hi = int(self.bounds[i]), int(self.bounds[i + 1])
            if lo >= b:
                break
            if hi <= a:
                continue
            parts.append(self.read(i, max(a, lo) - lo, min(b, hi) - lo))
        out = (
            (np.concatenate(parts) if len(parts) > 1 else parts[0])
            if parts
            else np.zeros((0,) + self.shape[1:], self.dtype)
        )
        if step != 1:
            out = out[::step]
        return out[(slice(None), *rest)] if rest else out


class GranuleRows:
    """A variable constant along each read unit, never touching a file: ``granule`` (per
    row the index of its granule), or one of a granule's per-point metadata (its beam,
    track, cycle)."""

    def __init__(self, sizes, index, dtype=np.int32):
        self.bounds = np.cumsum([0] + list(sizes)).astype(np.int64)
        self.dtype = np.dtype(dtype)
        self.index = np.asarray(index, dtype=self.dtype)
        self.shape = (int(self.bounds[-1]),)
        self.ndim = 1

    def __len__(self) -> int:
        return self.shape[0]

    def __getitem__(self, key) -> np.ndarray:
        key = key if isinstance(key, tuple) else (key,)
        rows = key[0] if key else slice(None)
        if not isinstance(rows, slice):
            return np.repeat(self.index, np.diff(self.bounds))[rows]
        a, b, step = rows.indices(self.shape[0])
        lo = np.clip(self.bounds[:-1], a, max(a, b))
        hi = np.clip(self.bounds[1:], a, max(a, b))
        return np.repeat(self.index, hi - lo)[::step]


def lazy(array_like, sizes, name: str):
    """``array_like`` as a dask array with one chunk per read unit (``sizes`` rows each)."""
    import dask.array as da

    chunks = (tuple(sizes),) + tuple((s,) for s in array_like.shape[1:])
    meta = np.empty((0,) * array_like.ndim, array_like.dtype)
    return da.from_array(
        array_like,
        chunks=chunks,
        name=name,
        inline_array=False,
        meta=meta,
        asarray=True,
        fancy=False,
    )
