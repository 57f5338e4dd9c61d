"""Opening a points file or store named by ``data_source.input``: zarr, netCDF4/HDF5 or
netCDF3, each failure reported as a ConfigError naming the key, the path and the fix."""

from __future__ import annotations

import os
import warnings
from typing import TYPE_CHECKING

from zagg.checks.credentials import StorageOptions
from zagg.checks.validation import ConfigError

if TYPE_CHECKING:
    import xarray as xr


def open_input(path: str, storage_options=None) -> xr.Dataset:
    """The lazy Dataset of the zarr store or netCDF file at ``path`` (local, or a URL read
    with ``storage_options``)."""
    import xarray as xr

    remote = "://" in path
    where = f"config key 'data_source.input': cannot open {path!r}"
    magic = None  # the first bytes of a local file (not read for a directory or URL)
    try:
        if not remote and os.path.isfile(path):
            with open(path, "rb") as f:
                magic = f.read(8)
    except OSError as exc:
        raise ConfigError(f"{where}: {exc}; check the file's permissions") from exc
    # The engine is picked by the file's magic bytes, not by trying h5netcdf then scipy:
    # a damaged file would then be reported by whichever engine failed last (h5py's "file
    # signature not found" for a cut-short netCDF3 file, scipy's "not a valid NetCDF 3
    # file" for a netCDF4 one), and the bytes say which error is the real one. HDF5
    # (netCDF4) goes to h5netcdf, classic/64-bit-offset netCDF3 ("CDF\x01", "CDF\x02")
    # to scipy, which h5py cannot read; a remote file (never read here) to h5netcdf.
    hdf5 = magic is not None and magic.startswith(b"\x89HDF\r\n\x1a\n")
    cdf = magic is not None and magic.startswith(b"CDF")
    netcdf = hdf5 or cdf or path.lower().endswith((".nc", ".nc4", ".h5", ".hdf5", ".cdf"))
    fix = (
        "if the file is cut short or corrupt, download or export it again; or convert "
        "it to a zarr store"
    )
    if remote:
        fix = f"check the URL and your credentials; {fix}"
    try:
        if netcdf and cdf:
            what = "reading it as netCDF3 (scipy) failed"
            if magic[3:4] not in (b"\x01", b"\x02"):
                fix = "convert it to netCDF4 (nccopy -k nc4 IN OUT) or to a zarr store"
                raise ValueError(
                    f"netCDF3 format byte {magic[3:4]!r} is not supported "
                    "(only 1, classic, and 2, 64-bit offset; 5 is CDF5)"
                )
            return xr.open_dataset(path, engine="scipy", chunks={}, decode_times=False)
        if netcdf:
            what = "reading it as netCDF4/HDF5 (h5netcdf) failed"
            if magic == b"":
                what = "there is nothing to read"
                raise ValueError("the file is empty")
            if magic is not None and not hdf5:
                # HDF5 also allows a user block before its signature: let h5py look
                what = (
                    f"it is neither netCDF3 nor netCDF4/HDF5 (it begins {magic!r}) and "
                    "reading it as HDF5 failed"
                )
            # phony_dims: plain HDF5 datasets (no dimension scales) get phony_dim_N
            # dimensions, as h5netcdf does by default, but without its warning
            return xr.open_dataset(
                path, engine="h5netcdf", phony_dims="access", chunks={}, decode_times=False
            )
        what = "reading it as a zarr store failed"
        fix = (
            "give a zarr store (a directory holding zarr.json or .zgroup"
            + (", and check the URL and your credentials" if remote else "")
            + ") or a netCDF file ending in .nc, .nc4, .h5 or .hdf5"
        )
        with warnings.catch_warnings():
            # zarr v3 does not define consolidated metadata; a store without it is normal
            warnings.filterwarnings(
                "ignore", message="Failed to open Zarr store with consolidated metadata"
            )
            return xr.open_zarr(
                path, decode_times=False, storage_options=dict(storage_options or {}) or None
            )
    except Exception as exc:  # any backend error: OSError, ValueError, IndexError, ...
        if not remote and not os.path.exists(path):
            raise ConfigError(
                f"{where}: it does not exist; give the path of a zarr "
                "store or netCDF file with the points"
            ) from exc
        if cdf:
            # scipy leaves a half-read file to the garbage collector, which would warn
            # later, out of context, that it "cannot close a netcdf_file opened with mmap"
            import gc
            import traceback

            with warnings.catch_warnings():
                warnings.simplefilter("ignore", RuntimeWarning)
                traceback.clear_frames(exc.__traceback__)  # its frames hold the file
                gc.collect()
        detail = " ".join(str(exc).split()) or "no detail given"
        detail = StorageOptions(storage_options or {}).redact(detail)
        if isinstance(exc, ImportError) or "unrecognized engine" in detail:
            # xarray's own message only points at its install docs
            engine = "scipy" if cdf else "h5netcdf" if netcdf else "zarr"
            detail = f"the {engine} package is not installed"
            fix = f"pip install {engine} (a zagg dependency: reinstalling zagg brings it)"
        raise ConfigError(f"{where}: {what} ({type(exc).__name__}: {detail}); {fix}") from exc
