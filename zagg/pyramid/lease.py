"""The sweep-admission lease (spec §4.8): one ``sweep.lease.json`` serialises a store's sweeps.

Admission is one exclusive create of the store-root intent object: ``O_CREAT | O_EXCL``
on a local store, a conditional PUT (``If-None-Match: *``, s3fs's ``mode="create"``) on
S3. A live lease refuses a second sweep naming its holder; one whose ``heartbeat_at`` is
older than its ``ttl_s`` is claimed (deleted, then created again under the same exclusive
create, ``claimed_from`` naming the dead run), and the claimant completes the prior run's
work under the generation ratchet. The holder beats between the ladder's waves and
deletes the lease as its last act. Control plane only: no data object is ever locked.
"""

from __future__ import annotations

import os
import secrets
from dataclasses import dataclass, field
from datetime import UTC, datetime

from zagg.errors import ZaggError
from zagg.hive.stamp import now_iso
from zagg.hive.storage import StoreRoot, dumps_json

LEASE_KEY = "sweep.lease.json"
LEASE_SPEC = "zagg-sweep-lease/1"
DEFAULT_TTL = 900


class SweepRefused(ZaggError, RuntimeError):
    """Another sweep holds the store's admission lease."""


def new_run_id() -> str:
    """A sweep's identity: ``stage-{UTC timestamp}-{6 hex}``."""
    return f"stage-{datetime.now(UTC).strftime('%Y%m%dT%H%M%SZ')}-{secrets.token_hex(3)}"


@dataclass
class Lease:
    """An admitted sweep's hold on one store."""

    root: StoreRoot
    run_id: str
    payload: dict = field(default_factory=dict)

    def beat(self) -> None:
        """Move ``heartbeat_at`` (the holder alone writes its lease)."""
        self.payload["heartbeat_at"] = now_iso()
        self.root.write_bytes(LEASE_KEY, dumps_json(self.payload))

    def release(self) -> None:
        """Delete the lease (the finisher's last act)."""
        current = _read(self.root)
        if current is not None and current.get("run_id") not in (None, self.run_id):
            return  # claimed by another sweep after ours went stale: theirs now
        self.root.delete_prefix(LEASE_KEY)


def _create_exclusive(root: StoreRoot, data: bytes) -> bool:
    """Create the lease object only when absent; False when it exists."""
    if root.is_local:
        full = root._full(LEASE_KEY)
        os.makedirs(os.path.dirname(full), exist_ok=True)
        try:
            fd = os.open(full, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            return False
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        return True
    try:
        root.fs.pipe_file(root._full(LEASE_KEY), data, mode="create")
    except FileExistsError:
        return False
    except OSError as exc:  # the conditional PUT's 412, as s3fs raises it
        if "PreconditionFailed" in str(exc) or "412" in str(exc):
            return False
        raise
    return True


def _read(root: StoreRoot) -> dict | None:
    try:
        payload = root.read_json(LEASE_KEY)
    except ValueError:
        return {"run_id": None, "unreadable": True}
    return payload if isinstance(payload, dict) else None


def _stale(payload: dict, now: datetime) -> bool:
    if payload.get("unreadable"):
        return True
    try:
        beat = datetime.fromisoformat(str(payload.get("heartbeat_at")))
        ttl = float(payload.get("ttl_s", DEFAULT_TTL))
    except (TypeError, ValueError):
        return True
    return (now - beat).total_seconds() > ttl


def acquire(root: StoreRoot, run_id: str, *, scope=None, ttl_s: int = DEFAULT_TTL) -> Lease:
    """Admit one sweep of ``root`` or raise :class:`SweepRefused` naming the holder."""
    now = now_iso()
    payload = {
        "spec": LEASE_SPEC,
        "run_id": run_id,
        "scope": None if scope is None else sorted(scope),
        "acquired_at": now,
        "heartbeat_at": now,
        "ttl_s": int(ttl_s),
        "claimed_from": None,
    }
    if _create_exclusive(root, dumps_json(payload)):
        return Lease(root, run_id, payload)
    held = _read(root)
    if held is not None and not _stale(held, datetime.now(UTC)):
        raise SweepRefused(
            f"{root.url_of(LEASE_KEY)}: sweep {held.get('run_id')!r} holds this store "
            f"(acquired {held.get('acquired_at')}, last heartbeat {held.get('heartbeat_at')}, "
            f"ttl {held.get('ttl_s')} s); sweeps of one store run one at a time: wait for it "
            "to finish (its lease is claimable once its heartbeat is older than its ttl)"
        )
    root.delete_prefix(LEASE_KEY)  # a dead sweep's lease: claim it
    payload["claimed_from"] = None if held is None else held.get("run_id")
    if _create_exclusive(root, dumps_json(payload)):
        return Lease(root, run_id, payload)
    held = _read(root) or {}
    raise SweepRefused(
        f"{root.url_of(LEASE_KEY)}: sweep {held.get('run_id')!r} claimed the "
        "stale lease first; wait for it to finish"
    )
