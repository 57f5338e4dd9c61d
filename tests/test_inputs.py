"""``data_source.input`` files: zarr, netCDF4/HDF5 and netCDF3 give the same store; damaged or
foreign files are refused with a ConfigError naming the key."""

import sys

import pytest
from builders import fields, grid_orders, pipeline_config, synthetic_source

import zagg
from zagg import hive
from zagg.config.model import load_config
from zagg.pipeline.run import open_source, run
from zagg.sources.synthetic import synthetic_photons

REGION = (-100.2, -75.6, -99.8, -75.4)


def config(path=None):
    source = synthetic_source() if path is None else synthetic_source(input=str(path))
    variables = fields("count", "h_mean", "h_tdigest", h_mean={"dtype": "float64"})
    return pipeline_config(source, variables, grid_orders(6, 12, inner=6))


@pytest.fixture(scope="module")
def points(tmp_path_factory):
    """The same few thousand points as a zarr store, a netCDF4 file and a netCDF3 file."""
    ds = synthetic_photons(4_000, REGION, chunk_size=4_000, seed=7).compute()
    ds = ds[["lat_ph", "lon_ph", "h_ph"]]  # only what the config reads
    d = tmp_path_factory.mktemp("inputs")
    ds.to_zarr(d / "points.zarr", zarr_format=3, consolidated=False)
    ds.to_netcdf(d / "points4.nc", engine="h5netcdf")
    ds.to_netcdf(d / "points3.nc", engine="scipy")
    return d


def _hashes(root):
    return {
        sid: hive.read_stamp(hive.StoreRoot(root), leaf)["content_hashes"]
        for leaf, sid in hive.walk_leaves(root)
    }


def test_zarr_netcdf4_and_netcdf3_inputs_write_the_same_leaves(tmp_path, points, worker_process):
    assert (points / "points4.nc").read_bytes()[:4] == b"\x89HDF"
    assert (points / "points3.nc").read_bytes()[:3] == b"CDF"
    hashes, counts = {}, {}
    for name in ("points.zarr", "points4.nc", "points3.nc"):
        store = tmp_path / name.replace(".", "_")
        summary = run(
            config(points / name), store=str(store), scheduler=worker_process, progress=False
        )
        hashes[name], counts[name] = _hashes(store), summary.points
    assert counts["points.zarr"] > 3_000 and len(set(counts.values())) == 1
    assert hashes["points.zarr"] and hashes["points4.nc"] == hashes["points.zarr"]
    assert hashes["points3.nc"] == hashes["points.zarr"]


def _damaged(points, tmp_path):
    four, three = (points / "points4.nc").read_bytes(), (points / "points3.nc").read_bytes()
    files = {
        "cut4.nc": four[: len(four) // 2],
        "cut3.nc": three[: len(three) // 2],
        "header3.nc": three[:40],  # scipy: IndexError while reading the header
        "empty.nc": b"",
        "text.nc": b"lat,lon,h\n-75.5,-100.0,1800.0\n",
        "text.h5": b"not an HDF5 file at all\n" * 4,
        "cdf5.nc": b"CDF\x05" + three[4:],
    }
    for name, data in files.items():
        (tmp_path / name).write_bytes(data)
    return files


@pytest.mark.parametrize(
    "name, what",
    [
        ("cut4.nc", "reading it as netCDF4/HDF5 (h5netcdf) failed (OSError: "),
        ("cut3.nc", "reading it as netCDF3 (scipy) failed (ValueError: "),
        ("header3.nc", "reading it as netCDF3 (scipy) failed (IndexError: "),
        ("empty.nc", "there is nothing to read (ValueError: the file is empty)"),
        ("text.nc", "it is neither netCDF3 nor netCDF4/HDF5 (it begins b'lat,lon,')"),
        ("text.h5", "it is neither netCDF3 nor netCDF4/HDF5 (it begins b'not an H')"),
        ("cdf5.nc", "format byte b'\\x05' is not supported"),
    ],
)
def test_damaged_or_foreign_files_are_refused_naming_the_key(tmp_path, points, name, what):
    _damaged(points, tmp_path)
    path = tmp_path / name
    with pytest.raises(zagg.ConfigError) as err:
        open_source(load_config(config(path)))
    msg = str(err.value)
    assert msg.startswith(f"config key 'data_source.input': cannot open {str(path)!r}: ")
    assert what in msg and "to a zarr store" in msg and "\n" not in msg
    assert isinstance(err.value.__cause__, Exception)


def test_a_truncated_netcdf_input_stops_the_run_with_a_config_error(
    tmp_path, points, worker_process
):
    data = (points / "points3.nc").read_bytes()
    (tmp_path / "cut.nc").write_bytes(data[: len(data) - 1000])
    with pytest.raises(
        zagg.ConfigError,
        match=r"'data_source.input': cannot open .*cut\.nc.*"
        r"reading it as netCDF3 \(scipy\) failed",
    ):
        run(
            config(tmp_path / "cut.nc"),
            store=str(tmp_path / "s"),
            scheduler=worker_process,
            progress=False,
        )
    assert not (tmp_path / "s").exists() or not hive.walk_leaves(tmp_path / "s")


def test_a_missing_reader_package_is_named(tmp_path, points, monkeypatch):
    monkeypatch.setitem(sys.modules, "h5netcdf", None)  # as if it were not installed
    with pytest.raises(
        zagg.ConfigError,
        match=r"'data_source.input': cannot open .*points4\.nc"
        r".*h5netcdf package is not installed\); "
        r"pip install h5netcdf",
    ):
        open_source(load_config(config(points / "points4.nc")))


def test_missing_and_non_zarr_inputs_say_what_is_wrong(tmp_path):
    with pytest.raises(zagg.ConfigError, match=r"cannot open .*gone\.nc.*: it does not exist"):
        open_source(load_config(config(tmp_path / "gone.nc")))
    (tmp_path / "folder").mkdir()
    with pytest.raises(
        zagg.ConfigError,
        match=r"cannot open .*folder.*reading it as a zarr "
        r"store failed .*; give a zarr store",
    ):
        open_source(load_config(config(tmp_path / "folder")))
