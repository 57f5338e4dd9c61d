"""Argument checks shared by the public entry points, so a wrong type gets a message that
says what is needed and how to get it instead of an AttributeError from deep inside."""

from __future__ import annotations

import os
import sys


def require_dataset(obj, call: str, fix: str) -> None:
    """Refuse anything but an xarray Dataset as ``call``'s argument (``fix`` says how to
    get one). xarray is not imported here: an object can only be a Dataset once it is."""
    xr = sys.modules.get("xarray")
    if xr is not None and isinstance(obj, xr.Dataset):
        return
    shown = f" {os.fspath(obj)!r}" if isinstance(obj, str | os.PathLike) else ""
    hint = ""
    if xr is not None and isinstance(obj, xr.DataArray):
        hint = f" (the DataArray {obj.name!r}: pass the Dataset that holds it)"
    raise TypeError(f"{call} needs an xarray Dataset, got {type(obj).__name__}{shown}{hint}; {fix}")
