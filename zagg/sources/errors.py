"""The errors of the granule sources, in a module of their own so that every part of the
reading (config block, scanning, the lazy arrays' tasks) raises the same types."""

from __future__ import annotations

from zagg.errors import ZaggError

__all__ = [
    "ArchiveError",
    "ArchiveLoginError",
    "ArchiveUnreachable",
    "EmptySearch",
    "GranuleError",
    "GranuleReadError",
    "crashed",
]


class GranuleError(ZaggError, ValueError):
    """A granule that cannot be read as configured; the message names the file and path."""


class GranuleReadError(GranuleError):
    """Reading rows of a granule failed (a damaged chunk, a truncated file, a lost
    connection). ``granule`` and ``href`` name the file, so a run under ``on_error: skip``
    can leave it out (:func:`zagg.sources.granules.skip_damaged`)."""

    def __init__(self, msg: str, granule: str, href: str):
        super().__init__(msg)
        self.granule = granule
        self.href = href

    def __reduce__(self):  # keep granule and href across processes
        return (type(self), (str(self), self.granule, self.href))


def crashed(href: str, exc: BaseException) -> GranuleError | None:
    """The :class:`GranuleError` of a granule whose reading died of a ``BaseException``
    that is no ``Exception`` (a Rust panic in a library), so a scan task returns it like
    any failed granule instead of raising what distributed's gather cannot carry; None for
    anything else (interrupts and exits keep their meaning)."""
    if isinstance(exc, (Exception, KeyboardInterrupt, SystemExit, GeneratorExit)):
        return None
    text = str(exc).strip().splitlines()
    what = f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__
    return GranuleError(
        f"granule {href}: reading it crashed a library ({what}); check the file (fetch it "
        "again), or set data_source.on_error: skip to leave it out"
    )


class ArchiveError(ZaggError, OSError):
    """NASA's Earthdata archive (its search, its login, its S3 or HTTPS reads) refused a
    request or could not be reached; the message names the service and the fix. (One
    builtin family, OSError, so that dask carries it between processes intact.)"""


class ArchiveLoginError(ArchiveError, PermissionError):
    """The archive refused the Earthdata login or the S3 keys issued for it."""


class ArchiveUnreachable(ArchiveError, ConnectionError):
    """A service of the archive did not answer."""


class EmptySearch(ArchiveError):
    """A granule search that found nothing; the message names the query."""
