"""Decode a leaf array straight from its chunk objects, for the layouts the spec fixes.

zarr-python decodes a shard with one asyncio task per inner chunk: about 50 ms for one
array of an order-17 leaf of 256 inner chunks, which made reading a store far slower than
writing it. A leaf array of the P0 format is simple enough to decode directly:

- 1-D, one regular chunk per leaf (sharded: ``c/0`` holds the inner chunks back to back,
  then K (offset, nbytes) u64 pairs, 2^64 − 1 twice for an absent chunk, and the index's
  crc32c) or K chunk objects ``c/{k}`` (unsharded; a missing object is all fill);
- dense chains ``[bytes(little)]``, ragged chains ``[vlen-bytes, zstd]`` (a u32 cell
  count, then u32 length ‖ payload per cell).

:func:`read_array` recognises exactly those layouts from the array's ``zarr.json`` and
returns ``None`` for anything else, so callers fall back to zarr-python. The tests hold
both decoders equal on every store they write.
"""

from __future__ import annotations

import math
import struct

import google_crc32c
import numba
import numpy as np
import zstandard

from .encode import ABSENT

VLEN = "variable_length_bytes"
_DENSE_CHAIN = [{"name": "bytes", "configuration": {"endian": "little"}}]
_INDEX_CHAIN = [{"name": "bytes", "configuration": {"endian": "little"}}, {"name": "crc32c"}]
_FLOAT_FILLS = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}


class CorruptChunkError(ValueError):
    """A chunk object that does not decode as its array's metadata says."""


def read_array(root, key: str, found=None) -> np.ndarray | None:
    """The decoded array at ``key`` (a folder holding ``zarr.json``) of a StoreRoot: a
    numpy array, or an object array of ``bytes`` (``b""`` where empty) for a vlen array;
    ``None`` when its layout is not one this module knows (use zarr-python then).
    ``found`` is its :func:`layout` when the caller has read ``zarr.json`` already."""
    if found is None:
        meta = root.read_json(f"{key}/zarr.json")
        found = layout(meta) if isinstance(meta, dict) else None
    if found is None:
        return None
    n, per, sharded, dtype, fill = found
    chunks = inner_chunks(root, key, found)
    if dtype is None:
        return _ragged(chunks, per, key)
    out = np.full(n, fill, dtype=dtype)
    for k, chunk in enumerate(chunks):
        if chunk is None:
            continue
        if len(chunk) != per * dtype.itemsize:
            raise CorruptChunkError(f"{key}: inner chunk {k} holds {len(chunk)} bytes, "
                                    f"{per} cells of {dtype} need {per * dtype.itemsize}")
        out[k * per : (k + 1) * per] = np.frombuffer(chunk, dtype=dtype)
    return out


def inner_chunks(root, key: str, found) -> list:
    """The stored (still encoded) inner chunk objects of the array at ``key``, in chunk
    order, None where absent; ``found`` is its :func:`layout`."""
    n, per, sharded, _, _ = found
    n_inner = n // per
    if not sharded:
        return [root.read_bytes(f"{key}/c/{k}") for k in range(n_inner)]
    obj = root.read_bytes(f"{key}/c/0")
    return [None] * n_inner if obj is None else _shard_chunks(obj, n_inner, f"{key}/c/0")


def layout(meta: dict):
    """``(cells, cells per inner chunk, sharded, dtype or None for vlen, fill)``, or None."""
    shape = meta.get("shape")
    grid = meta.get("chunk_grid") or {}
    keys = meta.get("chunk_key_encoding") or {}
    if (meta.get("zarr_format") != 3 or meta.get("node_type") != "array"
            or not isinstance(shape, list) or len(shape) != 1 or meta.get("storage_transformers")
            or grid.get("name") != "regular" or keys.get("name") != "default"
            or (keys.get("configuration") or {}).get("separator", "/") != "/"):
        return None
    n = shape[0]
    chunk = (grid.get("configuration") or {}).get("chunk_shape")
    codecs = meta.get("codecs") or []
    sharded = len(codecs) == 1 and codecs[0].get("name") == "sharding_indexed"
    if sharded:
        conf = codecs[0].get("configuration") or {}
        if (chunk != [n] or conf.get("index_codecs") != _INDEX_CHAIN
                or conf.get("index_location", "end") != "end"):
            return None
        inner = conf.get("chunk_shape")
        codecs = conf.get("codecs") or []
    else:
        inner = chunk
    if not isinstance(inner, list) or len(inner) != 1 or not inner[0] or n % inner[0]:
        return None
    per = inner[0]
    data_type = meta.get("data_type")
    if data_type == VLEN:
        names = [c.get("name") for c in codecs]
        if names != ["vlen-bytes", "zstd"]:
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


def _shard_chunks(obj: bytes, n_inner: int, where: str) -> list[bytes | None]:
    """The inner chunk objects of one shard object (None where absent)."""
    size = 16 * n_inner
    if len(obj) < size + 4:
        raise CorruptChunkError(f"{where}: {len(obj)} bytes cannot hold the index of "
                                f"{n_inner} inner chunks")
    raw = obj[-size - 4 : -4]
    if google_crc32c.value(raw) != struct.unpack("<I", obj[-4:])[0]:
        raise CorruptChunkError(f"{where}: the shard index fails its crc32c")
    index = np.frombuffer(raw, dtype="<u8").reshape(n_inner, 2)
    out: list[bytes | None] = []
    view = memoryview(obj)
    for off, nbytes in index.tolist():
        if off == ABSENT and nbytes == ABSENT:
            out.append(None)
        elif off + nbytes > len(obj) - size - 4:
            raise CorruptChunkError(f"{where}: an inner chunk runs past the shard's data")
        else:
            out.append(view[off : off + nbytes])
    return out


def _ragged(chunks, per: int, where: str) -> np.ndarray:
    """Object array of every cell's payload from the vlen inner chunks (None: all empty)."""
    zstd = zstandard.ZstdDecompressor()
    out = np.empty(len(chunks) * per, dtype=object)
    out.fill(b"")
    for k, chunk in enumerate(chunks):
        if chunk is None:
            continue
        try:
            frame = zstd.decompress(chunk)
        except zstandard.ZstdError as exc:
            raise CorruptChunkError(f"{where}: inner chunk {k} is not a zstd frame: {exc}") \
                from exc
        starts = np.empty(per + 1, np.int64)
        if not _frame_bounds(np.frombuffer(frame, dtype=np.uint8), per, starts):
            raise CorruptChunkError(f"{where}: inner chunk {k} is not a vlen frame of {per} "
                                    "cells")
        # starts[i] is where cell i's payload begins, its length the 4 bytes before it
        ends = starts[1:] - 4
        ends[-1] = len(frame)
        bounds = np.stack([starts[:-1], ends], axis=1).tolist()
        out[k * per : (k + 1) * per] = [frame[a:b] for a, b in bounds]
    return out


@numba.njit(cache=True, nogil=True)
def _u32(data, o):
    return (np.int64(data[o]) | (np.int64(data[o + 1]) << 8) | (np.int64(data[o + 2]) << 16)
            | (np.int64(data[o + 3]) << 24))


@numba.njit(cache=True, nogil=True)
def _frame_bounds(frame, per, starts):
    """Where each of the ``per`` cells of one vlen frame starts (``starts[i]``; a cell runs
    to the next one's length word, the last to the frame's end); False for a malformed
    frame."""
    if frame.size < 4 or _u32(frame, 0) != per:
        return False
    i = 4
    for c in range(per):
        if i + 4 > frame.size:
            return False
        n = _u32(frame, i)
        if i + 4 + n > frame.size:
            return False
        starts[c] = i + 4
        i += 4 + n
    starts[per] = i + 4
    return i == frame.size
