"""HDF5 storage chunks read and decoded outside h5py, so that reads run on every core.

h5py serialises every call under one process-wide lock, decompression included, so threads
of one process read HDF5 one at a time. Here h5py is used only for metadata, when a granule
is opened: :func:`layout_of` records how a dataset is stored (chunk shape, filter pipeline,
fill value) and :func:`chunk_index` where each storage chunk lies in the file (byte offset,
size, filter mask). A read task then fetches exactly those byte ranges (``os.pread`` for a
local file, concurrent ranged GETs through s3fs for ``s3://``) and inflates them with
:mod:`zlib`, which releases the GIL: reads of one process proceed in parallel, each chunk
is decompressed once, and the bytes read are the chunks' stored bytes.

Datasets whose pipeline holds a filter other than deflate and shuffle (szip, scale-offset,
fletcher32, plugins), and compact or external layouts, are read through h5py instead (a
``fallback`` layout): correct, but serialised under h5py's lock.
"""

from __future__ import annotations

import os
import zlib
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from zagg.errors import ZaggError

__all__ = [
    "FetchSettings",
    "Layout",
    "chunk_index",
    "decode_chunk",
    "fetch_ranges",
    "float_fill",
    "layout_of",
    "read_direct",
]

FILTER_DEFLATE = 1
FILTER_SHUFFLE = 2
DIRECT_FILTERS = {FILTER_DEFLATE: "deflate", FILTER_SHUFFLE: "shuffle"}
#: chunk-index columns: first row, first column, byte offset, stored size, filter mask
INDEX_COLUMNS = ("row", "col", "offset", "size", "mask")


@dataclass(frozen=True)
class FetchSettings:
    """How byte ranges are fetched: ranges closer than ``max_gap`` bytes are read as one,
    no single request exceeds ``request_size`` bytes (unless one chunk is larger), and up
    to ``concurrency`` ranged GETs of one read task are in flight at once on S3.
    ``metadata_block_size`` is the s3fs block size h5py reads metadata through."""

    max_gap: int = 64 << 10
    request_size: int = 8 << 20
    concurrency: int = 16
    metadata_block_size: int = 1 << 20


@dataclass(frozen=True)
class Layout:
    """How one HDF5 dataset is stored. ``chunks`` is the storage chunk shape (None for
    contiguous data at byte ``offset``; an unallocated one has ``offset`` None and reads as
    ``fill``). ``filters`` are the pipeline's filter ids in write order. ``fallback`` says
    why the dataset must be read through h5py (None: read directly). ``nan_fill`` is the
    ``_FillValue`` attribute of a float dataset (as ICESat-2 products declare it), whose
    values readers turn into NaN."""

    path: str
    dtype: str
    shape: tuple[int, ...]
    chunks: tuple[int, ...] | None
    filters: tuple[int, ...]
    fill: object
    offset: int | None = None
    fallback: str | None = None
    nan_fill: float | None = None  # a float dataset's finite _FillValue, read as NaN

    @property
    def rows(self) -> int:
        return self.shape[0] if self.shape else 0

    @property
    def chunk_rows(self) -> int:
        """Rows per storage chunk (all rows for contiguous data)."""
        return self.chunks[0] if self.chunks else max(self.rows, 1)

    @property
    def row_bytes(self) -> int:
        return int(np.dtype(self.dtype).itemsize * np.prod(self.shape[1:], dtype=np.int64))


def layout_of(dset) -> Layout:
    """The :class:`Layout` of an open h5py dataset (metadata only)."""
    import h5py

    dcpl = dset.id.get_create_plist()
    kind = dcpl.get_layout()
    filters = tuple(int(dcpl.get_filter(i)[0]) for i in range(dcpl.get_nfilters()))
    fill = dset.fillvalue
    common = {
        "path": dset.name,
        "dtype": dset.dtype.str,
        "shape": tuple(dset.shape),
        "filters": filters,
        "fill": fill.item() if hasattr(fill, "item") else fill,
        "nan_fill": float_fill(dset),
    }
    fallback = None
    if dcpl.get_external_count():
        fallback = "external storage"
    elif kind == h5py.h5d.CHUNKED:
        unknown = [f for f in filters if f not in DIRECT_FILTERS]
        if unknown:
            fallback = f"HDF5 filter(s) {unknown} (only deflate and shuffle are read directly)"
        return Layout(chunks=tuple(dset.chunks), fallback=fallback, **common)
    elif kind == h5py.h5d.CONTIGUOUS:
        offset = dset.id.get_offset()
        return Layout(chunks=None, offset=None if offset is None else int(offset), **common)
    else:
        fallback = "compact or virtual layout"
    return Layout(chunks=tuple(dset.chunks) if dset.chunks else None, fallback=fallback, **common)


def float_fill(dset) -> float | None:
    """A float dataset's finite ``_FillValue`` attribute, else None."""
    if dset.dtype.kind != "f" or "_FillValue" not in dset.attrs:
        return None
    fill = np.asarray(dset.attrs["_FillValue"]).ravel()
    return float(fill[0]) if fill.size and np.isfinite(fill[0]) else None


def chunk_index(dset, layout: Layout) -> np.ndarray:
    """Every allocated storage chunk of a chunked dataset as int64 rows of
    :data:`INDEX_COLUMNS`, sorted by first row and column (an empty index otherwise)."""
    if layout.chunks is None or layout.fallback is not None or not layout.rows:
        return np.zeros((0, len(INDEX_COLUMNS)), np.int64)
    out = []

    def add(info):
        off = info.chunk_offset
        out.append(
            (off[0], off[1] if len(off) > 1 else 0, info.byte_offset, info.size, info.filter_mask)
        )

    dset.id.chunk_iter(add)
    index = np.asarray(out, dtype=np.int64).reshape(-1, len(INDEX_COLUMNS))
    return index[np.lexsort((index[:, 1], index[:, 0]))]


def rows_of(index: np.ndarray, layout: Layout, start: int, stop: int) -> np.ndarray:
    """The entries of ``index`` holding any of rows ``start:stop``."""
    if not index.size:
        return index
    first = index[:, 0]
    keep = (first < stop) & (first + layout.chunk_rows > start)
    return index[keep]


# --------------------------------------------------------------------------- fetching


def _plan_requests(offsets: np.ndarray, sizes: np.ndarray, settings: FetchSettings):
    """Merged byte ranges ``(start, stop)`` covering every (offset, size), and per range
    the indices it serves: neighbours closer than ``max_gap`` share one request while it
    stays within ``request_size``."""
    order = np.argsort(offsets, kind="stable")
    ranges, members = [], []
    for i in order.tolist():
        lo, hi = int(offsets[i]), int(offsets[i] + sizes[i])
        if (
            ranges
            and lo - ranges[-1][1] <= settings.max_gap
            and hi - ranges[-1][0] <= settings.request_size
        ):
            ranges[-1][1] = max(ranges[-1][1], hi)
            members[-1].append(i)
        else:
            ranges.append([lo, hi])
            members.append([i])
    return ranges, members


def fetch_ranges(
    href: str, offsets, sizes, storage_options: Mapping | None, settings: FetchSettings
) -> tuple[list, int]:
    """The bytes at each (offset, size) of ``href`` and the number of bytes fetched.

    A local file is read with ``os.pread`` (no Python-level buffering, the GIL released);
    an ``s3://`` object with concurrent ranged GETs (``cat_ranges``) through s3fs, or over
    HTTPS for an archive granule read so (:func:`zagg.sources.remote_file.remote_filesystem`),
    never whole unless every range together covers it.
    """
    offsets = np.asarray(offsets, dtype=np.int64)
    sizes = np.asarray(sizes, dtype=np.int64)
    if not offsets.size:
        return [], 0
    ranges, members = _plan_requests(offsets, sizes, settings)
    if href.startswith("s3://"):
        from zagg.sources.remote_file import remote_filesystem

        fs, url = remote_filesystem(href, storage_options)
        blobs = fs.cat_ranges(
            [url] * len(ranges),
            [r[0] for r in ranges],
            [r[1] for r in ranges],
            batch_size=settings.concurrency,
            on_error="raise",
        )
    else:
        path = href[len("file://") :] if href.startswith("file://") else href
        fd = os.open(path, os.O_RDONLY)
        try:
            blobs = [os.pread(fd, r[1] - r[0], r[0]) for r in ranges]
        finally:
            os.close(fd)
    out = [None] * offsets.size
    fetched = 0
    for (lo, hi), idx, blob in zip(ranges, members, blobs, strict=True):
        if len(blob) != hi - lo:
            raise OSError(
                f"bytes {lo}:{hi} of {href}: got {len(blob)} bytes, expected "
                f"{hi - lo} (the file is shorter than its metadata says)"
            )
        view = memoryview(blob)
        fetched += len(blob)
        for i in idx:
            a = int(offsets[i]) - lo
            out[i] = view[a : a + int(sizes[i])]
    return out, fetched


# --------------------------------------------------------------------------- decoding


def _unshuffle(data, itemsize: int) -> bytes:
    if itemsize == 1:
        return data
    buf = np.frombuffer(data, np.uint8)
    n = buf.size // itemsize
    body = buf[: n * itemsize].reshape(itemsize, n).T.tobytes()
    return body + bytes(buf[n * itemsize :])  # a trailing remainder is stored as is


def decode_chunk(raw, layout: Layout, mask: int) -> np.ndarray:
    """One stored chunk's array (the full chunk shape): the pipeline's filters undone in
    reverse order, skipping those the chunk's ``mask`` marks as not applied."""
    data = raw
    itemsize = np.dtype(layout.dtype).itemsize
    for i in range(len(layout.filters) - 1, -1, -1):
        if mask & (1 << i):
            continue
        f = layout.filters[i]
        if f == FILTER_DEFLATE:
            data = zlib.decompress(data)
        elif f == FILTER_SHUFFLE:
            data = _unshuffle(data, itemsize)
    shape = layout.chunks
    want = int(np.prod(shape, dtype=np.int64)) * itemsize
    if len(data) != want:
        raise ValueError(
            f"a decoded chunk holds {len(data)} bytes, expected {want} for chunk shape {shape}"
        )
    return np.frombuffer(data, dtype=np.dtype(layout.dtype)).reshape(shape)


class ChunkError(ZaggError, ValueError):
    """A stored chunk that cannot be decoded; ``rows`` are the rows it holds."""

    def __init__(self, msg: str, rows: tuple[int, int]):
        super().__init__(msg)
        self.rows = rows


def read_direct(
    href: str,
    layout: Layout,
    index: np.ndarray,
    start: int,
    stop: int,
    storage_options: Mapping | None,
    settings: FetchSettings,
) -> tuple[np.ndarray, int]:
    """Rows ``start:stop`` of a dataset read without h5py, in its stored dtype, and the
    bytes fetched. ``index`` holds (at least) the chunk entries of those rows; rows of
    unallocated chunks read as the dataset's fill value."""
    dtype = np.dtype(layout.dtype)
    n = stop - start
    tail = layout.shape[1:]
    if layout.chunks is None:  # contiguous: one byte range of whole rows
        if layout.offset is None or n <= 0:
            return np.full((max(n, 0),) + tail, layout.fill, dtype), 0
        rb = layout.row_bytes
        [blob], fetched = fetch_ranges(
            href, [layout.offset + start * rb], [n * rb], storage_options, settings
        )
        return np.frombuffer(blob, dtype).reshape((n,) + tail).copy(), fetched
    if n <= 0:
        return np.zeros((0,) + tail, dtype), 0
    entries = rows_of(index, layout, start, stop)
    rows_per = layout.chunk_rows
    first, last = start // rows_per, (min(stop, layout.rows) - 1) // rows_per
    per_row = int(
        np.prod([-(-s // c) for s, c in zip(tail, layout.chunks[1:], strict=True)], dtype=np.int64)
    )
    complete = entries.shape[0] == (last - first + 1) * per_row
    # every chunk allocated: nothing to pre-fill; else never-written chunks read as fill
    out = np.empty((n,) + tail, dtype) if complete else np.full((n,) + tail, layout.fill, dtype)
    blobs, fetched = fetch_ranges(href, entries[:, 2], entries[:, 3], storage_options, settings)
    for (row, col, _, _, mask), raw in zip(entries.tolist(), blobs, strict=True):
        lo, hi = max(row, start), min(row + rows_per, stop, layout.rows)
        try:
            chunk = decode_chunk(raw, layout, mask)
        except (zlib.error, ValueError) as exc:
            raise ChunkError(f"{type(exc).__name__}: {exc}", (row, row + rows_per)) from None
        if tail:
            width = min(layout.chunks[1], tail[0] - col)
            out[lo - start : hi - start, col : col + width] = chunk[lo - row : hi - row, :width]
        else:
            out[lo - start : hi - start] = chunk[lo - row : hi - row]
    return out, fetched
