"""h5mdx.engine.chunking: dask blocks along time."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import xarray as xr

from h5mdx.engine.chunking import balanced_block, time_block


def _ceil(a: int, b: int) -> int:
    return -(-a // b)


def test_time_block_whole_chunks_near_target():
    assert time_block((30000, 3341, 3), 4, (100, 3341, 3)) == 3300  # 128 MiB
    assert time_block((30000, 3341, 3), 4, (1, 3341, 3), target_mib=32) == 836
    assert time_block((30000, 3341, 3), 4, None, target_mib=32) == 836
    assert time_block((50, 3341, 3), 4, (100, 3341, 3)) == 50


@pytest.mark.parametrize("n_frames, block, chunk, workers, expected, tasks", [
    (30000, 3300, 100, 16, 1900, 16),  # 10 blocks on 16 workers: 6 would idle
    (30000, 3300, 100, 2, 3000, 10),  # 9 full blocks and a 300-frame one: evened out
    (30000, 3300, 100, 1, 3300, 10),  # one worker: as it was
    (9900, 3300, 100, 2, 2500, 4),  # 3 blocks on 2 workers: 2 rounds of 3300 -> of 2500
    (3000, 3300, 100, 2, 1500, 2),  # one block: split
    (100000, 3300, 100, 16, 3200, 32),  # 31 blocks -> 32
    (1000, 3300, 1, 16, 63, 16),
    (50, 3300, 100, 4, 3300, 1),  # within one HDF5 chunk: cannot be split
])
def test_balanced_block_examples(n_frames, block, chunk, workers, expected, tasks):
    got = balanced_block(n_frames, block, chunk, workers)
    assert got == expected
    assert _ceil(n_frames, got) == tasks


def test_balanced_block_never_larger_nor_more_rounds():
    for n_frames, block, chunk, workers in itertools.product(
            (1, 7, 99, 100, 101, 999, 3300, 9999, 30000, 100_001),
            (1, 50, 100, 3300, 5000), (1, 10, 100), (1, 2, 3, 4, 7, 16, 64)):
        got = balanced_block(n_frames, block, chunk, workers)
        assert 1 <= got <= block
        if got < block:
            assert got % chunk == 0  # whole HDF5 chunks
        rounds = _ceil(_ceil(n_frames, block), workers)
        assert _ceil(_ceil(n_frames, got), workers) <= rounds


def test_every_variable_on_time_gets_the_same_blocks(tmp_path):
    """chunks={}: the step coordinate was one block and an element of other HDF5 chunks
    had blocks of its own, so ds.chunks and xr.map_blocks raised;
    every variable on a time axis takes the largest one's blocks."""
    from h5mdx.testing import write_h5md

    rng = np.random.default_rng(0)
    path = write_h5md(tmp_path / "mixed.h5md", {"g": {
        "position": {"value": rng.random((60, 50, 3)), "step": np.arange(60),
                     "chunks": (4, 50, 3)},
        "velocity": {"value": rng.random((60, 50, 3)), "step": np.arange(60),
                     "chunks": (7, 50, 3)},
        "energy_per_atom": {"value": rng.random((60, 50)), "step": np.arange(60)}}})
    with xr.open_dataset(path, engine="h5md", chunks={}, chunk_mib=0.01) as ds:
        blocks = ds.chunks["time"]  # raised: inconsistent chunks
        assert len(blocks) > 1 and set(blocks[:-1]) == {blocks[0]}
        for name in ("position", "velocity", "energy_per_atom", "step"):
            assert ds[name].chunks[0] == blocks, name
        total = xr.map_blocks(lambda b: b.sum("atom"), ds[["position", "velocity"]])
        np.testing.assert_allclose(total.position, ds.position.values.sum(1))
