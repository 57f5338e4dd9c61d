"""The Icechunk companion's run history (spec §11.4): each run's close — retention, one
content-free ``finalize {run_id}`` commit and the immutable tag ``run-{run_id}`` on it — and
what the snapshots kept reference, which the version collector (``zagg gc``) must keep.

A run tag pins what the run left: ``zagg.open_icechunk(store, tag="run-…")`` reads every
base leaf as that run left it (leaf versions are never rewritten, §1.5). Retention
(``output.icechunk.retain_runs = K``, 0 keeps every run) deletes the run tags beyond the
K − 1 newest, expires the snapshots older than the oldest kept run's finalize and
collects what only they reached; the cutoff is always a finalize commit's time, never
"now", so a concurrent writer's fresh objects are never collected.
"""

from __future__ import annotations

import inspect
import logging
import time
from dataclasses import dataclass

import zagg
from zagg.hive import icechunk as ic
from zagg.hive.manifest import read_manifest
from zagg.hive.storage import StoreRoot, as_root
from zagg.pyramid.icechunk import (
    LEDGER,
    RepoDocs,
    coordinate_chunk,
    enabled,
    has_repo,
    read_block,
    retrying,
)

log = logging.getLogger(__name__)

TAG_PREFIX = "run-"
ROW_CHUNK = "window_start/c/0"  # the row coordinate's first chunk


def run_tag(run_id: str) -> str:
    """The tag a run's finalize puts on its snapshot: ``run-{run_id}``."""
    return f"{TAG_PREFIX}{run_id}"


@dataclass(frozen=True)
class Tagged:
    tag: str
    snapshot: str
    written_at: object  # the tagged snapshot's commit time (a datetime)


def run_tags(repo) -> list[Tagged]:
    """The repo's run tags, newest finalize first."""
    out = []
    for tag in repo.list_tags():
        if tag.startswith(TAG_PREFIX):
            snap = repo.lookup_tag(tag)
            out.append(Tagged(tag, snap, repo.lookup_snapshot(snap).written_at))
    return sorted(out, key=lambda t: t.written_at, reverse=True)


def _retain(repo, doomed: list[Tagged], cutoff, *, dry_run: bool = False) -> dict:
    """Delete the ``doomed`` run tags, expire every snapshot older than ``cutoff`` and
    collect what no kept snapshot reaches (repo objects older than ``cutoff`` only)."""
    out = {"tags_deleted": len(doomed), "snapshots_expired": 0, "gc": None}
    if dry_run:
        if cutoff is not None:
            old = [s for s in repo.ancestry(branch="main") if s.written_at < cutoff]
            out["snapshots_expired"] = len(old)
        return out
    for t in doomed:
        repo.delete_tag(t.tag)
    if cutoff is None:
        return out
    out["snapshots_expired"] = len(repo.expire_snapshots(older_than=cutoff))
    gc = repo.garbage_collect(cutoff)
    out["gc"] = {
        "snapshots_deleted": gc.snapshots_deleted,
        "manifests_deleted": gc.manifests_deleted,
        "chunks_deleted": gc.chunks_deleted,
        "bytes_deleted": gc.bytes_deleted,
    }
    return out


def retention(repo, retain_runs: int) -> dict:
    """The finalize's retention, before its own tag exists: keep the ``retain_runs − 1``
    newest run tags (with the run's own, ``retain_runs`` in all), cut at the oldest kept
    one's finalize — at the previous run's when none is kept — so the cutoff is never
    newer than the previous run's finalize."""
    tags = run_tags(repo)
    kept, doomed = tags[: retain_runs - 1], tags[retain_runs - 1 :]
    cutoff = kept[-1].written_at if kept else (tags[0].written_at if tags else None)
    return _retain(repo, doomed, cutoff)


def _content_free_commit(docs: RepoDocs, message: str, metadata: dict) -> str:
    """A commit that changes nothing a reader sees. Icechunk 1 refuses an empty commit,
    so the row coordinate's first chunk is stored again with the values it already reads
    as (a few bytes, inlined in its manifest); where Icechunk allows an empty commit, that
    is used instead."""
    if "allow_empty" in inspect.signature(docs.session.commit).parameters:
        return docs.session.commit(message, metadata=metadata, allow_empty=True)
    data = docs.get_bytes(ROW_CHUNK)
    docs.put_chunk(ROW_CHUNK, data if data is not None else coordinate_chunk([]))
    return docs.session.commit(message, metadata=metadata)


def _newest_ledger(repo, snapshot: str) -> dict | None:
    for snap in repo.ancestry(snapshot_id=snapshot):
        if LEDGER in (snap.metadata or {}):
            return snap.metadata[LEDGER]
    return None


def _tip_tag(repo) -> str | None:
    """The run tag on main's tip when that tip is a run's finalize (nothing was committed
    since that run closed), else None."""
    tip = repo.lookup_branch("main")
    if not repo.lookup_snapshot(tip).message.startswith("finalize "):
        return None
    for t in sorted(repo.list_tags()):
        if t.startswith(TAG_PREFIX) and repo.lookup_tag(t) == tip:
            return t
    return None


def finalize(
    store,
    storage_options=None,
    *,
    run_id: str,
    retain_runs: int = 0,
    rewrite_pending: str | None = None,
    committed: bool = True,
) -> dict:
    """Close a run on the store's repo: retention (``retain_runs`` > 0), one content-free
    ``finalize {run_id}`` commit whose metadata identifies the run (run_id, the store's
    semantic_hash, zagg_version, the block's commit / commit_order / split_order, the
    retention counts), then the tag ``run-{run_id}`` on it. Idempotent: when the tag
    exists it is returned and nothing is written. A run that ``committed`` nothing, on a
    repo whose main tip is already a run's tagged finalize (nothing changed since), writes
    nothing either: that tag reads its store, and is named (``same_as``). Safe against
    other writers committing at once. ``rewrite_pending`` (``"{from}->{to}"``)
    reports a split ratchet whose old manifests an operator may rewrite."""
    root = as_root(store, storage_options)
    with ic.exclusive(root):
        return _finalize(root, run_id, retain_runs, rewrite_pending, committed)


def _finalize(root, run_id, retain_runs, rewrite_pending, committed) -> dict:
    """:func:`finalize` on ``root``, under its lock."""
    t0 = time.perf_counter()
    repo = ic.open_repo(root)
    path = ic.url_prefix(root) + ic.REPO_DIR
    if repo is None:
        return {"skipped": f"{root.url} has no Icechunk repository"}
    tag = run_tag(run_id)
    out = {"path": path, "tag": tag, "tagged": False}
    if tag in repo.list_tags():
        return {**out, "snapshot": repo.lookup_tag(tag), "commit_s": 0.0}
    block = read_block(repo)
    if not block:
        return {"skipped": "the repository indexes nothing yet"}
    same = None if committed else _tip_tag(repo)
    if same is not None:  # nothing changed since that run: this one writes nothing
        return {
            "path": path,
            "skipped": f"nothing changed since {same}, whose tag reads this run's store",
            "same_as": same,
            "snapshot": repo.lookup_tag(same),
            "commit_s": time.perf_counter() - t0,
        }
    counts = {"retain_runs": int(retain_runs), "tags_deleted": 0, "snapshots_expired": 0}
    counts.update({"gc": None, "retention_error": None})
    if retain_runs > 0:
        try:
            counts.update(retention(repo, int(retain_runs)))
        except Exception as exc:  # fail-open inside finalize: the commit and tag still land
            counts["retention_error"] = f"{type(exc).__name__}: {exc}"
    pending = None
    if rewrite_pending:
        a, _, b = rewrite_pending.partition("->")
        pending = {"from": int(a), "to": int(b)}
    manifest = read_manifest(root) or {}
    metadata = {
        "run_id": run_id,
        "semantic_hash": manifest.get("semantic_hash"),
        "zagg_version": zagg.__version__,
        "commit": block.get("commit"),
        "commit_order": block.get("commit_order"),
        "split_order": block.get("split_order"),
        **counts,
        "rewrite_pending": pending,
    }

    def attempt():
        docs = RepoDocs(repo.writable_session("main"))
        ledger = _newest_ledger(repo, docs.session.snapshot_id)
        if ledger is not None:  # expiry may squash the commit that carried it
            metadata[LEDGER] = ledger
        return _content_free_commit(docs, f"finalize {run_id}", metadata)

    snapshot = retrying(attempt, f"the finalize of run {run_id}")

    def tag_it() -> bool:
        try:
            repo.create_tag(tag, snapshot)
        except Exception:  # another finalize of this run won (else: retried or raised)
            if tag not in repo.list_tags():
                raise
            return False
        return True

    tagged = retrying(tag_it, f"the tag {tag}")
    if not tagged:
        snapshot = repo.lookup_tag(tag)
    return {
        **out,
        "snapshot": snapshot,
        "tagged": tagged,
        **counts,
        "rewrite_pending": pending,
        "commit_s": time.perf_counter() - t0,
    }


def finalize_quietly(store, storage_options=None, **kwargs) -> dict:
    """:func:`finalize`, fail-open: an error is returned as ``{"error": …}``."""
    try:
        return finalize(store, storage_options, **kwargs)
    except Exception as exc:  # the index never fails the run it indexes
        log.warning("icechunk finalize failed: %s", exc)
        return {"error": f"{type(exc).__name__}: {exc}"}


def finalize_run(cfg, summary, store, storage_options, run_id: str):
    """The run's close, after its leaves' commit and its sweep's: recorded as
    ``summary.icechunk["finalize"]``; skipped (and the run left untagged, its commits
    covered by the next run's tag) when a commit of the run failed. Returns ``summary``."""
    record = summary.icechunk
    if not enabled(cfg.output.icechunk) or not isinstance(record, dict):
        return summary
    sweep = getattr(summary.sweep, "icechunk", None)
    failed = [c["error"] for c in (record, sweep) if isinstance(c, dict) and "error" in c]
    if failed:
        record["finalize"] = {"skipped": f"a commit of this run failed: {failed[0]}"}
        return summary
    settings = cfg.output.icechunk_settings
    record["finalize"] = finalize_quietly(
        store,
        storage_options,
        run_id=run_id,
        retain_runs=getattr(settings, "retain_runs", 0),
        rewrite_pending=record.get("split_ratchet"),
        committed=bool(record.get("commits") or (sweep or {}).get("commits")),
    )
    return summary


# -- what the snapshots kept reference (for the version collector) ------------------------


@dataclass
class History:
    """What ``zagg gc`` must keep of a store with a repo: the leaf versions a retained
    snapshot references, and the guard against a run still in flight."""

    referenced: set  # (leaf prefix, version name)
    tags: set  # run tags that exist
    newest: object  # the newest run tag's finalize time (else main's tip): the guard
    retention: dict | None = None  # what ``retain_runs`` expired, when asked

    def protect(self, leaf: str, version: str, written_at: str | None) -> bool:
        """Whether a superseded version must stay: a retained snapshot references it,
        it is newer than the newest run's finalize (a run in flight), or it is unstamped
        and its run has no tag yet."""
        if (leaf, version) in self.referenced:
            return True
        if written_at is None:
            run = version[len(TAG_PREFIX) :].rsplit("-", 1)[0]
            return run_tag(run) not in self.tags
        import datetime as dt

        when = dt.datetime.fromisoformat(written_at.replace("Z", "+00:00"))
        return self.newest is None or when > self.newest


def retained_snapshots(repo) -> list[str]:
    """Every snapshot in the ancestry of every branch and of every tag."""
    seen: dict[str, None] = {}
    heads = [("branch", b) for b in repo.list_branches()] + [("tag", t) for t in repo.list_tags()]
    for kind, name in heads:
        ancestry = repo.ancestry(branch=name) if kind == "branch" else repo.ancestry(tag=name)
        for snap in ancestry:
            if snap.id in seen:
                break  # the rest of this history is already listed
            seen[snap.id] = None
    return list(seen)


def referenced_versions(root: StoreRoot, repo) -> set[tuple[str, str]]:
    """``(leaf prefix, version)`` of every leaf version a retained snapshot references."""
    prefix = ic.url_prefix(root)
    out = set()
    for snap in retained_snapshots(repo):
        for loc in repo.readonly_session(snapshot_id=snap).all_virtual_chunk_locations():
            key = ic.key_of(prefix, loc) or loc
            parts = key.split("/")
            for i, part in enumerate(parts):
                if part.startswith(TAG_PREFIX) and i and parts[i - 1].endswith(".zarr"):
                    out.add(("/".join(parts[:i]), part))
                    break
    return out


def history(
    store, storage_options=None, *, retain_runs: int | None = None, dry_run: bool = False
) -> History | None:
    """What the version collector must keep of the store's repo (None: it has none).
    With ``retain_runs`` (K ≥ 1) the repo's history is cut first as a finalize would: the
    K newest run tags kept, the others deleted, the snapshots older than the oldest kept
    run's finalize expired and collected."""
    root = as_root(store, storage_options)
    if not ic.available() or not has_repo(root):
        return None
    repo = ic.open_repo(root)
    done = None
    if retain_runs:
        tags = run_tags(repo)
        kept = tags[:retain_runs]
        done = _retain(
            repo, tags[retain_runs:], kept[-1].written_at if kept else None, dry_run=dry_run
        )
    tags = run_tags(repo)
    newest = (
        tags[0].written_at if tags else repo.lookup_snapshot(repo.lookup_branch("main")).written_at
    )
    return History(referenced_versions(root, repo), {t.tag for t in tags}, newest, done)


def summary_lines(summary) -> list[str]:
    """What a run did to the store's Icechunk companion, for the command line: its
    commits, its tag, or why there is none."""
    record = summary.icechunk
    if not isinstance(record, dict):
        return []
    sweep = getattr(summary.sweep, "icechunk", None) or {}
    if "error" in record or "error" in sweep:
        return [f"icechunk        not committed: {record.get('error') or sweep.get('error')}"]
    commits = [*record.get("commits", ()), *sweep.get("commits", ())]
    closing = record.get("finalize") or {}
    line = f"icechunk        {', '.join(commits) or 'nothing new'}"
    if closing.get("tag"):
        line += f"; tagged {closing['tag']}"
    elif closing:
        line += f"; not tagged: {closing.get('skipped') or closing.get('error')}"
    return [line]
