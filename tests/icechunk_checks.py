"""Whether a store's Icechunk companion, opened with icechunk and xarray alone, equals the
hive cell for cell at every level and row (what its commits must keep true)."""

import mortie
import numpy as np

from zagg.hive import icechunk as ic
from zagg.hive.manifest import read_manifest
from zagg.hive.storage import StoreRoot
from zagg.pyramid.icechunk import levels_of
from zagg.read.levels import open_level


def plain_session(root: StoreRoot):
    """A read session of main with icechunk alone (the documented plain way)."""
    import icechunk

    repo = icechunk.Repository.open(  # the container config is the repo's own
        ic.repo_storage(root), authorize_virtual_chunk_access=ic.credentials(root)
    )
    return repo.readonly_session(branch="main")


def plain_open(root: StoreRoot, group: str, session=None):
    """One group of the repo opened with xarray alone."""
    import xarray as xr

    session = session or plain_session(root)
    return xr.open_zarr(session.store, group=group, consolidated=False, chunks=None)


def same_values(got, want, what: str) -> None:
    if want.dtype == object:  # digest payloads: the stored bytes exactly
        assert [bytes(x) for x in got] == [bytes(x) for x in want], what
    else:
        np.testing.assert_array_equal(got, want, err_msg=what)


def repo_matches_hive(store, storage_options=None, orders=None) -> int:
    """Assert that main's tip of the store's repo holds every level the manifest declares
    (or only compare ``orders``) and reads, at every row, what ``zagg.open_level`` reads
    from the hive (every field the two share, on the level's occupied cells; fill
    elsewhere at the coarse levels, where reading the whole sphere is cheap). Returns the
    (level, row) pairs compared."""
    root = StoreRoot(store, storage_options)
    manifest = read_manifest(root)
    windowed = manifest.get("temporal") is not None
    session = plain_session(root)
    top = plain_open(root, "/", session)
    block = top.attrs["zagg_icechunk"]
    rows = block["rows"]
    levels = levels_of(manifest)
    if orders is None:
        assert [int(c) for c in block["levels"]] == list(levels)
    else:
        levels = {c: e for c, e in levels.items() if c in orders}
    want_attrs = {"zagg_icechunk"} | (
        {"zarr_conventions", "multiscales"} if manifest.get("multiscales") else set()
    )
    assert set(top.attrs) == want_attrs
    checked = 0
    for c, level in levels.items():
        ds = plain_open(root, str(c), session)
        assert ds.sizes["cells"] == 12 * 4**c and ds.sizes["window"] == len(rows)
        for w, label in enumerate(rows):
            if windowed and label == "all" and level.artifact != "overview":
                continue
            window = None if label == "all" else label
            want = open_level(store, c, storage_options, window=window).compute()
            nested, _ = mortie.mort2healpix(want["morton"].values)
            nested = np.asarray(nested, dtype=np.int64)
            names = [n for n in ds.data_vars if n in want.data_vars and want[n].dims == ("cells",)]
            assert "count" in names, names
            for n in names:
                got = at_cells(ds[n].isel(window=w), nested)
                same_values(got, want[n].values, f"/{c} {n} row {label}")
            if c <= 4:  # outside the occupied cells a level reads fill (no stray reference)
                whole = ds["count"].isel(window=w).values
                assert int(np.nan_to_num(whole).sum()) == int(want["count"].sum())
            checked += 1
    return checked


#: cells between two wanted ones below which they are read as one slice
GAP = 4096


def at_cells(values, cells: np.ndarray) -> np.ndarray:
    """A lazily opened ``(cells,)`` variable's values at ``cells`` (sorted or not), read as
    a slice per run of nearby cells: zarr's integer indexing makes a pass over every chunk
    of the axis, and a fine level's axis has millions of chunks."""
    order = np.argsort(cells, kind="stable")
    ranked = cells[order]
    out = np.empty(cells.size, dtype=values.dtype)
    breaks = np.flatnonzero(np.diff(ranked) > GAP) + 1
    for run in np.split(np.arange(cells.size), breaks):
        if run.size:
            lo, hi = int(ranked[run[0]]), int(ranked[run[-1]]) + 1
            out[order[run]] = values.isel(cells=slice(lo, hi)).values[ranked[run] - lo]
    return out
