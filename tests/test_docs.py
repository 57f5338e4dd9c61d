"""The README's Python examples run as written (on fewer points, into a temporary store)."""

import re
from pathlib import Path

import zagg

README = Path(__file__).resolve().parents[1] / "README.md"
READING = Path(__file__).resolve().parents[1] / "docs" / "reading.md"


def test_the_readme_python_examples_run(tmp_path, monkeypatch):
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), re.S)
    assert len(blocks) == 2  # the quick start, then reading the store it wrote
    monkeypatch.chdir(tmp_path)
    scope: dict = {}
    for code in blocks:
        exec(code.replace("5_000_000", "50_000"), scope)
    assert scope["summary"].leaves_written > 0
    assert int(scope["cells"]["count"].sum()) == scope["summary"].points
    occupied = scope["store"]["count"].values > 0
    assert int(scope["median"].notnull().sum()) == int(occupied.sum())


def _timed_store(path):
    import dask
    from test_windows_timed import REGION, config

    from zagg.engine.aggregate import shard_collection
    from zagg.engine.write import write_shards
    from zagg.sources.synthetic import synthetic_photons

    ds = synthetic_photons(12_000, REGION, chunk_size=6_000, seed=5)
    with dask.config.set(scheduler="sync"):
        write_shards(shard_collection(ds, config(), chunk_size=6_000), str(path))


def _pyramid_store(path):
    from test_pyramid_store import config

    from zagg.sources.synthetic import synthetic_photons

    points = synthetic_photons(8_000, (-104, -77, -96, -73), seed=3, chunk_size=2_000)
    zagg.to_hive(zagg.aggregate(points, zagg.load_config(config())), str(path))


def _v1_store(path):
    from test_read_pyramid_v1 import build

    from zagg.sources.synthetic import synthetic_photons

    build(synthetic_photons(8_000, (-104, -77, -96, -73), seed=3, chunk_size=2_000), str(path))


def _typed_store(path):
    from test_read_ragged2 import relabel

    _pyramid_store(path)
    relabel(path)


#: the stores docs/reading.md's tested snippets read, by the name they open
DOC_STORES = {
    "timed": _timed_store,
    "pyramid": _pyramid_store,
    "pyramid1": _v1_store,
    "typed": _typed_store,
}


def test_the_reading_guide_snippets_run(tmp_path, monkeypatch):
    """Every ``python test`` block of docs/reading.md runs as written, in a directory
    holding the stores it names (built by this suite's writer)."""
    import test_pyramid_store  # noqa: F401  (it reads a config relative to the checkout)

    blocks = re.findall(r"```python test\n(.*?)```", READING.read_text(), re.S)
    assert blocks
    monkeypatch.chdir(tmp_path)
    for code in blocks:
        for name, build in DOC_STORES.items():
            if f'"{name}"' in code and not (tmp_path / name).exists():  # built on first use
                build(tmp_path / name)
        exec(code, {"zagg": zagg})
