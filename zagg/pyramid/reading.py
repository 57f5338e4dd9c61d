"""Read a committed pyramid artifact's resolution group back as a sparse :class:`Level`.

The sweep reads leaf columns (its gather source) and the overviews of children it does
not refold through the reader's own array loaders (:mod:`zagg.read`), one whole group at
a time: a group holds ``4^(r - node)`` cells, and only the cells holding a value become
the level.
"""

from __future__ import annotations

import numpy as np

from zagg.hive.layout import MORTON, FieldSpec
from zagg.hive.loaders import load_field
from zagg.hive.schema import held, leaf_group, schema
from zagg.pyramid.column import shard_words
from zagg.pyramid.levels import FieldCells, Law, Level
from zagg.reducers.partials import Digests


def group_schema(root, rel: str, r: int) -> dict:
    """``{name: (Field, attrs)}`` of one artifact group's arrays, every array checked."""
    _attrs, arrays = leaf_group(root, rel, str(r), root.url_of(rel))
    return schema(arrays)


def specs_of(fields: dict, laws: dict[str, Law]) -> dict[str, FieldSpec]:
    """Array specs (kind, dtype, fill, attrs) of the composable fields of a group schema
    (and their location and time siblings)."""
    out = {}
    names = list(laws) + [law.locations for law in laws.values() if law.locations]
    names += [law.times for law in laws.values() if law.times]
    for name in names:
        f = fields.get(name)
        if f is None:
            continue
        if f.ragged:
            out[name] = FieldSpec("ragged", np.dtype(object), b"", dict(f.attrs))
        else:
            out[name] = FieldSpec("dense", f.dtype, f.fill, dict(f.attrs))
    return out


def payload_digests(
    payloads: np.ndarray, locations: np.ndarray | None = None, times: np.ndarray | None = None
) -> Digests:
    """t-digest payloads (``[mean, weight]`` float32 rows per cell) as centroid columns,
    with each centroid's location word and time word from the located and timed siblings'
    cells."""
    sizes = np.fromiter((len(p) // 8 for p in payloads), np.int64, count=payloads.size)
    data = b"".join(payloads.tolist())
    rows = np.frombuffer(data, "<f4").reshape(-1, 2)
    offsets = np.concatenate(([0], np.cumsum(sizes))).astype(np.int64)
    if locations is None and times is None:
        return Digests.of(rows[:, 0].copy(), rows[:, 1].copy(), offsets)
    locs, words = (None if w is None else _words(w) for w in (locations, times))
    return Digests(rows[:, 0].copy(), rows[:, 1].copy(), offsets, locs, words)


def _words(cells: np.ndarray) -> np.ndarray:
    """A word sibling's cells as one uint64 column."""
    if not len(cells):
        return np.zeros(0, np.uint64)
    return np.concatenate([np.asarray(w, np.uint64) for w in cells])


def group_level(root, rel: str, node_id: str, r: int, laws: dict[str, Law]) -> Level:
    """Group ``r`` of the artifact at ``rel`` (a column or an overview at ``node_id``) as a
    level of its cells holding a value; a composable field the group lacks is absent."""
    from zagg import grid as G

    fields = group_schema(root, rel, r)
    k = G.id_order(node_id)
    out = Level(r)
    where = root.url_of(rel)
    for name in laws:
        f = fields.get(name)
        if f is None or name == MORTON:
            continue
        values = load_field(root, rel, str(r), f, None, where, None, None)
        ranks = np.flatnonzero(held(values, f.fill))
        words = shard_words(node_id, k, r, ranks)
        if f.ragged:
            siblings = [laws[name].locations, laws[name].times]
            if any(s is not None and s not in fields for s in siblings):
                continue  # a payload without its words is not a located or timed level
            locs, times = (
                None
                if s is None
                else load_field(root, rel, str(r), fields[s], ranks, where, None, None)
                for s in siblings
            )
            out.fields[name] = FieldCells(words, payload_digests(values[ranks], locs, times))
        else:
            out.fields[name] = FieldCells(words, np.asarray(values[ranks]))
    return out
