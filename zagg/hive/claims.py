"""One writer at a time on what a leaf shares with other writers: a claim object beside it.

A leaf without versions is rewritten in place (clear, template, arrays, stamp), so two runs
writing it at once could interleave their objects. Before it clears anything, the writer
creates ``{id}.zarr.claim.json`` beside the leaf with an atomic exclusive create (a
conditional PUT on an object store) and deletes it after the leaf and what is derived from
it are written. A second writer finds the claim and is refused with the holder named,
instead of racing.

A versioned leaf (the default) needs no claim for its arrays: every writer writes a version
of its own. Its unversioned siblings (the stats and granule sidecars, the pyramid column)
are another matter: they are rewritten in place, so the writer takes the same claim for
them only, waiting (:func:`holding`) while another writer holds it, and writes them only if
its version is still the one the leaf's pointer names.

A claim records how long it may be held (``ttl_s``); an older one is a writer that died
holding it, and is taken over. Two writers taking over one stale claim at the same moment
can both succeed (the store has no conditional delete): the residual of the scheme, as for
the pyramid sweep's lease.
"""

from __future__ import annotations

import contextlib
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass

from zagg.hive.storage import StoreRoot, dumps_json

CLAIM_SPEC = "zagg-leaf-claim/1"
CLAIM_TTL_S = 600.0  # a leaf write that has held its claim this long is presumed dead
SIBLINGS_TTL_S = 120.0  # the same, for the sidecars and column of a versioned leaf


class LeafHeldError(RuntimeError):
    """Another live run is writing this (unversioned) leaf."""


@dataclass(frozen=True)
class Claim:
    key: str
    token: str


def claim_key(leaf: str) -> str:
    return f"{leaf}.claim.json"


def claim_leaf(root: StoreRoot, leaf: str, run_id: str | None, *,
               ttl_s: float = CLAIM_TTL_S) -> Claim:
    """Take the leaf's claim for this writer, or raise :class:`LeafHeldError`."""
    key = claim_key(leaf)
    token = uuid.uuid4().hex
    body = dumps_json({"spec": CLAIM_SPEC, "run_id": run_id, "token": token,
                       "claimed_at": time.time(), "ttl_s": float(ttl_s)})
    if root.create(key, body):
        return Claim(key, token)
    try:
        held = root.read_json(key) or {}
    except ValueError:  # not a claim anyone could hold (claims are created whole)
        held = {}
    if not isinstance(held, dict):
        held = {}
    age = time.time() - float(held.get("claimed_at") or 0.0)
    if age < float(held.get("ttl_s") or CLAIM_TTL_S):
        raise LeafHeldError(
            f"leaf {root.url_of(leaf)} is being written by run {held.get('run_id')!r} (claimed "
            f"{age:.0f} s ago): two runs may not write one leaf at once without leaf versions. "
            "Wait for that run, or write with output.leaf_versions: true (the default), which "
            f"lets concurrent runs each write a version of their own; a claim older than "
            f"{float(held.get('ttl_s') or CLAIM_TTL_S):.0f} s is taken over")
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


@contextlib.contextmanager
def holding(root: StoreRoot, leaf: str, run_id: str | None, *,
            ttl_s: float = SIBLINGS_TTL_S) -> Iterator[Claim]:
    """Hold the leaf's claim for the ``with`` block, waiting while another writer holds
    it (a live holder releases it within its ``ttl_s``, a dead one is taken over then)."""
    delay = 0.01
    while True:
        try:
            claim = claim_leaf(root, leaf, run_id, ttl_s=ttl_s)
            break
        except LeafHeldError:
            time.sleep(delay)
            delay = min(2 * delay, 0.25)
    try:
        yield claim
    finally:
        release(root, claim)
