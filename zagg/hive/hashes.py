"""O11 content hashes (spec §5): per-array sha256 over decoded values, plus a combined hash.

Fixed-width arrays hash their little-endian C-order bytes at the declared dtype. Vlen
(object) arrays hash, cell by cell in flat C order, ``u64_le(len(payload)) || payload``;
the length prefix makes the digest injective and ``None`` hashes exactly like ``b""``.
The combined hash is sha256 over the sorted per-array hex digests joined by ``"\\n"``.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping

import numba
import numpy as np

_LEN = 8  # bytes of the vlen length prefix


def element_bytes(element: object) -> bytes:
    """The bytes a vlen cell contributes; anything outside the §5.2 table raises."""
    if element is None:
        return b""
    if isinstance(element, bytes | bytearray | memoryview):
        return bytes(element)
    if isinstance(element, str):
        return element.encode("utf-8")
    if isinstance(element, np.ndarray):
        values = np.ascontiguousarray(element)
        if values.dtype.byteorder == ">":
            values = values.astype(values.dtype.newbyteorder("<"))
        return values.tobytes()
    raise TypeError(
        f"a vlen cell of type {type(element).__name__} has no content-hash recipe: store bytes, "
        "str or ndarray payloads (None and b'' mean an empty cell)"
    )


def array_digest(values: np.ndarray, lengths: np.ndarray | None = None) -> str:
    """The §5.2 hex digest of one array's full decoded contents.

    For a vlen array whose cells are all bytes, ``lengths`` (each cell's payload length)
    may be passed to skip measuring them again.
    """
    values = np.asarray(values)
    if values.dtype.kind == "O":
        return _vlen_digest(np.ascontiguousarray(values.ravel(order="C")), lengths)
    if values.dtype.kind in "USV":
        raise TypeError(f"arrays of dtype {values.dtype} have no content-hash recipe")
    values = np.ascontiguousarray(values)
    if values.dtype.byteorder == ">":
        values = values.astype(values.dtype.newbyteorder("<"))
    return hashlib.sha256(_buffer(values)).hexdigest()


def _buffer(values: np.ndarray) -> memoryview:
    """A zero-copy byte view of a contiguous array (hashing never copies the array)."""
    return memoryview(values.reshape(-1).view(np.uint8)) if values.size else memoryview(b"")


def _vlen_digest(cells: np.ndarray, lengths: np.ndarray | None) -> str:
    """sha256 over ``u64_le(len) || payload`` per cell, assembled in blocks with numpy.

    Cells are sorted by type in numpy's loops: ``None`` and ``bytes`` (a decoded leaf's
    cells, mostly empty) are measured there, and only cells of other types pass through
    :func:`element_bytes` one by one; a run of empty cells is 8 zero bytes each.
    """
    if lengths is None:
        kinds = _type_of(cells) if cells.size else np.empty(0, dtype=object)
        plain = np.equal(kinds, bytes)
        other = np.flatnonzero(~(plain | np.equal(kinds, type(None))))
        lengths = np.zeros(cells.size, dtype=np.int64)
        if plain.any():
            lengths[plain] = _len_of(cells[plain]).astype(np.int64)
        payload = cells.copy()
        if other.size:
            converted = [element_bytes(c) for c in cells[other].tolist()]
            lengths[other] = np.fromiter(map(len, converted), dtype=np.int64, count=other.size)
            payload[other] = np.fromiter(converted, dtype=object, count=other.size)
        filled = np.flatnonzero(lengths)
        payloads = payload[filled].tolist()
    else:
        filled = np.flatnonzero(lengths)
        payloads = cells[filled].tolist()
    return hashlib.sha256(_buffer(vlen_stream(lengths, filled, payloads))).hexdigest()


#: each cell's type and length, in numpy's loops rather than Python's
_type_of = np.frompyfunc(type, 1, 1)
_len_of = np.frompyfunc(len, 1, 1)


@numba.njit(cache=True, nogil=True)
def _fill_stream(stream, heads, filled, lengths, body):
    at = 0
    for k in range(filled.size):
        i = filled[k]
        h = heads[i]
        n = lengths[i]
        for b in range(8):
            stream[h + b] = (n >> (8 * b)) & 0xFF
        stream[h + 8 : h + 8 + n] = body[at : at + n]
        at += n


def vlen_stream(lengths: np.ndarray, filled: np.ndarray, payloads: list) -> np.ndarray:
    """The hashed byte stream: ``u64_le(len) || payload`` for every cell, in order.

    An empty cell is 8 zero bytes of the zero-initialised buffer; only occupied cells
    (``filled``, with their ``payloads``) are copied in, by a compiled loop.
    """
    lengths = np.asarray(lengths, dtype=np.int64)
    heads = _LEN * np.arange(lengths.size, dtype=np.int64)
    heads[1:] += np.cumsum(lengths[:-1])
    stream = np.zeros(_LEN * lengths.size + int(lengths.sum()), dtype=np.uint8)
    if len(payloads):
        body = np.frombuffer(b"".join(payloads), dtype=np.uint8)
        _fill_stream(stream, heads, np.asarray(filled, np.int64), lengths, body)
    return stream


def combined_digest(digests: Mapping[str, str] | list[str]) -> str:
    """sha256 over the sorted per-array hex digests joined by newlines (names excluded)."""
    values = digests.values() if isinstance(digests, Mapping) else digests
    return hashlib.sha256("\n".join(sorted(values)).encode("ascii")).hexdigest()


def content_hashes(
    arrays: Mapping[str, np.ndarray], lengths: Mapping[str, np.ndarray] | None = None
) -> dict:
    """The structured record ``{"arrays": {key: hex}, "combined": hex}``, keys sorted.

    ``arrays`` is keyed by the path relative to the leaf root (``"6/count"``).
    """
    if "combined" in arrays:
        raise ValueError("'combined' is reserved in content_hashes and cannot name an array")
    lengths = lengths or {}
    per_array = {key: array_digest(arrays[key], lengths.get(key)) for key in sorted(arrays)}
    return {"arrays": per_array, "combined": combined_digest(per_array)}
