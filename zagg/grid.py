"""HEALPix morton grid on mortie: a store's orders, point words, cell and shard words,
decimal ids, hive paths.

:class:`Grid` is the one description of a store's orders (shards, inner chunks, cells) that
the config, the plan, the leaf writer and the readers share; its :meth:`Grid.as_dict` is the
serialized form (the config's ``output.grid`` keys, a Dataset's ``attrs["zagg"]["grid"]``).

mortie is the only authority for cell identity: every word comes from mortie's ``geo2mort``
(mortie's default authalic latitude), as an order-29 point word or, where no point word is
needed, straight as the area word at the cell order, which is the point word's ancestor.
Coarsening a word to an ancestor uses the public bit layout (clearing the tuples below the
order and writing the order suffix), which mortie documents and which is bit-identical to
``clip2order`` for orders up to 27; orders 28 and 29 go through ``clip2order`` itself.
Longitudes are angles: every finite longitude is wrapped into [-180, 180) (-0.0 as 0.0,
:func:`wrap_longitude`) before mortie sees it, so one position has one cell whatever its
spelling (``lon + 360 * k``, 180 or -180, -0.0 or 0.0), and a longitude far out of range
never reaches mortie's kernels. mortie is imported by the functions that call it, so the
config's checks can read :data:`MAX_ORDER` without loading it.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass

import numpy as np

#: mortie's deepest order, that of point words
MAX_ORDER = 29

LATITUDE_CONVENTION = "authalic-wgs84"
WGS84_SEMI_MAJOR_AXIS = 6378137.0
WGS84_INVERSE_FLATTENING = 298.257223563

_U64 = np.uint64
_ID_RE = re.compile(r"^-?[1-6][1-4]*$")
_WINDOW_RE = re.compile(r"^[0-9A-Za-z-]{1,32}$")


@dataclass(frozen=True)
class Grid:
    """The orders of a store: shards (``p``), inner chunks and cells (``c``), with
    ``0 <= p <= chunk_order <= c``; ``sharded`` puts a leaf's dense inner chunks in one
    sharding object. Serialized (:meth:`as_dict`) under the config's names: ``parent_order``,
    ``chunk_inner``, ``child_order``."""

    shard_order: int
    chunk_order: int
    cell_order: int
    sharded: bool = True

    @classmethod
    def from_dict(cls, block) -> Grid:
        """The grid of a serialized ``{type, parent_order, chunk_inner, child_order,
        sharded}`` block, validated (a ValueError names what is wrong)."""
        if block.get("type", "healpix") != "healpix":
            raise ValueError(f"hive stores need a healpix grid, got type {block.get('type')!r}")
        try:
            p, k, c = (int(block[key]) for key in ("parent_order", "chunk_inner", "child_order"))
        except KeyError as exc:
            raise ValueError(f"grid block is missing {exc.args[0]!r}") from None
        if not 0 <= p <= k <= c <= MAX_ORDER:
            raise ValueError(
                f"grid orders must satisfy 0 <= parent_order ({p}) <= chunk_inner ({k}) "
                f"<= child_order ({c}) <= {MAX_ORDER}"
            )
        return cls(p, k, c, bool(block.get("sharded", True)))

    def as_dict(self) -> dict:
        """The serialized block (the config's ``output.grid`` keys)."""
        return {
            "type": "healpix",
            "parent_order": self.shard_order,
            "chunk_inner": self.chunk_order,
            "child_order": self.cell_order,
            "sharded": self.sharded,
        }

    @property
    def depth(self) -> int:
        """Orders from a shard down to its cells (``c - p``)."""
        return self.cell_order - self.shard_order

    @property
    def cells_per_shard(self) -> int:
        """Cells of one shard (a leaf's length): ``4**(c - p)``."""
        return 4**self.depth

    @property
    def inner_chunks(self) -> int:
        """K, the inner chunks of one leaf: ``4**(chunk_order - p)``."""
        return 4 ** (self.chunk_order - self.shard_order)

    @property
    def cells_per_chunk(self) -> int:
        return 4 ** (self.cell_order - self.chunk_order)

    @property
    def dense_sharded(self) -> bool:
        """Whether a leaf's dense arrays are one sharding object (sharded, K > 1)."""
        return self.sharded and self.inner_chunks > 1

    @property
    def ragged_sharded(self) -> bool:
        """Whether a leaf's ragged arrays are one sharding object (K > 1)."""
        return self.inner_chunks > 1

    def shard_of(self, words) -> np.ndarray:
        """The shard words of cell (or point) ``words``."""
        return ancestor(words, self.shard_order)

    def shard_cells(self, shard_word) -> np.ndarray:
        """The cell words of one shard, in nested order (:func:`shard_cell_words`)."""
        return shard_cell_words(shard_word, self.shard_order, self.cell_order)

    def ranks(self, cells, shard_word) -> np.ndarray:
        """Each cell word's index on its shard's cells axis (:func:`cell_rank`)."""
        return cell_rank(cells, shard_word, self.shard_order, self.cell_order)


def pin_threads(n: int = 1) -> None:
    """Limit mortie's Rust (rayon) pool to ``n`` threads; call before mortie first runs.

    Inside a dask worker every task thread already runs in parallel, so letting each
    ``geo2mort`` call spawn a thread per core oversubscribes the machine.
    """
    os.environ["RAYON_NUM_THREADS"] = str(int(n))


def point_words(lat, lon) -> tuple[np.ndarray, np.ndarray]:
    """Order-29 point words for ``lat``/``lon`` degrees, and the mask of keyable points.

    Points with a non-finite coordinate or a latitude outside [-90, 90] are not keyed: their
    word is 0 (mortie's null word) and their mask entry is False, so callers drop and count
    them.
    """
    return _keyed(lat, lon, None)


def cell_words(lat, lon, order: int) -> tuple[np.ndarray, np.ndarray]:
    """Area words at ``order`` for ``lat``/``lon`` degrees, and the mask of keyable points
    (refusing the same points as :func:`point_words`).

    Each word is the ancestor of the point's order-29 word: mortie's ``geo2mort`` at an
    explicit order truncates the same nested index (the tests hold the two equal). Asking
    for the area word directly skips encoding the point suffix, about a fifth faster, so
    callers that never look at point words key this way. Orders 28 and 29 use special
    suffix codes, so there the point word is made and coarsened by :func:`ancestor`.
    """
    if not 0 <= order <= MAX_ORDER:
        raise ValueError(f"order must be in 0..{MAX_ORDER}, got {order}")
    if order > 27:
        words, ok = point_words(lat, lon)
        return keyed_ancestor(words, ok, order), ok
    return _keyed(lat, lon, order)


def keyable_words(lat, lon, order: int | None) -> np.ndarray:
    """:func:`cell_words` at ``order`` (:func:`point_words` for None) of coordinates known
    to be keyable (finite, latitude within [-90, 90], longitude wrapped into [-180, 180)):
    mortie's words alone, no mask, for callers that already dropped the rest and wrapped
    the longitudes (:func:`zagg.kernels.keep.keyable_rows`)."""
    import mortie

    lat = np.asarray(lat, dtype=np.float64)
    lon = np.asarray(lon, dtype=np.float64)
    if order is None:
        return mortie.geo2mort(lat, lon)
    if not 0 <= order <= MAX_ORDER:
        raise ValueError(f"order must be in 0..{MAX_ORDER}, got {order}")
    if order > 27:
        return ancestor(mortie.geo2mort(lat, lon), order)
    return mortie.geo2mort(lat, lon, order=order)


def keyed_ancestor(words, ok, order: int) -> np.ndarray:
    """:func:`ancestor` of the keyed words (``ok``); unkeyed entries stay the null word 0,
    which mortie's ``clip2order`` (orders 28 and 29) would refuse."""
    if order > 27 and not ok.all():
        out = np.zeros_like(words)
        out[ok] = ancestor(words[ok], order)
        return out
    return ancestor(words, order)


def wrap_longitude(lon) -> np.ndarray:
    """``lon`` degrees as the same angles in [-180, 180), exactly, -0.0 as 0.0 (NaN for a
    non-finite longitude); an in-range longitude other than -0.0 is unchanged bit for bit.
    :func:`zagg.kernels.keep.wrap_longitude` is the same rule inside the keying pass."""
    with np.errstate(invalid="ignore"):
        r = np.fmod(np.asarray(lon, dtype=np.float64), 360.0)  # exact, in (-360, 360)
    r = np.where(r >= 180.0, r - 360.0, np.where(r < -180.0, r + 360.0, r))  # exact shifts
    return r + 0.0


def _keyed(lat, lon, order: int | None) -> tuple[np.ndarray, np.ndarray]:
    import mortie

    lat = np.asarray(lat, dtype=np.float64)
    lon = wrap_longitude(lon)
    words = mortie.geo2mort(lat, lon, order=order)  # non-finite input gives the null word 0
    polar = np.abs(lat) > 90.0  # NaN compares False here; geo2mort already nulled it
    if polar.any():
        words[polar] = 0
    return words, words != 0


def ancestor(words, order: int) -> np.ndarray:
    """Ancestor area words at ``order`` (words already at or above it come back unchanged
    for area words; point words always become the area cell)."""
    import mortie

    words = np.asarray(words, dtype=_U64)
    if not 0 <= order <= MAX_ORDER:
        raise ValueError(f"order must be in 0..{MAX_ORDER}, got {order}")
    if order > 27:
        return mortie.clip2order(order, words)
    mask = _U64(~((1 << (60 - 2 * order)) - 1) & 0xFFFFFFFFFFFFFFFF)
    return (words & mask) | _U64(order)


def stride(cell_order: int) -> int:
    """Word distance between consecutive cells at ``cell_order`` (valid for orders <= 27)."""
    if not 0 <= cell_order <= 27:
        raise ValueError(f"the arithmetic stride exists for cell orders 0..27, got {cell_order}")
    return 1 << (60 - 2 * cell_order)


def cells_per_shard(shard_order: int, cell_order: int) -> int:
    return 4 ** (cell_order - shard_order)


def shard_cell_words(shard_word, shard_order: int, cell_order: int) -> np.ndarray:
    """The cell coordinate of one shard: its children at ``cell_order`` in nested order.

    For cell orders up to 27 this is the spec's arithmetic law
    ``word[j] = word[0] + j * 2**(60 - 2c)`` with ``word[0] = shard word + (c - p)``; at 28
    and 29 mortie's children are the law.
    """
    import mortie

    shard_word = _U64(shard_word)
    if cell_order > 27:
        return np.asarray(
            mortie.generate_morton_children(shard_word, cell_order), dtype=_U64
        ).reshape(-1)
    n = cells_per_shard(shard_order, cell_order)
    first = int(shard_word) + (cell_order - shard_order)
    step = stride(cell_order)
    # one pass; n * step is a power of two, so numpy's float length (n * step) / step is
    # exact, and each word is first + j * step in uint64
    return np.arange(first, first + n * step, step, dtype=_U64)


def cell_rank(cell_words, shard_word, shard_order: int, cell_order: int) -> np.ndarray:
    """Index of each cell word on its shard's cells axis (cell orders up to 27)."""
    first = _U64(shard_word) + _U64(cell_order - shard_order)
    return ((np.asarray(cell_words, dtype=_U64) - first) >> _U64(60 - 2 * cell_order)).astype(
        np.int64
    )


def to_decimal(words) -> list[str]:
    """Decimal ids (mortie's rendering; point words carry a trailing ``p``)."""
    import mortie

    words = np.atleast_1d(np.asarray(words, dtype=_U64))
    if words.size == 0:
        return []
    return [str(s) for s in mortie.MortonIndexArray(words).to_decimal()]


def from_decimal(ids) -> np.ndarray:
    """Words for decimal ids; every id is validated against the id grammar first."""
    import mortie

    ids = [ids] if isinstance(ids, str) else list(ids)
    for s in ids:
        validate_id(s)
    if not ids:
        return np.zeros(0, dtype=_U64)
    return np.asarray(mortie.decimal_to_word(np.asarray(ids)), dtype=_U64)


def as_words(cells) -> np.ndarray:
    """Morton words of ``cells``: decimal ids (validated) or words, one or many."""
    items = [cells] if isinstance(cells, str | int | np.integer) else list(cells)
    if items and all(isinstance(s, str) for s in items):
        return from_decimal(items)
    return np.asarray(items, dtype=_U64)


def ancestor_id(cell_id: str, order: int) -> str:
    """The decimal id of ``cell_id``'s ancestor at ``order`` (its first ``order`` digits
    after the base cell, which carries a sign in the south)."""
    sign = 1 if cell_id.startswith("-") else 0
    return cell_id[: sign + 1 + order]


def id_order(shard_id: str) -> int:
    return len(validate_id(shard_id).lstrip("-")) - 1


def validate_id(shard_id: str) -> str:
    """Return ``shard_id`` if it is a decimal area id (``[-]base digit{1..4}*``), else raise."""
    if not isinstance(shard_id, str) or not _ID_RE.match(shard_id):
        raise ValueError(
            f"{shard_id!r} is not a morton decimal area id: expected an optional '-', a base "
            "digit 1-6, then one digit 1-4 per order (e.g. '-5121141141')"
        )
    if len(shard_id.lstrip("-")) - 1 > MAX_ORDER:
        raise ValueError(f"{shard_id!r} is deeper than order {MAX_ORDER}")
    return shard_id


def validate_window(label: str) -> str:
    if not isinstance(label, str):
        raise ValueError(
            f"window={label!r} is not text (it is a {type(label).__name__}): a window id is a "
            "text label, as "
            "the store names its leaves: '2019' for a year, '201906' for a month, "
            "'20190601' for a day, or an explicit window's name; pass it quoted, e.g. "
            f"window='{label}'"
        )
    if not _WINDOW_RE.match(label) or label == "all":
        raise ValueError(
            f"window label {label!r} is invalid: use 1-32 characters of [0-9A-Za-z-], not 'all'"
        )
    return label


def leaf_name(shard_id: str, window: str | None = None) -> str:
    validate_id(shard_id)
    return f"{shard_id}.zarr" if window is None else f"{shard_id}_{validate_window(window)}.zarr"


def node_path(shard_id: str, grouping: int = 1) -> str:
    """The digit-tree node of an id: ``{sign+base}/{d1}/.../{dn}``. A tree of
    ``path_grouping`` g > 1 chunks the digits g to a component, the remainder last, the
    ``{sign+base}`` component always alone (``433142241`` at 3: ``4/331/422/41``)."""
    validate_id(shard_id)
    if not isinstance(grouping, int) or isinstance(grouping, bool) or grouping < 1:
        raise ValueError(f"path_grouping must be an integer >= 1, got {grouping!r}")
    sign = "-" if shard_id.startswith("-") else ""
    body = shard_id.lstrip("-")
    digits = body[1:]
    parts = [digits[i : i + grouping] for i in range(0, len(digits), grouping)]
    return "/".join([sign + body[0], *parts])


def hive_path(shard_id: str, window: str | None = None, grouping: int = 1) -> str:
    """Leaf path relative to the store root, e.g. ``-5/1/1/2/3/3/3/-5112333.zarr``."""
    return f"{node_path(shard_id, grouping)}/{leaf_name(shard_id, window)}"


def parse_leaf_name(name: str) -> tuple[str, str | None]:
    """Split a leaf basename into (id, window); the window follows the FIRST underscore."""
    if not name.endswith(".zarr"):
        raise ValueError(f"{name!r} is not a leaf name (no .zarr suffix)")
    stem = name[: -len(".zarr")]
    shard_id, sep, window = stem.partition("_")
    validate_id(shard_id)
    if sep:
        validate_window(window)
        return shard_id, window
    return shard_id, None
