"""Write one shard's leaf: validate → template → arrays → coverage → stamp (→ pointer).

A leaf write takes one :class:`LeafSpec` (what every leaf of a run shares: the store, the
grid, the arrays' storage and attrs, how leaves are written; validated once) and the
shard's :class:`ShardLeaf` (its occupied cells and identity): :func:`write_shard_leaf`, what
the aggregation's write tasks call. :func:`write_leaf_cells` builds both from plain
arguments, and :func:`write_leaf` from dense per-cell arrays; all three write the same
bytes. Everything is validated before the first byte is written (bad ids, wrong lengths or
dtypes, malformed ragged declarations raise with nothing on the store).

A versioned leaf (the default of runs) writes a fresh version subgroup, stamps it, then
moves the leaf root's ``current`` pointer in one PUT: a crash at any point leaves the
previous version current, and concurrent writers never tear each other's leaf. An
unversioned leaf is rewritten in place under a claim: a retry clears the prefix and writes
the whole leaf again, so a crash leaves either the previous state or an unstamped prefix
(debris) that the next write heals. The stamp is always the last write of a leaf's
objects; the granule and stats sidecars follow it.

On an object store a leaf's write waits for few round trips: its objects go up together,
then the stamp (and the pointer). The listing that finds a previous attempt to clear (an
unversioned rewrite) runs beside the encoding, and is skipped where the caller knows the
prefix is empty (a store this write created).
"""

from __future__ import annotations

import contextlib
import time
import warnings
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

import numpy as np

from zagg import grid as _grid
from zagg.errors import ZaggWarning
from zagg.grid import Grid
from zagg.hive import cells as cells_
from zagg.hive import claims, coverage, encode, hashes, paths, stamp, stats, versions
from zagg.hive.cells import DenseCells, RaggedCells
from zagg.hive.layout import MORTON, FieldSpec, field_specs, template_documents
from zagg.hive.parts import object_size
from zagg.hive.storage import StoreRoot, as_root, background, dumps_json


@dataclass(frozen=True)
class LeafSpec:
    """What every leaf of a run shares, validated once: the store, the grid, each array's
    storage and zarr attrs, and how leaves are written (versions, claims, sidecars)."""

    root: StoreRoot
    grid: Grid
    specs: Mapping[str, FieldSpec]  # every stored array, by name (ascending)
    morton_attrs: Mapping = field(default_factory=dict)  # the stored cell coordinate's
    semantic_hash: str | None = None  # the store's, recorded in each stats sidecar
    run_id: str | None = None  # names the run in claims, sidecars and versions
    #: each leaf is written as a fresh version named after ``run_id`` (unless its
    #: :class:`ShardLeaf` names one) and made current by its pointer
    versioned: bool = False
    write_stats: bool = True  # write each leaf's stats sidecar
    stats_extra: Mapping | None = None  # what every stats sidecar adds
    #: nothing can be under any leaf's prefix yet (the store was empty when the run began),
    #: so an unversioned rewrite lists nothing to clear
    fresh: bool = False

    @classmethod
    def of(
        cls,
        root: str | StoreRoot,
        fields: Mapping[str, dict],
        grid: Grid | Mapping,
        attrs: Mapping[str, dict] | None = None,
        **kwargs,
    ) -> LeafSpec:
        """Validated from a fields block (``{name: {kind, dtype, fill_value, ...}}``), a
        grid (or its ``{type, parent_order, chunk_inner, child_order, sharded}`` block) and
        the arrays' exact zarr attrs; ``kwargs`` set the other fields."""
        grid = grid if isinstance(grid, Grid) else Grid.from_dict(dict(grid))
        specs = field_specs(dict(fields), dict(attrs or {}))
        morton_attrs = dict((attrs or {}).get(MORTON) or {})
        return cls(as_root(root), grid, specs, morton_attrs, **kwargs)

    def version(self, leaf: ShardLeaf) -> str | None:
        """The version ``leaf`` is written as (None: in place)."""
        if leaf.version is not None:
            return versions.check_name(leaf.version)
        return versions.new_version(self.run_id) if self.versioned else None


@dataclass(frozen=True)
class ShardLeaf:
    """One shard's leaf: its occupied cells (array name → :class:`~zagg.hive.cells.DenseCells`
    or :class:`~zagg.hive.cells.RaggedCells`) and what identifies them."""

    shard_id: str
    contents: Mapping[str, DenseCells | RaggedCells]
    granule_ids: Iterable[str] | None = None  # recorded in granules.json and the stats
    granule_count: int | None = None  # the stamp's (default: len(granule_ids), else 0)
    window: str | None = None  # the time window's label: the leaf is {id}_{window}.zarr
    time_range: list[str] | None = None  # a window's first and last observation (ISO UTC)
    temporal: dict | None = None  # the leaf's temporal.toc (zagg.windows.record)
    version: str | None = None  # the version subgroup to write (None: as the spec says)


def write_leaf(
    root: str | StoreRoot,
    shard_id: str,
    arrays: Mapping[str, np.ndarray],
    fields: Mapping[str, dict],
    grid: Mapping,
    **kwargs,
) -> dict | None:
    """Write the leaf of ``shard_id`` from dense arrays and return its record; an empty
    shard writes nothing.

    ``arrays`` maps each field name (and optionally ``"morton"``, checked against the cell
    law) to a 1-D array of ``4**(c - p)`` cells in canonical nested order; dense fields as
    numpy values, ragged fields as an object array of raw payload bytes (``b""``/None when
    empty). ``fields`` is the ``{name: {kind, dtype, fill_value, ...}}`` block and ``grid``
    the ``{type, parent_order, chunk_inner, child_order, sharded}`` block; the keyword
    arguments are those of :func:`write_leaf_cells`, which writes the same bytes from the
    occupied cells alone.
    """
    spec = LeafSpec.of(root, fields, grid, kwargs.get("attrs"))
    contents = _cells_from_arrays(shard_id, arrays, spec.specs, spec.grid)
    return write_leaf_cells(root, shard_id, contents, fields, grid, **kwargs)


def write_leaf_cells(
    root: str | StoreRoot,
    shard_id: str,
    contents: Mapping[str, DenseCells | RaggedCells],
    fields: Mapping[str, dict],
    grid: Mapping,
    *,
    attrs: Mapping[str, dict] | None = None,
    granule_count: int | None = None,
    granule_ids: Iterable[str] | None = None,
    semantic_hash: str | None = None,
    write_stats: bool = True,
    stats_extra: Mapping | None = None,
    fresh: bool = False,
    version: str | None = None,
    run_id: str | None = None,
    window: str | None = None,
    time_range: list[str] | None = None,
    temporal: dict | None = None,
    derived: Callable[[dict], object] | None = None,
) -> dict | None:
    """Write the leaf of ``shard_id`` from its occupied cells and return its record.

    ``contents`` maps each field to its :class:`~zagg.hive.cells.DenseCells` or
    :class:`~zagg.hive.cells.RaggedCells` (every other cell holds the fill). ``attrs`` are
    the exact zarr attrs of each array. ``granule_ids`` (when given) are recorded in the
    ``granules.json`` sibling and hashed into the stats sidecar, which is written when
    ``write_stats`` is true; both are written right after the stamp.

    With ``version`` (a :func:`zagg.hive.versions.new_version` name) the leaf is versioned:
    its objects go to the fresh subgroup ``{leaf}/{version}/``, which is stamped, and then
    one PUT of the leaf's root ``zarr.json`` mirrors that stamp and names it ``current``.
    Nothing is cleared, so a concurrent writer of the same leaf (each with its own version)
    can never tear it: the last pointer wins whole. Without ``version`` the leaf is
    rewritten in place under a claim (:mod:`zagg.hive.claims`) that refuses a second
    writer; ``fresh`` then says nothing can be under the prefix yet (the store was empty
    when this write began), so no listing looks for a previous attempt. ``run_id`` names
    the run in claims and sidecars. Everything is validated before the first write;
    returns None (writing nothing) when no cell is occupied.

    With ``window`` (a window label) the leaf is the shard's leaf of that time window,
    ``{id}_{window}.zarr`` (``morton-hive/2``): it stores no ``morton`` array (readers
    derive the coordinate), its stamp names the window and ``time_range`` (the actual
    first and last observation, ISO 8601 UTC), a leaf whose every cell is occupied
    records ``encoding: "full"`` coverage with no bitmap, and its sidecars are
    ``stats_{window}.json`` and ``granules_{window}.json``.

    ``temporal`` (a :func:`zagg.windows.record.leaf_record`) is written as the leaf's
    ``temporal.toc`` beside its arrays, before the stamp: if it cannot be written, the
    write fails and the leaf is left unstamped (its counts exist nowhere else).

    The leaf's unversioned siblings (its sidecars, and whatever ``derived`` writes when
    called with the leaf's record: the pyramid column) are written under the leaf's claim,
    which a versioned write takes (waiting while another writer holds it) just before its
    pointer PUT: the writer whose pointer lands last writes the siblings last, so they
    always describe the current version, and no two writers interleave their objects.

    A run's leaves share everything but their cells and identity: it builds one
    :class:`LeafSpec` and calls :func:`write_shard_leaf` per shard, which writes the same
    bytes.
    """
    spec = LeafSpec.of(
        root,
        fields,
        grid,
        attrs,
        semantic_hash=semantic_hash,
        run_id=run_id,
        write_stats=write_stats,
        stats_extra=stats_extra,
        fresh=fresh,
    )
    leaf = ShardLeaf(
        shard_id, contents, granule_ids, granule_count, window, time_range, temporal, version
    )
    return write_shard_leaf(spec, leaf, derived=derived)


def write_shard_leaf(
    spec: LeafSpec,
    leaf: ShardLeaf,
    *,
    derived: Callable[[dict], object] | None = None,
    encoded: Mapping[str, encode.EncodedArray] | None = None,
) -> dict | None:
    """Write one shard's leaf as :func:`write_leaf_cells` describes, from what every leaf
    of the run shares (``spec``) and the shard's own cells and identity (``leaf``); returns
    its record, or None (writing nothing) when no cell is occupied.

    ``encoded`` holds arrays of the leaf already encoded by :func:`encode_leaf_array`
    (elsewhere, beside each other: the CPU work of a big leaf split across tasks); the
    others are encoded here. Either way this call is the one writer of every object of
    the leaf, in the order above, stamp last."""
    t_start = time.perf_counter()
    grid, shard_id = spec.grid, leaf.shard_id
    rel = paths.leaf_path(shard_id, leaf.window)
    if _grid.id_order(shard_id) != grid.shard_order:
        raise ValueError(
            f"shard {shard_id} is order {_grid.id_order(shard_id)}, but the grid's parent_order "
            f"is {grid.shard_order}"
        )
    ids = None if leaf.granule_ids is None else stats.bare_granule_ids(leaf.granule_ids)
    granule_count = leaf.granule_count
    if granule_count is None:
        granule_count = 0 if ids is None else len(ids)
    _check_cells(shard_id, leaf.contents, spec.specs, grid)
    occupied = cells_.occupied_ranks(leaf.contents.values(), grid.cells_per_shard)
    if occupied.size == 0:
        return None
    version = spec.version(leaf)
    t_prepared = time.perf_counter()

    write = _LeafWrite(
        spec,
        leaf,
        rel,
        rel if version is None else f"{rel}/{version}",
        version,
        template_documents(grid, spec.specs, spec.morton_attrs, morton=leaf.window is None),
        occupied,
        ids,
        int(granule_count),
        (t_start, t_prepared),
        dict(encoded or {}),
    )
    claim = None if version is not None else claims.claim_leaf(spec.root, rel, spec.run_id)
    try:
        clearing = None if spec.fresh or version is not None else _Clearing(spec.root, rel)
        return write.run(clearing, derived)
    finally:
        if claim is not None:
            claims.release(spec.root, claim)


@dataclass(frozen=True)
class _LeafWrite:
    """One leaf's write once everything is checked: where it goes and what it holds."""

    spec: LeafSpec
    leaf: ShardLeaf
    rel: str  # the leaf's prefix
    data: str  # where its arrays go: the prefix, or its version subgroup
    version: str | None
    template: dict[str, bytes]
    occupied: np.ndarray  # ranks of the occupied cells
    ids: list[str] | None  # granule ids to record
    granule_count: int
    clock: tuple[float, float]  # when the write started and finished its checks
    encoded: dict  # arrays encoded before this write (by encode_leaf_array), by name

    def run(self, clearing: _Clearing | None, derived) -> dict:
        """The writes, in the normative order: template, arrays and coverage under
        ``data``, its stamp, the pointer (a versioned leaf), then the siblings
        (:meth:`siblings`)."""
        spec, leaf = self.spec, self.leaf
        root, window = spec.root, leaf.window
        t_start, t_prepared = self.clock
        cells_with_data = int(self.occupied.size)
        out = _Unstamped(root, clearing)
        sizes = {  # final size of every object of the leaf, by key
            key: out.put(f"{self.data}/{key}", doc) for key, doc in self.template.items()
        }
        digests, chunk_bytes, chunk_objects, io_s = _write_chunks(
            out, self.data, spec, leaf, self.occupied, self.encoded
        )
        t_arrays = time.perf_counter()

        envelope, extra = self.coverage(out)  # sizes of the objects beside the arrays
        if leaf.temporal is not None:  # the temporal record: before the stamp, fail closed
            extra.append(
                out.put(f"{self.data}/{paths.LEAF_TEMPORAL_NAME}", dumps_json(leaf.temporal))
            )
        t_coverage = time.perf_counter()
        out.flush()  # every object of the leaf is stored before its stamp
        t_uploaded = time.perf_counter()
        content = {
            "arrays": dict(sorted(digests.items())),
            "combined": hashes.combined_digest(digests),
        }
        written_at = stamp.now_iso()
        seal = stamp.build_stamp(
            cells_with_data=cells_with_data,
            granule_count=self.granule_count,
            written_at=written_at,
            coverage=envelope,
            content_hashes=content,
            window=window,
            time_range=leaf.time_range,
        )
        sizes[stamp.ZARR_JSON] = stamp.write_stamp(
            root, self.data, self.template[stamp.ZARR_JSON], seal
        )
        # a versioned leaf's pointer and its unversioned siblings are written under the
        # leaf's claim (an unversioned write holds it already, from before it cleared
        # anything), so the last writer to publish the leaf writes its siblings too, and no
        # two interleave
        publishing = (
            contextlib.nullcontext()
            if self.version is None
            else claims.holding(root, self.rel, spec.run_id)
        )
        with publishing:
            if self.version is not None:  # the pointer: one PUT, once the version is stamped
                sizes["pointer"] = stamp.write_stamp(
                    root,
                    self.rel,
                    self.template[stamp.ZARR_JSON],
                    {**seal, "current": self.version},
                )
            t_stamped = time.perf_counter()
            record = {
                "shard_id": leaf.shard_id,
                "window": window,
                "path": self.rel,
                "version": self.version,
                "run_id": spec.run_id,
                "cells_with_data": cells_with_data,
                "granule_count": self.granule_count,
                "content_hashes": content,
                "coverage": envelope,
                "bytes_written": sum(sizes.values()) + chunk_bytes + sum(extra),
                "objects_written": len(sizes) + chunk_objects + len(extra),
                "written_at": written_at,
                "temporal": leaf.temporal,
                "timings": {
                    "prepare_s": t_prepared - t_start,
                    "arrays_s": t_arrays - t_prepared,  # encoding and content hashes included
                    "array_io_s": io_s,  # the part of arrays_s spent storing chunk objects
                    "coverage_s": t_coverage - t_arrays,
                    "upload_s": t_uploaded - t_coverage,  # an object store's batch; 0 locally
                    "stamp_s": t_stamped - t_uploaded,  # the claim's wait included
                    "total_s": t_stamped - t_start,
                    # arrays encoded in tasks of their own before this write
                    "encoded_s": sum(e.seconds for e in self.encoded.values()),
                },
            }
            self.siblings(record, derived)
        return record

    def coverage(self, out: _Unstamped) -> tuple[dict, list[int]]:
        """The leaf's coverage envelope, and the sizes of the objects written for it (its
        bitmap, unless the leaf has one cell, or is a windowed leaf with every cell)."""
        grid, shard_id, occupied = self.spec.grid, self.leaf.shard_id, self.occupied
        if grid.depth == 0:
            return coverage.leaf_envelope(
                coverage.box_of_ranks(shard_id, occupied, 0), grid.cell_order
            ), []
        box = coverage.box_of_ranks(shard_id, occupied, grid.depth)
        if self.leaf.window is not None and occupied.size == grid.cells_per_shard:
            return coverage.leaf_envelope(box, grid.cell_order, full=True), []  # no bitmap
        payload, raw_nbytes = coverage.encode_bitmap_ranks(occupied, grid.depth)
        size = out.put(f"{self.data}/{paths.LEAF_COVERAGE_NAME}", payload)
        envelope = coverage.leaf_envelope(
            box, grid.cell_order, bitmap_nbytes=len(payload), raw_nbytes=raw_nbytes
        )
        return envelope, [size]

    def siblings(self, record: dict, derived) -> None:
        """The leaf's identity and stats sidecars, then what ``derived`` writes from it."""
        spec, ids = self.spec, self.ids
        shard_id, window = record["shard_id"], record["window"]
        siblings = {}
        granules_sha = None
        if ids is not None:
            siblings[paths.granules_key(shard_id, window)] = granules = stats.granules_record(ids)
            granules_sha = granules["granules_sha256"]
        if spec.write_stats:
            try:
                siblings[paths.stats_key(shard_id, window)] = stats.stats_record(
                    record,
                    semantic_hash=spec.semantic_hash,
                    granules_sha=granules_sha,
                    extra=dict(spec.stats_extra) if spec.stats_extra else None,
                )
            except ValueError as exc:  # the sidecar is telemetry, never truth
                warnings.warn(
                    f"stats sidecar for leaf {self.rel} was not made: {exc}",
                    ZaggWarning,
                    stacklevel=2,
                )
        # the leaf's identity record lands with the leaf, so a run killed after this leaf
        # can tell it is current (one batch of concurrent PUTs on an object store)
        try:
            spec.root.write_many({key: dumps_json(payload) for key, payload in siblings.items()})
        except Exception as exc:  # the stamp stands; without its sidecars it is rewritten
            warnings.warn(
                f"sidecars of leaf {self.rel} were not written: {exc}", ZaggWarning, stacklevel=2
            )
        if derived is not None:
            derived(record)


def _check_clearable(root: StoreRoot, rel: str) -> None:
    """Raise if the leaf at ``rel`` must not be cleared: a versioned leaf (its stamp names
    ``current``), which clearing would delete with every version.

    An unparsable root ``zarr.json`` is a stamp that never landed (a torn last write), so
    the leaf is debris and cleared like any other, unless version prefixes (``run-…``)
    sit under it: then it may be a damaged versioned leaf, and it is refused.
    """
    previous, unreadable = stamp.read_stamp_or_debris(root, rel)
    if previous is not None and "current" in previous:
        raise ValueError(
            f"leaf {rel} is a versioned leaf (its stamp names current={previous['current']!r}); "
            "clearing it would delete every version. Write this store with a versioned writer "
            "or to a new root"
        )
    if unreadable is not None:
        versions = [d for d in root.list_dir(rel)[0] if d.startswith("run-")]
        if versions:
            raise ValueError(
                f"{unreadable}; the leaf holds version prefixes {versions[:3]}, so it may be a "
                "versioned leaf and is not cleared. Restore its root zarr.json or write to a "
                "new root"
            )


def _check_cells(shard_id: str, contents, specs: dict[str, FieldSpec], grid: Grid):
    """Raise unless ``contents`` matches the fields: kinds, ranks, dtypes, row framing."""
    n = grid.cells_per_shard
    missing = sorted(set(specs) - set(contents))
    extra = sorted(set(contents) - set(specs))
    if missing or extra:
        raise ValueError(
            f"shard {shard_id}: arrays do not match the fields block "
            f"(missing {missing}, undeclared {extra})"
        )
    for name, spec in specs.items():
        cells = contents[name]
        expected = RaggedCells if spec.ragged else DenseCells
        if not isinstance(cells, expected):
            raise ValueError(
                f"shard {shard_id}: field {name!r} needs {expected.__name__}, got "
                f"{type(cells).__name__}"
            )
        r = cells.ranks
        if r.size and (r[0] < 0 or r[-1] >= n or (r.size > 1 and np.any(r[1:] <= r[:-1]))):
            raise ValueError(
                f"shard {shard_id}: field {name!r} ranks must be strictly "
                f"ascending cell positions in [0, {n})"
            )
        if spec.ragged:
            element = spec.attrs["ragged"]["element"]
            row = np.dtype(str(element["dtype"])).itemsize * int(
                np.prod(element["shape"][1:], dtype=np.int64)
            )
            bad = np.flatnonzero(cells.lengths % row)
            if bad.size:
                i = int(bad[0])
                raise ValueError(
                    f"ragged field {name!r}: cell {int(r[i])} holds {int(cells.lengths[i])} "
                    f"bytes, not a whole number of {row}-byte rows of the declared element "
                    f"{element}"
                )
        elif cells.values.dtype != spec.dtype.newbyteorder("<"):
            raise ValueError(
                f"shard {shard_id}: field {name!r} values are "
                f"{cells.values.dtype}, declared {spec.dtype}"
            )


def _cells_from_arrays(
    shard_id: str, arrays: Mapping[str, np.ndarray], specs: dict[str, FieldSpec], grid: Grid
) -> dict:
    """The occupied cells of dense per-cell arrays (validated: names, shapes, dtypes, the
    cell law of a given ``morton``)."""
    n = grid.cells_per_shard
    missing = sorted(set(specs) - set(arrays))
    extra = sorted(set(arrays) - set(specs) - {MORTON})
    if missing or extra:
        raise ValueError(
            f"shard {shard_id}: arrays do not match the fields block "
            f"(missing {missing}, undeclared {extra})"
        )
    out = {}
    for name, spec in specs.items():
        raw = np.asarray(arrays[name])
        if raw.shape != (n,):
            raise ValueError(
                f"shard {shard_id}: field {name!r} has shape {raw.shape}, expected ({n},) "
                f"= 4**(child_order - parent_order) cells"
            )
        if spec.ragged:
            out[name] = cells_.ragged_from_objects(
                raw, lambda i, cell, name=name, spec=spec: _payload(name, i, cell, spec)
            )
        else:
            out[name] = cells_.dense_from_array(
                _dense_raw(name, raw, spec), spec.dtype, spec.fill_value
            )
    if MORTON in arrays:
        given = np.asarray(arrays[MORTON])
        law = _grid.shard_cell_words(
            _grid.from_decimal(shard_id)[0], grid.shard_order, grid.cell_order
        )
        if given.shape != (n,) or not np.array_equal(given.astype(np.uint64), law):
            raise ValueError(
                f"shard {shard_id}: the morton array given does not follow the cell law "
                "(the shard's children at the cell order, in nested order)"
            )
    return out


def _dense_raw(name: str, raw: np.ndarray, spec: FieldSpec) -> np.ndarray:
    if raw.dtype.kind not in "biuf":
        raise ValueError(f"dense field {name!r} got values of dtype {raw.dtype}")
    if not np.can_cast(raw.dtype, spec.dtype, casting="same_kind"):
        raise ValueError(
            f"dense field {name!r}: values of dtype {raw.dtype} cannot be stored as {spec.dtype}"
        )
    return raw


def _payload(name: str, i: int, cell, spec: FieldSpec) -> bytes:
    if cell is None:
        return b""
    if type(cell) is bytes:
        return cell
    if isinstance(cell, bytes | bytearray | memoryview):
        return bytes(cell)
    if isinstance(cell, np.ndarray):
        element = spec.attrs["ragged"]["element"]
        dtype = np.dtype(str(element["dtype"])).newbyteorder("<")
        return np.ascontiguousarray(cell, dtype=dtype).tobytes()
    raise ValueError(
        f"ragged field {name!r}: cell {i} holds a {type(cell).__name__}; expected raw "
        "payload bytes (b'' or None when empty)"
    )


def _morton_encoded(shard_id: str, occupied: np.ndarray, grid: Grid) -> encode.EncodedArray:
    """The stored ``morton``: the cell law's words in every inner chunk holding an occupied
    cell (those chunks are written whole), nothing elsewhere; each chunk's words are made
    in place in the object's buffer."""
    per = grid.cells_per_chunk
    k_of = occupied // per  # ascending: the touched chunks are where it changes
    touched = k_of[np.concatenate(([True], k_of[1:] != k_of[:-1]))] if k_of.size else k_of
    word = _grid.from_decimal(shard_id)[0]
    p, c = grid.shard_order, grid.cell_order

    def fill_rows(block: np.ndarray) -> None:
        if c > 27:
            block[:] = _grid.shard_cell_words(word, p, c).reshape(-1, per)[touched]
            return
        step = np.uint64(_grid.stride(c))
        first = (
            np.uint64(word) + np.uint64(c - p) + touched.astype(np.uint64) * (np.uint64(per) * step)
        )
        np.add(first[:, None], np.arange(per, dtype=np.uint64)[None, :] * step, out=block)

    n = grid.cells_per_shard
    return encode.encode_dense_chunks(
        touched, fill_rows, np.dtype("<u8"), 0, n, grid.inner_chunks, grid.dense_sharded
    )


def _clear_previous(root: StoreRoot, rel: str) -> None:
    """Delete what a previous attempt left under the leaf prefix ``rel`` (one listing when
    there is nothing, the usual case), refusing leaves that must not be cleared."""
    if any(root.list_dir(rel)):
        _check_clearable(root, rel)
        root.delete_prefix(rel)


class _Clearing:
    """Clears a leaf prefix of a previous attempt before the leaf's first object lands:
    at once on a local store (whose objects are written as they are made), in the
    background on an object store (whose objects wait for :meth:`_Unstamped.flush`), so
    the listing's round trip passes while the leaf encodes."""

    def __init__(self, root: StoreRoot, rel: str):
        self.future = None
        if root.is_local:
            _clear_previous(root, rel)
        else:
            self.future = background().submit(_clear_previous, root, rel)

    def wait(self) -> None:
        """Return once the prefix is clear; raise what clearing raised."""
        if self.future is not None:
            self.future.result()


class _Unstamped:
    """A leaf's objects before its stamp. A local store writes each at once; an object
    store gets them together at :meth:`flush` (concurrent PUTs), which the stamp follows.
    ``clearing`` (None for a prefix known to be empty) is waited for before any write."""

    def __init__(self, root: StoreRoot, clearing: _Clearing | None = None):
        self.root = root
        self.clearing = clearing
        self.pending: dict[str, object] = {}

    def put(self, key: str, data) -> int:
        if self.root.is_local:
            return self.root.write_bytes(key, data)
        self.pending[key] = data
        return object_size(data)

    def flush(self) -> None:
        if self.clearing is not None:
            self.clearing.wait()
        self.root.write_many(self.pending)
        self.pending = {}


def leaf_arrays(spec: LeafSpec, leaf: ShardLeaf) -> list[str]:
    """The arrays ``leaf`` stores, in the order they are written: the cell coordinate
    (not in a window's leaf, spec §1.5), then the fields."""
    return ([MORTON] if leaf.window is None else []) + list(spec.specs)


def encode_leaf_array(
    spec: LeafSpec, leaf: ShardLeaf, name: str, occupied: np.ndarray | None = None
) -> encode.EncodedArray:
    """One stored array of ``leaf`` (a name of :func:`leaf_arrays`): its chunk objects and
    §5.2 digest, with nothing written. The arrays of a leaf are independent of each other,
    so a big leaf's can be encoded beside each other and handed to
    :func:`write_shard_leaf`. ``occupied`` (the ranks any array occupies) is found from the
    cells when not given."""
    t0 = time.perf_counter()
    grid = spec.grid
    n, k = grid.cells_per_shard, grid.inner_chunks
    if name == MORTON:
        if occupied is None:
            occupied = cells_.occupied_ranks(leaf.contents.values(), n)
        enc = _morton_encoded(leaf.shard_id, occupied, grid)
    else:
        cells = leaf.contents[name]
        if isinstance(cells, RaggedCells):
            enc = encode.encode_ragged_cells(cells, n, k)
        else:
            fill = spec.specs[name].fill_value
            enc = encode.encode_dense(cells.ranks, cells.values, fill, n, k, grid.dense_sharded)
    enc.seconds = time.perf_counter() - t0
    return enc


def _write_chunks(
    out: _Unstamped, rel: str, spec: LeafSpec, leaf: ShardLeaf, occupied, encoded: dict
):
    """Write every array's chunk objects under ``rel`` (the stored ``morton`` too, unless
    the leaf is a window's), encoding those ``encoded`` does not hold; returns (digests by
    key, bytes, objects, seconds storing)."""
    group = str(spec.grid.cell_order)
    digests = {}
    total = count = 0
    io_s = 0.0
    for name in leaf_arrays(spec, leaf):
        enc = encoded.get(name)
        if enc is None:
            enc = encode_leaf_array(spec, leaf, name, occupied)
        digests[f"{group}/{name}"] = enc.digest
        t0 = time.perf_counter()
        for idx, data in enc.objects:
            total += out.put(f"{rel}/{group}/{name}/c/{idx}", data)
            count += 1
        io_s += time.perf_counter() - t0
    return digests, total, count, io_s
