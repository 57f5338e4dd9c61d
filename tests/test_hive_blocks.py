"""A leaf written from blocks (runs of whole inner chunks compressed by separate tasks) is
byte for byte the leaf written whole, and mismatched blocks are refused before any write."""

from __future__ import annotations

import numpy as np
import pytest
from test_hive_builders import (
    ATTRS,
    FIELDS,
    NORTH,
    chunk_objects,
    grid_block,
    new_store,
    shard_arrays,
)

from zagg.hive import cells as cells_
from zagg.hive import encode_block, leaf_path, write_leaf_blocks, write_leaf_cells
from zagg.hive import leaf as leaf_module
from zagg.hive.layout import Geometry, field_specs

pytestmark = pytest.mark.filterwarnings("ignore::zarr.errors.UnstableSpecificationWarning")

N_CELLS = 256  # p = 4, c = 8: K = 16 inner chunks of 16 cells at chunk_inner 6


def _contents(grid, digest_rows: bool, seed=0):
    """Occupied cells of a random shard: chunks 0, 5-7 and 15 hold data, the rest none."""
    rng = np.random.default_rng(seed)
    chunks = [0, 5, 6, 7, 15]
    occupied = sorted(int(c * 16 + r) for c in chunks for r in rng.choice(16, 5, replace=False))
    arrays = shard_arrays(N_CELLS, occupied, seed, g2=False)
    contents = leaf_module._cells_from_arrays(
        NORTH, arrays, field_specs(FIELDS, ATTRS), Geometry.from_grid(grid)
    )
    if digest_rows:  # the aggregation's own form: float32 mean and weight columns
        rag = contents["h_tdigest"]
        rows = rag.data.view("<f4").reshape(-1, 2)
        contents["h_tdigest"] = cells_.digest_rows(
            rag.ranks, rag.offsets // 8, rows[:, 0], rows[:, 1].copy()
        )
    return contents


def _block(cells, lo: int, hi: int):
    i0, i1 = np.searchsorted(cells.ranks, [lo, hi])
    if isinstance(cells, cells_.DenseCells):
        return cells_.DenseCells(cells.ranks[i0:i1], cells.values[i0:i1])
    if isinstance(cells, cells_.DigestRows):
        return cells_.digest_rows(
            cells.ranks[i0:i1], cells.offsets[i0 : i1 + 1] // 8, cells.means, cells.weights
        )
    return cells_.ragged_cells(cells.ranks[i0:i1], cells.offsets[i0 : i1 + 1], cells.data)


def _split(contents, blocks: int):
    size = N_CELLS // blocks
    return [
        {k: _block(v, b * size, (b + 1) * size) for k, v in contents.items()} for b in range(blocks)
    ]


@pytest.mark.parametrize("sharded", [True, False])
@pytest.mark.parametrize("digest_rows", [True, False])
@pytest.mark.parametrize("blocks", [2, 4, 16])
def test_a_leaf_from_blocks_is_the_leaf_written_whole(tmp_path, sharded, digest_rows, blocks):
    grid = grid_block(p=4, k=6, c=8, sharded=sharded)
    contents = _contents(grid, digest_rows)
    whole = write_leaf_cells(
        new_store(tmp_path / "whole"), NORTH, contents, FIELDS, grid, attrs=ATTRS
    )
    parts = _split(contents, blocks)
    encoded = [encode_block(p, FIELDS, grid, b, blocks, attrs=ATTRS) for b, p in enumerate(parts)]
    made = [len(e["h_tdigest"]) for e in encoded]
    assert sum(made) == 5 and (blocks == 2 or 0 in made)  # 5 chunks; some blocks empty
    split = write_leaf_blocks(
        new_store(tmp_path / "split"), NORTH, parts, encoded, FIELDS, grid, attrs=ATTRS
    )
    assert split["content_hashes"] == whole["content_hashes"]
    assert split["cells_with_data"] == whole["cells_with_data"] == 25
    assert split["coverage"] == whole["coverage"]
    a, b = chunk_objects(tmp_path / "whole"), chunk_objects(tmp_path / "split")
    assert len(a) >= 5 and a.keys() == b.keys()
    assert all(a[k] == b[k] for k in a)


def test_joined_blocks_are_the_whole_contents():
    grid = grid_block(p=4, k=6, c=8)
    for digest_rows in (True, False):
        contents = _contents(grid, digest_rows, seed=3)
        joined = {k: cells_.join_cells([p[k] for p in _split(contents, 4)]) for k in contents}
        for k, v in contents.items():
            np.testing.assert_array_equal(joined[k].ranks, v.ranks)
            if isinstance(v, cells_.DenseCells):
                np.testing.assert_array_equal(joined[k].values, v.values)
            else:
                assert type(joined[k]) is type(v)
                np.testing.assert_array_equal(joined[k].data, v.data)


def test_a_block_with_cells_outside_its_chunks_is_refused():
    grid = grid_block(p=4, k=6, c=8)
    parts = _split(_contents(grid, True), 4)
    with pytest.raises(ValueError, match=r"block 1 of 4 holds cells outside its ranks \[64, 128\)"):
        encode_block(parts[0], FIELDS, grid, 1, 4, attrs=ATTRS)
    with pytest.raises(ValueError, match="3 blocks do not divide the leaf's 16 inner chunks"):
        encode_block(parts[0], FIELDS, grid, 0, 3, attrs=ATTRS)


def test_encodings_that_do_not_match_their_blocks_write_nothing(tmp_path):
    grid = grid_block(p=4, k=6, c=8)
    parts = _split(_contents(grid, True), 4)
    encoded = [encode_block(p, FIELDS, grid, b, 4, attrs=ATTRS) for b, p in enumerate(parts)]
    root = new_store(tmp_path)
    with pytest.raises(ValueError, match="4 blocks with 3 encodings"):
        write_leaf_blocks(root, NORTH, parts, encoded[:3], FIELDS, grid, attrs=ATTRS)
    swapped = [encoded[1], encoded[0], *encoded[2:]]
    with pytest.raises(ValueError, match="'h_tdigest' in block 0 are not its cells' chunks"):
        write_leaf_blocks(root, NORTH, parts, swapped, FIELDS, grid, attrs=ATTRS)
    assert not (tmp_path / leaf_path(NORTH)).exists()
