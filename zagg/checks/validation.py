"""The checks every part of a config shares: one error type and the helpers that raise it.

Config parsing, storage credentials, dataset checks and the granule sources all validate
pieces of one YAML document, so they refuse in one voice: a :class:`ConfigError` whose
message starts with the key path, says what was wrong and what would be valid, and offers a
close match for a misspelt name.
"""

from __future__ import annotations

import difflib
import math
from collections.abc import Mapping

from zagg.errors import ZaggError
from zagg.grid import MAX_ORDER


class ConfigError(ZaggError, ValueError):
    """A configuration that zagg refuses; the message names the key and the fix."""


def fail(path: str, msg: str):
    """Raise the :class:`ConfigError` of key ``path``."""
    raise ConfigError(f"config key '{path}': {msg}")


def did_you_mean(value, choices) -> str:
    """`` (did you mean 'x'?)`` for the closest of ``choices``, or an empty string."""
    hint = difflib.get_close_matches(str(value), [str(c) for c in choices], n=1)
    return f" (did you mean '{hint[0]}'?)" if hint else ""


def check_keys(block: Mapping, allowed, path: str, required=()) -> None:
    """Refuse a block that is not a mapping, holds a key outside ``allowed`` or lacks one
    of ``required``."""
    if not isinstance(block, Mapping):
        fail(path, f"expected a mapping, got {type(block).__name__} {block!r}")
    for key in block:
        if key not in allowed:
            where = f"{path}.{key}" if path else str(key)
            fail(
                where,
                f"unknown key{did_you_mean(key, allowed)}; valid keys here: "
                f"{', '.join(sorted(allowed))}",
            )
    for key in required:
        if key not in block:
            fail(f"{path}.{key}" if path else key, "is required but missing")


def check_name(value, path: str) -> str:
    """A non-empty variable name."""
    if not isinstance(value, str) or not value.strip():
        fail(path, f"expected a non-empty variable name, got {value!r}")
    return value


def check_order(value, path: str) -> int:
    """A HEALPix order 0..MAX_ORDER."""
    if isinstance(value, bool) or not isinstance(value, int):
        fail(path, f"expected an integer order 0..{MAX_ORDER}, got {value!r}")
    if not 0 <= value <= MAX_ORDER:
        fail(path, f"order {value} is outside 0..{MAX_ORDER}")
    return value


_UNITS = {
    "": 1,
    "b": 1,
    "kib": 1024,
    "mib": 1024**2,
    "gib": 1024**3,
    "tib": 1024**4,
    "kb": 1000,
    "mb": 1000**2,
    "gb": 1000**3,
}


#: the largest size any knob takes (bytes; the int64 sizes numpy and the OS count in)
MAX_BYTES = 2**63 - 1


def parse_bytes(value, path: str) -> int:
    """A positive, finite size: bytes, or text such as ``'2GiB'`` or ``'512 MiB'``; at
    most :data:`MAX_BYTES` (``'inf'``, ``'1e400'`` are refused, not overflowed)."""
    size = None
    if isinstance(value, int) and not isinstance(value, bool) and value > 0:
        size = value
    elif isinstance(value, str):
        s = value.strip().lower().replace(" ", "")
        num = s.rstrip("kmgtib")
        unit = s[len(num) :]
        try:
            x = float(num)
        except ValueError:
            x = None
        if unit in _UNITS and x is not None and x > 0:
            if not math.isfinite(x) or x * _UNITS[unit] > MAX_BYTES:
                fail(path, f"{value!r} is not a usable size: at most {MAX_BYTES} bytes (8 EiB)")
            size = int(x * _UNITS[unit])
    if size is not None and size > MAX_BYTES:
        fail(path, f"{value!r} is not a usable size: at most {MAX_BYTES} bytes (8 EiB)")
    if size is not None and size > 0:
        return size
    fail(path, f"{value!r} is not a positive size; use bytes or e.g. '2GiB', '512MiB'")
