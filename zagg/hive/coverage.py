"""Coverage (``morton-moc/1``): the tier-0 box, the leaf bitmap sidecar, the root ranges MOC.

All three index a shard subtree by *rank*: the position of a cell on the leaf's cells axis,
which is the base-4 value of its decimal digit tail below the shard (digits 1..4 -> 0..3),
i.e. ascending packed-word order. Ranks make the arithmetic independent of the cell order
(28 and 29 included) and the decimal rendering exact.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterable

import numpy as np
import zstandard

from zagg import grid
from zagg.errors import ZaggWarning
from zagg.hive.manifest import path_grouping, read_manifest
from zagg.hive.paths import ROOT_COVERAGE_KEY, leaf_path
from zagg.hive.stamp import now_iso, read_stamp
from zagg.hive.storage import as_root
from zagg.hive.walk import walk_leaves

SPEC = "morton-moc/1"
BOX_SLOTS = 4
BITMAP_ZSTD_LEVEL = 3


# -- tier 0: the box ---------------------------------------------------------------------
def rank_id(shard_id: str, rank: int, depth: int) -> str:
    """Decimal id of the cell ``depth`` levels under ``shard_id`` at rank ``rank``."""
    digits = []
    for _ in range(depth):
        digits.append(str(rank % 4 + 1))
        rank //= 4
    return shard_id + "".join(reversed(digits))


def _common_levels(lo: int, hi: int, depth: int) -> int:
    """How many leading base-4 digits two ranks at ``depth`` share."""
    level = 0
    while level < depth and (lo >> (2 * (depth - level - 1))) == (hi >> (2 * (depth - level - 1))):
        level += 1
    return level


def box(shard_id: str, occupied: np.ndarray, depth: int) -> list[str | None]:
    """The canonical <= 4-member cover of the occupied cells, padded to 4 slots with None.

    ``occupied`` is the boolean occupancy of the shard's ``4**depth`` cells. The cover is
    the occupied children of the cells' deepest common ancestor, each tightened to the
    deepest common ancestor of the occupied cells inside it. Raises on an empty shard.
    """
    return box_of_ranks(shard_id, np.flatnonzero(np.asarray(occupied, dtype=bool)), depth)


def box_of_ranks(shard_id: str, ranks: np.ndarray, depth: int) -> list[str | None]:
    """:func:`box` from the ascending ranks of the occupied cells."""
    ranks = np.asarray(ranks, dtype=np.int64)
    if ranks.size == 0:
        raise ValueError(f"shard {shard_id} has no occupied cell: an empty shard has no box")
    lo, hi = int(ranks[0]), int(ranks[-1])
    if lo == hi:
        members = [rank_id(shard_id, lo, depth)]
    else:
        level = _common_levels(lo, hi, depth)
        shift = 2 * (depth - level - 1)
        child = ranks >> shift
        members = []
        for c in np.unique(child):
            group = ranks[child == c]
            g_lo, g_hi = int(group[0]), int(group[-1])
            g_level = _common_levels(g_lo, g_hi, depth)
            members.append(rank_id(shard_id, g_lo >> (2 * (depth - g_level)), g_level))
    return members + [None] * (BOX_SLOTS - len(members))


# -- tier 1: the bitmap sidecar -------------------------------------------------------------
def raw_bitmap_size(depth: int) -> int:
    """Exact raw size of a depth-``depth`` bitmap: ceil(4**depth / 8) bytes."""
    return -(-(4**depth) // 8)


def encode_bitmap(occupied: np.ndarray) -> tuple[bytes, int]:
    """One zstd stream over the MSB-first packed occupancy bits; returns (payload, raw size)."""
    raw = np.packbits(np.asarray(occupied, dtype=bool), bitorder="big").tobytes()
    payload = zstandard.ZstdCompressor(level=BITMAP_ZSTD_LEVEL).compress(raw)
    return payload, len(raw)


def encode_bitmap_ranks(ranks: np.ndarray, depth: int) -> tuple[bytes, int]:
    """:func:`encode_bitmap` from the ascending ranks of the occupied cells."""
    ranks = np.asarray(ranks, dtype=np.int64)
    raw = np.zeros(raw_bitmap_size(depth), dtype=np.uint8)
    np.bitwise_or.at(raw, ranks >> 3, (0x80 >> (ranks & 7)).astype(np.uint8))
    payload = zstandard.ZstdCompressor(level=BITMAP_ZSTD_LEVEL).compress(raw.tobytes())
    return payload, raw.size


def decode_bitmap(payload: bytes, depth: int) -> np.ndarray:
    """Occupancy (bool, ``4**depth``) from a sidecar payload; corrupt or mis-sized raises."""
    expected = raw_bitmap_size(depth)
    try:
        raw = zstandard.ZstdDecompressor().decompress(payload, max_output_size=expected + 1)
    except zstandard.ZstdError as exc:
        raise ValueError(f"coverage bitmap is not a valid zstd stream: {exc}") from exc
    if len(raw) != expected:
        raise ValueError(
            f"coverage bitmap decompressed to {len(raw)} bytes; a depth-{depth} bitmap is "
            f"exactly {expected} bytes. The sidecar is corrupt: rewrite the leaf"
        )
    bits = np.unpackbits(np.frombuffer(raw, dtype=np.uint8), bitorder="big")
    return bits[: 4**depth].astype(bool)


def leaf_envelope(
    box_members: list[str | None],
    cell_order: int,
    *,
    bitmap_nbytes: int | None = None,
    raw_nbytes: int | None = None,
    sidecar: str = "coverage.moc",
    full: bool = False,
) -> dict:
    """The stamp's ``coverage`` envelope: box-only, box plus the bitmap sidecar keys, or
    ``full`` (every cell occupied: ``encoding: "full"`` and no sidecar)."""
    if len(box_members) != BOX_SLOTS:
        raise ValueError(f"a coverage box has exactly {BOX_SLOTS} slots, got {len(box_members)}")
    envelope = {"spec": SPEC, "box": list(box_members), "cell_order": int(cell_order)}
    envelope["source"] = "worker"
    if full:
        envelope["encoding"] = "full"
    elif bitmap_nbytes is not None:
        envelope.update(
            encoding="bitmap",
            sidecar=sidecar,
            nbytes=int(bitmap_nbytes),
            raw_nbytes=int(raw_nbytes),
        )
    return envelope


def parse_leaf_envelope(stamp: dict | None) -> dict | None:
    """The stamp's coverage envelope, or None when absent or of an unknown spec."""
    coverage = stamp.get("coverage") if isinstance(stamp, dict) else None
    if not isinstance(coverage, dict) or coverage.get("spec") != SPEC:
        return None
    return coverage


def listed_leaves(
    root, shard_order: int, discover: str = "auto", grouping: int = 1
) -> list[tuple[str, str]]:
    """``(leaf prefix, shard id)`` of the leaves a store lists, in ascending word order:
    from the root ``coverage.moc`` when it is usable (``discover`` "auto" or "moc"), else
    by the discovery walk ("walk", or "auto" without a usable root coverage); ``grouping``
    is the tree's ``path_grouping``."""
    root = as_root(root)
    envelope = None if discover == "walk" else read_root_coverage(root)
    if envelope is None and discover == "moc":
        raise ValueError(f"{root.url} has no usable root coverage.moc; use discover='walk'")
    if envelope is not None and envelope["order"] == shard_order:
        ids = expand_ranges(envelope)
        words = grid.from_decimal(ids)
        return [
            (leaf_path(ids[i], grouping=grouping), ids[i]) for i in np.argsort(words, kind="stable")
        ]
    found = walk_leaves(root, grouping=grouping)
    for rel, sid in found:
        if grid.id_order(sid) != shard_order:
            raise ValueError(
                f"{root.url_of(rel)} is an order-{grid.id_order(sid)} leaf in a store "
                f"whose manifest declares shard_order {shard_order}"
            )
    return found


# -- root: the ranges MOC ---------------------------------------------------------------
def _base_and_rank(shard_id: str) -> tuple[str, int]:
    sign = 1 if shard_id.startswith("-") else 0
    base, tail = shard_id[: sign + 1], shard_id[sign + 1 :]
    rank = 0
    for ch in tail:
        rank = rank * 4 + int(ch) - 1
    return base, rank


def ranges(shard_ids: Iterable[str], order: int) -> list[list[str]]:
    """Inclusive ``[first, last]`` runs of same-order shards within one base cell.

    Runs are consecutive in rank and listed in ascending packed-word order (so northern
    base cells come before southern ones).
    """
    ids = sorted(set(shard_ids))
    for sid in ids:
        if grid.id_order(sid) != order:
            raise ValueError(
                f"shard {sid} is order {grid.id_order(sid)}, not the MOC order {order}"
            )
    if not ids:
        return []
    words = grid.from_decimal(ids)
    ids = [ids[i] for i in np.argsort(words, kind="stable")]
    runs: list[list[str]] = []
    prev_base, prev_rank = None, None
    for sid in ids:
        base, rank = _base_and_rank(sid)
        if runs and base == prev_base and rank == prev_rank + 1:
            runs[-1][1] = sid
        else:
            runs.append([sid, sid])
        prev_base, prev_rank = base, rank
    return runs


def expand_ranges(envelope: dict) -> list[str]:
    """Every shard id a ranges envelope lists; malformed ranges raise."""
    order = int(envelope["order"])
    out = []
    for first, last in envelope["ranges"]:
        b0, r0 = _base_and_rank(grid.validate_id(first))
        b1, r1 = _base_and_rank(grid.validate_id(last))
        if b0 != b1 or r0 > r1 or grid.id_order(first) != order or grid.id_order(last) != order:
            raise ValueError(f"malformed coverage range [{first}, {last}] at order {order}")
        out.extend(rank_id(b0, r, order) for r in range(r0, r1 + 1))
    return out


def root_envelope(
    shard_ids: Iterable[str], order: int, *, source: str = "dispatcher", generated_at=None
) -> dict:
    """The store-root ranges MOC object."""
    return {
        "spec": SPEC,
        "encoding": "ranges",
        "order": int(order),
        "source": source,
        "generated_at": generated_at or now_iso(),
        "ranges": ranges(shard_ids, order),
    }


def parse_root_envelope(payload: object) -> dict | None:
    """A usable root ranges MOC, or None (it is a cache: unknown specs read as absent)."""
    ok = (
        isinstance(payload, dict)
        and payload.get("spec") == SPEC
        and payload.get("encoding") == "ranges"
        and isinstance(payload.get("order"), int)
        and isinstance(payload.get("ranges"), list)
    )
    return payload if ok else None


def depth_of(n_cells: int) -> int:
    depth = (int(n_cells).bit_length() - 1) // 2
    if n_cells <= 0 or 4**depth != n_cells:
        raise ValueError(f"{n_cells} cells is not a power of four")
    return depth


# -- root MOC I/O (client side) -------------------------------------------------------------
def read_root_coverage(root) -> dict | None:
    """The root ranges MOC if present and usable, else None (unusable reads as absent)."""
    try:
        payload = as_root(root).read_json(ROOT_COVERAGE_KEY)
    except ValueError:
        return None
    return parse_root_envelope(payload)


def update_root_coverage(
    root,
    shard_ids: Iterable[str],
    order: int,
    *,
    source: str = "dispatcher",
    temporal: dict | None = None,
) -> dict | None:
    """Union the root ranges MOC with ``shard_ids``; returns the object left standing.

    Any number of runs may do this at once: the union is one compare-and-swap update
    (:meth:`StoreRoot.update_json`), which re-reads and unions again whenever another
    writer changed the object in between, so no run's shards are lost to another's write.
    Fail-open: the object is a regenerable cache, so an I/O failure warns and returns None
    rather than failing the run. Ids at the wrong order raise before any I/O. An existing
    object at a different order (or unusable) is replaced, with a warning. A standing
    ``temporal`` section is kept; ``temporal`` (a windowed run's section,
    :mod:`zagg.hive.rootsection`) is composed with it.
    """
    mine = set(shard_ids)
    ranges(mine, order)  # validates every id against the order
    root = as_root(root)
    try:
        return root.update_json(
            ROOT_COVERAGE_KEY,
            lambda standing: _union(root, standing, mine, order, source, temporal),
            replace_unreadable=True,
        )
    except Exception as exc:  # fail-open by contract
        warnings.warn(
            f"root coverage at {root.url} was not updated: {exc}", ZaggWarning, stacklevel=2
        )
        return None


def finish_root_coverage(root, records: list[dict], order: int) -> dict | None:
    """After a run: the root coverage (and a windowed store's temporal section) unioned
    with every unit the run covers, given as leaf records (``shard_id``, ``window``,
    ``temporal``): those it wrote and those it found current. A re-run after a killed run
    lists this way the leaves the killed run stamped before it could publish them."""
    if not records:
        return None
    from zagg.hive.rootsection import root_temporal

    root = as_root(root)
    return update_root_coverage(
        root,
        [r["shard_id"] for r in records],
        order,
        temporal=root_temporal(root, records, order),
    )


def _union(
    root, standing, mine: set, order: int, source: str, temporal: dict | None = None
) -> dict | None:
    """The root coverage ``standing`` unioned with the shards ``mine`` (and a temporal
    section composed with the standing one); None when it already says all that."""
    ids = set(mine)
    existing = parse_root_envelope(standing)
    if existing is not None and existing["order"] != order:
        warnings.warn(
            f"root coverage at {root.url} is at order {existing['order']}, not {order}; "
            "replacing it",
            ZaggWarning,
            stacklevel=4,
        )
        existing = None
    if existing is not None:
        try:
            ids |= set(expand_ranges(existing))
        except ValueError as exc:
            warnings.warn(
                f"root coverage at {root.url} is malformed ({exc}); replacing it",
                ZaggWarning,
                stacklevel=4,
            )
    envelope = root_envelope(ids, order, source=source)
    held = existing.get("temporal") if existing is not None else None
    if temporal is not None:
        from zagg.hive.rootsection import compose_section

        envelope["temporal"] = compose_section(held, temporal)
    elif held is not None:
        envelope["temporal"] = held
    if existing is not None and same_but_times(
        existing, {**envelope, "source": existing.get("source")}
    ):
        return None  # nothing new (whoever adds it): a re-run leaves the object as it is
    return envelope


def same_but_times(a, b) -> bool:
    """Whether two JSON objects agree but for their ``generated_at`` times (at any depth)."""
    if isinstance(a, dict) and isinstance(b, dict):
        keys = (set(a) | set(b)) - {"generated_at"}
        return all(k in a and k in b and same_but_times(a[k], b[k]) for k in keys)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(same_but_times(x, y) for x, y in zip(a, b, strict=True))
    return a == b


def refresh_root_coverage(root) -> dict:
    """Rebuild the root MOC from a walk of the stamped leaves (``source: "refresh"``)."""
    root = as_root(root)
    manifest = read_manifest(root)
    if manifest is None:
        raise ValueError(f"no morton_hive.json at {root.url}: not a hive store")
    order = manifest["shard_order"]
    found = list(walk_leaves(root))
    if manifest.get("temporal") is not None:
        from zagg.hive.walk import walk_windows

        found += [leaf for leaves in walk_windows(root).values() for leaf in leaves]
    ids = {sid for rel, sid in found if read_stamp(root, rel) is not None}
    ids = {s for s in ids if grid.id_order(s) == order}
    walked = {sid for _, sid in found}
    grouping = path_grouping(manifest)

    def rebuild(standing):
        # a run that published while the walk ran keeps its shards: a listed shard the
        # walk did not see stays when its leaf carries a stamp now
        kept = set()
        listed = parse_root_envelope(standing)
        if listed is not None and listed["order"] == order:
            try:
                extra = set(expand_ranges(listed)) - walked
            except ValueError:
                extra = set()
            kept = {s for s in extra if read_stamp(root, leaf_path(s, grouping=grouping))}
        return root_envelope(ids | kept, order, source="refresh")

    return root.update_json(ROOT_COVERAGE_KEY, rebuild, replace_unreadable=True)
