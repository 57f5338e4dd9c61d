"""The Icechunk companion's view of one hive object: where its repo lives, the repo array
an object array maps onto, and the virtual references of its chunks (spec §11.2–11.3).

Nothing here opens a session: these are the reads (one zarr.json, one shard-index suffix
and one HEAD per array) and the pure derivations the commit code in
:mod:`zagg.pyramid.icechunk` builds on. A reference is ``(chunk j of the object, location,
offset, length, checksum)``; the checksum is the object's ETag on an object store and its
mtime ceiled to the whole second on a local one, so a reference into a rewritten object
fails loudly on read instead of decoding other bytes.
"""

from __future__ import annotations

import copy
import datetime as _dt
import math
import os
from dataclasses import dataclass

import numpy as np

from zagg.hive.storage import StoreRoot

REPO_DIR = "icechunk"  # {store_root}/icechunk/, a reserved store-root name
SPEC = "zagg-icechunk/2"
ROW_DIM = "window"
ABSENT = 2**64 - 1  # a shard index's marker of an inner chunk never written


def available() -> bool:
    """Whether the ``icechunk`` package (the ``zagg[icechunk]`` extra) is importable."""
    try:
        import icechunk  # noqa: F401
    except ImportError:
        return False
    return True


@dataclass(frozen=True)
class Ref:
    """One chunk of an object array as a virtual reference."""

    j: int  # the chunk's index on the object's cells axis
    location: str
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


def url_prefix(root: StoreRoot) -> str:
    """The virtual chunk container's prefix: the store root URL with a trailing ``/``."""
    if root.is_local:
        return "file://" + os.path.abspath(root.path).rstrip("/") + "/"
    return root.url.rstrip("/") + "/"


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
    import icechunk

    if root.is_local:
        return icechunk.local_filesystem_storage(os.path.join(os.path.abspath(root.path), REPO_DIR))
    if not root.url.startswith("s3://"):
        raise ValueError(
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
    """The one virtual chunk container the repo declares: the store root itself."""
    import icechunk

    if root.is_local:
        store = icechunk.local_filesystem_store(os.path.abspath(root.path))
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
    return icechunk.VirtualChunkContainer(url_prefix(root), store)


def credentials(root: StoreRoot) -> dict:
    """Authorization of the container prefix, with the credentials the leaves are read with."""
    import icechunk

    if root.is_local:
        return icechunk.containers_credentials({url_prefix(root): None})
    o = _s3_options(root)
    if o["anon"]:
        cred = icechunk.s3_anonymous_credentials()
    elif o["key"]:
        cred = icechunk.s3_static_credentials(
            access_key_id=o["key"], secret_access_key=o["secret"], session_token=o["token"]
        )
    else:
        cred = icechunk.s3_from_env_credentials()
    return icechunk.containers_credentials({url_prefix(root): cred})


def open_repo(root: StoreRoot, *, create: bool = False):
    """The store's repo (created when ``create`` and absent), its container authorized;
    ``None`` when there is none and ``create`` is false."""
    import icechunk

    storage = repo_storage(root)
    config = icechunk.RepositoryConfig.default()
    config.set_virtual_chunk_container(container(root))
    creds = credentials(root)
    if icechunk.Repository.exists(storage):
        return icechunk.Repository.open(
            storage, config=config, authorize_virtual_chunk_access=creds
        )
    if not create:
        return None
    return icechunk.Repository.create(storage, config=config, authorize_virtual_chunk_access=creds)


# -- one object array -------------------------------------------------------------------


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


def object_array(root: StoreRoot, array: str) -> ObjectArray | None:
    """The references of one object array (``{prefix}/{group}/{name}``), read as §11.4
    says: a sharded array by its index suffix plus one HEAD, a one-chunk array by one HEAD,
    a multi-chunk regular array by one LIST. ``None`` when the array has no metadata."""
    meta = root.read_json(f"{array}/zarr.json")
    if not isinstance(meta, dict) or meta.get("node_type") != "array":
        return None
    shape = list(meta["shape"])
    tail = "/0" * (len(shape) - 1)
    prefix = url_prefix(root)
    fs, base = root.fs, root.path.rstrip("/")
    codecs = meta.get("codecs") or []
    if codecs and codecs[0].get("name") == "sharding_indexed":
        conf = codecs[0]["configuration"]
        k = math.ceil(shape[0] / conf["chunk_shape"][0])
        key = f"{array}/c/0{tail}"
        full = f"{base}/{key}"
        try:
            info = fs.info(full)
        except FileNotFoundError:
            return ObjectArray(meta, k, ())
        n = _index_nbytes(conf, k)
        at_end = conf.get("index_location", "end") == "end"
        raw = fs.cat_file(full, start=-n) if at_end else fs.cat_file(full, start=0, end=n)
        index = np.frombuffer(raw[: 16 * k], dtype="<u8").reshape(k, 2)
        check = _checksum(info, root.is_local)
        refs = tuple(
            Ref(j, prefix + key, int(off), int(size), check)
            for j, (off, size) in enumerate(index)
            if not (off == ABSENT and size == ABSENT)
        )
        return ObjectArray(meta, k, refs)
    c0 = meta["chunk_grid"]["configuration"]["chunk_shape"][0]
    k = math.ceil(shape[0] / c0)
    if k == 1:
        key = f"{array}/c/0{tail}"
        try:
            infos = {0: (key, fs.info(f"{base}/{key}"))}
        except FileNotFoundError:
            infos = {}
    else:
        infos = {}
        for key in root.list_keys(f"{array}/c"):
            parts = key[len(array) + 3 :].split("/")
            if parts[0].isdigit() and all(p == "0" for p in parts[1:]):
                infos[int(parts[0])] = (key, fs.info(f"{base}/{key}"))
    refs = tuple(
        Ref(j, prefix + key, 0, int(info["size"]), _checksum(info, root.is_local))
        for j, (key, info) in sorted(infos.items())
    )
    return ObjectArray(meta, k, refs)


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
