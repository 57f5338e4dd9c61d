"""One writer per legacy leaf: a claim object beside the leaf while a run writes it.

A leaf without versions is rewritten in place (clear, template, arrays, stamp), so two runs
writing it at once could interleave their objects. Before it clears anything, the writer
creates ``{id}.zarr.claim.json`` beside the leaf with an atomic exclusive create (a
conditional PUT on an object store) and deletes it after the stamp. A second writer finds
the claim and is refused with the holder named, instead of racing. A claim older than
:data:`CLAIM_TTL_S` is a writer that died mid-leaf: it is taken over. Versioned leaves
(the default) need no claim: every writer writes a version of its own.
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass

from zagg.hive.storage import StoreRoot, dumps_json

CLAIM_SPEC = "zagg-leaf-claim/1"
CLAIM_TTL_S = 600.0  # a leaf write that has held its claim this long is presumed dead


class LeafHeldError(RuntimeError):
    """Another live run is writing this (unversioned) leaf."""


@dataclass(frozen=True)
class Claim:
    key: str
    token: str


def claim_key(leaf: str) -> str:
    return f"{leaf}.claim.json"


def claim_leaf(root: StoreRoot, leaf: str, run_id: str | None) -> Claim:
    """Take the leaf's claim for this writer, or raise :class:`LeafHeldError`."""
    key = claim_key(leaf)
    token = uuid.uuid4().hex
    body = dumps_json({"spec": CLAIM_SPEC, "run_id": run_id, "token": token,
                       "claimed_at": time.time()})
    if root.create(key, body):
        return Claim(key, token)
    try:
        held = root.read_json(key) or {}
    except ValueError:  # a torn claim: its writer died while writing it
        held = {}
    age = time.time() - float(held.get("claimed_at") or 0.0)
    if age < CLAIM_TTL_S:
        raise LeafHeldError(
            f"leaf {root.url_of(leaf)} is being written by run {held.get('run_id')!r} (claimed "
            f"{age:.0f} s ago): two runs may not write one leaf at once without leaf versions. "
            "Wait for that run, or write with output.leaf_versions: true (the default), which "
            f"lets concurrent runs each write a version of their own; a claim older than "
            f"{CLAIM_TTL_S:.0f} s is taken over")
    root.delete(key)  # stale: its writer is gone
    if not root.create(key, body):
        raise LeafHeldError(f"leaf {root.url_of(leaf)}: another writer took over its stale "
                            "claim at the same moment; run again once it is done")
    return Claim(key, token)


def release(root: StoreRoot, claim: Claim) -> None:
    """Give the claim up, unless another writer took it over meanwhile."""
    try:
        held = root.read_json(claim.key) or {}
    except ValueError:
        held = {}
    if held.get("token") == claim.token:
        root.delete(claim.key)
