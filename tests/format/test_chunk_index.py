"""Where the chunks lie: the chunk B-tree read from the file, against HDF5's own answers."""

from __future__ import annotations

import struct
import sys
import types

import h5py
import numpy as np
import pytest

from h5mdx.format import chunk_index

pyfive = pytest.importorskip("pyfive")


def _truth(dset: h5py.Dataset) -> dict:
    """Every allocated chunk as HDF5 reports it, one look-up each (any HDF5 version)."""
    out = {}
    for i in range(dset.id.get_num_chunks()):
        info = dset.id.get_chunk_info(i)
        out[tuple(int(c) for c in info.chunk_offset)] = (
            int(info.byte_offset), int(info.size), int(info.filter_mask))
    return out


def _write(path, **kwargs):
    rng = np.random.default_rng(0)
    values = rng.normal(scale=20.0, size=(203, 17, 3)).astype(np.float32)
    with h5py.File(path, "w", **kwargs) as f:
        f.create_dataset("one_frame", data=values, chunks=(1, 17, 3))
        f.create_dataset("blocks", data=values, chunks=(10, 17, 3), maxshape=(None, 17, 3))
        f.create_dataset("gzip", data=values, chunks=(7, 17, 3), compression="gzip",
                         shuffle=True)
        f.create_dataset("tiles", data=values[:, :, 0], chunks=(16, 5))
        f.create_dataset("step", data=np.arange(203), chunks=(50,))
        part = f.create_dataset("partial", shape=(203, 17, 3), dtype="f4", chunks=(10, 17, 3))
        part[:30] = values[:30]  # chunks from frame 30 on are never allocated
        part[150:160] = values[150:160]
    return values


NAMES = ["one_frame", "blocks", "gzip", "tiles", "step", "partial"]
RANGES = [(0, 203), (0, 1), (5, 6), (3, 41), (40, 50), (41, 49), (150, 151), (199, 203),
          (200, 10_000)]


@pytest.mark.parametrize("name", NAMES)
def test_tree_lists_what_hdf5_lists(tmp_path, name):
    path = str(tmp_path / "t.h5")
    _write(path)
    with h5py.File(path, "r") as f:
        truth = _truth(f[name])
        tree = chunk_index.chunk_tree(f[name])
    assert tree is not None
    assert tree.rows(0, 203) == truth
    for lo, hi in RANGES:
        assert tree.rows(lo, hi) == {c: v for c, v in truth.items() if lo <= c[0] < hi}
    if name == "partial":
        assert sorted(c[0] for c in truth) == [0, 10, 20, 150]


def test_a_deep_tree_read_range_by_range(tmp_path):
    """10,000 chunks need a tree of more than one level (64 entries per node by
    default); each range descends only where it may find its rows, and every located
    chunk holds its frame's bytes."""
    path = str(tmp_path / "deep.h5")
    values = np.random.default_rng(1).normal(size=(10_000, 2, 3)).astype(np.float32)
    with h5py.File(path, "w") as f:
        f.create_dataset("x", data=values, chunks=(1, 2, 3))
    with h5py.File(path, "r") as f:
        truth = _truth(f["x"])
        tree = chunk_index.chunk_tree(f["x"])
    assert tree.rows(0, 10_000) == truth and len(truth) == 10_000
    with open(path, "rb") as fh:
        raw = fh.read()
    for lo, hi in [(0, 64), (63, 65), (4000, 8096), (9990, 10_000), (5000, 5001)]:
        got = tree.rows(lo, hi)
        assert sorted(got) == [(i, 0, 0) for i in range(lo, hi)]
        for (frame, _, _), (offset, size, _) in got.items():
            assert raw[offset:offset + size] == values[frame].tobytes()


@pytest.mark.parametrize("name", NAMES)
def test_newest_format_has_no_tree(tmp_path, name):
    """``libver="latest"`` files index chunks with other structures (fixed and extensible
    arrays, version-2 B-trees): no tree; HDF5 finds those chunks."""
    path = str(tmp_path / "latest.h5")
    _write(path, libver="latest")
    with h5py.File(path, "r") as f:
        assert chunk_index.chunk_tree(f[name]) is None


def _fake_pyfive(params):
    """A stand-in for pyfive whose datasets report chunk B-tree ``params``."""
    view = types.SimpleNamespace(id=types.SimpleNamespace(_index_params=params))

    class File:
        def __init__(self, filename):
            pass

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

        def get_lazy_view(self, name):
            return view

    return types.SimpleNamespace(File=File)


def _root_of(path, name):
    with pyfive.File(path) as f:
        return f.get_lazy_view(name).id._index_params


@pytest.mark.parametrize("fault", ["other", "data", "dims", "none", "undefined", "raises"])
def test_a_tree_hdf5_disagrees_with_is_not_used(tmp_path, monkeypatch, fault):
    """The tree must give HDF5's first and last chunk: another dataset's tree (same
    shape and chunks), bytes that are no tree node, keys of another rank, no address,
    or an error in pyfive all give None."""
    path = str(tmp_path / "t.h5")
    values = _write(path)
    with h5py.File(path, "a") as f:
        f.create_dataset("twin", data=values[::-1], chunks=(10, 17, 3))
    real = _root_of(path, "blocks")
    with h5py.File(path, "r") as f:
        dset = f["blocks"]
        first_chunk = _truth(dset)[(0, 0, 0)][0]
        params = {
            "other": _root_of(path, "twin"),
            "data": types.SimpleNamespace(chunk_address=first_chunk, chunk_dims=4),
            "dims": types.SimpleNamespace(chunk_address=real.chunk_address, chunk_dims=3),
            "none": None,
            "undefined": types.SimpleNamespace(chunk_address=2**64 - 1, chunk_dims=4),
            "raises": None,
        }[fault]
        with monkeypatch.context() as m:  # the stand-in itself passes with the real root
            m.setitem(sys.modules, "pyfive", _fake_pyfive(real))
            assert chunk_index.chunk_tree(dset).rows(0, 203) == _truth(dset)
        monkeypatch.setitem(sys.modules, "pyfive", _fake_pyfive(params))
        if fault == "raises":
            def boom(filename):
                raise RuntimeError("Pyfive cannot yet read HDF5 files with layout class 4")
            monkeypatch.setattr(sys.modules["pyfive"], "File", boom)
        assert chunk_index.chunk_tree(dset) is None


def test_a_tree_that_loops_or_lies_stops(tmp_path):
    """A node listed twice, or an entry off the chunk grid, raises instead of giving
    wrong addresses."""
    path = str(tmp_path / "t.h5")
    _write(path)
    with h5py.File(path, "r") as f:
        tree = chunk_index.chunk_tree(f["one_frame"])
        blocks = chunk_index.chunk_tree(f["blocks"])
    assert tree.rows(0, 203)
    # a node whose one child is itself
    node = struct.pack("<4sBBHQQ", b"TREE", 1, 1, 1, 2**64 - 1, 2**64 - 1)
    node += struct.pack("<II4QQ", 0, 0, 0, 0, 0, 0, 0) + struct.pack("<II4Q", 0, 0, 0, 0, 0, 0)
    looped = tmp_path / "loop.bin"
    looped.write_bytes(node)
    with pytest.raises(ValueError, match="twice"):
        chunk_index.ChunkTree(str(looped), 0, (203, 17, 3), (1, 17, 3)).rows(0, 203)
    # blocks' tree read as if its chunks were 7 frames: keys 10, 20, ... are off the grid
    odd = chunk_index.ChunkTree(path, blocks.root, (203, 17, 3), (7, 17, 3))
    with pytest.raises(ValueError, match="off the chunk grid"):
        odd.rows(0, 203)
    with pytest.raises(ValueError, match="no chunk B-tree node"):
        chunk_index.ChunkTree(path, 0, (203, 17, 3), (1, 17, 3)).rows(0, 203)


def test_without_pyfive_no_tree(tmp_path, monkeypatch):
    path = str(tmp_path / "t.h5")
    _write(path)
    monkeypatch.setitem(sys.modules, "pyfive", None)
    with h5py.File(path, "r") as f:
        assert chunk_index.chunk_tree(f["blocks"]) is None


def test_file_not_on_disk_has_no_tree(tmp_path):
    """A file held in memory (driver="core", no backing store) has no bytes to read."""
    with h5py.File(str(tmp_path / "mem.h5"), "w", driver="core", backing_store=False) as f:
        f.create_dataset("x", data=np.zeros((20, 3)), chunks=(2, 3))
        assert chunk_index.chunk_tree(f["x"]) is None


def test_index_all_chunks_is_hdf5s_pass(tmp_path):
    path = str(tmp_path / "t.h5")
    _write(path)
    with h5py.File(path, "r") as f:
        dset = f["one_frame"]
        got = chunk_index.index_all_chunks(dset)
        if hasattr(dset.id, "chunk_iter"):
            assert got == _truth(dset)
        else:  # HDF5 before 1.12.3
            assert got is None
