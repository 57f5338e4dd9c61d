"""One writer at a time on what a leaf shares with other writers: a claim object beside it.

A leaf without versions is rewritten in place (clear, template, arrays, stamp), so two runs
writing it at once could interleave their objects. Before it clears anything, the writer
creates ``{id}.zarr.claim.json`` beside the leaf with an atomic exclusive create (a
conditional PUT on an object store) and deletes it after the leaf and what is derived from
it are written. A second writer finds the claim and is refused with the holder named,
instead of racing.

A versioned leaf (the default) needs no claim for its arrays: every writer writes a version
of its own. Its pointer and its unversioned siblings (the stats and granule sidecars, the
pyramid column) are another matter: the writer takes the same claim for those only,
waiting (:func:`wait_for`) while another writer holds it, so the writer whose pointer
lands last also writes the siblings last.

A claim records how long it may be held (``ttl_s``); an older one is a writer that died
holding it, and is taken over. It also records the host and process of its writer, so a
writer on the same host takes over at once a claim whose process is gone (a run killed
mid-write, then run again, does not wait out the ttl). Two writers taking over one stale claim at the same moment
can both succeed (the store has no conditional delete): the residual of the scheme, as for
the pyramid sweep's lease.
"""

from __future__ import annotations

import contextlib
import os
import socket
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass

from zagg.errors import ZaggError
from zagg.hive.storage import StoreRoot, dumps_json

CLAIM_SPEC = "zagg-leaf-claim/1"
CLAIM_TTL_S = 600.0  # a leaf write that has held its claim this long is presumed dead
PUBLISH_TTL_S = 120.0  # the same, for a versioned leaf's pointer, sidecars and column


class LeafHeldError(ZaggError, RuntimeError):
    """Another live run is writing this (unversioned) leaf."""


@dataclass(frozen=True)
class Claim:
    key: str
    token: str
    taken: float = 0.0  # time.monotonic() when it was taken
    ttl_s: float = CLAIM_TTL_S


def claim_key(leaf: str) -> str:
    return f"{leaf}.claim.json"


def claim_leaf(
    root: StoreRoot, leaf: str, run_id: str | None, *, ttl_s: float = CLAIM_TTL_S
) -> Claim:
    """Take the leaf's claim for this writer, or raise :class:`LeafHeldError`."""
    key = claim_key(leaf)
    token = uuid.uuid4().hex
    body = dumps_json(
        {
            "spec": CLAIM_SPEC,
            "run_id": run_id,
            "token": token,
            "claimed_at": time.time(),
            "ttl_s": float(ttl_s),
            "host": process_host(),
            "pid": os.getpid(),
        }
    )
    if root.create(key, body):
        return Claim(key, token, time.monotonic(), float(ttl_s))
    try:
        held = root.read_json(key) or {}
    except ValueError:  # not a claim anyone could hold (claims are created whole)
        held = {}
    if not isinstance(held, dict):
        held = {}
    age = time.time() - float(held.get("claimed_at") or 0.0)
    if age < float(held.get("ttl_s") or CLAIM_TTL_S) and not holder_gone(held):
        raise LeafHeldError(
            f"leaf {root.url_of(leaf)} is being written by run {held.get('run_id')!r} (claimed "
            f"{age:.0f} s ago): two runs may not write one leaf at once without leaf versions. "
            "Wait for that run, or write with output.leaf_versions: true (the default), which "
            f"lets concurrent runs each write a version of their own; a claim older than "
            f"{float(held.get('ttl_s') or CLAIM_TTL_S):.0f} s is taken over"
        )
    root.delete(key)  # stale: its writer is gone
    if not root.create(key, body):
        raise LeafHeldError(
            f"leaf {root.url_of(leaf)}: another writer took over its stale "
            "claim at the same moment; run again once it is done"
        )
    return Claim(key, token, time.monotonic(), float(ttl_s))


def process_host() -> str:
    """Where this process's ids mean something: the host name and its pid namespace (two
    containers of one name do not share process ids)."""
    try:
        space = os.readlink("/proc/self/ns/pid")
    except OSError:
        space = ""
    return f"{socket.gethostname()}/{space}"


def holder_gone(held: dict) -> bool:
    """Whether a claim's writer is known to be dead: a process of this host that no
    longer runs (or is a zombie). A claim from another host is alive until its ttl."""
    pid = held.get("pid")
    if held.get("host") != process_host() or not isinstance(pid, int) or pid <= 0:
        return False
    if pid == os.getpid():
        return False  # this process: a live writer of its own
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except OSError:  # another user's live process
        return False
    try:  # a killed process nobody has reaped yet still answers signal 0
        with open(f"/proc/{pid}/stat", encoding="ascii") as f:
            return f.read().rsplit(")", 1)[1].split()[0] in ("Z", "X")
    except (OSError, IndexError):
        return False


def release(root: StoreRoot, claim: Claim) -> None:
    """Give the claim up, unless another writer took it over meanwhile (possible only once
    it has been held past its ttl: only then is it read back first)."""
    if time.monotonic() - claim.taken < 0.9 * claim.ttl_s:
        root.delete(claim.key)
        return
    try:
        held = root.read_json(claim.key) or {}
    except ValueError:
        held = {}
    if held.get("token") == claim.token:
        root.delete(claim.key)


def wait_for(
    root: StoreRoot, leaf: str, run_id: str | None, *, ttl_s: float = PUBLISH_TTL_S
) -> Claim:
    """Take the leaf's claim, waiting while another writer holds it (a live holder gives
    it back within its ``ttl_s``; a dead one's is taken over then)."""
    delay = 0.01
    while True:
        try:
            return claim_leaf(root, leaf, run_id, ttl_s=ttl_s)
        except LeafHeldError:
            time.sleep(delay)
            delay = min(2 * delay, 0.25)


@contextlib.contextmanager
def holding(
    root: StoreRoot, leaf: str, run_id: str | None, *, ttl_s: float = PUBLISH_TTL_S
) -> Iterator[Claim]:
    """Hold the leaf's claim for the ``with`` block (see :func:`wait_for`)."""
    claim = wait_for(root, leaf, run_id, ttl_s=ttl_s)
    try:
        yield claim
    finally:
        release(root, claim)
