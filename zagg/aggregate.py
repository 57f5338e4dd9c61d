"""Points Dataset → lazy leaf Dataset: keyed groupby-reduction onto morton cells.

Each input chunk is keyed (mortie point words → cell and shard words), grouped by cell and
reduced to a :class:`~zagg.partials.Partial`. Per shard, the partials of every chunk that
touched it are combined by a tree reduction and finalized into dense arrays of
4^(child_order − parent_order) cells: one dask chunk per shard, in canonical nested order.
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from . import graph, heap, predicate
from . import grid as G
from . import progress as progress_
from .checks import require_dataset
from .config import Config, ConfigError, FieldSpec, Filter, load_config
from .credentials import redacted
from .hive import cells
from .kernels import composition, located, segments, tdigest
from .kernels.setup import start_numba_setup
from .partials import Digests, DigestSpec, Partial, combine, group_key

if TYPE_CHECKING:
    import xarray as xr

DEFAULT_CHUNK = 1 << 20
POINT_WORDS = "__point_words__"  # the values() name of each kept point's order-29 word


@dataclass(frozen=True)
class Composition:
    """A composition field's inputs: confidence rows, threshold, and its digest's rows."""

    conf: str
    threshold: int
    of_source: str
    of_where: str | None

    @property
    def key(self) -> str:
        return f"composition:{self.conf}@{self.threshold}:{self.of_source}|{self.of_where or ''}"


@dataclass(frozen=True)
class Plan:
    """Everything a chunk task needs, small and picklable."""

    lat: str
    lon: str
    filters: tuple[Filter, ...]
    inputs: tuple[str, ...]  # Dataset variables handed to chunk tasks, in this order
    columns: tuple[tuple[str, str, int | None], ...]  # declared name, variable, column
    declared: tuple[str, ...]  # names predicates may read
    states: tuple[tuple[str, str, str | None, tuple[str, ...]], ...]  # key, source, where, states
    digests: tuple[tuple[str, DigestSpec], ...]
    compositions: tuple[tuple[str, Composition], ...]
    cell_order: int
    shard_order: int
    shard_set: tuple[int, ...] | None = None
    granule_var: str | None = None  # per-row granule index, tracked into each shard

    @property
    def digest_specs(self) -> dict[str, DigestSpec]:
        return dict(self.digests)

    @property
    def needs_point_words(self) -> bool:
        """Whether any field stores its points' order-29 words (located digests)."""
        return any(spec.located for _, spec in self.digests)


@dataclass
class ChunkResult:
    """A chunk's partial with its shard index and point accounting."""

    partial: Partial
    shards: np.ndarray  # shard words present, ascending
    bounds: np.ndarray  # row bounds of each shard in partial.cells (len + 1)
    counts: dict[str, int]
    granules: dict[int, list[int]] | None = None  # shard word → granule indices it holds

    def piece(self, shard_word: int, words: tuple[int, int] | None = None) -> Partial:
        """The rows of one shard (views of this chunk's arrays); with ``words = (lo, hi)``
        only its cells with ``lo <= word < hi`` (one block of the shard)."""
        i = np.searchsorted(self.shards, np.uint64(shard_word))
        if i == len(self.shards) or self.shards[i] != np.uint64(shard_word):
            return self.partial.take(0, 0)
        a, b = int(self.bounds[i]), int(self.bounds[i + 1])
        if words is not None:
            cells = self.partial.cells[a:b]
            lo, hi = np.searchsorted(cells, np.array(words, dtype=np.uint64))
            a, b = a + int(lo), a + int(hi)
        return self.partial.take(a, b)

    def shard_rows(self) -> np.ndarray:
        """Per shard of :attr:`shards`, the rows its piece holds (cells plus digest
        centroids): what combining and encoding that shard will cost, roughly."""
        rows = np.diff(self.bounds)
        for d in self.partial.digests.values():
            rows = rows + np.diff(d.offsets[self.bounds])
        return rows.astype(np.int64)


def state_key(f: FieldSpec, config: Config) -> str:
    """Where a field's states live in a partial."""
    if f.function == "composition":
        return composition_of(f, config).key
    if f.kind == "ragged":
        return digest_spec(f).key
    return group_key(f.source, f.where)


def digest_spec(f: FieldSpec) -> DigestSpec:
    flux = f.params.get("weights") == "flux"
    return DigestSpec(f.source, int(f.params["delta"]), f.where, f.located,
                      f.params["weight_source"] if flux else None)


def composition_of(f: FieldSpec, config: Config) -> Composition:
    of = config.fields[f.params["of"]]
    return Composition(f.source, int(f.params["threshold"]), of.source, of.where)


def make_plan(config: Config, shards=None, granule_var: str | None = None) -> Plan:
    src = config.data_source
    states: dict[tuple, set] = {}
    digests: dict[str, DigestSpec] = {}
    comps: dict[str, Composition] = {}
    used = set()
    for f in config.fields.values():
        red = f.reducer
        if f.where:
            used.update(predicate.parse(f.where, src.variables).variables)
        if f.function == "composition":
            comp = composition_of(f, config)
            comps[comp.key] = comp
            used.update({comp.conf, comp.of_source})
            if comp.of_where:
                used.update(predicate.parse(comp.of_where, src.variables).variables)
        elif red.kind == "ragged":
            spec = digest_spec(f)
            digests[spec.key] = spec
            used.update({f.source, spec.weight_source} - {None})
        else:
            states.setdefault((f.source or "", f.where), set()).update(red.chunk)
            if f.source:
                used.add(f.source)
    columns = tuple((n, *src.columns.get(n, (n, None))) for n in sorted(used))
    inputs = [src.latitude, src.longitude]
    inputs += [f.variable for f in src.filters]
    inputs += [var for _, var, _ in columns]
    if granule_var:
        inputs.append(granule_var)
    inputs = tuple(dict.fromkeys(inputs))
    shard_set = None
    if shards is not None:
        shard_set = tuple(int(w) for w in np.unique(_shard_words(shards, config)))
    return Plan(
        src.latitude,
        src.longitude,
        src.filters,
        inputs,
        columns,
        tuple(src.variables),
        tuple((group_key(k[0], k[1]), k[0], k[1], tuple(sorted(v)))
              for k, v in sorted(states.items(), key=lambda kv: (kv[0][0], kv[0][1] or ""))),
        tuple(sorted(digests.items())),
        tuple(sorted(comps.items())),
        config.grid.child_order,
        config.grid.parent_order,
        shard_set,
        granule_var,
    )


def _shard_words(shards, config: Config) -> np.ndarray:
    p = config.grid.parent_order
    ids = [shards] if isinstance(shards, str) else list(shards)
    if ids and isinstance(ids[0], str):
        words = G.from_decimal(ids)
    else:
        words = np.asarray(ids, dtype=np.uint64)
    orders = words & np.uint64(63)
    if words.size and not np.all(orders == p):
        raise ValueError(f"shards must be cells at the shard order (parent_order {p})")
    return words


def key_chunk(plan: Plan, arrs: dict) -> tuple[np.ndarray, object, dict]:
    """Filter and key one chunk: cell words of the kept points, a ``values(name)`` accessor
    returning any input variable aligned with them, and the point accounting."""
    n_in = len(arrs[plan.lat])
    keep = None
    for f in plan.filters:
        m = f.mask(np.asarray(arrs[f.variable]))
        keep = m if keep is None else keep & m
    lat = np.asarray(arrs[plan.lat], dtype=np.float64)
    lon = np.asarray(arrs[plan.lon], dtype=np.float64)
    if keep is not None:
        lat, lon = lat[keep], lon[keep]
    n_filtered = n_in - len(lat)
    if plan.needs_point_words:
        words, ok = G.point_words(lat, lon)
        cell_words = G.keyed_ancestor(words, ok, plan.cell_order)
    else:
        words = None
        cell_words, ok = G.cell_words(lat, lon, plan.cell_order)
    n_invalid = int(len(ok) - np.count_nonzero(ok))
    sel = ok
    n_outside = 0
    if plan.shard_set is not None:
        inside = np.isin(G.ancestor(cell_words, plan.shard_order),
                         np.asarray(plan.shard_set, dtype=np.uint64))
        n_outside = int(np.count_nonzero(ok & ~inside))
        sel = ok & inside
    all_sel = bool(sel.all())
    if not all_sel:
        cell_words = cell_words[sel]

    columns = {n: (var, col) for n, var, col in plan.columns}
    cache: dict[str, np.ndarray] = {}

    def values(name):
        """``name``'s values for the kept points; selected once per chunk, however many
        fields read it."""
        if name not in cache:
            cache[name] = _select(name)
        return cache[name]

    def _select(name):
        var, col = columns.get(name, (name, None))
        v = np.asarray(arrs[var])
        if col is not None:
            v = v[:, col]
        if keep is not None:
            v = v[keep]
        if v.dtype == np.bool_:  # flags aggregate as 0/1 (a mean is the fraction set)
            v = v.view(np.uint8)
        return v if all_sel else v[sel]

    point_words = words if all_sel or words is None else words[sel]

    def values_or_words(name):
        return point_words if name == POINT_WORDS else values(name)

    counts = {
        "points_in": n_in,
        "filtered": n_filtered,
        "invalid_coordinates": n_invalid,
        "outside_shards": n_outside,
        "keyed": int(cell_words.size),
    }
    return cell_words, values_or_words, counts


def reduce_keyed(plan: Plan, cell_words: np.ndarray, values) -> tuple[Partial, np.ndarray,
                                                                        np.ndarray]:
    """Group keyed points by cell and reduce them: the chunk's partial, the shard words it
    touches and each shard's row bounds in the partial."""
    grp = segments.group_cells(cell_words, plan.cell_order)
    cells, offsets = grp.cells, grp.offsets
    masks: dict[str, np.ndarray] = {}

    def selected(where):
        if where not in masks:
            pred = predicate.parse(where, plan.declared)
            masks[where] = pred.evaluate({n: values(n) for n in pred.variables})
        return masks[where]

    def masked(source, where):
        """``source`` in input order, NaN where ``where`` excludes a point."""
        v = values(source)
        if where is None:
            return v
        return np.where(selected(where), v.astype(np.float64, copy=False), np.nan)

    made: dict[tuple, np.ndarray] = {}

    def addressed(source, where):
        """``masked(source, where)`` as the kernels address it with ``grp.starts``, made
        once for the dense states and the digest that both read it."""
        if (source, where) not in made:
            made[source, where] = grp.addressed(masked(source, where))
        return made[source, where]

    states = {}
    for key, source, where, wanted in plan.states:
        if source == "":
            if where is None:
                states[key] = {"count": np.diff(offsets)}
            else:
                hits = grp.addressed(selected(where))
                states[key] = {"count": segments.segment_sums(hits, offsets, grp.starts)}
            continue
        states[key] = segments.dense_states(addressed(source, where), grp.starts, offsets,
                                            wanted)
    digests = {}
    for key, spec in plan.digests:
        # located digests track their rows, so they take cell-contiguous copies
        take = grp.contiguous if spec.located else grp.addressed
        v = take(masked(spec.source, spec.where)) if spec.located else addressed(
            spec.source, spec.where)
        if v.dtype.kind != "f":
            v = v.astype(np.float64)
        wts = None
        if spec.weight_source is not None:
            wts = take(values(spec.weight_source)).astype(np.float64, copy=False)
        if spec.located:
            m, w, o, loc = located.located_build(v, take(values(POINT_WORDS)), offsets,
                                                 spec.delta, weights=wts)
            digests[key] = Digests.of(m, w, o, loc)
        else:
            m, w, o = tdigest.build(v, offsets, spec.delta, weights=wts, out_dtype=np.float32,
                                    starts=grp.starts, drop_unit_weights=True)
            digests[key] = Digests.of(m, w, o)
    order = grp.permutation() if plan.compositions else None
    for key, comp in plan.compositions:
        rows = np.isfinite(values(comp.of_source).astype(np.float64, copy=False))
        if comp.of_where is not None:
            rows &= selected(comp.of_where)
        lanes, nsig = composition.lane_counts(values(comp.conf), order, offsets,
                                              comp.threshold, rows)
        states[key] = {"lanes": lanes, "nsig": nsig}
    partial = Partial(cells, states, digests)
    shard_of_cell = G.ancestor(cells, plan.shard_order)
    if cells.size:
        starts = np.flatnonzero(np.concatenate(([True], shard_of_cell[1:] != shard_of_cell[:-1])))
        shards = shard_of_cell[starts]
        bounds = np.append(starts, cells.size).astype(np.int64)
    else:
        shards = np.zeros(0, np.uint64)
        bounds = np.zeros(1, np.int64)
    return partial, shards, bounds


def reduce_chunk(plan: Plan, *arrays) -> ChunkResult:
    """Key, filter, group and reduce one input chunk."""
    start_numba_setup()  # while this chunk is keyed (inputs not read by read_block)
    arrs = dict(zip(plan.inputs, arrays, strict=True))
    cell_words, values, counts = key_chunk(plan, arrs)
    partial, shards, bounds = reduce_keyed(plan, cell_words, values)
    granules = None
    if plan.granule_var is not None and cell_words.size:
        granules = _shard_granules(G.ancestor(cell_words, plan.shard_order),
                                   values(plan.granule_var))
    del arrs, arrays, cell_words, values
    partial = partial.compact()  # it waits for every chunk of the run: keep it small
    heap.trim_heap()  # the partial stays; the chunk's temporaries must not stay with it
    return ChunkResult(partial, shards, bounds, counts, granules)


def _shard_granules(shard_words: np.ndarray, granule: np.ndarray) -> dict[int, list[int]]:
    out: dict[int, list[int]] = {}
    for g in np.unique(granule):
        for w in np.unique(shard_words[granule == g]):
            out.setdefault(int(w), []).append(int(g))
    return out


def _combine(plan: Plan, *parts: Partial) -> Partial:
    nonempty = [p for p in parts if p.cells.size]
    if not nonempty:
        return parts[0]
    out = combine(nonempty, plan.digest_specs)
    if out.nbytes > heap.TRIM_AFTER_BYTES:  # only big merges leave enough to give back
        # all of it: merges run once the chunks are reduced, so the free heap they would
        # keep (the chunks' temporaries) would only raise the write phase's peak
        heap.trim_heap(keep=0)
    return out


def _summary(result: ChunkResult):
    return result.shards, result.counts, result.granules, result.shard_rows()


def shard_contents(plan: Plan, fields: tuple[FieldSpec, ...], keys: tuple[str, ...],
                   part: Partial, shard_word: int) -> dict:
    """One shard's stored values at its occupied cells only: per field (and located
    sibling) a :class:`~zagg.hive.cells.DenseCells` or :class:`~zagg.hive.cells.RaggedCells`;
    ``keys[i]`` says where field i's states live in the partial. What both the leaf writer
    and :func:`finalize_shard` start from."""
    rank = G.cell_rank(part.cells, shard_word, plan.shard_order, plan.cell_order)
    out = {}
    for f, key in zip(fields, keys, strict=True):
        red = f.reducer
        if red.kind == "ragged":
            if not part.cells.size:
                out[f.name] = cells.ragged_cells(rank, np.zeros(1, np.int64), np.zeros(0, np.uint8))
                if f.located:
                    out[f.locations_name] = out[f.name]
                continue
            d = part.digests[key]
            out[f.name] = cells.digest_rows(rank, d.offsets, d.means, d.weights)
            if f.located:
                words = np.ascontiguousarray(d.locs, dtype="<u8")
                out[f.locations_name] = cells.ragged_cells(
                    rank, (d.offsets - d.offsets[0]) * words.itemsize, words)
            continue
        dtype = np.dtype(f.dtype)
        if not part.cells.size:
            out[f.name] = cells.DenseCells(rank, np.zeros(0, dtype.newbyteorder("<")))
            continue
        st = part.states[key]
        vals = red.finalize(st, f.params)
        has = st["count"] > 0 if "count" in st else st["nsig"] > 0
        if red.name != "count" and vals.dtype.kind == "f":
            has &= ~np.isnan(vals)
        out[f.name] = cells.dense_cells(rank[has], stored_values(vals[has], dtype, f), dtype,
                                        f.fill_value)
    return out


def stored_values(vals: np.ndarray, dtype: np.dtype, f: FieldSpec) -> np.ndarray:
    """``vals`` cast to the field's stored ``dtype``, refusing values the dtype cannot hold
    (an integer out of its range, a finite float that would become infinite) instead of
    letting them wrap around or overflow silently."""
    with np.errstate(over="ignore", invalid="ignore"):  # refused below, not warned about
        out = vals.astype(dtype)
    if not vals.size or dtype == vals.dtype:
        return out
    bad = None
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        lo, hi = vals.min(), vals.max()
        if lo < info.min or hi > info.max:
            bad = lo if lo < info.min else hi
            limits = f"{info.min}..{info.max}"
    elif dtype.kind == "f":
        over = np.isinf(out) & np.isfinite(vals)
        if over.any():
            bad = vals[over][0]
            limits = f"magnitudes up to {np.finfo(dtype).max:.4g}"
    if bad is None:
        return out
    raise ConfigError(
        f"config key 'aggregation.variables.{f.name}.dtype': a cell's {f.function} is {bad}, "
        f"which {dtype.name} cannot store ({limits}); choose a wider dtype (the default for "
        f"{f.function} is {f.reducer.default_dtype}). The dtype is part of the store's "
        "identity: write the rerun to a new store, or delete this one first"
    )


def finalize_shard(plan: Plan, fields: tuple[FieldSpec, ...], contents: dict):
    """Dense arrays of one shard (fills where a cell has no data), one per field and
    located sibling, from :func:`shard_contents`."""
    n = 4 ** (plan.cell_order - plan.shard_order)
    out = {}
    for f in fields:
        if f.kind == "ragged":
            out[f.name] = cells.to_objects(contents[f.name], n)
            if f.located:
                out[f.locations_name] = cells.to_objects(contents[f.locations_name], n)
        else:
            out[f.name] = cells.to_dense(contents[f.name], n, np.dtype(f.dtype), f.fill_value)
    return out


def _select_inputs(ds: xr.Dataset, plan: Plan, chunk_size: int, keep_copy: bool):
    """The observation dimension and, per input chunk, its arrays as graph nodes (in
    ``plan.inputs`` order). ``keep_copy``: the graph outlives this call (nothing is
    computed before the result is), so in-memory inputs are copied, as dask does, and a
    caller's later edit to them cannot reach the result."""
    lat = ds[plan.lat]
    if lat.ndim != 1:
        raise ValueError(f"latitude variable {plan.lat!r} must be 1-D, has dims {lat.dims}")
    dim = lat.dims[0]
    # variables stored as coordinates (CF ``coordinates``, ``set_coords``) are read like
    # any other; the Dataset's other coordinates are not carried into the graph
    sub = ds[list(plan.inputs)].reset_coords()
    sub = sub.drop_vars([v for v in sub.data_vars if v not in plan.inputs])
    columns = {n: (var, col) for n, var, col in plan.columns}
    two_d = {f.variable for f in plan.filters}
    two_d |= {var for var, col in columns.values() if col is not None}
    two_d |= {columns.get(c.conf, (c.conf, None))[0] for _, c in plan.compositions}
    for name in plan.inputs:
        v = sub[name]
        if v.dims[0] != dim or (v.ndim > 1 and name not in two_d) or v.ndim > 2:
            raise ValueError(
                f"variable {name!r} has dims {v.dims}; every variable zagg reads must run along "
                f"the observation dimension {dim!r}; a 2-D variable is read through a column "
                "(data_source.variables: {name: {variable, column}}), a filter column or a "
                "composition source"
            )
    held = [getattr(sub[name].variable, "_data", None) for name in plan.inputs]
    if not keep_copy and sub.sizes[dim] and all(
            isinstance(a, np.ndarray) and a.flags.c_contiguous and a.flags.writeable
            for a in held):
        # numpy arrays in memory, laid out as the kernels' compiled signatures expect:
        # chunks are views of them (dask's from_array would first copy every array
        # whole, ~20 bytes a point of fresh memory); nothing writes into its inputs
        return dim, graph.literal_blocks(held, chunk_size)
    if any(sub[name].chunks is None for name in plan.inputs):
        # a fresh token: xarray would otherwise hash every byte of the in-memory arrays
        # (~0.2-0.4 s for 10^7 points) only to name their chunks
        sub = sub.chunk({dim: chunk_size}, token=uuid.uuid4().hex)
    extra = {d: -1 for d in sub.dims if d != dim}
    if extra:
        sub = sub.chunk(extra)
    sub = sub.unify_chunks()
    # optimize_graph=False: one input task per chunk, shared by every variable it yields
    blocks = [sub[name].data.to_delayed(optimize_graph=False).reshape(-1) for name in plan.inputs]
    return dim, list(zip(*blocks, strict=True))


def aggregate(ds: xr.Dataset, config, *, shards=None, discover: bool | None = None,
              chunk_size: int = DEFAULT_CHUNK, progress: bool = False) -> xr.Dataset:
    """Aggregate the points of ``ds`` into a lazy leaf Dataset on dimension ``cells``.

    ``ds`` is any Dataset with one observation dimension (numpy- or dask-backed; numpy
    inputs are chunked by ``chunk_size``). Which shards hold data is discovered by reducing
    every input chunk once (the partials are persisted, never the raw points). ``shards``
    (decimal ids or words at the shard order) restricts the output to those shards; with
    ``discover=False`` (the default when ``shards`` is given) nothing is computed until the
    result is, and every given shard is in the output. A ``granule`` index variable with
    ``ds.attrs["granules"]`` (as :func:`zagg.sources.granules.open_granules` makes) is
    tracked into ``attrs["zagg"]["shard_granules"]`` when discovering.
    """
    require_dataset(ds, "zagg.aggregate", "open the points first (e.g. xr.open_zarr(path) "
                    "or xr.open_dataset(path)), or name them in the config's "
                    "data_source.input and use zagg.run")
    config = load_config(config)
    config.check_dataset(ds)
    granule_ids = list(ds.attrs.get("granules") or [])
    granule_var = "granule" if granule_ids and "granule" in ds.variables else None
    plan = make_plan(config, shards, granule_var)
    if discover is None:
        discover = shards is None
    dim, blocks = _select_inputs(ds, plan, chunk_size, keep_copy=not discover)
    results = graph.chunk_tasks(plan, blocks)
    t0 = time.perf_counter()
    counts = None
    shard_granules = None
    rows = None
    if discover:
        results = progress_.persist(results, progress=progress,
                                    label="keying and reducing input chunks")
        summaries = progress_.compute(graph.summary_tasks(results, _summary))
        shard_words = np.unique(np.concatenate([s for s, _, _, _ in summaries]
                                               + [np.zeros(0, np.uint64)]))
        members = {int(w): [] for w in shard_words}
        rows = dict.fromkeys(members, 0)
        for r, (ws, _, _, n) in zip(results, summaries, strict=True):
            for w, k in zip(ws.tolist(), n.tolist(), strict=True):
                members[w].append(r)
                rows[w] += k
        counts = ({k: int(sum(c[k] for _, c, _, _ in summaries)) for k in summaries[0][1]}
                  if summaries else {})
        if granule_var:
            per_shard: dict[int, set] = {}
            for _, _, g, _ in summaries:
                for w, idx in (g or {}).items():
                    per_shard.setdefault(w, set()).update(idx)
            shard_granules = {
                G.to_decimal(np.uint64(w))[0]: sorted(granule_ids[i] for i in idx)
                for w, idx in per_shard.items()
            }
    else:
        shard_words = np.asarray(plan.shard_set, dtype=np.uint64)
        members = {int(w): results for w in shard_words}
    out = _build_dataset(config, plan, shard_words, members, counts, dim,
                         time.perf_counter() - t0, rows, _in_one_process(results, discover))
    if granule_var:
        out.attrs["zagg"]["granules"] = granule_ids
        out.attrs["zagg"]["shard_granules"] = shard_granules
    if ds.attrs.get("failed_granules"):
        out.attrs["zagg"]["failed_granules"] = list(ds.attrs["failed_granules"])
    return out


def _in_one_process(results: list, discovered: bool) -> bool:
    """Whether one process holds every chunk result: without a distributed client, or
    when one worker holds them all (discovered: where they were persisted; otherwise
    when the cluster has one worker). Then no piece of a chunk result ever has to move,
    and the combines cut their pieces themselves (:func:`zagg.graph.shard_chains`)."""
    client = progress_.active_client()
    if client is None:
        return True
    if discovered:
        return len({w for held in client.who_has(results).values() for w in held}) <= 1
    return len(client.scheduler_info(n_workers=-1)["workers"]) <= 1


def _fields_block(fields) -> dict:
    """The per-array declaration the writer reads: every field, then located siblings."""
    out = {}
    for f in fields:
        out[f.name] = {"function": f.function, "source": f.source, "kind": f.kind,
                       "dtype": f.dtype, "fill_value": f.fill_value, "params": dict(f.params),
                       "pyramid_class": f.reducer.pyramid_class}
        if f.where:
            out[f.name]["where"] = f.where
        if f.located:
            out[f.locations_name] = {"function": None, "source": f.source, "kind": "ragged",
                                     "dtype": "uint64", "fill_value": b"", "params": {},
                                     "pyramid_class": "approximate", "locations_of": f.name}
    return out


def _build_dataset(
    config: Config, plan: Plan, shard_words, members, counts, dim, t_discover, rows=None,
    inline_pieces: bool = False,
):
    """The lazy leaf Dataset: per shard, tree-combine → :func:`shard_contents` →
    :func:`finalize_shard` (:func:`zagg.graph.shard_chains`), one chunk per shard along
    ``cells``."""
    import xarray as xr

    fields = tuple(config.fields.values())
    keys = tuple(state_key(f, config) for f in fields)
    outputs = {}
    for f in fields:
        outputs[f.name] = object if f.kind == "ragged" else np.dtype(f.dtype)
        if f.located:
            outputs[f.locations_name] = object
    built = graph.shard_chains(graph.ShardJob(plan, fields, keys), shard_words, members,
                               outputs, rows, config.grid.inner_chunks, inline_pieces)
    data_vars = {}
    for f in fields:
        data_vars[f.name] = xr.Variable("cells", built.arrays[f.name], f.array_attrs())
        if f.located:
            data_vars[f.locations_name] = xr.Variable("cells", built.arrays[f.locations_name],
                                                      f.locations_attrs())
    ds = xr.Dataset(data_vars, coords={"morton": ("cells", built.morton)})
    ds["morton"].attrs = {"long_name": "morton cell word", "grid": "healpix-nested-morton"}
    ds.attrs["zagg"] = {
        "grid": config.grid.as_dict(),
        "shards": G.to_decimal(shard_words),
        "fields": _fields_block(fields),
        "dataset": {"short_name": config.output.short_name, "version": config.output.version},
        "latitude": G.LATITUDE_CONVENTION,
        "observation_dim": dim,
        "points": counts,
        "discovery_seconds": round(t_discover, 3),
        "config": redacted(config.raw),  # credentials masked: attrs show in notebooks
        # how the leaf writer finds each shard's occupied cells in this Dataset's graph
        # (used only while every array still has the name recorded here)
        "contents": {"layer": built.chain_layer, "key": built.contents,
                     "block_key": built.block_contents, "blocks": built.blocks,
                     "priority": built.priorities,
                     "arrays": {name: ds[name].data.name for name in ds.variables}},
    }
    return ds
