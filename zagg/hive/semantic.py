"""The semantic hash: an opaque digest of the config's leaf-shaping core, compared for equality.

Canonicalization (ours, documented in docs/store-format.md): the core dict is serialized as
JSON with keys sorted at every level, no whitespace (``","`` and ``":"`` separators), UTF-8
without ASCII escaping, tuples as lists, and NaN/Infinity refused; the digest is the
lowercase hex sha256 of those bytes. Which keys enter the core is the caller's decision.
"""

from __future__ import annotations

import hashlib
import json


def canonical_json(core: dict) -> bytes:
    """The canonical byte form of ``core`` that :func:`semantic_hash` digests."""
    if not isinstance(core, dict):
        raise TypeError(f"the semantic core must be a dict, got {type(core).__name__}")
    try:
        text = json.dumps(
            core, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
        )
    except (TypeError, ValueError) as exc:
        raise ValueError(
            f"the semantic core is not canonical JSON ({exc}); use str/int/float/bool/None, "
            "lists and dicts with string keys, and finite numbers"
        ) from exc
    return text.encode("utf-8")


def semantic_hash(core: dict) -> str:
    """Lowercase hex sha256 of :func:`canonical_json` of ``core``."""
    return hashlib.sha256(canonical_json(core)).hexdigest()
