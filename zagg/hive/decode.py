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

from ..filled import filled
from .cells import BINBYTES, PICKLE_HEAD, PICKLE_TAIL, empty_items, unpickled_items
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
    out = filled(n, dtype, fill)
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
    """Object array of every cell's payload from the vlen inner chunks (None: all empty).

    A vlen frame is u32 length ‖ payload per cell; a pickle BINBYTES item is one opcode byte
    then the same u32 length and payload. So each frame becomes part of a pickle stream of
    a tuple of byte strings by inserting one byte per cell, and one unpickling makes every
    cell's ``bytes`` object in C (see :meth:`RaggedCells.payloads`)."""
    zstd = zstandard.ZstdDecompressor()
    frames = {}
    for k, chunk in enumerate(chunks):
        if chunk is None:
            continue
        try:
            frames[k] = np.frombuffer(zstd.decompress(chunk), dtype=np.uint8)
        except zstandard.ZstdError as exc:
            raise CorruptChunkError(f"{where}: inner chunk {k} is not a zstd frame: {exc}") \
                from exc
    n = len(chunks) * per
    size = sum(f.size for f in frames.values())
    stream = np.empty(len(PICKLE_HEAD) + size + 2 * n + len(PICKLE_TAIL), dtype=np.uint8)
    stream[: len(PICKLE_HEAD)] = np.frombuffer(PICKLE_HEAD, np.uint8)
    o = len(PICKLE_HEAD)
    for k in range(len(chunks)):
        frame = frames.get(k)
        o = empty_items(stream, o, per) if frame is None else _frame_items(frame, per, stream, o)
        if o < 0:
            raise CorruptChunkError(f"{where}: inner chunk {k} is not a vlen frame of {per} "
                                    "cells")
    stream[o : o + len(PICKLE_TAIL)] = np.frombuffer(PICKLE_TAIL, np.uint8)
    return unpickled_items(stream, o + len(PICKLE_TAIL), n)


@numba.njit(cache=True, nogil=True)
def _u32(data, o):
    return (np.int64(data[o]) | (np.int64(data[o + 1]) << 8) | (np.int64(data[o + 2]) << 16)
            | (np.int64(data[o + 3]) << 24))


@numba.njit(cache=True, nogil=True)
def _frame_items(frame, per, out, o):
    """Append the ``per`` cells of one vlen frame to the pickle stream ``out[o:]`` as
    BINBYTES items; returns the new position, or -1 for a malformed frame."""
    if frame.size < 4 or _u32(frame, 0) != per:
        return -1
    i = 4
    for _ in range(per):
        if i + 4 > frame.size:
            return -1
        n = _u32(frame, i)
        if i + 4 + n > frame.size:
            return -1
        out[o] = BINBYTES
        out[o + 1 : o + 5 + n] = frame[i : i + 4 + n]
        o += 5 + n
        i += 4 + n
    return o if i == frame.size else -1
