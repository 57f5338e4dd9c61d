"""Roots and discovery (spec C50, C68): multi-product roots, ``path_grouping`` > 1 trees
and stores without a root coverage, all opened through ``open_store``."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import moczarr
import numpy as np
import pytest
from test_pyramid_store import config

import zagg
from zagg import grid as G
from zagg.hive import ManifestConflictError
from zagg.sources.synthetic import synthetic_photons


def write(path, seed, pyramid=False):
    points = synthetic_photons(4_000, (-104, -77, -96, -73), seed=seed, chunk_size=2_000)
    zagg.to_hive(zagg.aggregate(points, zagg.load_config(config(pyramid=pyramid))), str(path))


@pytest.fixture(scope="module")
def bare(tmp_path_factory):
    path = tmp_path_factory.mktemp("roots") / "bare"
    write(path, 3)
    return path


def same(a, b):
    a, b = a.compute(), b.compute()
    np.testing.assert_array_equal(a["morton"].values, b["morton"].values)
    for var in ("count", "h_sum", "composition"):
        np.testing.assert_array_equal(a[var].values, b[var].values)


def test_the_spec_path_of_a_grouped_tree():
    assert G.hive_path("433142241", grouping=3) == "4/331/422/41/433142241.zarr"  # G10
    assert G.hive_path("-5112333") == "-5/1/1/2/3/3/3/-5112333.zarr"
    assert zagg.hive.leaf_path("433142241", "2019", grouping=3) == (
        "4/331/422/41/433142241_2019.zarr"
    )


def test_a_multi_product_root_opens_every_product(tmp_path, bare):
    root = tmp_path / "root"
    shutil.copytree(bare, root / "alpha")
    write(root / "beta", 4)
    (root / "multiscales").mkdir()  # a reserved name with a product manifest: reported
    shutil.copy(root / "alpha" / "morton_hive.json", root / "multiscales")
    with pytest.warns(UserWarning, match="reserved name 'multiscales'"):
        tree = zagg.open_store(root)
    assert list(tree.children) == ["alpha", "beta"]
    assert tree.attrs["morton_hive_store"]["products"] == ["alpha", "beta"]
    same(tree["alpha"].to_dataset(), zagg.open_hive(root / "alpha"))
    same(tree["beta"].to_dataset(), zagg.open_hive(root / "beta"))
    # moczarr 0.10 predates the reservation (it lists the collision too); otherwise the same
    theirs = sorted(p["name"] for p in moczarr.list_products(str(root)))
    assert [n for n in theirs if n != "multiscales"] == ["alpha", "beta"]


def test_a_store_without_root_coverage_falls_back_to_the_walk(tmp_path, bare):
    copy = tmp_path / "s"
    shutil.copytree(bare, copy)
    os.remove(copy / "coverage.moc")
    tree = zagg.open_store(copy)
    same(next(iter(tree.children.values())).to_dataset(), zagg.open_hive(bare))
    assert int(moczarr.open_hive(str(copy))["count"].values.sum()) == int(
        zagg.open_hive(copy)["count"].sum()
    )


def regroup(src: Path, dst: Path, g: int) -> None:
    """The same store laid out at ``path_grouping`` g: every leaf (and its node's
    sidecars) moved to its grouped node, the manifest saying so."""
    shutil.copytree(src, dst)
    for rel, sid in zagg.hive.walk_leaves(dst):
        old_node = dst / rel.rsplit("/", 1)[0]
        new_node = dst / G.node_path(sid, g)
        new_node.mkdir(parents=True, exist_ok=True)
        for entry in os.listdir(old_node):
            if entry.startswith(sid):
                shutil.move(str(old_node / entry), str(new_node / entry))
        for name in ("stats.json", "granules.json"):
            if (old_node / name).exists():
                shutil.move(str(old_node / name), str(new_node / name))
    for base in [d for d in os.listdir(dst) if d.lstrip("-").isdigit()]:
        for path, _dirs, files in sorted(os.walk(dst / base), reverse=True):
            if not files and not os.listdir(path):
                os.rmdir(path)
    man = json.loads((dst / "morton_hive.json").read_text())
    man["path_grouping"] = g
    (dst / "morton_hive.json").write_text(json.dumps(man))


@pytest.mark.parametrize("coverage", [True, False])
def test_a_grouped_tree_opens_through_open_store(tmp_path, bare, coverage):
    grouped = tmp_path / "g"
    regroup(bare, grouped, 3)
    sid = zagg.hive.walk_leaves(bare)[0][1]
    assert (grouped / zagg.hive.leaf_path(sid, grouping=3)).is_dir()
    assert not (grouped / zagg.hive.leaf_path(sid)).exists()
    if not coverage:
        os.remove(grouped / "coverage.moc")
    tree = zagg.open_store(grouped)
    same(next(iter(tree.children.values())).to_dataset(), zagg.open_hive(bare))
    same(zagg.open_leaf(grouped, sid), zagg.open_leaf(bare, sid))
    theirs = moczarr.open_hive(str(grouped))  # the independent reader finds the same cells
    assert int(theirs["count"].values.sum()) == int(zagg.open_hive(grouped)["count"].sum())


def test_a_grouped_tree_omits_its_order_nodes_and_refuses_writes(tmp_path):
    src = tmp_path / "p"
    write(src, 3, pyramid=None)  # the default /2 pyramid, leaf columns included
    grouped = tmp_path / "g"
    regroup(src, grouped, 2)
    with pytest.warns(UserWarning, match="path_grouping"):
        tree = zagg.open_pyramid(grouped)
    assert list(tree.children) == ["o11"]
    with pytest.raises(ValueError, match="no settled path"):
        zagg.open_level(grouped, 8)
    with pytest.raises(ManifestConflictError, match="writes one-digit trees only"):
        write(grouped, 5, pyramid=None)
