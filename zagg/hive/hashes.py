"""O11 content hashes (spec §5): per-array sha256 over decoded values, plus a combined hash.

Fixed-width arrays hash their little-endian C-order bytes at the declared dtype. Vlen
(object) arrays hash, cell by cell in flat C order, ``u64_le(len(payload)) || payload``;
the length prefix makes the digest injective and ``None`` hashes exactly like ``b""``.
The combined hash is sha256 over the sorted per-array hex digests joined by ``"\\n"``.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping

import numpy as np

_LEN = 8  # bytes of the vlen length prefix
_BLOCK = 1 << 16  # cells hashed per numpy block


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


def array_digest(values: np.ndarray) -> str:
    """The §5.2 hex digest of one array's full decoded contents."""
    values = np.asarray(values)
    if values.dtype.kind == "O":
        return _vlen_digest(values.ravel(order="C"))
    if values.dtype.kind in "USV":
        raise TypeError(f"arrays of dtype {values.dtype} have no content-hash recipe")
    values = np.ascontiguousarray(values)
    if values.dtype.byteorder == ">":
        values = values.astype(values.dtype.newbyteorder("<"))
    return hashlib.sha256(values.tobytes()).hexdigest()


def _vlen_digest(cells: np.ndarray) -> str:
    """sha256 over ``u64_le(len) || payload`` per cell, assembled in blocks with numpy."""
    if not set(map(type, cells)) <= {bytes}:
        cells = [element_bytes(element) for element in cells]
    digest = hashlib.sha256()
    for start in range(0, len(cells), _BLOCK):
        block = cells[start : start + _BLOCK]
        lengths = np.fromiter(map(len, block), dtype="<u8", count=len(block))
        payload = np.frombuffer(b"".join(block), dtype=np.uint8)
        stream = np.empty(_LEN * len(block) + payload.size, dtype=np.uint8)
        starts = _LEN * np.arange(len(block), dtype=np.int64)
        starts[1:] += np.cumsum(lengths[:-1].astype(np.int64))
        prefix = starts[:, None] + np.arange(_LEN, dtype=np.int64)
        is_payload = np.ones(stream.size, dtype=bool)
        is_payload[prefix.ravel()] = False
        stream[prefix.ravel()] = lengths.view(np.uint8)
        stream[is_payload] = payload
        digest.update(stream.tobytes())
    return digest.hexdigest()


def combined_digest(digests: Mapping[str, str] | list[str]) -> str:
    """sha256 over the sorted per-array hex digests joined by newlines (names excluded)."""
    values = digests.values() if isinstance(digests, Mapping) else digests
    return hashlib.sha256("\n".join(sorted(values)).encode("ascii")).hexdigest()


def content_hashes(arrays: Mapping[str, np.ndarray]) -> dict:
    """The structured record ``{"arrays": {key: hex}, "combined": hex}``, keys sorted.

    ``arrays`` is keyed by the path relative to the leaf root (``"6/count"``).
    """
    if "combined" in arrays:
        raise ValueError("'combined' is reserved in content_hashes and cannot name an array")
    per_array = {key: array_digest(arrays[key]) for key in sorted(arrays)}
    return {"arrays": per_array, "combined": combined_digest(per_array)}
