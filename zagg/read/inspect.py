"""Human-readable store reports: ``inspect`` (what is there) and ``verify`` (is it intact).

Verification checks the manifest, then recomputes every leaf's §5 content hashes from the
decoded arrays and compares them with the leaf's commit stamp, array by array, reporting
each outcome separately: match, mismatch (a shared array whose digest differs), extra array
(present, not recorded), missing array (recorded, not present), unreadable (present, but
its metadata or chunks do not decode: corrupt or truncated) and unverifiable (no recorded
hashes). One damaged leaf never stops the check of the others. A leaf whose root
``zarr.json`` does not parse is debris (its stamp, the last write, never landed whole) and
is reported with a warning; a run that stopped before its end-of-run root coverage is
reported with a warning too.
"""

from __future__ import annotations

import json
import sys
import time
from collections import Counter

import numpy as np
import zarr

from zagg import grid as G
from zagg import hive
from zagg.hive import coverage as hcov
from zagg.hive import decode as hdecode
from zagg.hive.hashes import array_digest, combined_digest
from zagg.hive.manifest import path_grouping
from zagg.hive.paths import CONFIG_KEY, MANIFEST_KEY, ROOT_COVERAGE_KEY, window_of
from zagg.hive.schema import cell_rows, word_siblings
from zagg.hive.stamp import data_prefix, read_stamp_or_debris
from zagg.hive.storage import StoreRootError
from zagg.hive.walk import walk_windows

#: outcomes that are not failures of integrity
PASSING = ("ok", "debris", "unverifiable")
_REASON_CHARS = 160


def _reason(exc: BaseException) -> str:
    """One short line for an exception: its type and the first line of its message."""
    text = str(exc).strip()
    if "checksum do not match" in text:  # zarr's crc32c codec (shard index)
        return "a shard index fails its crc32c checksum: the object is corrupt or truncated"
    if "too short to hold its index" in text:  # zarr >= 3.4 checks a shard's length first
        return "a shard is shorter than its index: the object is corrupt or truncated"
    text = f"{type(exc).__name__}: {text.splitlines()[0]}" if text else type(exc).__name__
    return text if len(text) <= _REASON_CHARS else text[: _REASON_CHARS - 1] + "…"


def _require_store(root: hive.StoreRoot) -> None:
    """Raise ``FileNotFoundError`` when nothing is at the store's path or URL."""
    if not root.exists(""):
        raise FileNotFoundError(f"{root.url} does not exist")


def _leaf_nodes(root: hive.StoreRoot, leaf: str) -> tuple[list[str], dict[str, str]]:
    """The named arrays under a leaf (keys relative to it), plus the nodes whose
    ``zarr.json`` cannot be read, with the reason.

    Found node by node from the ``zarr.json`` objects: on an intact leaf this is the set
    ``group.members(max_depth=None)`` enumerates (a directory without ``zarr.json`` is not a
    node, and nothing below an array is), but a damaged node is reported, not fatal to the
    enumeration of the others.
    """
    arrays: list[str] = []
    unreadable: dict[str, str] = {}
    groups = [""]
    while groups:
        group = groups.pop()
        for name in root.list_dir(f"{leaf}/{group}" if group else leaf)[0]:
            key = f"{group}/{name}" if group else name
            try:
                meta = root.read_json(f"{leaf}/{key}/zarr.json")
            except ValueError as exc:
                unreadable[key] = f"zarr.json does not parse ({_reason(exc.__cause__ or exc)})"
                continue
            if meta is None:
                continue  # not a zarr node: zarr skips it too
            kind = meta.get("node_type") if isinstance(meta, dict) else None
            if kind == "array":
                arrays.append(key)
            elif kind == "group":
                groups.append(key)
            else:
                unreadable[key] = f"zarr.json is not zarr node metadata (node_type {kind!r})"
    return arrays, unreadable


def _decoded(root: hive.StoreRoot, store, prefix: str, key: str) -> np.ndarray:
    """A whole array through zarr-python; a zagg-ragged/2 typed array (whose data type a
    stock zarr does not know) by zagg's own decoder, whose chunk bytes are /1's."""
    meta = root.read_json(f"{prefix}/{key}/zarr.json")
    if isinstance(meta, dict) and hdecode.typed_element(meta.get("data_type")) is not None:
        values = hdecode.read_array(root, f"{prefix}/{key}")
        if values is not None:
            return values
    return zarr.open_array(store, path=key, mode="r", zarr_format=3)[...]


def verify_leaf(root: hive.StoreRoot, leaf: str) -> dict:
    """Outcome of one leaf: status plus the arrays in each outcome class.

    ``unreadable`` maps each array (or group) that could not be decoded to the reason; the
    arrays below an unreadable group are not also reported missing.
    """
    stamp, stamp_problem = read_stamp_or_debris(root, leaf)
    if stamp is None:
        out = {"leaf": leaf, "status": "debris"}
        if stamp_problem:
            out["stamp_unreadable"] = stamp_problem
        return out
    data = data_prefix(leaf, stamp)  # a versioned leaf's arrays are under its current version
    if data != leaf:
        own, own_problem = read_stamp_or_debris(root, data)
        if own is None:  # the pointer names a version that is gone or was never stamped
            return {
                "leaf": leaf,
                "status": "debris",
                "stamp_unreadable": own_problem
                or (f"its current version {stamp['current']} is missing or unstamped"),
            }
    recorded = stamp.get("content_hashes") or {}
    arrays_rec = (
        recorded.get("arrays") if isinstance(recorded, dict) and "arrays" in recorded else recorded
    )
    if not isinstance(recorded, dict) or not isinstance(arrays_rec, dict):
        return {
            "leaf": leaf,
            "status": "unreadable",
            "unreadable": {"content_hashes": "the stamp's record is not a JSON object"},
        }
    arrays_rec = {k: v for k, v in arrays_rec.items() if k != "combined"}
    if not arrays_rec:
        return {"leaf": leaf, "status": "unverifiable"}
    keys, unreadable = _leaf_nodes(root, data)
    if data == leaf:  # a legacy leaf's root holds no versions
        keys = [k for k in keys if not k.startswith("run-")]
    store = root.zarr_store(data, read_only=True)
    actual = {}
    ragged = {}
    for key in keys:
        try:
            values = _decoded(root, store, data, key)
            actual[key] = array_digest(values)
        except Exception as exc:  # corrupt chunks, bad metadata, no hash recipe
            unreadable[key] = _reason(exc)
            continue
        if values.dtype == object:
            ragged[key] = values
    hidden = tuple(f"{k}/" for k in unreadable)  # below an unreadable group
    out = {
        "leaf": leaf,
        "match": sorted(k for k in actual if arrays_rec.get(k) == actual[k]),
        "mismatch": sorted(k for k in actual if k in arrays_rec and arrays_rec[k] != actual[k]),
        "extra": sorted(set(actual) - set(arrays_rec)),
        "missing": sorted(
            k
            for k in set(arrays_rec) - set(actual)
            if k not in unreadable and not k.startswith(hidden)
        ),
        "unreadable": dict(sorted(unreadable.items())),
        "misaligned": misaligned_siblings(root, data, ragged),
    }
    combined_ok = bool(unreadable) or recorded.get("combined") in (
        None,
        combined_digest(list(actual.values())),
    )
    out["status"] = (
        "unreadable"
        if unreadable
        else "mismatch"
        if out["mismatch"]
        else "extra array"
        if out["extra"]
        else "missing array"
        if out["missing"]
        else "misaligned"
        if out["misaligned"]
        else "ok"
        if combined_ok
        else "combined mismatch"
    )
    return out


def misaligned_siblings(root: hive.StoreRoot, data: str, ragged: dict) -> list[str]:
    """The word siblings (``*_locations``, ``*_times``) of a leaf or artifact whose rows do
    not match, cell by cell, the payload rows they are bound to (one word per centroid)."""
    out = []
    for key, payload in ragged.items():
        attrs = (root.read_json(f"{data}/{key}/zarr.json") or {}).get("attributes") or {}
        group = key.rpartition("/")[0]
        for name in word_siblings(attrs):
            sibling = f"{group}/{name}" if group else name
            words = ragged.get(sibling)
            if words is None:
                continue  # absent or unreadable: reported as such
            meta = root.read_json(f"{data}/{sibling}/zarr.json") or {}
            if not np.array_equal(
                cell_rows(payload, attrs), cell_rows(words, meta.get("attributes") or {})
            ):
                out.append(sibling)
    return sorted(out)


def _detail(r: dict) -> str:
    """The parenthesised detail of one leaf's outcome line."""
    if r["status"] == "debris":
        if r.get("stamp_unreadable"):
            return (
                f"warning: {r['stamp_unreadable']}; read as unstamped debris, which the "
                "next run of this shard rewrites"
            )
        return "no commit stamp: an unfinished write, which the next run of this shard rewrites"
    parts = [f"{k}: {r[k]}" for k in ("mismatch", "extra", "missing", "misaligned") if r.get(k)]
    parts += [f"unreadable: {k} ({why})" for k, why in (r.get("unreadable") or {}).items()]
    if r.get("error"):
        parts.append(f"unreadable: {r['error']}")
    return "; ".join(parts)


def _leaves(n: int) -> str:
    return f"{n} leaf" if n == 1 else f"{n} leaves"


def _manifest_problem(root: hive.StoreRoot, has_leaves: bool) -> str | None:
    """Why the store's manifest cannot be used, or None when it reads."""
    try:
        manifest = hive.read_manifest(root)
    except ValueError as exc:
        return f"UNREADABLE: {exc}"
    if manifest is None and not has_leaves:
        return f"MISSING: {root.url} holds no {MANIFEST_KEY} and no leaf: not a hive store"
    if manifest is None:
        return (
            f"MISSING: {root.url_of(MANIFEST_KEY)} does not exist; readers refuse a store "
            "without it and a run will not write into one (restore it, or rebuild the "
            "store into a new root)"
        )
    return None


def _coverage_warnings(root: hive.StoreRoot, stamped: list[str]) -> list[str]:
    """Warnings when the root coverage MOC does not account for the stamped leaves: the
    client writes it after all leaves, so a gap means a run that did not finish."""
    if not stamped:
        return []
    rerun = (
        "         the last run into this store probably did not finish (or one is still "
        "writing): rerun the same config to complete it"
    )
    envelope = hcov.read_root_coverage(root)
    listed = None
    if envelope is not None:
        try:
            listed = set(hcov.expand_ranges(envelope))
        except ValueError:
            listed = None
    if listed is None:
        what = "is unreadable" if root.exists(ROOT_COVERAGE_KEY) else "is missing"
        return [
            f"WARNING: the root {ROOT_COVERAGE_KEY} {what}, although "
            f"{_leaves(len(stamped))} {'is' if len(stamped) == 1 else 'are'} stamped;",
            rerun,
        ]
    absent = [sid for sid in stamped if sid not in listed]
    if not absent:
        return []
    return [
        f"WARNING: the root {ROOT_COVERAGE_KEY} does not list {len(absent)} of the "
        f"{_leaves(len(stamped))} stamped (e.g. shard {absent[0]});",
        rerun,
    ]


#: what ``zagg verify`` exits with: intact, damaged, or intact but incomplete (debris, or a
#: run into the store that did not finish)
EXIT_INTACT, EXIT_DAMAGED, EXIT_INCOMPLETE = 0, 1, 3


def _verify_artifacts(root: hive.StoreRoot, results: list[dict]) -> list[dict]:
    """Every committed pyramid artifact's §5 hashes: each stamped leaf's column (all its
    groups, declared or intermediate) and every overview at the declared levels."""
    from concurrent.futures import ThreadPoolExecutor

    from zagg.hive import artifact
    from zagg.read.levels import levels

    try:
        manifest = hive.read_manifest(root)
    except ValueError:
        return []
    if not manifest or path_grouping(manifest) > 1:
        return []
    leaves = [(r["shard_id"], window_of(r["leaf"])) for r in results if r["status"] != "debris"]
    rels = {artifact.column_path(sid, w) for sid, w in leaves}
    windows = sorted({w for _sid, w in leaves if w is not None})
    for e in levels(manifest).values():
        if e["artifact"] != "overview":
            continue
        k = e["order"]
        nodes = {G.ancestor_id(sid, k) for sid, _w in leaves}
        for w in [None, *windows]:
            rels |= {artifact.overview_path(n, w) for n in nodes}

    def check(rel):
        if artifact.read_root(root, rel) is None:
            return None  # not materialized: regenerable, never required
        try:
            return verify_leaf(root, rel)
        except Exception as exc:
            return {"leaf": rel, "status": "unreadable", "error": _reason(exc)}

    with ThreadPoolExecutor(max_workers=8) as pool:
        out = [r for r in pool.map(check, sorted(rels)) if r is not None]
    return [r for r in out if r["status"] != "debris"]


def object_notes(root: hive.StoreRoot) -> list[str]:
    """Problems in the objects the spec leaves unhashed (the leaves' temporal records, the
    root temporal section and cover, the multiscales companion): each reads as absent, so
    they are warnings, never damage."""
    import warnings as _w

    from zagg.read.temporal import open_temporal

    notes = []
    try:
        manifest = hive.read_manifest(root)
    except ValueError:
        return notes
    if not manifest:
        return notes
    from zagg.read.report import has_temporal

    with _w.catch_warnings(record=True) as caught:
        _w.simplefilter("always")
        try:
            if has_temporal(root, manifest):
                open_temporal(root)
        except (OSError, ValueError) as exc:
            notes.append(f"the temporal record does not read ({_reason(exc)})")
        try:
            from zagg.pyramid.companion import read_companion

            read_companion(root, manifest)
        except (OSError, ValueError) as exc:
            notes.append(f"the multiscales companion is unusable ({_reason(exc)})")
    notes += [str(c.message) for c in caught if issubclass(c.category, UserWarning)]
    return notes


def verify_store(store, storage_options=None) -> tuple[str, bool]:
    """Check the manifest and every leaf; returns (report text, store intact).

    A store with a manifest and no leaf yet (a run that found no points) is reported as
    such and passes: there is nothing to be damaged. See :func:`verify_status` for the
    finer outcome (intact, damaged, incomplete).
    """
    report, status = verify_status(store, storage_options)
    return report, status != EXIT_DAMAGED


class VerifyProgress:
    """What ``zagg verify`` says while it works, on ``stream`` (stderr). On a terminal: the
    listing, the count of leaves to check, then one line kept up to date per leaf.
    Elsewhere (a log, a pipe): nothing while the check is short; once it has run for
    ``every_s`` seconds, a count line every ``every_s`` seconds and one at the end."""

    def __init__(self, stream=None, every_s: float = 5.0):
        self.stream = stream or sys.stderr
        self.tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self.every_s = every_s
        self.total = 0
        self.last = 0.0
        self.spoke = False

    def listing(self, url: str) -> None:
        if self.tty:
            self._say(f"verify: listing the leaves of {url} ...")

    def start(self, total: int) -> None:
        self.total, self.last = total, time.monotonic()
        if self.tty:
            self._say(f"verify: {_leaves(total)} to check")

    def tick(self, done: int) -> None:
        final = done == self.total
        if self.tty:
            end = "\n" if final else ""
            print(f"\rverify: {done:,} of {self.total:,} checked", end=end, file=self.stream)
            self.stream.flush()
        elif (final and self.spoke) or time.monotonic() - self.last >= self.every_s:
            self.last, self.spoke = time.monotonic(), True
            self._say(f"verify: {done:,} of {_leaves(self.total)} checked")

    def _say(self, text: str) -> None:
        print(text, file=self.stream, flush=True)


def verify_status(store, storage_options=None, progress=None) -> tuple[str, int]:
    """:func:`verify_store`'s report and its exit status: :data:`EXIT_INTACT`,
    :data:`EXIT_DAMAGED` (a damaged leaf or manifest) or :data:`EXIT_INCOMPLETE` (nothing
    damaged, but debris is left or the last run into the store did not finish).
    ``progress`` (a :class:`VerifyProgress`) is told how far the check is."""
    root = hive.StoreRoot(store, storage_options)
    _require_store(root)
    if progress is not None:
        progress.listing(root.url)
    found = _grouped_walk(root) + _windowed_leaves(root)
    manifest_problem = _manifest_problem(root, bool(found))
    results = []
    if progress is not None:
        progress.start(len(found))
    for leaf, sid in found:
        try:
            r = verify_leaf(root, leaf)
        except Exception as exc:  # whatever breaks one leaf is that leaf's outcome
            r = {"leaf": leaf, "status": "unreadable", "error": _reason(exc)}
        results.append({**r, "shard_id": sid})
        if progress is not None:
            progress.tick(len(results))
    artifacts = _verify_artifacts(root, results)
    notes = object_notes(root)
    counts = Counter(r["status"] for r in results)
    lines = [f"verify {root.url}: {_leaves(len(results))}"]
    if manifest_problem:
        lines.append(f"  {'manifest':<14} {manifest_problem}")
    for r in results:
        if r["status"] != "ok":
            detail = _detail(r)
            lines.append(f"  {r['status']:<14} {r['leaf']}" + (f"  ({detail})" if detail else ""))
    if results:
        lines.append("  " + ", ".join(f"{n} {s}" for s, n in sorted(counts.items())))
    if artifacts:
        tally = Counter(r["status"] for r in artifacts)
        lines.append(
            f"  pyramid artifacts: {len(artifacts)} checked ("
            + ", ".join(f"{n} {st}" for st, n in sorted(tally.items()))
            + ")"
        )
        for r in artifacts:
            if r["status"] not in PASSING:
                detail = _detail(r)
                lines.append(
                    f"  {r['status']:<14} {r['leaf']}" + (f"  ({detail})" if detail else "")
                )
    lines += [f"  warning: {n}" for n in notes]
    failed = [r for r in results + artifacts if r["status"] not in PASSING]
    stamped = sorted({r["shard_id"] for r in results if r["status"] != "debris"})
    ok = not manifest_problem and not failed
    if not ok:
        why = (
            ["the manifest is " + manifest_problem.split(":")[0].lower()]
            if manifest_problem
            else []
        )
        bad_leaves = sum(1 for r in results if r["status"] not in PASSING)
        why += [f"{bad_leaves} of {_leaves(len(results))} damaged"] if bad_leaves else []
        bad_art = len(failed) - bad_leaves
        why += [f"{bad_art} pyramid artifact{'s' * (bad_art != 1)} damaged"] if bad_art else []
        lines.append("verification FAILED: " + "; ".join(why))
    elif not results:
        lines.append(
            "no leaves yet: the store holds only its manifest (a run that found no "
            "points writes no leaf). Nothing to verify, which is not a failure: "
            "exit status 0"
        )
    elif not stamped:
        lines.append(
            f"no committed leaves yet: {_leaves(len(results))}, all debris "
            "(unfinished writes, not damage to a committed leaf)"
        )
    elif counts.get("unverifiable"):
        n = counts["unverifiable"]
        lines.append(
            f"verified, but {_leaves(n)} {'records' if n == 1 else 'record'} no "
            "content hashes (nothing to compare: unverifiable, not tampered)"
        )
    else:
        lines.append("verified: all stamped leaves intact")
    unfinished = _coverage_warnings(root, stamped)
    lines += unfinished
    if not ok:
        return "\n".join(lines), EXIT_DAMAGED
    if counts.get("debris") or unfinished:
        lines.append(
            f"incomplete: {'debris is left' if counts.get('debris') else ''}"
            f"{' and ' if counts.get('debris') and unfinished else ''}"
            f"{'the last run did not finish' if unfinished else ''}; run the same "
            f"command again to complete the store (exit status {EXIT_INCOMPLETE})"
        )
        return "\n".join(lines), EXIT_INCOMPLETE
    return "\n".join(lines), EXIT_INTACT


def inspect_store(store, *, leaves: int = 10, storage_options=None, manifest=False) -> str:
    """A store's summary: its product and grid (from the manifest), leaf list with stamps,
    root coverage, levels and sample quantiles of one leaf; ``manifest`` adds the manifest
    in full after it."""
    show_manifest = manifest
    root = hive.StoreRoot(store, storage_options)
    _require_store(root)
    try:
        manifest = hive.read_manifest(root)
    except ValueError as exc:
        raise StoreRootError(f"cannot inspect {root.url}: its manifest is unusable: {exc}") from exc
    if manifest is None:
        from zagg.read.tree import list_products

        products = list_products(root)
        if not products:
            raise FileNotFoundError(f"{root.url} holds no {MANIFEST_KEY}: not a hive store")
        reports = [f"store root {root.url}: {len(products)} products: {', '.join(products)}"]
        for name in products:
            sub = hive.StoreRoot(root.url_of(name), storage_options)
            reports.append(inspect_store(sub, leaves=leaves, manifest=show_manifest))
        return "\n\n".join(reports)
    lines = [f"store {root.url}", *manifest_lines(manifest)]
    lines.append(
        f"config: {root.url_of(CONFIG_KEY)}"
        if root.exists(CONFIG_KEY)
        else f"config: no {CONFIG_KEY} (made by a zagg that did not record its config)"
    )
    windowed = manifest.get("temporal") is not None
    found = hive.walk_leaves(root, grouping=path_grouping(manifest))
    if windowed:
        found = _windowed_leaves(root)
    stamps = [(leaf, sid, *read_stamp_or_debris(root, leaf)) for leaf, sid in found]
    stamped = [s for s in stamps if s[2] is not None]
    torn = sum(1 for s in stamps if s[3] is not None)
    if windowed:
        lines += window_lines(stamped)
    lines.append(
        f"leaves: {len(stamped)} stamped, {len(stamps) - len(stamped)} debris"
        + (f" ({torn} with an unreadable stamp)" if torn else "")
    )
    for leaf, _sid, st, problem in stamps[:leaves]:
        if problem is not None:
            lines.append(
                f"  {leaf}  DEBRIS (warning: {problem}; read as unstamped, which the "
                "next run of this shard rewrites)"
            )
        elif st is None:
            lines.append(f"  {leaf}  DEBRIS (no commit stamp)")
        else:
            box = [b for b in (st.get("coverage") or {}).get("box", []) if b]
            lines.append(
                f"  {leaf}  cells_with_data={st.get('cells_with_data')} "
                f"written_at={st.get('written_at')} box={box}"
            )
    if len(stamps) > leaves:
        lines.append(f"  … {len(stamps) - leaves} more")
    cov = hcov.read_root_coverage(root)
    if cov:
        lines.append(
            f"root coverage: order {cov.get('order')}, {len(cov.get('ranges', []))} "
            f"ranges, source {cov.get('source')}, generated {cov.get('generated_at')}"
        )
    else:
        lines.append("root coverage: absent (readers fall back to the walk)")
    lines += _coverage_warnings(root, sorted({s[1] for s in stamped}))
    by_window = None
    if windowed:
        by_window = {}
        for _leaf, sid, st, _problem in stamped:
            by_window.setdefault(str(st.get("window")), set()).add(sid)
        by_window = {w: sorted(by_window[w]) for w in sorted(by_window)}
    lines += level_lines(root, manifest, sorted({s[1] for s in stamped}), by_window)
    lines += object_lines(root, manifest, stamped)
    if stamped:
        try:
            lines += _sample_quantiles(root, stamped[0][1], stamped[0][2].get("window"))
        except Exception as exc:  # a damaged leaf must not hide the report above
            lines.append(
                f"sample quantiles: leaf {stamped[0][0]} does not read "
                f"({_reason(exc)}); python -m zagg verify names the damaged arrays"
            )
    if show_manifest:
        lines.append(f"manifest ({MANIFEST_KEY}):")
        lines += ["  " + line for line in json.dumps(manifest, indent=2).splitlines()]
    else:
        lines.append("manifest: in full with zagg inspect --manifest")
    return "\n".join(lines)


def manifest_lines(manifest: dict) -> list[str]:
    """The manifest in brief: the product, the format and the grid."""
    dataset = manifest.get("dataset") or {}
    semantic = str(manifest.get("semantic_hash") or "")
    return [
        f"product: {dataset.get('short_name')} version {dataset.get('version')} "
        f"({manifest.get('spec')}, semantic hash {semantic[:12]}…)",
        f"grid: shards at order {manifest.get('shard_order')}, cells at order "
        f"{manifest.get('cell_order')}, path_grouping {path_grouping(manifest)}",
    ]


def object_lines(root: hive.StoreRoot, manifest: dict, stamped: list) -> list[str]:
    """The leaf column of the first stamped leaf, the multiscales companion, the
    temporal record and the schema's ragged arrays."""
    from zagg.read import report

    out = []
    if stamped and path_grouping(manifest) == 1:
        leaf, sid, st, _problem = stamped[0]
        out += report.column_lines(root, manifest, sid, st.get("window"))
    out += report.companion_lines(root, manifest)
    out += report.temporal_lines(root, manifest)
    if stamped:
        leaf, _sid, st, _problem = stamped[0]
        out += report.ragged_lines(root, manifest, data_prefix(leaf, st))
    return out


def level_lines(
    root: hive.StoreRoot,
    manifest: dict,
    shard_ids: list[str],
    windows: dict[str, list[str]] | None = None,
) -> list[str]:
    """The pyramid levels the manifest declares and how many of their artifacts are
    committed (leaf columns per leaf, overviews per ancestor node); on a windowed store
    (``windows``: label → its shard ids) per window, and the all-time fold above the
    shard."""
    from concurrent.futures import ThreadPoolExecutor

    from zagg.hive import artifact
    from zagg.read.levels import levels

    table = levels(manifest)
    if len(table) == 1:
        return ["levels: the native cells only (pyramid declared off)"]
    if path_grouping(manifest) > 1:
        return [
            f"levels: {sorted(table, reverse=True)} declared; on a path_grouping "
            f"{path_grouping(manifest)} tree only the native cells are read"
        ]
    fired: list = []

    def committed(kind, ids, k, window):
        path = artifact.column_path if kind == "column" else artifact.overview_path
        nodes = sorted({G.ancestor_id(sid, k) for sid in ids})
        with ThreadPoolExecutor(max_workers=16) as pool:
            found = list(
                pool.map(lambda n: artifact.stamped_attrs(root, path(n, window), kind), nodes)
            )
        key = artifact.COLUMN_ATTR if kind == "column" else artifact.OVERVIEW_ATTR
        fired.extend(d for a in found if a is not None for d in (a[key].get("demotions") or []))
        return sum(1 for a in found if a is not None), len(nodes)

    out = ["levels (cell order, artifact, committed):"]
    for r, e in table.items():
        if e["artifact"] == "source":
            out.append(f"  o{r:<3} leaves     {len(shard_ids)} leaves of order {e['order']}")
            continue
        k, kind = e["order"], e["artifact"]
        what = "leaf columns" if kind == "column" else f"overviews at order {k}"
        if windows is None:
            counts = [committed(kind, shard_ids, k, None)]
            text = f"{counts[0][0]}/{counts[0][1]}"
        else:
            labelled = (
                []
                if kind == "column"
                else [(artifact.WINDOW_ALL, committed(kind, shard_ids, k, None))]
            )
            labelled += [(w, committed(kind, ids, k, w)) for w, ids in windows.items()]
            counts = [c for _w, c in labelled]
            text = ", ".join(f"{w} {d}/{n}" for w, (d, n) in labelled)
        behind = any(d != n for d, n in counts)
        hint = (
            f" (python -m zagg sweep {root.url} builds the rest)"
            if behind and kind != "column"
            else ""
        )
        demoted = f" ({len(fired)} demotion records)" if fired else ""
        fired.clear()
        out.append(f"  o{r:<3} {kind:<10} {text} {what}{hint}{demoted}")
    return out


def _grouping(root: hive.StoreRoot) -> int:
    try:
        manifest = hive.read_manifest(root)
    except ValueError:
        return 1
    return path_grouping(manifest) if manifest else 1


def _grouped_walk(root: hive.StoreRoot) -> list[tuple[str, str]]:
    """The unwindowed leaves, walked at the tree's own ``path_grouping``."""
    return hive.walk_leaves(root, grouping=_grouping(root))


def _windowed_leaves(root: hive.StoreRoot) -> list[tuple[str, str]]:
    """The windowed leaves of a store whose manifest declares a window schedule."""
    try:
        manifest = hive.read_manifest(root)
    except ValueError:
        return []
    if not manifest or manifest.get("temporal") is None:
        return []
    g = path_grouping(manifest)
    return [leaf for leaves in walk_windows(root, g).values() for leaf in leaves]


def window_lines(stamped: list) -> list[str]:
    """A windowed store's windows: leaves, cells and the actual time range each holds
    (from the leaves' stamps), in label order."""
    by: dict[str, list[dict]] = {}
    for _leaf, _sid, st, _problem in stamped:
        by.setdefault(str(st.get("window")), []).append(st)
    lines = [f"windows: {len(by)}"]
    for label in sorted(by):
        stamps = by[label]
        ranges = [st["time_range"] for st in stamps if st.get("time_range")]
        span = (
            f"{min(r[0] for r in ranges)} .. {max(r[1] for r in ranges)}"
            if ranges
            else "time range not recorded"
        )
        cells = sum(int(st.get("cells_with_data") or 0) for st in stamps)
        lines.append(f"  {label:<10} {_leaves(len(stamps))}, {cells:,} cells with data, {span}")
    return lines


def _sample_quantiles(root: hive.StoreRoot, shard_id: str, window: str | None = None) -> list[str]:
    from zagg.read import open_leaf, quantile
    from zagg.read.stats import digest_fields

    ds = open_leaf(root, shard_id, window=window)
    ragged = digest_fields(ds)
    if not ragged:
        return []
    name_ = shard_id if window is None else f"{shard_id}, window {window}"
    out = [f"sample quantiles (leaf {name_}):"]
    for name in ragged:
        payloads = ds[name].values
        filled = np.flatnonzero([len(p) > 0 for p in payloads])[:3]
        for i in filled:
            q = quantile(ds.isel(cells=[int(i)]), name, [0.1, 0.5, 0.9]).values.ravel()
            word = int(ds["morton"].values[i])
            out.append(f"  {name} cell {word}: q10={q[0]:.3f} q50={q[1]:.3f} q90={q[2]:.3f}")
    return out
