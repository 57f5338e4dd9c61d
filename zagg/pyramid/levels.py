"""Sparse cells of one pyramid resolution, and the one fold engine that coarsens them.

A :class:`Level` holds, per field, the cells that carry a value at one cell order (their
words, ascending, and the stored values: an array, or :class:`~zagg.reducers.partials.Digests`).
Everything here scales with occupied cells. :func:`coarsen` folds the levels of several
contributors (a leaf's cells, the four children of a node) into their ancestors at a
coarser order: parent cells are a :class:`~zagg.reducers.partials.Groups` over the ancestor words,
and each field's values fold through its reducer's :class:`~zagg.reducers.Fold` — the
only fold implementation, which columns, overviews and the sweep all call. A packed field
is weighted by its ``of`` digest's per-cell weight, with the §4.3 guard rail: a
contributor lacking the word blanks the parent cells it reaches, one lacking the divisor
adds nothing for the field; both are recorded as ``demotions``. :func:`concat` joins
contributors of disjoint spans at the same order (a gather).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

import numpy as np

from zagg import grid as G
from zagg.kernels.fold import sort_points
from zagg.reducers import records as reducers
from zagg.reducers.partials import Digests, Groups


@dataclass
class FieldCells:
    """The cells of one field holding a value: ``words`` ascending, ``values`` aligned."""

    words: np.ndarray
    values: object  # np.ndarray of the stored dtype, or Digests

    def __len__(self) -> int:
        return int(self.words.size)


@dataclass
class Level:
    """Every composable field's cells at cell order ``order``."""

    order: int
    fields: dict[str, FieldCells] = field(default_factory=dict)

    def n_cells(self) -> int:
        """Cells holding a value in any field."""
        parts = [f.words for f in self.fields.values() if len(f)]
        return int(np.unique(np.concatenate(parts)).size) if parts else 0


@dataclass(frozen=True)
class Law:
    """How one field folds: its reducer's fold, stored dtype and fold options."""

    name: str
    fold: reducers.Fold
    kind: str  # dense | ragged
    dtype: np.dtype
    opts: dict
    of: str | None = None  # the divisor digest of a packed field
    locations: str | None = None  # the location-word sibling of a located digest
    times: str | None = None  # the time-word sibling of a timed digest (spec §8.3)

    @classmethod
    def of_entry(cls, name: str, entry: dict) -> Law | None:
        """The law of a manifest field entry (spec §4.5), None for class none. The entry's
        ``function`` names the reducer; an entry without one (another writer's) is read by
        its class and method."""
        if entry.get("class") in (None, "none"):
            return None
        function = entry.get("function")
        if function not in reducers.REGISTRY:
            function = _by_method(entry)
            if function is None:
                return None
        red = reducers.get(function)
        fold = red.pyramid_fold
        if fold is None:
            return None
        if red.kind == "ragged":
            located = bool(entry.get("location"))
            timed = entry.get("temporal") == "per-centroid"
            opts = {
                "delta": int(entry.get("overview_delta") or entry["delta"]),
                "weights": entry.get("weights", "counts"),
                "located": located,
                "timed": timed,
            }
            return cls(
                name,
                fold,
                "ragged",
                np.dtype(object),
                opts,
                locations=f"{name}_locations" if located else None,
                times=f"{name}_times" if timed else None,
            )
        return cls(name, fold, "dense", np.dtype(entry["dtype"]), {}, entry.get("of"))


def _by_method(entry: dict) -> str | None:
    """The built-in reducer of a field entry's class and fold method (None: unknown)."""
    method = entry.get("method")
    if method == "sum":
        kind = np.dtype(entry.get("dtype") or "int64").kind
        return "count" if kind in "iu" else "sum"
    return {
        "min": "min",
        "max": "max",
        "tdigest_kway": "tdigest",
        "composition_kway": "composition",
    }.get(method)


#: a digest budget no cell reaches: a fold at it is the cells' lossless sorted union
LOSSLESS = 2**62


def lossless(laws: dict[str, Law]) -> dict[str, Law]:
    """The digest laws at :data:`LOSSLESS`: their fold keeps every centroid, sorted."""
    return {
        n: dataclasses.replace(law, opts={**law.opts, "delta": LOSSLESS})
        for n, law in laws.items()
        if law.kind == "ragged"
    }


def regroups_exactly(law: Law) -> bool:
    """Whether a field's fold of its folds is its fold, to the bit: min, max and integer
    counts (a float sum's rounding depends on how the cells are grouped)."""
    if law.kind != "dense" or law.fold.needs_divisor:
        return False
    return law.fold.method in ("min", "max") or law.fold is reducers.FOLD_COUNT


def single_observations(law: Law, cells: FieldCells | None) -> bool:
    """Whether a digest field's cells hold single observations only (every weight 1, no
    NaN mean, no location or time words riding along): their lossless fold is their
    values sorted (:func:`point_union`)."""
    if law.kind != "ragged" or cells is None or law.opts.get("weights") == "flux":
        return False
    d = cells.values
    if d.locs is not None or d.times is not None:
        return False
    if d.weights is not None and not (d.weights.size == 0 or np.all(d.weights == 1)):
        return False
    return not np.isnan(d.means[d.offsets[0] : d.offsets[-1]]).any()


def point_union(cells: FieldCells, order: int) -> FieldCells:
    """Digest cells of single observations (:func:`single_observations`) gathered into
    their ancestors at ``order``, each ancestor's values sorted: the cells' fold at
    :data:`LOSSLESS` (the same values in the same order), by one sort of the rows
    instead of a merge of every cell's run."""
    d = cells.values
    anc = G.ancestor(cells.words, order)
    if not anc.size:
        return FieldCells(anc, Digests(d.means[:0], None, np.zeros(1, np.int64)))
    _, starts = _distinct(anc)
    offsets = d.offsets[np.append(starts, anc.size)] - d.offsets[0]
    means = sort_points(d.means[d.offsets[0] : d.offsets[-1]], offsets)
    return FieldCells(anc[starts], Digests(means, None, offsets))


def laws_of(fields: dict[str, dict]) -> dict[str, Law]:
    """The fold laws of a composability map, composable fields only, divisors first."""
    laws = {n: law for n, e in fields.items() if (law := Law.of_entry(n, e)) is not None}
    return dict(sorted(laws.items(), key=lambda kv: kv[1].fold.needs_divisor))


# -- digests -------------------------------------------------------------------------------
def digests_concat(parts: list[Digests]) -> Digests:
    """Digests of several pieces back to back."""
    if len(parts) == 1:
        return parts[0]
    means = np.concatenate([d.means for d in parts])
    unit = all(d.weights is None for d in parts)
    weights = None if unit else np.concatenate([d.weights_or_ones() for d in parts])
    sizes = np.concatenate([np.diff(d.offsets) for d in parts])
    offsets = np.concatenate(([0], np.cumsum(sizes))).astype(np.int64)
    locs = None if parts[0].locs is None else np.concatenate([d.locs for d in parts])
    times = None if parts[0].times is None else np.concatenate([d.times for d in parts])
    return Digests(means, weights, offsets, locs, times)


def digests_take(d: Digests, index: np.ndarray) -> Digests:
    """Cells ``index`` of ``d``, in that order."""
    sizes = np.diff(d.offsets)[index]
    starts = d.offsets[:-1][index]
    rows = np.repeat(starts - np.concatenate(([0], np.cumsum(sizes)[:-1])), sizes) + np.arange(
        int(sizes.sum())
    )
    weights = None if d.weights is None else d.weights[rows]
    locs = None if d.locs is None else d.locs[rows]
    times = None if d.times is None else d.times[rows]
    offsets = np.concatenate(([0], np.cumsum(sizes))).astype(np.int64)
    return Digests(d.means[rows], weights, offsets, locs, times)


def digest_weights(d: Digests) -> np.ndarray:
    """Each cell's total weight (float64)."""
    w = d.weights_or_ones().astype(np.float64)
    cum = np.concatenate(([0.0], np.cumsum(w)))
    return cum[d.offsets[1:]] - cum[d.offsets[:-1]]


def _take(values, index):
    return digests_take(values, index) if isinstance(values, Digests) else values[index]


def _concat_values(parts):
    if isinstance(parts[0], Digests):
        return digests_concat(parts)
    return np.concatenate(parts)


def slice_level(level: Level, order: int, lo: int, hi: int) -> Level:
    """The cells of ``level`` whose ancestor word at ``order`` is in ``[lo, hi)``."""
    out = Level(level.order)
    for name, fc in level.fields.items():
        anc = G.ancestor(fc.words, order)
        # the bounds as words: a list of Python ints would be compared as float64, which
        # cannot tell a northern word (below 2**63) from the next one
        a, b = np.searchsorted(anc, np.array([lo, hi], dtype=np.uint64))
        if isinstance(fc.values, Digests):
            values = fc.values.take(int(a), int(b))
        else:
            values = fc.values[a:b]
        out.fields[name] = FieldCells(fc.words[a:b], values)
    return out


def blocks(level: Level, order: int, rows: int) -> list[tuple[int, int]]:
    """Ranges ``[lo, hi)`` of ancestor words at ``order`` that split ``level`` into pieces
    of about ``rows`` digest centroids (a cell at ``order`` is never split)."""
    # each field's ancestors are ascending: its distinct ones first, then their union
    spans = {n: _distinct(G.ancestor(fc.words, order)) for n, fc in level.fields.items() if len(fc)}
    if not spans:
        return []
    anc = np.unique(np.concatenate([a[starts] for a, starts in spans.values()]))
    digests = [n for n in spans if isinstance(level.fields[n].values, Digests)]
    if not digests or anc.size == 1:
        return [(int(anc[0]), int(anc[-1]) + 1)]
    weight = np.zeros(anc.size, np.int64)
    for n in digests:
        a, starts = spans[n]
        sizes = np.add.reduceat(np.diff(level.fields[n].values.offsets), starts)
        weight[np.searchsorted(anc, a[starts])] += sizes
    cut = np.flatnonzero(np.diff(np.cumsum(weight) // max(rows, 1)) > 0) + 1
    starts = np.concatenate(([0], cut)).astype(np.int64)
    ends = np.append(starts[1:], anc.size)
    return [(int(anc[a]), int(anc[e - 1]) + 1) for a, e in zip(starts, ends, strict=True)]


def _distinct(ascending: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """An ascending array and where each of its distinct values first occurs."""
    first = np.empty(ascending.size, bool)
    first[:1] = True
    np.not_equal(ascending[1:], ascending[:-1], out=first[1:])
    return ascending, np.flatnonzero(first)


# -- the fold engine -----------------------------------------------------------------------
def concat(levels: list[Level], order: int) -> Level:
    """Contributors of disjoint spans at the same ``order`` joined (a gather): no value
    changes, cells come out in ascending word order."""
    out = Level(order)
    names = sorted({n for lv in levels for n in lv.fields})
    for name in names:
        parts = [lv.fields[name] for lv in levels if name in lv.fields and len(lv.fields[name])]
        if not parts:
            continue
        words = np.concatenate([p.words for p in parts])
        values = _concat_values([p.values for p in parts])
        if words.size > 1 and np.any(words[1:] <= words[:-1]):
            perm = np.argsort(words, kind="stable")
            words, values = words[perm], _take(values, perm)
        out.fields[name] = FieldCells(words, values)
    return out


def gather(levels: list[Level], order: int, laws: dict[str, Law]) -> tuple[Level, list]:
    """:func:`concat` of contributors under the packed guard rail: a contributor's word
    without its divisor digest is dropped, one's divisor without the word leaves those
    cells at the fill word; both are recorded as ``demotions`` (spec §4.3)."""
    demotions = []
    kept = []
    for name, law in laws.items():
        if not law.fold.needs_divisor:
            continue
        fired = {"word-missing": [0, 0], "divisor-missing": [0, 0]}
        for lv in levels:
            word, of = lv.fields.get(name), lv.fields.get(law.of)
            if word is None and of is not None and len(of):
                fired["word-missing"][0] += 1
                fired["word-missing"][1] += len(of)
            elif of is None and word is not None and len(word):
                fired["divisor-missing"][0] += 1
                fired["divisor-missing"][1] += len(word)
        for reason, (count, cells) in fired.items():
            if count:
                demotions.append(
                    {
                        "field": name,
                        "class": "packed",
                        "reason": reason,
                        "contributors": count,
                        "of": law.of,
                        "cells": cells,
                    }
                )
        kept.append((name, law.of))
    out = concat(levels, order)
    for name, of in kept:  # a word without its divisor is dropped
        for lv in levels:
            if lv.fields.get(of) is None and lv.fields.get(name) is not None and name in out.fields:
                drop = np.isin(out.fields[name].words, lv.fields[name].words)
                cells = out.fields[name]
                out.fields[name] = FieldCells(cells.words[~drop], cells.values[~drop])
    demotions.sort(key=lambda d: (d["field"], d["reason"]))
    return out, demotions


def coarsen(levels: list[Level], order: int, laws: dict[str, Law]) -> tuple[Level, list]:
    """The contributors' cells folded into their ancestors at ``order``: one k-way fold
    per parent cell and field through the field's law. Returns the level and the
    ``demotions`` records of packed fields (spec §4.3; empty when the rail stayed quiet)."""
    out = Level(order)
    demotions = []
    for name, law in laws.items():
        have = [lv.fields.get(name) for lv in levels]
        if law.fold.needs_divisor:
            cells, record = _coarsen_packed(name, law, levels, order)
            if record:
                demotions.extend(record)
        else:
            parts = [p for p in have if p is not None and len(p)]
            cells = _fold(law, parts, order, None) if parts else None
        if cells is not None and len(cells):
            out.fields[name] = cells
    demotions.sort(key=lambda d: (d["field"], d["reason"]))
    return out, demotions


def _fold(law: Law, parts: list[FieldCells], order: int, divisor) -> FieldCells:
    words = np.concatenate([p.words for p in parts])
    groups, parents = Groups.of(G.ancestor(words, order))
    values = law.fold.combine([p.values for p in parts], groups, law.opts, divisor)
    if law.kind == "dense":
        values = _stored(values, law)
    return FieldCells(parents, values)


def _stored(values: np.ndarray, law: Law) -> np.ndarray:
    """Folded values at the field's stored dtype (a wider sum wraps, spec §4.4)."""
    dtype = law.dtype.newbyteorder("<")
    with np.errstate(over="ignore", invalid="ignore"):
        return np.asarray(values).astype(dtype)


def _coarsen_packed(name: str, law: Law, levels: list[Level], order: int):
    """A packed field's fold weighted by its ``of`` digest, with the demotions rail."""
    parts, divisor, blanked = [], [], []
    fired = {"word-missing": 0, "divisor-missing": 0}
    cells = {"word-missing": set(), "divisor-missing": set()}
    for lv in levels:
        word, of = lv.fields.get(name), lv.fields.get(law.of)
        if word is None and of is None:
            continue
        if word is None:  # the divisor without the word: blank what it reaches
            fired["word-missing"] += 1
            reach = G.ancestor(of.words, order)
            blanked.append(reach)
            cells["word-missing"].update(reach.tolist())
            continue
        if of is None:  # the word without its divisor: it adds nothing
            fired["divisor-missing"] += 1
            cells["divisor-missing"].update(G.ancestor(word.words, order).tolist())
            continue
        if not len(word):
            continue
        n = np.zeros(len(word), np.int64)
        at = np.searchsorted(of.words, word.words)
        ok = at < len(of)
        ok[ok] = of.words[at[ok]] == word.words[ok]
        n[ok] = np.rint(digest_weights(of.values)[at[ok]]).astype(np.int64)
        parts.append(word)
        divisor.append(n)
    result = _fold(law, parts, order, divisor) if parts else None
    if result is not None and blanked:
        keep = ~np.isin(result.words, np.concatenate(blanked))
        result = FieldCells(result.words[keep], result.values[keep])
    if result is not None:
        zero = np.asarray(result.values) != 0  # an all-empty part set folds to the 0 word
        result = FieldCells(result.words[zero], result.values[zero])
    records = []
    for reason, count in fired.items():
        if not count:
            continue
        rec = {
            "field": name,
            "class": "packed",
            "reason": reason,
            "contributors": count,
            "of": law.of,
        }
        covered = set() if result is None else set(result.words.tolist())
        lost = cells[reason] - covered if reason == "divisor-missing" else cells[reason]
        if lost:
            rec["cells"] = len(lost)
        records.append(rec)
    return result, records
