"""Chunk addresses listed in one pass: HDF5's chunk iteration, or pyfive checked against HDF5."""

from __future__ import annotations

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
        f.create_dataset("empty", shape=(0, 17, 3), dtype="f4", chunks=(10, 17, 3),
                         maxshape=(None, 17, 3))
    return values


NAMES = ["one_frame", "blocks", "gzip", "tiles", "step", "partial", "empty"]


@pytest.mark.parametrize("name", NAMES)
def test_pyfive_lists_what_hdf5_lists(tmp_path, name):
    path = str(tmp_path / "t.h5")
    _write(path)
    with h5py.File(path, "r") as f:
        truth = _truth(f[name])
        got = chunk_index.index_with_pyfive(f[name])
    assert got == truth
    if name == "partial":
        assert sorted(c[0] for c in got) == [0, 10, 20, 150]


@pytest.mark.parametrize("name", NAMES)
def test_newest_format_is_listed_right_or_not_at_all(tmp_path, name):
    """``libver="latest"`` files index chunks with newer structures (fixed and extensible
    arrays, version-2 B-trees); whatever pyfive makes of them, a wrong list never passes."""
    path = str(tmp_path / "latest.h5")
    _write(path, libver="latest")
    with h5py.File(path, "r") as f:
        got = chunk_index.index_with_pyfive(f[name])
        assert got is None or got == _truth(f[name])


def test_index_all_chunks_uses_hdf5_where_it_can(tmp_path):
    path = str(tmp_path / "t.h5")
    _write(path)
    with h5py.File(path, "r") as f:
        dset = f["one_frame"]
        got = chunk_index.index_all_chunks(dset)
        assert got == _truth(dset)
        if not hasattr(dset.id, "chunk_iter"):  # HDF5 before 1.12.3
            assert chunk_index.index_all_chunks(dset, use_pyfive=False) is None


def _fake_pyfive(index: dict, chunks, params=None):
    """A stand-in for pyfive: reports ``index`` (coord -> offset, size, mask) through its
    public ``DatasetID.index``, or, with ``params``, a chunk B-tree root to walk."""
    dsid = types.SimpleNamespace(
        chunks=chunks, _index_params=params,
        index={c: types.SimpleNamespace(chunk_offset=c, byte_offset=o, size=s, filter_mask=m)
               for c, (o, s, m) in index.items()},
    )

    class File:
        def __init__(self, filename):
            pass

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

        def __getitem__(self, name):
            return types.SimpleNamespace(id=dsid)

        get_lazy_view = __getitem__

    return types.SimpleNamespace(File=File)


@pytest.mark.parametrize("fault", ["offset", "size", "mask", "missing", "extra", "root",
                                   "dims", "raises"])
def test_disagreement_with_hdf5_gives_none(tmp_path, monkeypatch, fault):
    """The list is taken only where it agrees with HDF5 on the count and on the first,
    middle and last chunk; a B-tree that is not one, or an error in pyfive, gives None."""
    path = str(tmp_path / "t.h5")
    _write(path)
    with h5py.File(path, "r") as f:
        dset = f["blocks"]
        truth = _truth(dset)
        coords = sorted(truth)
        index, params = dict(truth), None
        first, middle = coords[0], coords[len(coords) // 2]
        if fault == "offset":
            index[middle] = (index[middle][0] + 4, *index[middle][1:])
        elif fault == "size":
            index[first] = (index[first][0], index[first][1] - 1, index[first][2])
        elif fault == "mask":
            index[coords[-1]] = (*index[coords[-1]][:2], 1)
        elif fault == "missing":
            del index[coords[3]]
        elif fault == "extra":
            index[(1000, 0, 0)] = (0, 1, 0)
        elif fault == "root":  # the first chunk's data, not a B-tree node
            params = types.SimpleNamespace(chunk_address=truth[first][0], chunk_dims=4)
        elif fault == "dims":
            params = types.SimpleNamespace(chunk_address=truth[first][0], chunk_dims=3)
        monkeypatch.setitem(sys.modules, "pyfive", _fake_pyfive(index, dset.chunks, params))
        if fault == "raises":
            def boom(filename):
                raise RuntimeError("Pyfive cannot yet read HDF5 files with layout class 4")
            monkeypatch.setattr(sys.modules["pyfive"], "File", boom)
        else:  # the unchanged stand-in passes
            with monkeypatch.context() as m:
                m.setitem(sys.modules, "pyfive", _fake_pyfive(truth, dset.chunks))
                assert chunk_index.index_with_pyfive(dset) == truth
        assert chunk_index.index_with_pyfive(dset) is None


def test_btree_walk_reads_every_level(tmp_path):
    """10,000 chunks need a B-tree of more than one level (64 entries per node by default,
    HDF5's chunk B-tree K of 32)."""
    path = str(tmp_path / "deep.h5")
    values = np.random.default_rng(1).normal(size=(10_000, 2, 3)).astype(np.float32)
    with h5py.File(path, "w") as f:
        f.create_dataset("x", data=values, chunks=(1, 2, 3))
    with h5py.File(path, "r") as f:
        got = chunk_index.index_with_pyfive(f["x"])
        assert got == _truth(f["x"])
    assert len(got) == 10_000
    with open(path, "rb") as fh:  # and the bytes they point at are the frames
        raw = fh.read()
    for frame in (0, 4567, 9999):
        offset, size, _ = got[(frame, 0, 0)]
        assert raw[offset:offset + size] == values[frame].tobytes()


def test_without_pyfive_gives_none(tmp_path, monkeypatch):
    path = str(tmp_path / "t.h5")
    _write(path)
    monkeypatch.setitem(sys.modules, "pyfive", None)
    with h5py.File(path, "r") as f:
        assert chunk_index.index_with_pyfive(f["blocks"]) is None


def test_file_not_on_disk_gives_none(tmp_path):
    """A file held in memory (driver="core", no backing store) has no bytes to read."""
    with h5py.File(str(tmp_path / "mem.h5"), "w", driver="core", backing_store=False) as f:
        f.create_dataset("x", data=np.zeros((20, 3)), chunks=(2, 3))
        assert chunk_index.index_with_pyfive(f["x"]) is None
