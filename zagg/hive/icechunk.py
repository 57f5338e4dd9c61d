"""The Icechunk companion's view of one hive object: where its repo lives, the repo array
an object array maps onto, the virtual references of its chunks (spec §11.2–11.3), the
ref carrier a leaf's task writes beside it (§11.4), and the manifest split (§11.5).

Nothing here opens a session: these are the reads (one LIST of an object group, its
arrays' ``zarr.json`` and shard-index suffixes) and the pure derivations the commit code in
:mod:`zagg.pyramid.icechunk` builds on. A reference is ``(chunk j of the object, key,
offset, length, checksum)``; the checksum is the object's ETag on an object store and its
mtime ceiled to the whole second on a local one, so a reference into a rewritten object
fails loudly on read instead of decoding other bytes.
"""

from __future__ import annotations

import contextlib
import copy
import datetime as _dt
import json
import math
import os
from dataclasses import dataclass
from urllib.parse import quote, unquote

import numpy as np

from zagg.errors import ZaggError
from zagg.hive import paths
from zagg.hive.storage import StoreRoot

REPO_DIR = "icechunk"  # {store_root}/icechunk/, a reserved store-root name
SPEC = "zagg-icechunk/2"
CARRIER_SPEC = "zagg-icechunk-refs/1"
CARRIER_NAME = "icechunk_refs.json"  # beside stats.json: icechunk_refs_{window}.json
ROW_DIM = "window"
ABSENT = 2**64 - 1  # a shard index's marker of an inner chunk never written


def available() -> bool:
    """Whether the ``icechunk`` package (the ``zagg[icechunk]`` extra) is installed (found,
    not imported: a run asks before its leaves, and the import is not cheap)."""
    import importlib.util

    return importlib.util.find_spec("icechunk") is not None


@dataclass(frozen=True)
class Ref:
    """One chunk of an object array as a virtual reference."""

    j: int  # the chunk's index on the object's cells axis
    key: str  # the object holding it, relative to the store root
    offset: int
    length: int
    checksum: object  # ETag (str) or a datetime


@dataclass(frozen=True)
class ObjectArray:
    """One object array's metadata and the references of its populated chunks."""

    meta: dict
    chunks: int  # C: the object's chunk count along the cells axis
    refs: tuple[Ref, ...]


# -- where the repo lives ---------------------------------------------------------------

QUIET_LOGS = "error"  # icechunk's log filter while ICECHUNK_LOG, its own switch, is unset
_logs_set = False


def _icechunk():
    """``icechunk``, imported; on first use in a process its Rust log lines are limited to
    errors (:data:`QUIET_LOGS`) unless ``ICECHUNK_LOG`` says otherwise: its warnings, such
    as a local repository's not being safe for concurrent commits (zagg commits from one
    process), are not a run's or a reader's to act on."""
    global _logs_set
    import icechunk

    if not _logs_set:
        _logs_set = True
        if "ICECHUNK_LOG" not in os.environ:
            icechunk.set_logs_filter(QUIET_LOGS)
    return icechunk


class IcechunkError(ZaggError, ValueError):
    """The store's Icechunk companion cannot be written or read as asked."""


class IcechunkMissing(ZaggError, ImportError):
    """The ``icechunk`` package (the ``zagg[icechunk]`` extra) is not installed."""


def require(what: str) -> None:
    """Refuse ``what`` in one line naming the extra when the icechunk package is absent."""
    try:
        import icechunk  # noqa: F401
    except ImportError:
        raise IcechunkMissing(
            f"{what} needs the icechunk package: pip install 'zagg[icechunk]'"
        ) from None


def _split_url(root: StoreRoot) -> tuple[str, str]:
    """The store root as ``(scheme and authority, absolute path)``: ``("file://",
    "/data/store")``, ``("s3://bucket", "/product")``."""
    if root.is_local:
        return "file://", os.path.abspath(root.path).rstrip("/")
    scheme, _, rest = root.url.partition("://")
    bucket, _, path = rest.partition("/")
    return f"{scheme}://{bucket}", "/" + path.strip("/") if path.strip("/") else ""


def _encoded(path: str) -> str:
    """A path as a URL path: every byte but letters, digits, ``_.-~`` and ``/``
    percent-encoded (UTF-8), so a space, ``#``, ``?``, ``%`` or ``é`` in a store path or key
    reads back as itself."""
    return quote(path, safe="/")


def check_path(root: StoreRoot) -> None:
    """Refuse a store path Icechunk cannot name: one holding a control character (a
    newline, a tab), which no object-store path admits."""
    bad = [c for c in root.url if ord(c) < 32 or ord(c) == 127]
    if bad:
        raise IcechunkError(
            f"{root.url!r}: the Icechunk companion cannot reference objects under a path "
            f"holding the control character {bad[0]!r}; rename the store or set "
            "output.icechunk: false"
        )


def url_prefix(root: StoreRoot) -> str:
    """The store root as a URL with a trailing ``/``, its path percent-encoded: every
    reference's location is this prefix and the object's encoded key (§11.3)."""
    base, path = _split_url(root)
    return base + _encoded(path) + "/"


def container_prefix(root: StoreRoot) -> str:
    """The prefix of the repo's one virtual chunk container: the store root, or, when the
    root's path holds a character a URL encodes, its nearest ancestor that holds none.
    Icechunk matches a reference against its container by the encoded form when one is
    set and by the decoded form when one is read, so the container must read the same
    both ways; the references below it still name the store root's objects exactly."""
    base, path = _split_url(root)
    while path and _encoded(path) != path:
        path = path.rsplit("/", 1)[0]
    return base + path + "/"


def location(prefix: str, key: str) -> str:
    """A reference's location: the store root's :func:`url_prefix` and the object's key,
    percent-encoded as a URL path (§11.3 names ``?``, ``#`` and ``%``; zagg encodes every
    byte a URL does not carry as itself)."""
    return prefix + _encoded(key)


def key_of(prefix: str, loc: str) -> str | None:
    """The store-relative key a location names (None: not under ``prefix``)."""
    return unquote(loc[len(prefix) :]) if loc.startswith(prefix) else None


@contextlib.contextmanager
def exclusive(root: StoreRoot):
    """On a local store, an exclusive lock of the store root's directory for one commit
    of its repo (its creation, configuration, commit and tags): Icechunk's local storage
    does not make a branch update conditional between processes, so two runs committing
    at once could each move main over the other. The lock creates no object and ends
    with its process; an object store's conditional writes need none."""
    try:
        import fcntl
    except ImportError:  # no advisory locks here: commits rely on Icechunk's conflicts
        fcntl = None
    if not root.is_local or fcntl is None:
        yield
        return
    fd = os.open(os.path.abspath(root.path), os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # releases the lock


def _s3_options(root: StoreRoot) -> dict:
    opts = dict(root.storage_options)
    client = dict(opts.get("client_kwargs") or {})
    endpoint = opts.get("endpoint_url") or client.get("endpoint_url")
    return {
        "endpoint_url": endpoint,
        "region": client.get("region_name") or opts.get("region") or "us-east-1",
        "key": opts.get("key"),
        "secret": opts.get("secret"),
        "token": opts.get("token"),
        "anon": bool(opts.get("anon")),
    }


def repo_storage(root: StoreRoot):
    """The Icechunk ``Storage`` of the store's repo, ``{root}/icechunk/``."""
    icechunk = _icechunk()

    if root.is_local:
        return icechunk.local_filesystem_storage(os.path.join(os.path.abspath(root.path), REPO_DIR))
    if not root.url.startswith("s3://"):
        raise IcechunkError(
            f"{root.url}: the Icechunk companion is written for local and s3:// stores; "
            "set output.icechunk: false for this store"
        )
    bucket, _, prefix = root.url[len("s3://") :].partition("/")
    o = _s3_options(root)
    return icechunk.s3_storage(
        bucket=bucket,
        prefix=f"{prefix.strip('/')}/{REPO_DIR}".lstrip("/"),
        region=o["region"],
        endpoint_url=o["endpoint_url"],
        allow_http=bool(o["endpoint_url"] and o["endpoint_url"].startswith("http:")),
        access_key_id=o["key"],
        secret_access_key=o["secret"],
        session_token=o["token"],
        anonymous=o["anon"] or None,
        force_path_style=bool(o["endpoint_url"]),
    )


def container(root: StoreRoot):
    """The one virtual chunk container the repo declares (:func:`container_prefix`)."""
    icechunk = _icechunk()

    prefix = container_prefix(root)
    if root.is_local:
        store = icechunk.local_filesystem_store(prefix[len("file://") :])
    else:
        o = _s3_options(root)
        store = icechunk.s3_store(
            region=o["region"],
            endpoint_url=o["endpoint_url"],
            allow_http=bool(o["endpoint_url"] and o["endpoint_url"].startswith("http:")),
            s3_compatible=bool(o["endpoint_url"]),
            force_path_style=bool(o["endpoint_url"]),
            anonymous=o["anon"],
        )
    return icechunk.VirtualChunkContainer(prefix, store)


def credentials(root: StoreRoot) -> dict:
    """Authorization of the container prefix, with the credentials the leaves are read with."""
    icechunk = _icechunk()

    prefix = container_prefix(root)
    if root.is_local:
        return icechunk.containers_credentials({prefix: _local_access(icechunk)})
    o = _s3_options(root)
    if o["anon"]:
        cred = icechunk.s3_anonymous_credentials()
    elif o["key"]:
        cred = icechunk.s3_static_credentials(
            access_key_id=o["key"], secret_access_key=o["secret"], session_token=o["token"]
        )
    else:
        cred = icechunk.s3_from_env_credentials()
    return icechunk.containers_credentials({prefix: cred})


def _local_access(icechunk):
    """The credential that authorizes a container on the local file system: icechunk 2's
    explicit sentinel (it deprecates ``None`` there); icechunk 1 has none and takes ``None``."""
    return getattr(icechunk.credentials, "LocalFileSystemAccess", None)


def open_repo(root: StoreRoot, *, create: bool = False, splitting=None):
    """The store's repo (created when ``create`` and absent), its container authorized;
    ``None`` when there is none and ``create`` is false. ``splitting`` (an Icechunk
    ``ManifestSplittingConfig``) overrides the repo's saved one for this handle. Two
    writers creating it at once: the one that loses opens the winner's."""
    icechunk = _icechunk()

    storage = repo_storage(root)
    config = icechunk.RepositoryConfig.default()
    config.set_virtual_chunk_container(container(root))
    if splitting is not None:
        config.manifest = icechunk.ManifestConfig(splitting=splitting)
    creds = credentials(root)
    if not icechunk.Repository.exists(storage):
        if not create:
            return None
        try:
            return icechunk.Repository.create(
                storage, config=config, authorize_virtual_chunk_access=creds
            )
        except Exception:  # another writer created it first: open theirs
            if not icechunk.Repository.exists(storage):
                raise
    return icechunk.Repository.open(storage, config=config, authorize_virtual_chunk_access=creds)


# -- one object group's references -------------------------------------------------------


def _checksum(info: dict, local: bool):
    if local:
        mtime = info.get("mtime")
        if hasattr(mtime, "timestamp"):
            mtime = mtime.timestamp()
        return _dt.datetime.fromtimestamp(math.ceil(float(mtime)), tz=_dt.UTC)
    etag = info.get("ETag") or info.get("etag")
    if etag is None:
        raise ValueError(f"{info.get('name')}: the object store reports no ETag")
    return etag


def _index_nbytes(conf: dict, k: int) -> int:
    crc = any(c.get("name") == "crc32c" for c in conf.get("index_codecs") or ())
    return 16 * k + (4 if crc else 0)


def chunk_count(meta: dict) -> int:
    """C: an object array's chunk count along its cells axis (inner chunks when sharded)."""
    codecs = meta.get("codecs") or []
    if codecs and codecs[0].get("name") == "sharding_indexed":
        inner = codecs[0]["configuration"]["chunk_shape"][0]
    else:
        inner = meta["chunk_grid"]["configuration"]["chunk_shape"][0]
    return -(-int(meta["shape"][0]) // int(inner))


def _listing(root: StoreRoot, prefix: str) -> dict[str, dict]:
    """Every object under ``prefix`` with its size and checksum source, by key (one
    recursive LIST on an object store)."""
    fs, base = root.fs, root.path.rstrip("/")
    full = f"{base}/{prefix}"
    if not root.is_local:
        try:
            fs.invalidate_cache(full)
        except Exception:  # best effort
            pass
    try:
        found = fs.find(full, detail=True)
    except FileNotFoundError:
        return {}
    return {name[len(base) + 1 :]: info for name, info in found.items()}


def _cat(root: StoreRoot, keys: list[str]) -> dict[str, bytes]:
    """Several whole objects at once (concurrent GETs on an object store)."""
    base = root.path.rstrip("/")
    if not keys:
        return {}
    if root.is_local:
        return {k: root.fs.cat_file(f"{base}/{k}") for k in keys}
    got = root.fs.cat([f"{base}/{k}" for k in keys], on_error="omit")
    return {name[len(base) + 1 :]: data for name, data in got.items()}


def _tails(root: StoreRoot, wanted: list[tuple[str, int, int]]) -> list[bytes]:
    """Byte ranges ``(key, start, end)`` of several objects (concurrent on an object store)."""
    base = root.path.rstrip("/")
    if not wanted:
        return []
    if root.is_local:
        return [root.fs.cat_file(f"{base}/{k}", start=a, end=b) for k, a, b in wanted]
    return root.fs.cat_ranges(
        [f"{base}/{k}" for k, _, _ in wanted], [a for _, a, _ in wanted], [b for _, _, b in wanted]
    )


def group_refs(root: StoreRoot, group: str) -> dict[str, ObjectArray]:
    """The references of every array of one object group (``{prefix}/{cell_order}``), read
    as §11.4 says — a sharded array's shard index suffix, a regular array's chunk objects —
    in three rounds whatever the group holds: one LIST (every key with its size and
    checksum), the arrays' ``zarr.json`` together, the index suffixes together."""
    listing = _listing(root, group)
    names = sorted(
        k[len(group) + 1 : -len("/zarr.json")]
        for k in listing
        if k.endswith("/zarr.json") and k[len(group) + 1 :].count("/") == 1
    )
    docs = _cat(root, [f"{group}/{n}/zarr.json" for n in names])
    metas = {}
    for n in names:
        raw = docs.get(f"{group}/{n}/zarr.json")
        meta = json.loads(raw) if raw else None
        if isinstance(meta, dict) and meta.get("node_type") == "array":
            metas[n] = meta
    out: dict[str, ObjectArray] = {}
    suffixes = []
    for n, meta in metas.items():
        array, k = f"{group}/{n}", chunk_count(meta)
        tail = "/0" * (len(meta["shape"]) - 1)
        codecs = meta.get("codecs") or []
        if codecs and codecs[0].get("name") == "sharding_indexed":
            key = f"{array}/c/0{tail}"
            info = listing.get(key)
            if info is None:
                out[n] = ObjectArray(meta, k, ())
                continue
            conf = codecs[0]["configuration"]
            nb, size = _index_nbytes(conf, k), int(info["size"])
            at_end = conf.get("index_location", "end") == "end"
            suffixes.append((n, key, info, (size - nb, size) if at_end else (0, nb)))
            continue
        chunks = {}
        for key, info in listing.items():
            parts = key[len(array) + 3 :].split("/") if key.startswith(f"{array}/c/") else ()
            if parts and parts[0].isdigit() and all(p == "0" for p in parts[1:]):
                chunks[int(parts[0])] = (key, info)
        out[n] = ObjectArray(
            meta,
            k,
            tuple(
                Ref(j, key, 0, int(info["size"]), _checksum(info, root.is_local))
                for j, (key, info) in sorted(chunks.items())
            ),
        )
    raw = _tails(root, [(key, a, b) for _, key, _, (a, b) in suffixes])
    for (n, key, info, _), data in zip(suffixes, raw, strict=True):
        k = chunk_count(metas[n])
        index = np.frombuffer(data[: 16 * k], dtype="<u8").reshape(k, 2)
        check = _checksum(info, root.is_local)
        out[n] = ObjectArray(
            metas[n],
            k,
            tuple(
                Ref(j, key, int(off), int(size), check)
                for j, (off, size) in enumerate(index)
                if not (off == ABSENT and size == ABSENT)
            ),
        )
    return dict(sorted(out.items()))


def refreshed(root: StoreRoot, arrays: dict[str, ObjectArray]) -> dict[str, ObjectArray]:
    """On a local store, ``arrays`` with every checksum read again from its object (one
    stat each): a touch of a column's objects (out of band, or by a zagg that touched
    them) moves their modification times, and with them the checksums its references
    must carry. An object store's ETags survive the touch (a
    self-copy), so there ``arrays`` are returned as they are."""
    if not root.is_local:
        return arrays
    base = root.path.rstrip("/")
    stamps: dict[str, object] = {}
    for a in arrays.values():
        for r in a.refs:
            if r.key not in stamps:
                try:
                    info = {"mtime": os.stat(f"{base}/{r.key}").st_mtime}
                except FileNotFoundError:
                    info = None
                stamps[r.key] = None if info is None else _checksum(info, True)
    return {
        n: ObjectArray(
            a.meta,
            a.chunks,
            tuple(
                Ref(r.j, r.key, r.offset, r.length, stamps[r.key])
                for r in a.refs
                if stamps[r.key] is not None
            ),
        )
        for n, a in arrays.items()
    }


def modified(root: StoreRoot, key: str) -> int | None:
    """A local object's modification time (ns), None when absent; None on an object store,
    whose ETags a lifecycle touch leaves as they are."""
    if not root.is_local:
        return None
    try:
        return os.stat(f"{root.path.rstrip('/')}/{key}").st_mtime_ns
    except FileNotFoundError:
        return None


# -- the ref carrier: a leaf's references, written by the task that wrote the leaf --------


def carrier_key(shard_id: str, window: str | None = None) -> str:
    """The leaf's ref carrier, a sibling of its stats sidecar at its node:
    ``icechunk_refs.json``, or ``icechunk_refs_{window}.json`` beside a windowed leaf."""
    return f"{paths.node_of(shard_id)}/{paths.sidecar_name(CARRIER_NAME, window)}"


def _checksum_text(value) -> str:
    return value.isoformat() if isinstance(value, _dt.datetime) else str(value)


def _checksum_value(text: str, local: bool):
    return _dt.datetime.fromisoformat(text) if local else text


def carrier_unit(level: int, row: str, node: str, prefix: str, stamp: str | None, arrays) -> dict:
    """One unit of a carrier: one object's references and what identifies the object
    (its data prefix and its stamp's ``written_at``)."""
    return {
        "level": int(level),
        "row": row,
        "node": node,
        "prefix": prefix,
        "stamp": stamp,
        "arrays": {
            name: {
                "chunks": a.chunks,
                "refs": [
                    [r.j, r.key, r.offset, r.length, _checksum_text(r.checksum)] for r in a.refs
                ],
            }
            for name, a in arrays.items()
        },
    }


def carrier_doc(root: StoreRoot, geometry: dict, units: list[dict]) -> dict:
    """A carrier (``zagg-icechunk-refs/1``): the writer's geometry and its units. It names
    rows by label and keys relative to the store root, never a row index or the container
    prefix, which only the repo knows."""
    return {
        "spec": CARRIER_SPEC,
        "shard_order": int(geometry["shard_order"]),
        "chunk_order": int(geometry["chunk_order"]),
        "cell_order": int(geometry["cell_order"]),
        "checksum": "last_modified" if root.is_local else "etag",
        "units": units,
    }


def carrier_units(root: StoreRoot, doc, geometry: dict) -> list[dict] | None:
    """The units of a carrier read back, or None when it is absent, unreadable, of
    another revision, or written for another geometry (the commit then reads the
    objects themselves)."""
    if not isinstance(doc, dict) or doc.get("spec") != CARRIER_SPEC:
        return None
    if any(doc.get(k) != geometry.get(k) for k in ("shard_order", "chunk_order", "cell_order")):
        return None
    if doc.get("checksum") != ("last_modified" if root.is_local else "etag"):
        return None
    units = doc.get("units")
    return units if isinstance(units, list) else None


def unit_arrays(unit: dict, local: bool) -> dict[str, ObjectArray]:
    """A carrier unit's arrays as references (their metadata is the repo's to know)."""
    return {
        name: ObjectArray(
            {},
            int(a["chunks"]),
            tuple(
                Ref(int(j), key, int(off), int(n), _checksum_value(c, local))
                for j, key, off, n, c in a["refs"]
            ),
        )
        for name, a in sorted(unit["arrays"].items())
    }


def repo_array_doc(meta: dict, n_rows: int, n_nodes: int) -> dict:
    """The repo array (§11.2) of an object array: the whole sphere at the level's cell
    order behind a leading row dimension, chunked one row deep by the object's inner
    chunk, with the inner codec chain; dtype, fill value and attributes verbatim."""
    doc = copy.deepcopy(meta)
    shape = list(meta["shape"])
    codecs = meta.get("codecs") or []
    if codecs and codecs[0].get("name") == "sharding_indexed":
        conf = codecs[0]["configuration"]
        inner, chain = list(conf["chunk_shape"]), copy.deepcopy(conf["codecs"])
    else:
        inner, chain = list(meta["chunk_grid"]["configuration"]["chunk_shape"]), codecs
    doc["shape"] = [int(n_rows), int(n_nodes) * shape[0], *shape[1:]]
    doc["chunk_grid"] = {"name": "regular", "configuration": {"chunk_shape": [1, *inner]}}
    doc["codecs"] = chain
    names = meta.get("dimension_names") or ["cells"] + [None] * (len(shape) - 1)
    doc["dimension_names"] = [ROW_DIM, *names]
    doc.pop("storage_transformers", None)
    return doc


def repo_chunk_key(path: str, row: int, index: int, ndim: int) -> str:
    """The repo key of chunk ``(row, index, 0, …)`` of the repo array at ``path``, whose
    object arrays have ``ndim`` dimensions (trailing axes at their one chunk)."""
    return f"{path}/c/{row}/{index}" + "/0" * (ndim - 1)


# -- manifest splitting (§11.5) -----------------------------------------------------------


def level_split(base_chunk_order: int, split_order: int, level_chunk_order: int, rows: int):
    """A level's manifest split: ``4^m`` chunks along the cells axis, ``m = min(base chunk
    order − split_order, the level's own chunk order)``; ``order`` the cell order one
    manifest spans; ``rows`` the row-axis block."""
    m = max(0, min(base_chunk_order - split_order, level_chunk_order))
    return {"chunks": 4**m, "order": level_chunk_order - m, "rows": int(rows)}


def splitting(levels: dict, rows_per_manifest: int):
    """The Icechunk splitting config of a block's levels: per level group (``^/{c}/``)
    its rows and chunks per manifest, both axes named (an unnamed axis splits at one
    chunk), trailing axes whole."""
    import icechunk

    cond, dim = icechunk.ManifestSplitCondition, icechunk.ManifestSplitDimCondition
    return icechunk.ManifestSplittingConfig.from_dict(
        {
            cond.path_matches(f"^/{c}/"): {
                dim.Axis(0): int(rows_per_manifest),
                dim.Axis(1): int(e["split"]["chunks"]),
                dim.Any(): 2**32 - 1,
            }
            for c, e in levels.items()
        }
    )
