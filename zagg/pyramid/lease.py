"""The sweep-admission lease (spec §4.8): one ``sweep.lease.json`` serialises a store's sweeps.

Admission is one compare-and-swap of the store-root intent object
(:meth:`~zagg.hive.storage.StoreRoot.update_json`: under a ``flock`` on a local store, a
conditional PUT, ``If-None-Match: *`` or ``If-Match`` the stale lease's ETag, on S3). A live lease refuses a second sweep naming its holder; one whose ``heartbeat_at`` is
older than its ``ttl_s`` is claimed (replaced by a compare-and-swap against the stale
lease, ``claimed_from`` naming the dead run), and the claimant completes the prior run's
work under the generation ratchet. The holder beats between the ladder's waves (only while
the lease is its own) and deletes the lease as its last act (likewise). Control plane
only: no data object is ever locked.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass, field
from datetime import UTC, datetime

from zagg.errors import ZaggError
from zagg.hive.stamp import now_iso
from zagg.hive.storage import StoreRoot

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
        """Move ``heartbeat_at``: a compare-and-swap of the lease that only ever rewrites
        this sweep's own lease. A lease another sweep claimed meanwhile (this one's
        heartbeat went stale) is left alone and stops this sweep with
        :class:`SweepRefused`: the claimant completes the work."""
        self.payload["heartbeat_at"] = now_iso()

        def mine(current):
            return self.payload if _holder(current) == self.run_id else None

        left = self.root.update_json(LEASE_KEY, mine, replace_unreadable=True)
        if _holder(left) != self.run_id:
            raise SweepRefused(
                f"{self.root.url_of(LEASE_KEY)}: sweep {_holder(left)!r} claimed this "
                f"sweep's lease ({self.run_id}) after its heartbeat went stale; it completes "
                "the work (a longer ttl_s keeps a slow sweep's lease)"
            )

    def release(self) -> None:
        """Delete the lease (the finisher's last act), only while it is this sweep's: one
        claimed by another sweep after ours went stale is theirs now."""
        self.root.delete_if(LEASE_KEY, lambda current: _holder(current) == self.run_id)


def _holder(payload) -> str | None:
    return payload.get("run_id") if isinstance(payload, dict) else None


def _stale(payload: dict | None, now: datetime) -> bool:
    if not isinstance(payload, dict):
        return True  # unreadable debris
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

    def admit(held):
        if held is not None and not _stale(held, datetime.now(UTC)):
            raise SweepRefused(
                f"{root.url_of(LEASE_KEY)}: sweep {held.get('run_id')!r} holds this store "
                f"(acquired {held.get('acquired_at')}, last heartbeat "
                f"{held.get('heartbeat_at')}, ttl {held.get('ttl_s')} s); sweeps of one store "
                "run one at a time: wait for it to finish (its lease is claimable once its "
                "heartbeat is older than its ttl)"
            )
        return {**payload, "claimed_from": _holder(held)}

    # one compare-and-swap: of two sweeps claiming one stale lease, one wins
    admitted = root.update_json(LEASE_KEY, admit, replace_unreadable=True)
    return Lease(root, run_id, admitted)
