"""The errors of the granule sources, in a module of their own so that every part of the
reading (config block, scanning, the lazy arrays' tasks) raises the same types."""

from __future__ import annotations

from zagg.errors import ZaggError

__all__ = ["GranuleError", "GranuleReadError"]


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
