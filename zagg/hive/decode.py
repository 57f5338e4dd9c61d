"""Decode a leaf array straight from its chunk objects, for the layouts the spec fixes.

zarr-python decodes a shard with one asyncio task per inner chunk: about 50 ms for one
array of an order-17 leaf of 256 inner chunks, which made reading a store far slower than
writing it. A leaf array of the P0 format is simple enough to decode directly:

- 1-D, one regular chunk per leaf (sharded: ``c/0`` holds the inner chunks back to back,
  then K (offset, nbytes) u64 pairs, 2^64 − 1 twice for an absent chunk, and the index's
  crc32c) or K chunk objects ``c/{k}`` (unsharded; a missing object is all fill);
- dense chains ``[bytes(little)]``, ragged chains ``[vlen-bytes, zstd]`` (a u32 cell
  count, then u32 length ‖ payload per cell).

:func:`layout` recognises exactly those layouts from the array's ``zarr.json`` and returns
``None`` for anything else, so callers fall back to zarr-python. :func:`read_array` decodes
a whole array; :func:`read_cells` only the given cells, fetching the shard index and the
inner chunks holding them as byte ranges (spec §1.5 "Subtree spans": never a whole-array
sweep). The tests hold both decoders equal to zarr-python on every store they write.
"""

from __future__ import annotations

import math
import struct

import google_crc32c
import numba
import numpy as np
import zstandard

from zagg.errors import ZaggError

VLEN = "variable_length_bytes"
#: the zagg-ragged/2 typed data type: the spec's name, and the reference package's
TYPED_VLEN = ("vlen-ndarray", "ndarray")
_VLEN_CHAINS = (["vlen-bytes", "zstd"], ["vlen-ndarray", "zstd"])  # identical chunk bytes
ABSENT = 0xFFFFFFFFFFFFFFFF  # an absent inner chunk's offset and size in a shard index
_DENSE_CHAIN = [{"name": "bytes", "configuration": {"endian": "little"}}]
_INDEX_CHAIN = [{"name": "bytes", "configuration": {"endian": "little"}}, {"name": "crc32c"}]
_FLOAT_FILLS = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}
_GAP = 1 << 16  # byte ranges closer than this are fetched as one


def typed_element(data_type) -> dict | None:
    """The ``{dtype, shape: [-1, *inner]}`` element of a zagg-ragged/2 typed data type
    (``{"name": "vlen-ndarray", "configuration": {"dtype", "shape": [null, *inner]}}``),
    or None when ``data_type`` is not one."""
    if not isinstance(data_type, dict) or data_type.get("name") not in TYPED_VLEN:
        return None
    conf = data_type.get("configuration")
    if not isinstance(conf, dict) or not isinstance(conf.get("shape"), list):
        return None
    shape = conf["shape"]
    if not shape or shape[0] not in (None, -1) or None in shape[1:]:
        return None
    return {"dtype": str(conf.get("dtype")), "shape": [-1, *(int(d) for d in shape[1:])]}


class CorruptChunkError(ZaggError, ValueError):
    """A chunk object that does not decode as its array's metadata says."""


def layout(meta: dict):
    """``(cells, cells per inner chunk, sharded, dtype or None for vlen, fill)``, or None."""
    shape = meta.get("shape")
    grid = meta.get("chunk_grid") or {}
    keys = meta.get("chunk_key_encoding") or {}
    if (
        meta.get("zarr_format") != 3
        or meta.get("node_type") != "array"
        or not isinstance(shape, list)
        or len(shape) != 1
        or meta.get("storage_transformers")
        or grid.get("name") != "regular"
        or keys.get("name") != "default"
        or (keys.get("configuration") or {}).get("separator", "/") != "/"
    ):
        return None
    n = shape[0]
    chunk = (grid.get("configuration") or {}).get("chunk_shape")
    codecs = meta.get("codecs") or []
    sharded = len(codecs) == 1 and codecs[0].get("name") == "sharding_indexed"
    if sharded:
        conf = codecs[0].get("configuration") or {}
        if (
            chunk != [n]
            or conf.get("index_codecs") != _INDEX_CHAIN
            or conf.get("index_location", "end") != "end"
        ):
            return None
        inner = conf.get("chunk_shape")
        codecs = conf.get("codecs") or []
    else:
        inner = chunk
    if not isinstance(inner, list) or len(inner) != 1 or not inner[0] or n % inner[0]:
        return None
    per = inner[0]
    data_type = meta.get("data_type")
    if data_type == VLEN or typed_element(data_type) is not None:
        names = [c.get("name") for c in codecs]
        if names not in _VLEN_CHAINS:
            return None
        return n, per, sharded, None, None
    if codecs != _DENSE_CHAIN or not isinstance(data_type, str):
        return None
    try:
        dtype = np.dtype(data_type).newbyteorder("<")
    except TypeError:
        return None
    if dtype.kind not in "biuf":
        return None
    fill = meta.get("fill_value")
    fill = _FLOAT_FILLS.get(fill, fill) if dtype.kind == "f" else fill
    if not isinstance(fill, (bool, int, float)):
        return None  # e.g. a hex-encoded NaN payload: leave it to zarr
    return n, per, sharded, dtype, fill


def read_layout(root, key: str):
    """The :func:`layout` of the array at ``key`` (None: absent or unknown)."""
    meta = root.read_json(f"{key}/zarr.json")
    return layout(meta) if isinstance(meta, dict) else None


# -- whole arrays ------------------------------------------------------------------------
def read_array(root, key: str, found=None) -> np.ndarray | None:
    """The decoded array at ``key`` (a folder holding ``zarr.json``) of a StoreRoot: a
    numpy array, or an object array of ``bytes`` (``b""`` where empty) for a vlen array;
    ``None`` when its layout is not one this module knows (use zarr-python then).
    ``found`` is its :func:`layout` when the caller has read ``zarr.json`` already."""
    if found is None:
        found = read_layout(root, key)
    if found is None:
        return None
    n, per, _sharded, dtype, fill = found
    chunks = inner_chunks(root, key, found)
    if dtype is None:
        out = np.full(n, b"", dtype=object)
        for k, chunk in enumerate(chunks):
            if chunk is not None:
                out[k * per : (k + 1) * per] = vlen_payloads(chunk, per, key, k)
        return out
    out = np.full(n, fill, dtype=dtype)
    for k, chunk in enumerate(chunks):
        if chunk is not None:
            out[k * per : (k + 1) * per] = dense_values(chunk, per, dtype, key, k)
    return out


def inner_chunks(root, key: str, found) -> list:
    """The stored (still encoded) inner chunk objects of the array at ``key``, in chunk
    order, None where absent; ``found`` is its :func:`layout`."""
    n, per, sharded, _, _ = found
    n_inner = n // per
    if not sharded:
        return [root.read_bytes(f"{key}/c/{k}") for k in range(n_inner)]
    obj = root.read_bytes(f"{key}/c/0")
    if obj is None:
        return [None] * n_inner
    index = _parse_index(
        obj[-16 * n_inner - 4 :] if len(obj) >= 16 * n_inner + 4 else obj, n_inner, f"{key}/c/0"
    )
    view = memoryview(obj)
    out: list = []
    for k, (off, nbytes) in enumerate(index.tolist()):
        if off == ABSENT and nbytes == ABSENT:
            out.append(None)
        elif off + nbytes > len(obj) - 16 * n_inner - 4:
            raise CorruptChunkError(f"{key}/c/0: inner chunk {k} runs past the shard's data")
        else:
            out.append(view[off : off + nbytes])
    return out


# -- chosen cells ------------------------------------------------------------------------
def read_cells(root, key: str, found, ranks: np.ndarray) -> np.ndarray:
    """The values of the cells ``ranks`` (ascending) of the array at ``key`` (``found``:
    its :func:`layout`), reading only the inner chunks that hold them: the shard index
    (one suffix range) and those chunks' byte ranges, or the unsharded chunk objects.

    Dense arrays come back in their dtype (the fill where a chunk is absent); vlen arrays
    as an object array of ``bytes`` (``b""`` for an empty cell)."""
    n, per, _sharded, dtype, fill = found
    ranks = np.asarray(ranks, dtype=np.int64)
    if ranks.size and (ranks[0] < 0 or ranks[-1] >= n):
        raise ValueError(f"{key}: cell ranks must lie in [0, {n})")
    chunk_of = ranks // per
    wanted, starts = np.unique(chunk_of, return_index=True)
    bounds = np.append(starts, ranks.size)
    chunks = fetch_chunks(root, key, found, wanted)
    if dtype is None:
        out = np.full(ranks.size, b"", dtype=object)
    else:
        out = np.full(ranks.size, fill, dtype=dtype)
    for i, k in enumerate(wanted.tolist()):
        chunk = chunks.get(k)
        if chunk is None:
            continue
        lo, hi = int(bounds[i]), int(bounds[i + 1])
        local = ranks[lo:hi] - k * per
        if dtype is None:
            out[lo:hi] = vlen_payloads(chunk, per, key, k, local)
        else:
            out[lo:hi] = dense_values(chunk, per, dtype, key, k)[local]
    return out


def fetch_chunks(root, key: str, found, wanted: np.ndarray) -> dict[int, bytes]:
    """The encoded inner chunks ``wanted`` (ascending chunk ordinals) that are stored, by
    ordinal. Sharded: one suffix read for the index, then the chunks' byte ranges in one
    batch (neighbours fetched as one range); unsharded: the chunk objects."""
    n, per, sharded, _, _ = found
    n_inner = n // per
    if not len(wanted):
        return {}
    if not sharded:
        keys = [f"{key}/c/{k}" for k in wanted.tolist()]
        return {
            k: v
            for k, v in zip(wanted.tolist(), read_objects(root, keys), strict=True)
            if v is not None
        }
    where = f"{key}/c/0"
    suffix = read_suffix(root, where, 16 * n_inner + 4)
    if suffix is None:
        return {}
    index = _parse_index(suffix, n_inner, where)
    offsets, sizes = index[wanted, 0], index[wanted, 1]
    present = ~((offsets == ABSENT) & (sizes == ABSENT))
    ks, offsets, sizes = (
        wanted[present],
        offsets[present].astype(np.int64),
        sizes[present].astype(np.int64),
    )
    if not ks.size:
        return {}
    runs = _coalesce(offsets, sizes)
    blobs = read_ranges(root, where, [(a, b) for a, b, _, _ in runs])
    out: dict[int, bytes] = {}
    for (start, end, i0, i1), blob in zip(runs, blobs, strict=True):
        if len(blob) != end - start:
            raise CorruptChunkError(
                f"{where}: inner chunks {ks[i0]}..{ks[i1 - 1]} run past the shard's data"
            )
        view = memoryview(blob)
        for i in range(i0, i1):
            a = int(offsets[i]) - start
            out[int(ks[i])] = view[a : a + int(sizes[i])]
    return out


def _coalesce(offsets: np.ndarray, sizes: np.ndarray) -> list[tuple[int, int, int, int]]:
    """``(start, end, first, last + 1)`` byte ranges covering the chunks (in ordinal order,
    which is their byte order in zagg's shards); chunks less than :data:`_GAP` apart share
    one range."""
    runs = []
    i0 = 0
    start, end = int(offsets[0]), int(offsets[0] + sizes[0])
    for i in range(1, offsets.size):
        a, b = int(offsets[i]), int(offsets[i] + sizes[i])
        if end <= a <= end + _GAP:
            end = b
            continue
        runs.append((start, end, i0, i))
        i0, start, end = i, a, b
    runs.append((start, end, i0, offsets.size))
    return runs


def _parse_index(suffix: bytes, n_inner: int, where: str) -> np.ndarray:
    size = 16 * n_inner
    if len(suffix) < size + 4:
        raise CorruptChunkError(
            f"{where}: {len(suffix)} bytes cannot hold the index of {n_inner} inner chunks"
        )
    raw = bytes(suffix[-size - 4 : -4])
    if google_crc32c.value(raw) != struct.unpack("<I", bytes(suffix[-4:]))[0]:
        raise CorruptChunkError(f"{where}: the shard index fails its crc32c")
    return np.frombuffer(raw, dtype="<u8").reshape(n_inner, 2)


# -- byte access on a StoreRoot ------------------------------------------------------------
def _full(root, key: str) -> str:
    return f"{root.path}/{key}"


def read_suffix(root, key: str, nbytes: int) -> bytes | None:
    """The last ``nbytes`` of an object (all of it when shorter), None when absent."""
    try:
        return root.fs.cat_file(_full(root, key), start=-nbytes)
    except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
        return None


def read_ranges(root, key: str, ranges: list[tuple[int, int]]) -> list[bytes]:
    """Byte ranges ``[start, end)`` of one object, fetched concurrently on object stores."""
    if len(ranges) == 1:
        start, end = ranges[0]
        return [root.fs.cat_file(_full(root, key), start=start, end=end)]
    path = _full(root, key)
    out = root.fs.cat_ranges(
        [path] * len(ranges), [a for a, _ in ranges], [b for _, b in ranges], on_error="raise"
    )
    return list(out)


def read_objects(root, keys: list[str]) -> list[bytes | None]:
    """Several whole objects (None where absent), fetched concurrently on object stores."""
    if root.is_local or len(keys) == 1:
        return [root.read_bytes(k) for k in keys]
    paths = [_full(root, k) for k in keys]
    got = root.fs.cat(paths, on_error="return")
    out = []
    for p in paths:
        v = got.get(p)
        out.append(None if v is None or isinstance(v, BaseException) else v)
    return out


# -- chunk decoding ------------------------------------------------------------------------
def dense_values(chunk, per: int, dtype: np.dtype, key: str, k: int) -> np.ndarray:
    """The ``per`` values of one encoded dense inner chunk (chain ``[bytes(little)]``)."""
    if len(chunk) != per * dtype.itemsize:
        raise CorruptChunkError(
            f"{key}: inner chunk {k} holds {len(chunk)} bytes, "
            f"{per} cells of {dtype} need {per * dtype.itemsize}"
        )
    return np.frombuffer(chunk, dtype=dtype)


def vlen_frame(chunk, key: str, k: int) -> bytes:
    """The vlen frame of one encoded ragged inner chunk (its zstd stream decompressed)."""
    try:
        return zstandard.ZstdDecompressor().decompress(bytes(chunk))
    except zstandard.ZstdError as exc:
        raise CorruptChunkError(f"{key}: inner chunk {k} is not a zstd frame: {exc}") from exc


def vlen_payloads(chunk, per: int, key: str, k: int, local=None) -> list[bytes]:
    """Payloads of the cells ``local`` (all ``per`` cells by default) of one encoded ragged
    inner chunk, ``b""`` where empty."""
    frame = vlen_frame(chunk, key, k)
    starts, lengths = frame_cells(frame, per, key, k)
    if local is not None:
        starts, lengths = starts[local], lengths[local]
    return [frame[s : s + n] for s, n in zip(starts.tolist(), lengths.tolist(), strict=True)]


def frame_cells(frame: bytes, per: int, key: str, k: int) -> tuple[np.ndarray, np.ndarray]:
    """``(payload start, payload length)`` of each of the ``per`` cells of a vlen frame
    (u32 cell count, then u32 length ‖ payload per cell); a malformed frame raises."""
    starts = np.empty(per, np.int64)
    lengths = np.empty(per, np.int64)
    if not _frame_cells(np.frombuffer(frame, np.uint8), per, starts, lengths):
        raise CorruptChunkError(f"{key}: inner chunk {k} is not a vlen frame of {per} cells")
    return starts, lengths


@numba.njit(cache=True, nogil=True)
def _u32(data, o):
    return (
        np.int64(data[o])
        | (np.int64(data[o + 1]) << 8)
        | (np.int64(data[o + 2]) << 16)
        | (np.int64(data[o + 3]) << 24)
    )


@numba.njit(cache=True, nogil=True)
def _frame_cells(frame, per, starts, lengths):
    i = np.int64(4)  # typed like every later offset: _u32 compiles once
    if frame.size < 4 or _u32(frame, i - 4) != per:
        return False
    for c in range(per):
        if i + 4 > frame.size:
            return False
        n = _u32(frame, i)
        if i + 4 + n > frame.size:
            return False
        starts[c] = i + 4
        lengths[c] = n
        i += 4 + n
    return i == frame.size
