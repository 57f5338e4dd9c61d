"""Storage options (s3fs credentials and endpoints) that never show their secrets.

Validated once where a config names them, and masked wherever they could be printed: in a
repr, an error message, or the config a Dataset records in its attrs. Importable without
dask, h5py or numba, so checking a config stays light.
"""

from __future__ import annotations

from collections.abc import Mapping

from zagg.checks.validation import check_keys, fail

_SECRET_KEYS = ("key", "secret", "token")
_STORAGE_KEYS = {  # s3fs options accepted here, with the type each must have
    "anon": bool,
    "key": str,
    "secret": str,
    "token": str,
    "profile": str,
    "endpoint_url": str,
    "requester_pays": bool,
    "use_ssl": bool,
    "client_kwargs": Mapping,
    "config_kwargs": Mapping,
}


class StorageOptions(dict):
    """s3fs options whose repr hides credentials, so they never reach a log or a message.

    A credential is ``key``, ``secret``, ``token`` or any option (also inside
    ``client_kwargs``/``config_kwargs``) whose name mentions a secret, token, password or
    access key.
    """

    def __repr__(self) -> str:
        return f"StorageOptions({_masked(self)!r})"

    __str__ = __repr__

    def redact(self, text: str) -> str:
        """``text`` with every credential value replaced by ``***``."""
        for value in sorted(_secret_values(self), key=len, reverse=True):
            text = text.replace(value, "***")
        return text


def _is_secret(name) -> bool:
    name = str(name).lower()
    return name in _SECRET_KEYS or any(
        w in name for w in ("secret", "token", "password", "access_key", "credential")
    )


def _masked(options: Mapping) -> dict:
    return {
        k: "***" if _is_secret(k) else _masked(v) if isinstance(v, Mapping) else v
        for k, v in options.items()
    }


def _secret_values(options: Mapping):
    for k, v in options.items():
        if isinstance(v, Mapping):
            yield from _secret_values(v)
        elif _is_secret(k) and isinstance(v, str) and v:
            yield v


def parse_storage_options(value, path: str) -> StorageOptions:
    """Validate s3fs options at config key ``path``: known keys, their types, key and secret
    together, an http(s) endpoint; values of credentials never appear in a refusal."""
    if value is None:
        return StorageOptions()
    check_keys(value, tuple(_STORAGE_KEYS), path)
    for key, kind in _STORAGE_KEYS.items():
        if key not in value:
            continue
        v = value[key]
        ok = isinstance(v, kind) and (kind is not str or v.strip())
        if not ok:
            shown = "(value not shown)" if _is_secret(key) or kind is Mapping else f"got {v!r}"
            fail(f"{path}.{key}", f"expected {_kind_name(kind)}, {shown}")
    if ("key" in value) != ("secret" in value):
        fail(path, "'key' and 'secret' go together; give both or neither (or use 'profile')")
    url = value.get("endpoint_url")
    if url is not None and not url.startswith(("http://", "https://")):
        fail(f"{path}.endpoint_url", f"expected an http:// or https:// URL, got {url!r}")
    return StorageOptions(value)


def _kind_name(kind) -> str:
    return {bool: "true or false", str: "a non-empty string", Mapping: "a mapping"}[kind]


def redacted(raw: Mapping) -> dict:
    """A config mapping with the values of credentials in every ``storage_options`` block
    replaced by ``***`` (what a Dataset's attrs may show in a notebook)."""
    out = {}
    for k, v in raw.items():
        if k == "storage_options" and isinstance(v, Mapping):
            out[k] = _masked(v)
        elif isinstance(v, Mapping):
            out[k] = redacted(v)
        else:
            out[k] = v
    return out
