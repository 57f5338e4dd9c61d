"""Human-readable store reports: ``inspect`` (what is there) and ``verify`` (is it intact).

Verification recomputes every leaf's §5 content hashes from the decoded arrays and compares
them with the leaf's commit stamp, array by array, reporting each outcome separately:
match, mismatch (a shared array whose digest differs), extra array (present, not recorded),
missing array (recorded, not present) and unverifiable (no recorded hashes).
"""

from __future__ import annotations

import json
import warnings
from collections import Counter

import numpy as np
import zarr

from . import hive
from .hive import coverage as hcov
from .hive.hashes import array_digest, combined_digest
from .hive.stamp import read_stamp


def _leaf_arrays(root: hive.StoreRoot, leaf: str) -> dict[str, np.ndarray]:
    """Every named array under a leaf, decoded, keyed by its path relative to the leaf."""
    group = zarr.open_group(root.zarr_store(leaf, read_only=True), mode="r", zarr_format=3)
    out = {}
    with warnings.catch_warnings():  # the leaf's coverage.moc sidecar is not a zarr node
        warnings.filterwarnings("ignore", message=r"Object at .* is not recognized as a "
                                "component of a Zarr hierarchy")
        members = list(group.members(max_depth=None))
    for path, member in members:
        if isinstance(member, zarr.Array):
            out[path] = member[...]
    return out


def verify_leaf(root: hive.StoreRoot, leaf: str) -> dict:
    """Outcome of one leaf: status plus the arrays in each outcome class."""
    stamp = read_stamp(root, leaf)
    if stamp is None:
        return {"leaf": leaf, "status": "debris"}
    recorded = (stamp.get("content_hashes") or {})
    arrays_rec = recorded.get("arrays") if "arrays" in recorded else {
        k: v for k, v in recorded.items() if k != "combined"}
    if not arrays_rec:
        return {"leaf": leaf, "status": "unverifiable"}
    actual = {k: array_digest(v) for k, v in _leaf_arrays(root, leaf).items()}
    out = {
        "leaf": leaf,
        "match": sorted(k for k in actual if arrays_rec.get(k) == actual[k]),
        "mismatch": sorted(k for k in actual if k in arrays_rec and arrays_rec[k] != actual[k]),
        "extra": sorted(set(actual) - set(arrays_rec)),
        "missing": sorted(set(arrays_rec) - set(actual)),
    }
    combined_ok = recorded.get("combined") in (None, combined_digest(list(actual.values())))
    bad = out["mismatch"] or out["extra"] or out["missing"] or not combined_ok
    out["status"] = "ok" if not bad else (
        "mismatch" if out["mismatch"] else "extra array" if out["extra"]
        else "missing array" if out["missing"] else "combined mismatch")
    return out


def verify_store(store, storage_options=None) -> tuple[str, bool]:
    """Verify every leaf; returns (report text, all leaves intact)."""
    root = hive.StoreRoot(store, storage_options)
    results = [verify_leaf(root, leaf) for leaf, _ in hive.walk_leaves(root)]
    counts = Counter(r["status"] for r in results)
    lines = [f"verify {root.url}: {len(results)} leaves"]
    for r in results:
        if r["status"] == "ok":
            continue
        detail = ", ".join(f"{k}: {r[k]}" for k in ("mismatch", "extra", "missing") if r.get(k))
        lines.append(f"  {r['status']:<14} {r['leaf']}" + (f"  ({detail})" if detail else ""))
    lines.append("  " + ", ".join(f"{n} {s}" for s, n in sorted(counts.items())))
    ok = all(r["status"] in ("ok", "debris", "unverifiable") for r in results) and bool(results)
    if ok and counts.get("unverifiable"):
        lines.append(f"verified, but {counts['unverifiable']} leaves record no content hashes "
                     "(nothing to compare: unverifiable, not tampered)")
    else:
        lines.append("verified: all stamped leaves intact" if ok else "verification FAILED")
    return "\n".join(lines), ok


def inspect_store(store, *, leaves: int = 10, storage_options=None) -> str:
    """Manifest, leaf list with stamps, root coverage and sample quantiles of one leaf."""
    root = hive.StoreRoot(store, storage_options)
    manifest = hive.read_manifest(root)
    if manifest is None:
        raise FileNotFoundError(f"{root.url} holds no morton_hive.json: not a hive store")
    lines = [f"store {root.url}", "manifest:"]
    lines += ["  " + line for line in json.dumps(manifest, indent=2).splitlines()]
    found = hive.walk_leaves(root)
    stamps = [(leaf, sid, read_stamp(root, leaf)) for leaf, sid in found]
    stamped = [s for s in stamps if s[2] is not None]
    lines.append(f"leaves: {len(stamped)} stamped, {len(stamps) - len(stamped)} debris")
    for leaf, _sid, st in stamps[:leaves]:
        if st is None:
            lines.append(f"  {leaf}  DEBRIS (no commit stamp)")
            continue
        box = [b for b in (st.get("coverage") or {}).get("box", []) if b]
        lines.append(f"  {leaf}  cells_with_data={st.get('cells_with_data')} "
                     f"written_at={st.get('written_at')} box={box}")
    if len(stamps) > leaves:
        lines.append(f"  … {len(stamps) - leaves} more")
    cov = hcov.read_root_coverage(root)
    if cov:
        lines.append(f"root coverage: order {cov.get('order')}, {len(cov.get('ranges', []))} "
                     f"ranges, source {cov.get('source')}, generated {cov.get('generated_at')}")
    else:
        lines.append("root coverage: absent (readers fall back to the walk)")
    if stamped:
        lines += _sample_quantiles(root, stamped[0][1])
    return "\n".join(lines)


def _sample_quantiles(root: hive.StoreRoot, shard_id: str) -> list[str]:
    from .read import open_leaf, quantile

    ds = open_leaf(root, shard_id)
    ragged = [n for n, v in ds.data_vars.items() if "ragged" in v.attrs]
    if not ragged:
        return []
    out = [f"sample quantiles (leaf {shard_id}):"]
    for name in ragged:
        payloads = ds[name].values
        filled = np.flatnonzero([len(p) > 0 for p in payloads])[:3]
        for i in filled:
            q = quantile(ds.isel(cells=[int(i)]), name, [0.1, 0.5, 0.9]).values.ravel()
            word = int(ds["morton"].values[i])
            out.append(f"  {name} cell {word}: q10={q[0]:.3f} q50={q[1]:.3f} q90={q[2]:.3f}")
    return out
