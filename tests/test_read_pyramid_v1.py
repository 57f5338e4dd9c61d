"""A ``zagg-pyramid/1`` store (spec §4.3-4.5), its manifest block and overview attrs
spelled as the spec gives them, read with ``open_level`` / ``open_pyramid`` at its orders:
a level folded clean, and a cascade level where a composition contributor was demoted
(its cells read as the fill word, the demotion recorded), checked against moczarr."""

from __future__ import annotations

import json
import os

import moczarr
import numpy as np
import pytest
from test_pyramid_store import config

import zagg
from zagg import grid as G
from zagg.hive import StoreRoot, artifact
from zagg.hive.cells import dense_cells
from zagg.hive.layout import FieldSpec
from zagg.hive.schema import fill_value, leaf_group
from zagg.hive.stamp import data_prefix, read_stamp
from zagg.sources.synthetic import synthetic_photons

P, C = 6, 11
ORDERS = [5, 3]  # /1 constant depth: cell orders 5 + (11 - 6) = 10 and 3 + 5 = 8
FIELDS = ("count", "h_sum", "composition")


@pytest.fixture(scope="module")
def points():
    ds = synthetic_photons(20_000, (-104, -77, -96, -73), seed=3, chunk_size=2_000)
    return ds.assign(h_ph=(np.round(ds.h_ph * 64) / 64).astype("float32")).persist()


def direct(points, r):
    cfg = zagg.load_config(config(p=min(P, r), ci=r, c=r, pyramid=False))
    return zagg.aggregate(points, cfg).compute()


def manifest_block():
    """§4.5's /1 example, at this store's orders and fields."""
    return {
        "spec": "zagg-pyramid/1",
        "overview": {
            "spacing": 2,
            "orders": ORDERS,
            "all_time": False,
            "fold_source": "cascade",
            "exact_levels": 1,
            "fields": {
                "count": {
                    "class": "exact",
                    "method": "sum",
                    "nan_policy": "skip",
                    "dtype": "int64",
                    "fill_value": 0,
                },
                "h_sum": {"class": "exact", "method": "sum", "nan_policy": "skip"},
                "composition": {
                    "class": "packed",
                    "method": "composition_kway",
                    "of": "h_tdigest_signal",
                },
                "h_tdigest": {"class": "none"},
            },
        },
    }


def overview_attrs(node, k, r, *, cascade, demotions=None):
    """§4.3's ``zagg_overview/1`` block for one overview."""
    block = {
        "spec": "zagg-overview/1",
        "node": node,
        "order": k,
        "cell_order": r,
        "source_shard_order": P,
        "source_cell_order": C,
        "window": "all",
        "fields": {
            "count": {"class": "exact", "method": "sum", "nan_policy": "skip"},
            "h_sum": {"class": "exact", "method": "sum", "nan_policy": "skip"},
            "composition": {"class": "packed", "method": "composition_kway"},
        },
        "fold_source": "cascade" if cascade else "leaves",
        "generation": {"n_leaves": 16, "max_leaf_timestamp": "2026-07-20T00:00:00Z"},
        "content_hash": "0" * 64,
        "generated_at": "2026-07-21T00:00:00Z",
    }
    if cascade:
        block["fold_from_order"] = ORDERS[0]
        block["source_children"] = {"folded": 4, "missing": 0, "unreadable": 0}
    if demotions:
        block["demotions"] = demotions
    return {"role": "overview", "zagg_overview": block}


@pytest.fixture(scope="module")
def store(points, tmp_path_factory):
    return build(points, str(tmp_path_factory.mktemp("v1") / "s"))


def build(points, path):
    """Leaves by our writer; the /1 block and overviews as the spec spells them, one
    order-3 node's composition demoted (word-missing: its cells blanked to the 0 word)."""
    zagg.to_hive(zagg.aggregate(points, zagg.load_config(config(pyramid=False))), path)
    root = StoreRoot(path)
    man = json.loads(open(os.path.join(path, "morton_hive.json")).read())
    man["pyramid"] = manifest_block()
    open(os.path.join(path, "morton_hive.json"), "w").write(json.dumps(man))
    shards = [sid for _rel, sid in zagg.hive.walk_leaves(path)]
    first = zagg.hive.leaf_path(shards[0])
    prefix = data_prefix(first, read_stamp(root, first))
    _attrs, arrays = leaf_group(root, prefix, str(C), first)
    specs = {
        n: FieldSpec("dense", arrays[n].dtype, fill_value(arrays[n]), dict(arrays[n].attrs))
        for n in FIELDS
    }
    demoted = None
    for k in ORDERS:
        r = k + C - P
        cells = direct(points, r)
        words = cells["morton"].values
        nodes = sorted(
            {s[: len(s) - (P - k)] for s in shards}, key=lambda n: int(G.from_decimal([n])[0])
        )
        for node in nodes:
            law = artifact.group_words(node, k, r)
            mine = np.isin(words, law)
            ranks = np.searchsorted(law, words[mine])
            contents = {}
            for n in FIELDS:
                values = cells[n].values[mine]
                if k == ORDERS[-1] and n == "composition" and demoted is None:
                    values = np.zeros_like(values)  # the demoted contributor's cells: fill
                contents[n] = dense_cells(ranks, values, specs[n].dtype, specs[n].fill_value)
            rec = None
            if k == ORDERS[-1] and demoted is None:
                demoted = (node, int(mine.sum()))
                rec = [
                    {
                        "field": "composition",
                        "class": "packed",
                        "reason": "word-missing",
                        "contributors": 1,
                        "of": "h_tdigest_signal",
                        "cells": int(mine.sum()),
                    }
                ]
            attrs = overview_attrs(node, k, r, cascade=k != ORDERS[0], demotions=rec)
            out = artifact.write_artifact(
                root,
                artifact.overview_path(node),
                node,
                {r: contents},
                specs,
                attrs,
                cells_with_data=int(mine.sum()),
                morton_attrs=dict(arrays["morton"].attrs),
            )
            root.write_json(*next(iter(out["sidecar"].items())))
    return path, demoted


def test_the_v1_orders_are_the_levels(store):
    path, _ = store
    tree = zagg.open_pyramid(path)
    assert list(tree.children) == ["o11", "o10", "o8"]
    assert tree.attrs["pyramid"]["spec"] == "zagg-pyramid/1"
    assert moczarr.pyramid_levels(moczarr.read_manifest(path)).keys() >= {10, 8}


def test_a_clean_level_reads_as_the_direct_aggregation(store, points):
    path, _ = store
    ds = zagg.open_level(path, 10).compute()
    want = direct(points, 10)
    np.testing.assert_array_equal(ds["morton"].values, want["morton"].values)
    for n in FIELDS:
        np.testing.assert_array_equal(ds[n].values, want[n].values)
    meta = ds.attrs["zagg_level"]
    assert meta["demotions"] == [] and meta["fold_sources"] == ["leaves"]
    assert "demotions" not in ds["composition"].attrs


def test_a_demoted_cell_reads_as_fill_with_its_demotion_recorded(store, points):
    path, (node, n_demoted) = store
    ds = zagg.open_level(path, 8).compute()
    want = direct(points, 8)
    np.testing.assert_array_equal(ds["morton"].values, want["morton"].values)
    np.testing.assert_array_equal(ds["count"].values, want["count"].values)
    inside = np.isin(ds["morton"].values, artifact.group_words(node, 3, 8))
    assert inside.sum() == n_demoted > 0
    assert (ds["composition"].values[inside] == 0).all()  # the spec's fill word
    np.testing.assert_array_equal(
        ds["composition"].values[~inside], want["composition"].values[~inside]
    )
    [rec] = ds.attrs["zagg_level"]["demotions"]
    assert rec == {
        "field": "composition",
        "class": "packed",
        "reason": "word-missing",
        "contributors": 1,
        "of": "h_tdigest_signal",
        "cells": n_demoted,
        "node": node,
    }
    assert ds["composition"].attrs["demotions"] == [rec]
    assert ds.attrs["zagg_level"]["fold_sources"] == ["cascade"]


def test_moczarr_reads_the_same_v1_levels(store):
    path, (node, _n) = store
    for r in (10, 8):
        ours = zagg.open_level(path, r).compute()
        theirs = moczarr.open_level(path, r)
        held = np.asarray(theirs["count"].values) > 0
        np.testing.assert_array_equal(
            np.asarray(theirs["count"].values)[held], ours["count"].values
        )
        np.testing.assert_array_equal(
            np.asarray(theirs["composition"].values)[held], ours["composition"].values
        )
    recs = moczarr.level_demotions(moczarr.open_level(path, 8))
    assert [(d["field"], d["reason"], d.get("cells")) for d in recs] == [
        ("composition", "word-missing", _n)
    ]


def test_an_overview_of_another_cell_order_is_refused(store, tmp_path):
    import shutil

    path, (node, _n) = store
    copy = str(tmp_path / "s")
    shutil.copytree(path, copy)
    key = os.path.join(copy, artifact.overview_path(node), "zarr.json")
    doc = json.loads(open(key).read())
    doc["attributes"]["zagg_overview"]["cell_order"] = 9
    open(key, "w").write(json.dumps(doc))
    with pytest.raises(ValueError, match="overview of cell order 9"):
        zagg.open_level(copy, 8)
