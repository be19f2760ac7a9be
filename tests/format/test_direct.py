"""Direct (lock-free) reads against h5py, byte for byte, on every layout and filter."""

from __future__ import annotations

import contextlib
import gc
import math
import os
import shutil
import sys
import threading

import h5py
import hdf5plugin
import numpy as np
import pytest
import xarray as xr

from h5mdx.format import direct, reader_cache
from h5mdx.format.chunk_index import locate_chunks
from h5mdx.format.scratch import scratch_buffers
from h5mdx.testing import write_h5md
from hdf5_versions import WithChunkIter, WithoutChunkIter

SHAPE = (57, 41, 3)

#: name -> create_dataset keywords; the bool says whether the direct path must take it
LAYOUTS = {
    "contiguous": ({}, True),
    "frames (1,n,3)": ({"chunks": (1, 41, 3)}, True),
    "frames (10,n,3)": ({"chunks": (10, 41, 3)}, True),
    "frames (10,n,3) unlimited": ({"chunks": (10, 41, 3), "maxshape": (None, 41, 3)}, True),
    "split (8,16,3)": ({"chunks": (8, 16, 3)}, True),
    "split (5,7,2)": ({"chunks": (5, 7, 2)}, True),
    "gzip": ({"chunks": (10, 41, 3), "compression": "gzip"}, True),
    "gzip+shuffle": ({"chunks": (8, 16, 3), "compression": "gzip", "shuffle": True}, True),
    "shuffle": ({"chunks": (10, 41, 3), "shuffle": True}, True),
    "lzf": ({"chunks": (10, 41, 3), "compression": "lzf"}, True),
    "lzf+shuffle": ({"chunks": (8, 16, 3), "compression": "lzf", "shuffle": True}, True),
    "blosc lz4+shuffle": ({"chunks": (10, 41, 3), **hdf5plugin.Blosc(
        cname="lz4", clevel=5, shuffle=hdf5plugin.Blosc.SHUFFLE)}, True),
    "blosc zstd+bitshuffle": ({"chunks": (8, 16, 3), **hdf5plugin.Blosc(
        cname="zstd", clevel=3, shuffle=hdf5plugin.Blosc.BITSHUFFLE)}, True),
    "zstd": ({"chunks": (10, 41, 3), **hdf5plugin.Zstd()}, True),
    "lz4 (HDF5 framing)": ({"chunks": (10, 41, 3), **hdf5plugin.LZ4()}, True),
    "lz4 (HDF5 framing, small blocks)": ({"chunks": (10, 41, 3),
                                          **hdf5plugin.LZ4(nbytes=1000)}, True),
    "bitshuffle+lz4": ({"chunks": (10, 41, 3), **hdf5plugin.Bitshuffle()}, False),
    "fletcher32": ({"chunks": (10, 41, 3), "fletcher32": True}, False),
    "scaleoffset": ({"chunks": (10, 41, 3), "scaleoffset": 3}, False),
}
DTYPES = ["<f4", ">f4", "<f8", "<i4", ">i8", "u2"]

KEYS = [
    (slice(None), slice(None), slice(None)),
    (slice(3, 29), slice(None), slice(None)),
    (slice(3, 29), slice(5, 40), slice(None)),
    (slice(50, 57), slice(0, 1), slice(1, 3)),
    (7, slice(None), slice(None)),
    (slice(0, 57, 2), slice(None), 1),
    (slice(10, 20), np.array([3, 1, 19, 1, 10]), slice(None)),
    (np.array([0, 2, 5, 4]), slice(2, 9), slice(None)),
    (slice(5, 5), slice(None), slice(None)),
    # an integer beside an array: outer indexing keeps the axes apart (numpy would not)
    (7, slice(None), np.array([2, 0])),
    (7, np.array([3, 1, 5]), 2),
    (slice(10, 20), 4, np.array([1])),
    (np.array([0, 2, 5]), 3, slice(None)),
]


def _outer(values: np.ndarray, key: tuple) -> np.ndarray:
    """``values[key]`` with xarray's outer indexing: every axis indexed on its own."""
    out = values[tuple(slice(k % n, k % n + 1) if isinstance(k, int) else
                       k if isinstance(k, slice) else slice(None)
                       for k, n in zip(key, values.shape, strict=True))]
    for axis, k in enumerate(key):
        if isinstance(k, np.ndarray):
            out = np.take(out, k, axis=axis)
    return out[tuple(0 if isinstance(k, int) else slice(None) for k in key)]


def _values(dtype: str) -> np.ndarray:
    rng = np.random.default_rng(7)
    v = rng.normal(scale=30.0, size=SHAPE)
    if np.dtype(dtype).kind in "iu":
        v = np.abs(v) * 100
    return v.astype(dtype)


def _at_once(task, n: int) -> list[BaseException]:
    """Run ``task(k)`` for k < n in n threads released together; the errors they raised."""
    start = threading.Barrier(n)
    errors: list[BaseException] = []

    def run(k: int) -> None:
        start.wait()
        try:
            task(k)
        except BaseException as err:  # noqa: BLE001 - reported by the test
            errors.append(err)

    threads = [threading.Thread(target=run, args=(k,)) for k in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return errors


def _read_direct(path: str, key: tuple) -> tuple[np.ndarray | None, bool]:
    with h5py.File(path, "r") as f:
        dset = f["x"]
        try:
            reader = direct.plan_direct(dset)
        except direct.Unsupported:
            return None, False
        split = direct.box_of(key, dset.shape)
        assert split is not None
        box, rest = split
        try:
            reader.add_locations(locate_chunks(dset, reader.missing(box)))
        except direct.Unsupported:
            return None, False
    try:
        return np.array(direct.within(reader.read(box), rest)), True
    finally:
        reader.close()


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_direct_equals_h5py_byte_for_byte(tmp_path, layout, dtype):
    kwargs, supported = LAYOUTS[layout]
    if layout == "scaleoffset" and np.dtype(dtype).kind == "f":
        kwargs = {**kwargs, "scaleoffset": 2}
    path = str(tmp_path / "d.h5")
    values = _values(dtype)
    with h5py.File(path, "w") as f:
        f.create_dataset("x", data=values, **kwargs)
    for key in KEYS:
        got, used = _read_direct(path, key)
        assert used == supported, layout
        if not used:
            continue
        want = _outer(values, key)  # the array h5py wrote (h5py wants sorted lists)
        with h5py.File(path, "r") as f:
            assert f["x"][()].tobytes() == values.tobytes()
        assert got.dtype == want.dtype
        assert got.shape == want.shape, key
        assert got.tobytes() == want.tobytes(), (layout, dtype, key)


def test_frames_read_one_by_one_decode_each_chunk_once(tmp_path, monkeypatch):
    """A frame loop over gzip chunks of 10 frames decoded each chunk for every frame of it
    (100x the work with chunks of 100 frames: 7 ms a frame, where HDF5's chunk cache
    served 0.01 ms; found by a benchmark): a chunk of whose rows a read wants part is kept
    decoded, within the process's budget, and the frames are h5py's byte for byte, also
    from threads. A read of all a chunk's rows (some atoms of every frame) keeps none."""
    values, path = _positions_file(tmp_path, (10, 41, 3), compression="gzip", shuffle=True)
    decoded = []
    decode = direct.DirectReader._decode
    monkeypatch.setattr(direct.DirectReader, "_decode",
                        lambda self, *a: decoded.append(a) or decode(self, *a))
    with xr.open_dataset(path, engine="h5md") as ds:
        for i in range(SHAPE[0]):
            assert ds.position[i].values.tobytes() == values[i].tobytes()
        assert len(decoded) == -(-SHAPE[0] // 10)  # one per chunk
        assert 0 < direct._KEPT_NBYTES <= direct.KEPT_BYTES
        errors = _at_once(lambda k: np.testing.assert_array_equal(
            ds.position[(7 * k) % SHAPE[0]].values, values[(7 * k) % SHAPE[0]]), 16)
        assert errors == []
        decoded.clear()
        assert ds.position[10:20].values.tobytes() == values[10:20].tobytes()
        assert len(decoded) == 1  # a whole chunk is decoded, not kept
        kept, decoded[:] = dict(direct._KEPT), []
        assert ds.position[:, 3:9].values.tobytes() == values[:, 3:9].tobytes()
        assert len(decoded) == 6 and dict(direct._KEPT) == kept  # decoded, none kept


def test_chunks_kept_decoded_are_bounded_in_the_process(tmp_path, monkeypatch):
    """The chunks kept decoded are bounded per process, not per dataset (a worker holds
    up to 256 readers: 4 GiB at 16 MiB each; found by a review), and a chunk larger than
    a quarter of the budget is not kept."""
    chunk = 10 * 41 * 3 * 4
    monkeypatch.setattr(direct, "KEPT_BYTES", 5 * chunk)
    with direct._KEPT_LOCK:
        direct._KEPT.clear()
        monkeypatch.setattr(direct, "_KEPT_NBYTES", 0)
    for name in "abc":
        (tmp_path / name).mkdir()
        values, path = _positions_file(tmp_path / name, (10, 41, 3), compression="gzip")
        with xr.open_dataset(path, engine="h5md") as ds:
            for i in range(0, SHAPE[0], 3):
                assert ds.position[i].values.tobytes() == values[i].tobytes()
        assert direct._KEPT_NBYTES == sum(c.nbytes for _, c in direct._KEPT.values())
        assert 0 < direct._KEPT_NBYTES <= 5 * chunk
    monkeypatch.setattr(direct, "KEPT_BYTES", 3 * chunk)  # a chunk is over a quarter
    kept = dict(direct._KEPT)
    with xr.open_dataset(path, engine="h5md") as ds:
        assert ds.position[1].values.tobytes() == values[1].tobytes()
    assert dict(direct._KEPT) == kept


@pytest.mark.parametrize("chunks", [(100, 500, 3), (3000, 10, 3), (1000, 50, 3)])
@pytest.mark.parametrize("scratch", [False, True])
def test_every_nth_frame_of_compressed_chunks_holds_about_the_result(tmp_path, monkeypatch,
                                                                     chunks, scratch):
    """Every 10th frame of gzip chunks kept each chunk's rows alive until the end (788 MiB
    for a 76 MiB result; found by a benchmark), and then read a chunk's rows at once
    (the whole dataset for chunks along time), each into a buffer of its own inside
    an RMSD task's scratch buffers (found by a review): each chunk is decoded once into
    the frames taken from it."""
    import tracemalloc

    values = np.random.default_rng(3).normal(size=(3000, 500, 3)).astype(np.float32)
    path = write_h5md(tmp_path / "g.h5md", {"all": {"position": dict(
        value=values, step=np.arange(3000), chunks=chunks, compression="gzip")}})
    with xr.open_dataset(path, engine="h5md") as ds:
        ds.position[0].values  # noqa: B018 - planned and located first
        tracemalloc.start()
        try:
            with scratch_buffers() if scratch else contextlib.nullcontext():
                got = ds.position[::10].values
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
    np.testing.assert_array_equal(got, values[::10])
    chunk = math.prod(chunks) * 4
    # the result, and a chunk's decoding (its compressed bytes, and two stages)
    assert peak < got.nbytes + 3 * chunk < values.nbytes / 2, (peak, got.nbytes)


@pytest.mark.parametrize("how", ["part of each row", "whole rows, 3 at a time"])
@pytest.mark.parametrize("layout", ["contiguous", "frames (1,n,3)", "frames (10,n,3)"])
def test_parts_of_whole_rows_equal_h5py(tmp_path, monkeypatch, layout, how):
    """Where the storage holds whole rows and a read asks for part of each, the rows are
    read a part or a bounded block at a time: every key gives h5py's bytes either way."""
    if how == "part of each row":
        monkeypatch.setattr(direct, "_ROW_PART_BYTES", 1)
    else:
        monkeypatch.setattr(direct, "_ROW_PART_BYTES", 1 << 40)
        monkeypatch.setattr(direct, "ROWS_BLOCK", 3 * 41 * 3 * 8)
    kwargs, _ = LAYOUTS[layout]
    path = str(tmp_path / "d.h5")
    values = _values("<f8")
    with h5py.File(path, "w") as f:
        f.create_dataset("x", data=values, **kwargs)
    for key in [*KEYS, (slice(None), slice(40, 41), slice(None)),
                (slice(2, 55), slice(0, 10), 2), (slice(None), np.array([30, 31]), 0)]:
        got, used = _read_direct(path, key)
        assert used
        want = _outer(values, key)
        assert got.shape == want.shape, key
        assert got.tobytes() == want.tobytes(), (layout, how, key)


@pytest.mark.parametrize("chunks", [None, (1, 3341, 3), (100, 3341, 3), (1000, 8, 3)])
def test_one_atom_across_all_frames_reads_in_bounded_memory(tmp_path, chunks):
    """One atom's time series read every frame whole at once from storage that holds
    whole frames (765 MiB for a 0.23 MiB result of a 766 MiB file):
    now a few MiB at most, whatever the file's length."""
    import tracemalloc

    n_frames, n_atoms = (1000, 3341) if chunks is None or chunks[1] > 8 else (200_000, 8)
    path = str(tmp_path / "t.h5")
    with h5py.File(path, "w") as f:
        dset = f.create_dataset("x", shape=(n_frames, n_atoms, 3), dtype="<f4", chunks=chunks)
        for a in range(0, n_frames, 100_000):
            b = min(n_frames, a + 100_000)
            dset[a:b] = np.arange(a, b, dtype="<f4")[:, None, None] + np.arange(
                n_atoms * 3, dtype="<f4").reshape(1, n_atoms, 3) / 1e4
    with h5py.File(path, "r") as f:
        reader = direct.plan_direct(f["x"])
        box = (slice(0, n_frames), slice(5, 6), slice(0, 3))
        reader.add_locations(locate_chunks(f["x"], reader.missing(box)))
    tracemalloc.start()
    try:
        got = reader.read(box)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
        reader.close()
    np.testing.assert_array_equal(got[:, 0, 0], np.arange(n_frames, dtype="<f4") + 15 / 1e4)
    whole = n_frames * n_atoms * 12
    assert peak < got.nbytes + (9 << 20) < whole, (peak, whole)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("layout", ["gzip", "gzip+shuffle", "shuffle", "lzf+shuffle"])
@pytest.mark.parametrize("codecs", ["zlib and numpy", "zlib-ng and numcodecs", "numba"])
def test_deflate_and_shuffle_decoders_agree_with_h5py(tmp_path, monkeypatch, layout, dtype,
                                                       codecs):
    """Deflate and the byte shuffle are decoded by zlib-ng and numcodecs where installed,
    else by zlib and numpy; the shuffle by numba's loops where numba is loaded: all give
    h5py's bytes."""
    import zlib

    kwargs, _ = LAYOUTS[layout]
    if codecs == "numba":
        pytest.importorskip("numba")
        assert direct._compiled_unshuffle() is not None
    else:
        monkeypatch.setattr(direct, "_compiled_unshuffle", lambda: None)
    if codecs == "zlib and numpy":
        fast = direct._decoders()
        only = {k: v for k, v in fast.items() if k not in (direct._DEFLATE, direct._SHUFFLE)}
        only[direct._DEFLATE] = lambda data, out: zlib.decompress(data)
        monkeypatch.setattr(direct, "_decoders", lambda: only)
    elif codecs == "zlib-ng and numcodecs":
        pytest.importorskip("numcodecs")
        imagecodecs = pytest.importorskip("imagecodecs")
        if not imagecodecs.ZLIBNG.available:
            pytest.skip("imagecodecs built without zlib-ng")
        assert direct._SHUFFLE in direct._decoders()
    path = str(tmp_path / "d.h5")
    values = _values(dtype)
    with h5py.File(path, "w") as f:
        f.create_dataset("x", data=values, **kwargs)
    for key in KEYS[:4]:
        got, used = _read_direct(path, key)
        assert used
        assert got.tobytes() == _outer(values, key).tobytes(), (layout, dtype, key)


@pytest.mark.parametrize("layout", ["gzip+shuffle", "lzf", "zstd"])
def test_threads_decoding_at_once_keep_their_own_buffers(tmp_path, layout):
    """Each thread decodes into buffers of its own, reused chunk after chunk (a new
    buffer per chunk ran at a third of the speed in dask's worker processes): threads
    decoding one reader's chunks at once each get their own values."""
    kwargs, _ = LAYOUTS[layout]
    path = str(tmp_path / "d.h5")
    values = _values("<f4")
    with h5py.File(path, "w") as f:
        f.create_dataset("x", data=values, **kwargs)
    with h5py.File(path, "r") as f:
        reader = direct.plan_direct(f["x"])
        reader.add_locations(locate_chunks(f["x"], reader.missing(
            tuple(slice(0, n) for n in SHAPE))))
    boxes = [(slice(a, a + 9), slice(None), slice(None)) for a in range(0, 48, 6)]
    try:
        def task(k: int) -> None:
            for _ in range(20):
                for j in range(len(boxes)):
                    box = boxes[(j + k) % len(boxes)]
                    got = direct.within(reader.read(direct.box_of(box, SHAPE)[0]), ())
                    assert got.tobytes() == values[box].tobytes(), (k, box)

        assert _at_once(task, 8) == []
    finally:
        reader.close()


def test_unallocated_chunks_fall_back(tmp_path):
    path = str(tmp_path / "fill.h5")
    with h5py.File(path, "w") as f:
        d = f.create_dataset("x", shape=SHAPE, dtype="f4", chunks=(10, 41, 3), fillvalue=-1.0)
        d[:10] = 1.0  # chunks 1.. stay unallocated
    got, used = _read_direct(path, (slice(0, 10), slice(None), slice(None)))
    assert used and np.all(got == 1.0)
    got, used = _read_direct(path, (slice(0, 30), slice(None), slice(None)))
    assert not used


def test_userblock_and_drivers_fall_back(tmp_path):
    path = str(tmp_path / "ub.h5")
    with h5py.File(path, "w", userblock_size=512) as f:
        f.create_dataset("x", data=_values("<f4"))
    with h5py.File(path, "r") as f, pytest.raises(direct.Unsupported, match="userblock"):
        direct.plan_direct(f["x"])
    with h5py.File(path, "r", driver="core") as f, pytest.raises(direct.Unsupported,
                                                                   match="driver"):
        direct.plan_direct(f["x"])


def test_external_and_virtual_fall_back(tmp_path):
    raw = tmp_path / "raw.bin"
    _values("<f4").tofile(raw)
    path = str(tmp_path / "ext.h5")
    with h5py.File(path, "w") as f:
        f.create_dataset("x", shape=SHAPE, dtype="<f4", external=[(str(raw), 0, h5py.h5f.UNLIMITED)])
        layout = h5py.VirtualLayout(shape=SHAPE, dtype="<f4")
        layout[:] = h5py.VirtualSource(f["x"])
        f.create_virtual_dataset("v", layout)
    with h5py.File(path, "r") as f:
        with pytest.raises(direct.Unsupported, match="external"):
            direct.plan_direct(f["x"])
        with pytest.raises(direct.Unsupported, match="virtual"):
            direct.plan_direct(f["v"])


def _int12_at_bit2() -> h5py.h5t.TypeID:
    t = h5py.h5t.STD_I16LE.copy()
    t.set_precision(12)
    t.set_offset(2)
    return t


def _float64_unnormalized() -> h5py.h5t.TypeID:
    t = h5py.h5t.IEEE_F64LE.copy()
    t.set_norm(h5py.h5t.NORM_NONE)
    return t


def _float32_biased() -> h5py.h5t.TypeID:
    t = h5py.h5t.IEEE_F32LE.copy()
    t.set_ebias(100)
    return t


@pytest.mark.parametrize("stored", [_int12_at_bit2, _float64_unnormalized, _float32_biased])
@pytest.mark.parametrize("chunks", [None, (5, 4)])
def test_stored_types_numpy_lays_out_otherwise_fall_back(tmp_path, stored, chunks):
    """h5py serves a stored type as numpy's nearest (HDF5 converts the values): a 12-bit
    integer at bit 2 as int16, a float of another normalisation or exponent bias as
    float64. Their bytes read directly were taken for the values: wrong values (a float32
    of another bias read 8 bytes an element, past its data). They are read
    through h5py."""
    path = str(tmp_path / "t.h5")
    with h5py.File(path, "w") as f:
        dcpl = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
        if chunks:
            dcpl.set_chunk(chunks)
        dset = h5py.Dataset(h5py.h5d.create(f.id, b"x", stored(),
                                            h5py.h5s.create_simple((20, 4)), dcpl))
        dset[...] = (np.arange(80).reshape(20, 4) * 3 - 50).astype(dset.dtype)
        want = dset[()]
    got, used = _read_direct(path, (slice(None), slice(None)))
    assert not used
    with h5py.File(path, "r") as f, pytest.raises(direct.Unsupported, match="stored type"):
        direct.plan_direct(f["x"])
    assert reader_cache.why_not_direct(path, "/x").startswith("the stored type")
    np.testing.assert_array_equal(want, np.arange(80).reshape(20, 4) * 3 - 50)


def test_box_of_rejects_wide_overreads():
    assert direct.box_of((slice(0, 100, 10),), (100,)) is None
    assert direct.box_of((np.array([0, 99]),), (100,)) is None
    assert direct.box_of((np.array([], dtype=int),), (100,)) is None
    box, rest = direct.box_of((np.array([-1, 97]), -2), (100, 5))
    assert box == (slice(97, 100), slice(3, 4)) and rest[1] == 0
    assert list(rest[0]) == [2, 0]


def test_engine_both_paths_and_threads(tmp_path, monkeypatch):
    """The engine gives the same values with direct reads on and off, also from threads."""
    values = _values("<f4")
    path = str(tmp_path / "t.h5md")
    write_h5md(path, {"all": {"position": {"value": values, "chunks": (4, 41, 3),
                                           "step": np.arange(SHAPE[0])}}})
    with xr.open_dataset(path, engine="h5md") as ds:
        a = ds.position[5:50, ::3].values
        assert isinstance(reader_cache.cached(path, "/particles/all/position/value"),
                          direct.DirectReader)
        out: list[np.ndarray] = []
        threads = [threading.Thread(target=lambda i=i: out.append(
            ds.position[i * 10:(i + 1) * 10].values)) for i in range(5)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert sorted(o[0, 0, 0] for o in out) == sorted(values[i * 10, 0, 0] for i in range(5))
    monkeypatch.setenv(direct.ENV_VAR, "0")
    with xr.open_dataset(path, engine="h5md") as ds:
        b = ds.position[5:50, ::3].values
    assert a.tobytes() == b.tobytes() == values[5:50, ::3].tobytes()


def test_a_reader_in_use_is_never_closed_under_its_readers(tmp_path):
    """Tasks of one dataset start at once, all find it unplanned, and all plan it.

    The second plan used to replace the first reader in the cache and close its file
    descriptor while the first task was reading through it: ``[Errno 9] Bad file
    descriptor`` (seen under load in CI), or, had another file been opened in between
    and been given the same descriptor number, that file's bytes read as this one's.
    """
    values = _values("<f4")
    path = str(tmp_path / "t.h5md")
    write_h5md(path, {"all": {"position": {"value": values, "chunks": (4, 41, 3),
                                           "step": np.arange(SHAPE[0])}}})
    key = "/particles/all/position/value"
    with h5py.File(path, "r") as f:
        first = reader_cache.plan_cached(f[key], path, key)
        fd = first._descriptor()  # a task of the first plan, mid-read
        second = reader_cache.plan_cached(f[key], path, key)  # another task's plan, just after
    assert second is first and reader_cache.cached(path, key) is first
    os.fstat(fd)  # still open
    assert reader_cache.why_not_direct(path, key) is None
    reader_cache.forget(first)  # another task met something unusual: h5py from now on
    assert reader_cache.cached(path, key) is None
    assert reader_cache.why_not_direct(path, key) == "a read found storage that only HDF5 reads"
    os.fstat(fd)  # the task reading through it still can
    box = (slice(0, 8), slice(0, 41), slice(0, 3))
    with h5py.File(path, "r") as f:
        first.add_locations(locate_chunks(f[key], first.missing(box)))
    assert first.read(box).tobytes() == values[:8].tobytes()


def test_first_reads_from_many_threads_at_once(tmp_path):
    """Many threads read a file none of them has planned, at the same moment."""
    values = _values("<f8")
    for i in range(8):
        path = str(tmp_path / f"t{i}.h5md")
        write_h5md(path, {"all": {"position": {"value": values, "chunks": (1, 41, 3),
                                               "compression": "gzip",
                                               "step": np.arange(SHAPE[0])}}})
        out: dict[int, np.ndarray] = {}
        with xr.open_dataset(path, engine="h5md") as ds:
            def read(k: int, ds: xr.Dataset = ds, out: dict = out) -> None:
                out[k] = ds.position[k * 9:(k + 1) * 9].values

            errors = _at_once(read, 6)
        assert not errors, errors
        for k in range(6):
            assert out[k].tobytes() == values[k * 9:(k + 1) * 9].tobytes()


def test_readers_kept_are_bounded_and_dropped_ones_close(tmp_path, monkeypatch):
    """A session reading many files (open at once) keeps the descriptors of the last
    MAX_READERS only."""
    import weakref

    monkeypatch.setattr(reader_cache, "MAX_READERS", 2)
    values = _values("<f4")
    key = "/particles/all/position/value"
    paths, readers, opened = [], [], []
    for i in range(3):
        paths.append(str(tmp_path / f"t{i}.h5md"))
        write_h5md(paths[-1], {"all": {"position": {"value": values + i,
                                                    "step": np.arange(SHAPE[0])}}})
        opened.append(xr.open_dataset(paths[-1], engine="h5md", cache=False))
        np.testing.assert_array_equal(opened[-1].position.values, values + i)
        reader = reader_cache.cached(paths[-1], key)
        assert isinstance(reader, direct.DirectReader) and reader._fd is not None
        readers.append(weakref.ref(reader))
        del reader
        if i == 1:  # the first file read again: the least recently used is the second
            assert reader_cache.cached(paths[0], key) is readers[0]()
    assert reader_cache.cached(paths[1], key) is reader_cache.UNPLANNED  # dropped
    assert reader_cache.cached(paths[0], key) is readers[0]()
    assert reader_cache.cached(paths[2], key) is readers[2]()
    gc.collect()
    assert readers[1]() is None  # freed, its descriptor closed with it (__del__)
    np.testing.assert_array_equal(opened[1].position.values, values + 1)  # planned again
    assert isinstance(reader_cache.cached(paths[1], key), direct.DirectReader)
    for ds in opened:
        ds.close()


def _positions_file(tmp_path, chunks, **filters):
    """Float32 positions of SHAPE in an H5MD file, chunked as given (None: contiguous)."""
    values = _values("<f4")
    path = str(tmp_path / "o.h5md")
    element = {"value": values, "step": np.arange(SHAPE[0]), **filters}
    if chunks is not None:
        element["chunks"] = chunks
    write_h5md(path, {"all": {"position": element}})
    return values, path


@pytest.mark.parametrize("chunks", [None, (4, 41, 3), (5, 7, 2)])
def test_engine_outer_indexing_on_both_paths(tmp_path, monkeypatch, chunks):
    """Lazy indexing without dask (``isel``/``sel`` with integers, slices and lists in
    any mix) gives numpy's outer-indexed values on both read paths."""
    values, path = _positions_file(tmp_path, chunks)
    keys = [dict(time=2, atom=slice(None), spatial=[2, 0]), dict(time=2, atom=[3], spatial=[2, 0]),
            dict(time=[0, 5, 9], atom=4, spatial=1), dict(time=slice(3, 9), atom=7, spatial=[1]),
            dict(time=-1, atom=[40, 0], spatial=slice(None))]
    for on in ("1", "0"):
        monkeypatch.setenv(direct.ENV_VAR, on)
        with xr.open_dataset(path, engine="h5md") as ds:
            for key in keys:
                want = _outer(values, tuple(
                    np.array(key[d]) if isinstance(key[d], list) else key[d]
                    for d in ("time", "atom", "spatial")))
                got = ds.position.isel(key)
                assert got.shape == want.shape, (on, key)
                assert got.values.tobytes() == want.tobytes(), (on, key)
            both = ds.position.isel(time=0).sel(spatial=["x", "y"])  # an integer, then a list
            np.testing.assert_array_equal(both.values, values[0][:, [0, 1]])


@pytest.mark.parametrize("chunks", [None, (1, 41, 3), (4, 41, 3), (5, 7, 2), "gzip (10,n,3)",
                                    "gzip (8,16,3)"])
def test_long_strides_along_time_are_read_directly(tmp_path, monkeypatch, chunks):
    """Every n-th frame (n > MAX_OVERREAD) went to h5py's strided selection, ~1 ms a frame
    on chunked data (an every-10th-frame export of 4 GB: 34-47 s against 3-6 s for all of
    it): read directly frame by frame, byte for byte the same."""
    from h5mdx.engine.arrays import H5MDArray

    filters = {}
    if isinstance(chunks, str):  # each chunk decoded once, not once per frame in it
        filters, chunks = {"compression": "gzip", "shuffle": True}, (
            (10, 41, 3) if "10" in chunks else (8, 16, 3))
    values, path = _positions_file(tmp_path, chunks, **filters)
    through_h5py, decoded = [], []
    real, decode = H5MDArray._read_locked, direct.DirectReader._decode
    monkeypatch.setattr(H5MDArray, "_read_locked",
                        lambda self, key: through_h5py.append(key) or real(self, key))
    monkeypatch.setattr(direct.DirectReader, "_decode",
                        lambda self, *a: decoded.append(a) or decode(self, *a))
    monkeypatch.setenv(direct.ENV_VAR, "1")
    with xr.open_dataset(path, engine="h5md") as ds:
        for key in (dict(time=slice(1, None, 5)), dict(time=slice(0, None, 7), atom=[3, 5]),
                    dict(time=slice(2, 9, 6), atom=slice(5, 9), spatial=1)):
            want = _outer(values, tuple(np.array(key[d]) if isinstance(key.get(d), list)
                                        else key.get(d, slice(None))
                                        for d in ("time", "atom", "spatial")))
            decoded.clear()
            got = ds.position.isel(key).values
            assert got.tobytes() == want.tobytes(), key
            if filters:
                atoms = np.arange(SHAPE[1])[key.get("atom", slice(None))]
                touched = {(i // chunks[0], j // chunks[1])
                           for i in range(*key["time"].indices(SHAPE[0])) for j in atoms}
                assert len(decoded) == len(touched), (key, len(decoded), len(touched))
    assert through_h5py == []


def test_rewritten_file_is_replanned(tmp_path):
    path = str(tmp_path / "r.h5md")
    v1 = _values("<f4")
    write_h5md(path, {"all": {"position": {"value": v1, "step": np.arange(SHAPE[0])}}})
    with xr.open_dataset(path, engine="h5md") as ds:
        np.testing.assert_array_equal(ds.position.values, v1)
    v2 = v1[:30] + 1
    write_h5md(path, {"all": {"position": {"value": v2, "chunks": (3, 41, 3),
                                           "step": np.arange(30)}}})
    with xr.open_dataset(path, engine="h5md") as ds:
        np.testing.assert_array_equal(ds.position.values, v2)


def test_a_file_rewritten_in_place_with_its_size_and_time_is_replanned(tmp_path):
    """A reader planned outside an open (``why_not_direct``; a dask worker's) was kept by
    the file's device, inode, size and modification time: the file rewritten in place
    (the same inode) with another layout of the same size, its time set back (``cp -p``
    over it), was read at the old chunks' offsets: the velocities served as the positions
   . The change time, which nothing sets back, is in the key now."""
    path = str(tmp_path / "r.h5md")
    values = _values("<f4")

    def write(first: str, position: np.ndarray) -> None:
        elements = {"position": {"value": position, "step": np.arange(SHAPE[0])},
                    "velocity": {"value": -position, "step": np.arange(SHAPE[0])}}
        if first != "position":
            elements = dict(reversed(elements.items()))
        written = str(tmp_path / f"{first}.h5md")
        write_h5md(written, {"all": elements})
        shutil.copyfile(written, path)  # truncated and written over: the same inode

    write("position", values)
    assert reader_cache.why_not_direct(path, "/particles/all/position/value") is None
    before = os.stat(path)
    write("velocity", values + 1000)
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
    stamp = reader_cache.file_stamp(path)
    assert stamp[:4] == (before.st_dev, before.st_ino, before.st_size, before.st_mtime_ns)
    assert stamp[4] != before.st_ctime_ns  # what tells the rewrite
    with xr.open_dataset(path, engine="h5md", group="all") as ds:
        np.testing.assert_array_equal(ds.position.values, values + 1000)


def test_chunks_stored_without_an_optional_filter(tmp_path):
    """HDF5 stores a chunk unfiltered (mask bit set) where an optional filter does not
    make it smaller: random bytes through Blosc. The direct path skips that filter."""
    path = str(tmp_path / "mask.h5")
    rng = np.random.default_rng(3)
    values = rng.integers(0, 2**63, size=(40, 41, 3), dtype=np.int64).view("<f8")
    values[20:] = 1.5  # compressible: these chunks keep the filter
    with h5py.File(path, "w") as f:
        f.create_dataset("x", data=values, chunks=(10, 41, 3),
                         **hdf5plugin.Blosc(cname="lz4", shuffle=hdf5plugin.Blosc.NOSHUFFLE))
    with h5py.File(path, "r") as f:
        masks = {f["x"].id.get_chunk_info_by_coord((c, 0, 0)).filter_mask for c in (0, 30)}
    assert masks == {0, 1}
    got, used = _read_direct(path, (slice(None),) * 3)
    assert used
    assert got.tobytes() == values.tobytes()


def test_many_chunks_without_chunk_iteration(tmp_path, monkeypatch):
    """Looking 1,000 small chunks up one by one walks the index each time. Without HDF5's
    chunk iteration, the chunk B-tree is read (pyfive finds it); without pyfive either,
    h5py reads them."""
    path = str(tmp_path / "many.h5")
    values = _values("<f4")[:, :8]
    many = np.tile(values, (20, 1, 1))
    with h5py.File(path, "w") as f:
        f.create_dataset("few", data=values, chunks=(1, 8, 3))  # 57 chunks
        f.create_dataset("many", data=many, chunks=(1, 8, 3))
    box = (slice(0, 1140), slice(0, 8), slice(0, 3))
    with h5py.File(path, "r") as f:
        assert isinstance(direct.plan_direct(WithoutChunkIter(f["few"])), direct.DirectReader)
        readers = [direct.plan_direct(WithChunkIter(f["many"]))]
        pytest.importorskip("pyfive")
        readers.append(direct.plan_direct(WithoutChunkIter(f["many"])))
        monkeypatch.setitem(sys.modules, "pyfive", None)  # not installed
        with pytest.raises(direct.Unsupported, match="1140 chunks: .*pyfive"):
            direct.plan_direct(WithoutChunkIter(f["many"]))
    assert readers[0].locate is None and len(readers[0]._index) == 1140  # HDF5's pass
    assert readers[1].locate is not None and not readers[1]._index  # as reads need them
    for reader in readers:
        assert reader.missing(box) == []  # nothing left for HDF5 to look up
        assert (reader._starts >= 0).all()  # every chunk's offset in the table
        try:
            assert reader.read(box).tobytes() == many.tobytes()
        finally:
            reader.close()


def test_whole_row_chunks_read_by_runs_from_a_table(tmp_path):
    """Chunks of whole frames are tabulated as they are located: a read finds its runs
    of chunks adjacent on disk from the table. Two datasets written in turns put their
    chunks side by side, so runs break at every chunk; one written at once has long runs
    (broken where HDF5 put B-tree nodes). Reads across run ends, a partial last chunk and
    single frames equal h5py's."""
    path = str(tmp_path / "runs.h5")
    rng = np.random.default_rng(5)
    a = rng.normal(size=(203, 7, 3)).astype(np.float32)
    b = rng.normal(size=(203, 7, 3)).astype(np.float32)
    with h5py.File(path, "w", rdcc_nbytes=0) as f:  # no chunk cache: written as written
        da = f.create_dataset("a", shape=a.shape, dtype="f4", chunks=(4, 7, 3))
        db = f.create_dataset("b", shape=b.shape, dtype="f4", chunks=(4, 7, 3))
        for i in range(0, 203, 4):  # in turns: a's chunks are never adjacent
            da[i:i + 4] = a[i:i + 4]
            db[i:i + 4] = b[i:i + 4]
        f.create_dataset("c", data=a, chunks=(1, 7, 3))  # at once: long runs
        f.create_dataset("gz", data=a, chunks=(1, 7, 3), compression="gzip")
    with h5py.File(path, "r") as f:
        readers = {name: direct.plan_direct(f[name]) for name in ("a", "c", "gz")}
        for reader in readers.values():  # few enough chunks to look up one by one
            box = (slice(0, 203), slice(0, 7), slice(0, 3))
            reader.add_locations(locate_chunks(f[reader_name(f, reader)], reader.missing(box)))
    try:
        assert readers["gz"]._starts is None  # filtered chunks are read one by one
        for name in ("a", "c"):
            starts = readers[name]._starts
            assert len(starts) == {"a": 51, "c": 203}[name] and (starts >= 0).all()
            if name == "a":  # every chunk ends a run
                assert (np.diff(starts) != 4 * 7 * 3 * 4).all()
            for first, stop in [(0, 203), (3, 9), (5, 6), (199, 203), (0, 1), (60, 141)]:
                box = (slice(first, stop), slice(0, 7), slice(0, 3))
                assert readers[name].read(box).tobytes() == a[first:stop].tobytes()
        assert readers["gz"].read((slice(3, 9), slice(0, 7), slice(0, 3))).tobytes() == \
            a[3:9].tobytes()
    finally:
        for reader in readers.values():
            reader.close()


@pytest.mark.parametrize("window", [4096, 7])
def test_runs_and_missing_chunks_follow_the_table_as_chunks_are_located(tmp_path, monkeypatch,
                                                                         window):
    """Reads of more than a few chunks find their runs and their missing chunks from lists
    derived per window of the offset table (one window, or reads across many); chunks
    located later (in batches, as a chunk B-tree gives them) update those lists, and a
    read that spans located and unlocated chunks lists exactly the unlocated ones."""
    monkeypatch.setattr(direct, "_WINDOW", window)
    path = str(tmp_path / "table.h5")
    rng = np.random.default_rng(9)
    a = rng.normal(size=(240, 5, 3)).astype(np.float32)
    with h5py.File(path, "w", rdcc_nbytes=0) as f:
        d = f.create_dataset("a", shape=a.shape, dtype="f4", chunks=(2, 5, 3))
        for i in range(0, 240, 2):  # a second dataset's chunk between every 30 of a's
            d[i:i + 2] = a[i:i + 2]
            if i % 60 == 58:
                f.create_dataset(f"gap{i}", data=np.zeros((2, 5, 3), "f4"), chunks=(2, 5, 3))
    with h5py.File(path, "r") as f:
        reader = direct.plan_direct(f["a"])
        reader._starts[:] = -1  # as before any read: nothing located
        reader._index.clear()
        full = tuple(slice(0, n) for n in a.shape)
        wanted = locate_chunks(f["a"], reader._chunk_coords(full))
    assert direct._FEW < 60  # reads of more chunks than that use the lists
    try:
        box = (slice(10, 130), slice(0, 5), slice(0, 3))  # chunks 5-64
        assert reader.missing(box) == [(i, 0, 0) for i in range(10, 130, 2)]
        reader.add_locations({c: w for c, w in wanted.items() if c[0] < 60})  # chunks 0-29
        assert reader.missing(box) == [(i, 0, 0) for i in range(60, 130, 2)]
        reader.add_locations({c: w for c, w in wanted.items() if c[0] >= 60})
        assert reader.missing(box) == []
        ends, holes = reader._among(0, 0, 120), reader._among(1, 0, 120)
        assert holes == []
        assert ends == np.flatnonzero(np.diff(reader._starts) != 2 * 5 * 3 * 4).tolist()
        assert {29, 59, 89} <= set(ends)  # other datasets' chunks (and B-tree nodes)
        for first, stop in [(0, 240), (10, 130), (57, 123), (59, 61), (0, 2), (1, 239)]:
            got = reader.read((slice(first, stop), slice(0, 5), slice(0, 3)))
            assert got.tobytes() == a[first:stop].tobytes(), (first, stop)
        # a table put in place of the reader's (benchmarks/bench_runs.py does) is used
        reader._starts = reader._starts.copy()
        reader._starts[60] = -1
        assert reader._among(1, 0, 120) == [60]
        assert reader.missing(box) == [(120, 0, 0)]
    finally:
        reader.close()


@pytest.mark.parametrize("locate_rows", [3, 4096])
def test_threads_reading_while_chunks_are_located_get_exact_bytes(tmp_path, monkeypatch,
                                                                  locate_rows):
    """Many threads read overlapping runs of one-frame chunks through their tasks' bound
    readers while the chunks are being located, a few at a time (``locate_rows``) or all
    at the first read: the per-window lists of runs and holes are derived and relisted
    under them (windows of 7 table entries, so every read spans many), and every read
    gives the file's bytes."""
    pytest.importorskip("pyfive")
    from h5mdx.engine.frames import frame_reader

    monkeypatch.setattr(direct, "TREE_CHUNKS", 0)  # chunks located from the tree as read
    monkeypatch.setattr(direct, "_WINDOW", 7)
    monkeypatch.setattr(direct, "LOCATE_ROWS_CHUNKS", locate_rows)
    path = str(tmp_path / "t.h5md")
    rng = np.random.default_rng(11)
    n = 400
    pos = rng.normal(scale=30.0, size=(n, 41, 3)).astype(np.float32)
    write_h5md(path, {"all": {"position": {"value": pos, "chunks": (1, 41, 3),
                                           "step": np.arange(n)}}})
    with h5py.File(path, "r+") as f:  # other datasets' chunks among the position's
        d = f["particles/all/position/value"]
        for i in range(0, n, 37):
            d[i] = pos[i]  # rewritten in place: same bytes, same address
            f.create_dataset(f"gap{i}", data=np.zeros((3, 41, 3), "f4"), chunks=(1, 41, 3))
    spans = [(int(a), int(a + b)) for a, b in zip(rng.integers(0, n - 60, 96),
                                                   rng.integers(direct._FEW + 1, 60, 96),
                                                   strict=True)]
    handed_over: list[direct.DirectReader] = []  # to h5py: a read the lists got wrong
    forget = reader_cache.forget
    monkeypatch.setattr(reader_cache, "forget", lambda r: (handed_over.append(r), forget(r)))
    with xr.open_dataset(path, engine="h5md") as ds:
        read = frame_reader(ds.position.variable)
        assert read is not None
        read.warm()  # planned: nothing located yet
        planned = reader_cache.cached(path, "/particles/all/position/value")
        assert isinstance(planned, direct.DirectReader) and planned.locate is not None
        assert planned._starts is not None and (planned._starts < 0).all()

        def task(k: int) -> None:
            bound = read.bind()
            for a, b in spans[k::8]:
                assert bound(a, b).tobytes() == pos[a:b].tobytes(), (k, a, b)

        errors = _at_once(task, 8)
        assert not errors, errors
        assert not handed_over  # every read was direct
        reader = reader_cache.cached(path, "/particles/all/position/value")
        assert reader is planned and reader._by_rows  # by runs from the table throughout


def reader_name(f, reader):
    """The dataset name of a reader planned above (by its chunk shape and filters)."""
    if reader.filters:
        return "gz"
    return "a" if reader.chunks[0] == 4 else "c"


def test_a_chunk_tree_that_fails_mid_file_hands_over_to_h5py(tmp_path, monkeypatch):
    """A tree node that cannot be read where a read needs it: that read, and the
    dataset's later ones, go through h5py and give the same values."""
    pytest.importorskip("pyfive")
    from h5mdx.format import chunk_index

    path = str(tmp_path / "t.h5md")
    pos = _values("<f4")
    write_h5md(path, {"all": {"position": {"value": pos, "chunks": (1, *pos.shape[1:]),
                                           "step": np.arange(SHAPE[0])}}})
    monkeypatch.setattr(direct, "TREE_CHUNKS", 0)  # read the tree for these 57 chunks
    real = chunk_index.ChunkTree.arrays
    armed = []  # once planned (the plan checks the first and last chunk)

    def arrays(self, lo, hi):
        if armed and lo >= 20:
            raise ValueError(f"no chunk B-tree node at {lo}")
        return real(self, lo, hi)

    monkeypatch.setattr(chunk_index.ChunkTree, "arrays", arrays)
    monkeypatch.setattr(direct, "LOCATE_ROWS_CHUNKS", 1)
    with xr.open_dataset(path, engine="h5md") as ds:
        var = ds.position.variable
        assert np.array_equal(var[:1].values, pos[:1])  # planned
        armed.append(True)
        assert np.array_equal(var[:5].values, pos[:5])
        reader = reader_cache.cached(path, "/particles/all/position/value")
        assert isinstance(reader, direct.DirectReader) and reader.locate is not None
        assert np.array_equal(var[20:30].values, pos[20:30])  # the tree fails here
        assert reader_cache.cached(path, "/particles/all/position/value") is None
        assert np.array_equal(var.values, pos)


def test_chunks_the_tree_does_not_list_are_not_allocated(tmp_path):
    """Rows whose chunks were never written: the tree lists none, so a read of them is
    handed to h5py (fill values) without asking HDF5 for each chunk."""
    pytest.importorskip("pyfive")
    path = str(tmp_path / "partial.h5")
    values = _values("<f4")[:, :8]
    with h5py.File(path, "w") as f:
        d = f.create_dataset("x", shape=(1140, 8, 3), dtype="f4", chunks=(1, 8, 3))
        d[:500] = np.tile(values, (9, 1, 1))[:500]
    with h5py.File(path, "r") as f:
        reader = direct.plan_direct(WithoutChunkIter(f["x"]))
    try:
        assert reader.locate is not None
        assert reader.missing((slice(0, 10), slice(0, 8), slice(0, 3))) == []
        assert reader.read((slice(0, 10), slice(0, 8), slice(0, 3))).tobytes() == \
            np.tile(values, (9, 1, 1))[:10].tobytes()
        with pytest.raises(direct.Unsupported, match="not allocated"):
            reader.missing((slice(495, 505), slice(0, 8), slice(0, 3)))
    finally:
        reader.close()


def test_tree_located_tiles_and_a_wrong_size(tmp_path):
    """Chunks that split frames (tiles) are recorded one by one from the tree's arrays and
    read equal to h5py; a whole-frame chunk of the wrong stored size is refused."""
    pytest.importorskip("pyfive")
    path = str(tmp_path / "tiles.h5")
    values = np.random.default_rng(4).normal(size=(600, 40)).astype(np.float32)
    with h5py.File(path, "w") as f:
        f.create_dataset("x", data=values, chunks=(2, 10))  # 1,200 chunks of 80 bytes
    with h5py.File(path, "r") as f:
        reader = direct.plan_direct(WithoutChunkIter(f["x"]))
    try:
        assert reader.locate is not None and reader._starts is None
        box = (slice(7, 311), slice(3, 37))
        assert reader.missing(box) == []
        assert reader.read(box).tobytes() == values[7:311, 3:37].tobytes()
    finally:
        reader.close()
    whole = direct.DirectReader(path, (10, 4), np.dtype("<f4"), (1, 4))
    coords = np.array([[0, 0], [1, 0]])
    with pytest.raises(direct.Unsupported, match="holds 12 bytes, not 16"):
        whole._add_arrays(coords, np.array([[100, 16, 0], [116, 12, 0]]))


@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_why_not_direct_names_what_only_hdf5_reads(tmp_path, layout):
    kwargs, takes = LAYOUTS[layout]
    name = str(tmp_path / "t.h5")
    with h5py.File(name, "w") as f:
        f.create_dataset("x", data=np.arange(np.prod(SHAPE), dtype="<f4").reshape(SHAPE),
                         **kwargs)
    why = reader_cache.why_not_direct(name, "x")
    if takes:
        assert why is None
        # planned for this process's reads: the engine's reads find the same reader
        reader = reader_cache.cached(os.path.abspath(name), "x")
        assert isinstance(reader, direct.DirectReader)
        assert reader.shape == SHAPE
    else:
        assert why is not None and why.startswith("filters (")
        assert reader_cache.cached(os.path.abspath(name), "x") is None  # read through h5py


def test_why_not_direct_off_missing_and_groups(tmp_path, monkeypatch):
    name = str(tmp_path / "t.h5")
    with h5py.File(name, "w") as f:
        f.create_dataset("g/x", data=np.zeros((4, 3)))
    assert reader_cache.why_not_direct(name, "g/x") is None
    assert reader_cache.why_not_direct(name, "g") == "g is not a dataset"
    assert reader_cache.why_not_direct(name, "nope").startswith("KeyError")
    assert reader_cache.why_not_direct(str(tmp_path / "absent.h5"), "x").startswith("FileNotFoundError")
    monkeypatch.setenv(direct.ENV_VAR, "0")
    assert reader_cache.why_not_direct(name, "g/x") == f"{direct.ENV_VAR}=0"


def _descriptors_of(path: str) -> int:
    """How many of this process's descriptors are open on ``path`` (deleted or not)."""
    n = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            n += os.readlink(f"/proc/self/fd/{fd}").startswith(path)
        except OSError:
            continue
    return n


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="needs /proc")
def test_closing_a_dataset_closes_its_descriptors(tmp_path):
    """A closed Dataset (or tree) keeps no descriptor of its file: the direct readers of
    the last open of a file leave with it; another open of the file keeps its own."""
    values = _values("<f4")
    path = str(tmp_path / "fd.h5md")
    write_h5md(path, {"all": {"position": {"value": values, "chunks": (4, 41, 3),
                                           "step": np.arange(SHAPE[0])}}})
    with xr.open_dataset(path, engine="h5md") as a:
        b = xr.open_datatree(path, engine="h5md")
        a.position.load()
        b["particles/all"].position.load()
        assert _descriptors_of(path) >= 1
    # b still holds the file: its reads stay direct
    assert isinstance(reader_cache.cached(path, "/particles/all/position/value"), direct.DirectReader)
    np.testing.assert_array_equal(b["particles/all"].position.values, values)
    b.close()
    gc.collect()
    assert _descriptors_of(path) == 0
    assert reader_cache.cached(path, "/particles/all/position/value") is reader_cache.UNPLANNED


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="needs /proc")
@pytest.mark.parametrize("chunks", [None, {}], ids=["lazy", "dask"])
def test_reads_after_close_keep_no_descriptor(tmp_path, chunks):
    """A lazy result computed after the ``with`` block that opened its file (xarray
    reopens the file to read it): the values, and no descriptor left once it is done
    (a reader cached for the rest of the process kept a deleted file's space in use)."""
    import h5mdx

    values = _values("<f4")
    path = str(tmp_path / "after.h5md")
    write_h5md(path, {"all": {"position": {"value": values, "chunks": (4, 41, 3),
                                           "step": np.arange(SHAPE[0])}}})
    with xr.open_dataset(path, engine="h5md", chunks=chunks) as ds:
        lazy = h5mdx.rmsd(ds.position)
        position = ds.position
    got = lazy.values
    np.testing.assert_array_equal(position.values, values)
    assert got.shape == (SHAPE[0],) and np.isfinite(got).all()
    del ds, lazy, position
    gc.collect()
    assert _descriptors_of(path) == 0
    assert reader_cache.cached(path, "/particles/all/position/value") is reader_cache.UNPLANNED


@pytest.mark.parametrize("how", ["replaced", "deleted"])
@pytest.mark.parametrize("first_read", [True, False])
def test_a_file_replaced_or_deleted_after_opening_reads_as_opened(tmp_path, how, first_read):
    """HDF5 holds the file it opened; direct reads, which open it by name, never read
    another file at the offsets of the first (a run writing a new file over the old one
    by renaming): they read what HDF5 holds, as h5netcdf does."""
    values = _values("<f4")
    path = str(tmp_path / "r.h5md")
    write_h5md(path, {"all": {"position": {"value": values, "chunks": (4, 41, 3),
                                           "step": np.arange(SHAPE[0])}}})
    with xr.open_dataset(path, engine="h5md", cache=False) as ds:
        if first_read:
            np.testing.assert_array_equal(ds.position.values, values)
        if how == "replaced":
            other = str(tmp_path / "new.h5md")
            write_h5md(other, {"pad": {"position": {"value": values[:5] - 1}},  # offsets move
                               "all": {"position": {"value": values + 1000,
                                                    "step": np.arange(SHAPE[0])}}})
            os.replace(other, path)
        else:
            os.remove(path)
        np.testing.assert_array_equal(ds.position.values, values)
        np.testing.assert_array_equal(ds.position[3:9, 2:5].values, values[3:9, 2:5])
    if how == "replaced":
        with xr.open_dataset(path, engine="h5md", group="all") as ds:  # the new file
            np.testing.assert_array_equal(ds.position.values, values + 1000)


@pytest.mark.parametrize("shuffle", [True, False])
def test_edge_chunks_stored_unfiltered_are_read_through_h5py(tmp_path, shuffle):
    """H5Pset_chunk_opts(DONT_FILTER_PARTIAL_CHUNKS): HDF5 stores the partial edge chunks
    raw with a filter mask of 0; decoded as filtered, they read as garbage (shuffle alone:
    silently). Such datasets are read through h5py."""
    import ctypes

    lib = direct._hdf5_library()
    assert lib is not None, "h5py's HDF5 library not found"
    values = _values("<f4")[:10]  # 10 frames in chunks of 4: a partial edge chunk
    path = str(tmp_path / "edge.h5md")
    write_h5md(path, {"all": {"position": {"value": np.zeros((1, 1, 3)),
                                           "step": np.arange(10)}}})
    with h5py.File(path, "a", libver="latest") as f:
        grp = f["particles/all/position"]
        del grp["value"]
        dcpl = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
        dcpl.set_chunk((4, *values.shape[1:]))
        if shuffle:
            dcpl.set_shuffle()
        dcpl.set_deflate(1)
        set_opts = lib.H5Pset_chunk_opts
        set_opts.argtypes = (ctypes.c_int64, ctypes.c_uint)
        assert set_opts(dcpl.id, direct._DONT_FILTER_PARTIAL_CHUNKS) >= 0
        dset = h5py.Dataset(h5py.h5d.create(grp.id, b"value", h5py.h5t.IEEE_F32LE,
                                            h5py.h5s.create_simple(values.shape), dcpl))
        dset[...] = values
        assert direct._partial_chunks_unfiltered(dset.id.get_create_plist())
    with xr.open_dataset(path, engine="h5md") as ds:
        np.testing.assert_array_equal(ds.position.values, values)
        np.testing.assert_array_equal(ds.position[8:10, 3].values, values[8:10, 3])
    with h5py.File(path, "r") as f, pytest.raises(direct.Unsupported,
                                                  match="stored unfiltered"):
        direct.plan_direct(f["particles/all/position/value"])


_SECOND_HDF5 = """
import ctypes, shutil, sys
import h5py, numpy as np, xarray as xr
from h5mdx.format import direct
from h5mdx.testing import write_h5md

path, copy = sys.argv[1], sys.argv[2]
with open("/proc/self/maps") as maps:
    libs = [line.split()[-1] for line in maps if "/libhdf5" in line and "_hl" not in line]
if not libs:
    sys.exit(77)  # HDF5 linked into h5py itself: no library to copy
values = np.arange(10 * 5 * 3, dtype="<f4").reshape(10, 5, 3)
write_h5md(path, {"all": {"position": {"value": np.zeros((1, 1, 3)), "step": np.arange(10)}}})
set_opts = ctypes.CDLL(libs[0]).H5Pset_chunk_opts
set_opts.argtypes = (ctypes.c_int64, ctypes.c_uint)
with h5py.File(path, "a", libver="latest") as f:
    grp = f["particles/all/position"]
    del grp["value"]
    dcpl = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
    dcpl.set_chunk((4, 5, 3))
    dcpl.set_shuffle()
    assert set_opts(dcpl.id, direct._DONT_FILTER_PARTIAL_CHUNKS) >= 0
    dset = h5py.Dataset(h5py.h5d.create(grp.id, b"value", h5py.h5t.IEEE_F32LE,
                                        h5py.h5s.create_simple(values.shape), dcpl))
    dset[...] = values
shutil.copy(libs[0], copy)
ctypes.CDLL(copy)  # a second HDF5 in the process, as netCDF4's wheel brings
with xr.open_dataset(path, engine="h5md") as ds:
    np.testing.assert_array_equal(ds.position.values, values)
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc/self/maps")
def test_edge_chunks_stored_unfiltered_with_another_hdf5_loaded(tmp_path):
    """Whether partial edge chunks are stored unfiltered is asked of h5py's own HDF5: with
    a second copy of HDF5 loaded (netCDF4's wheel brings one), the first ``libhdf5`` of
    the process' maps was asked, which knows no identifier of h5py's and could not tell,
    and the raw edge chunks were unshuffled: wrong values, without an error."""
    import subprocess

    run = subprocess.run([sys.executable, "-c", _SECOND_HDF5, str(tmp_path / "edge.h5md"),
                          str(tmp_path / "libhdf5_copy.so")], capture_output=True, text=True,
                         timeout=120)
    if run.returncode == 77:
        pytest.skip("h5py has no HDF5 library of its own to copy")
    assert run.returncode == 0, run.stderr[-3000:]


def test_a_read_of_an_unallocated_chunk_leaves_the_others_direct(tmp_path, monkeypatch):
    """One read that touched a chunk never written (a writer that stopped early) sent
    every later read of the dataset through h5py, frames fully stored too.
    Only that read goes through h5py (HDF5 supplies the fill value)."""
    values = _values("<f4")
    path = str(tmp_path / "hole.h5md")
    write_h5md(path, {"all": {"position": {"value": np.zeros((1, 1, 3)),
                                           "step": np.arange(SHAPE[0])}}})
    with h5py.File(path, "a") as f:
        grp = f["particles/all/position"]
        del grp["value"]
        dset = grp.create_dataset("value", shape=SHAPE, chunks=(5, *SHAPE[1:]), dtype="<f4",
                                  compression="gzip")
        dset[:40] = values[:40]  # the chunks of frames 40- never written
    reads = []
    real = direct.DirectReader.read
    monkeypatch.setattr(direct.DirectReader, "read",
                        lambda self, *a, **k: reads.append(1) or real(self, *a, **k))
    with pytest.warns(Warning, match="were never written"):
        ds = xr.open_dataset(path, engine="h5md")
    with ds:
        np.testing.assert_array_equal(ds.position[:10].values, values[:10])
        assert reads
        tail = ds.position[38:SHAPE[0]].values
        np.testing.assert_array_equal(tail[:2], values[38:40])
        np.testing.assert_array_equal(tail[2:], 0)  # HDF5's fill value
        reads.clear()
        np.testing.assert_array_equal(ds.position[:10].values, values[:10])
        assert reads, "the stored frames are read directly still"


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="needs /proc")
def test_a_dataset_dropped_without_close_keeps_no_descriptor(tmp_path, monkeypatch):
    """``ds = xr.open_dataset(p)`` in a loop, never closed: once a Dataset is collected
    its readers' descriptors close too (they stayed open, up to 256, deleted files'
    space in use, where h5netcdf's files close)."""
    monkeypatch.setenv(direct.ENV_VAR, "1")
    values = _values("<f4")
    paths = []
    for i in range(3):
        path = str(tmp_path / f"drop{i}.h5md")
        write_h5md(path, {"all": {"position": {"value": values, "chunks": (4, 41, 3),
                                               "step": np.arange(SHAPE[0])}}})
        ds = xr.open_dataset(path, engine="h5md")
        np.testing.assert_array_equal(ds.position[0:3].values, values[0:3])
        assert isinstance(reader_cache.cached(path, "/particles/all/position/value"),
                          direct.DirectReader)
        del ds
        gc.collect()
        os.remove(path)
        paths.append(path)
    assert [_descriptors_of(p) for p in paths] == [0, 0, 0]


def test_a_release_from_a_finalizer_waits_for_a_free_lock():
    """A Dataset collected while its thread holds the readers' lock (a collection inside a
    cached read) released under that lock: a deadlock. The release runs once the lock is
    free."""
    done: list[int] = []
    with reader_cache._CACHE_LOCK:
        reader_cache.release_soon(lambda: done.append(1))
        assert done == []  # deferred, not waiting on its own thread's lock
    release = reader_cache.hold("/nonexistent/release-soon.h5md")
    assert done == [1]  # run by the next hold
    release()


def test_names_that_moved_out_of_direct_are_still_found_there():
    """The reader cache and the scratch buffers left this module for their own; code
    written before (``from h5mdx.format.direct import why_not_direct``) still runs."""
    from h5mdx.format import scratch
    from h5mdx.format.direct import UNPLANNED, empty, hold, why_not_direct

    assert why_not_direct is reader_cache.why_not_direct
    assert hold is reader_cache.hold and UNPLANNED is reader_cache.UNPLANNED
    assert empty is scratch.empty and direct.scratch_buffers is scratch.scratch_buffers
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        direct.nope  # noqa: B018


@pytest.mark.parametrize("chunks", [{}, None])
def test_long_strides_of_no_atom_keep_the_frames_taken(tmp_path, chunks):
    """Every 5th frame of no atom (``atom=slice(0, 0)``) from gzip chunks came back with
    every frame between the first and last taken: 16 frames for 4 (a reshape of the
    dask block failed); now the frames taken, as h5py's."""
    values = np.arange(20 * 4 * 3, dtype=np.float32).reshape(20, 4, 3)
    path = write_h5md(tmp_path / "g.h5", {"all": {"position": dict(
        value=values, step=1, time=1.0, chunks=(5, 4, 3), compression="gzip")}})
    with xr.open_dataset(path, engine="h5md", chunks=chunks) as ds:
        for key in (dict(time=slice(None, None, 5), atom=slice(0, 0)),
                    dict(time=slice(3, 17, 6), atom=slice(2, 2), spatial=1)):
            got = ds.position.isel(key)
            want = values[key["time"], key["atom"], key.get("spatial", slice(None))]
            assert got.shape == want.shape
            assert got.values.shape == want.shape, key
