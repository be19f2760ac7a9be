"""h5mdx.engine.frames: runs of frames read straight from the engine's array."""

from __future__ import annotations

import os
import pickle

import numpy as np
import pytest
import xarray as xr

from h5mdx.engine.frames import FrameReader, frame_reader
from h5mdx.errors import H5MDReadError
from h5mdx.testing import write_h5md


def test_reads_what_xarray_reads(adk_h5md, adk_positions):
    with xr.open_dataset(adk_h5md, engine="h5md") as ds:
        var = ds.position.variable
        whole = frame_reader(var)
        assert isinstance(whole, FrameReader)
        np.testing.assert_array_equal(whole(0, 98), adk_positions)
        block = var[30:70]
        read = frame_reader(block)
        assert read is not None
        for a, b in ((0, 1), (0, 40), (13, 27), (39, 40), (5, 5)):
            np.testing.assert_array_equal(read(a, b), adk_positions[30 + a:30 + b])
            np.testing.assert_array_equal(read(a, b), block[a:b].values)
        # a slice of a slice, and slices along the other axes
        inner = frame_reader(block[10:20, 100:200, 1:3])
        np.testing.assert_array_equal(inner(2, 5), adk_positions[42:45, 100:200, 1:3])
        # it travels to worker processes
        back = pickle.loads(pickle.dumps(read))
        np.testing.assert_array_equal(back(3, 9), adk_positions[33:39])


def test_unit_scale_and_fill_values_as_through_xarray(tmp_path):
    value = np.arange(5 * 4 * 3, dtype=np.float32).reshape(5, 4, 3)
    value[2, 1, 0] = -1.0
    path = write_h5md(tmp_path / "nm.h5md", particles={"all": {"position": dict(
        value=value, step=np.arange(5), unit="nm", fillvalue=-1.0)}})
    with xr.open_dataset(path, engine="h5md", convert_units=True) as ds:
        var = ds.position.variable
        read = frame_reader(var)
        assert read is not None
        got = read(1, 4)
        np.testing.assert_array_equal(got, var[1:4].values)
        assert np.isnan(got[1, 1, 0])
        assert got[0, 0, 0] == pytest.approx(10 * value[1, 0, 0])


def test_unit_scale_in_place_reads_each_value_once(tmp_path):
    """Scaled where they lie: reads into reused scratch buffers are scaled once each, the
    file's bytes never change, and the values equal h5py's times the scale."""
    from h5mdx.format import scratch

    value = np.random.default_rng(2).normal(size=(40, 6, 3)).astype(np.float32)
    path = write_h5md(tmp_path / "nm.h5md", particles={"all": {"position": dict(
        value=value, step=np.arange(40), unit="nm")}})
    with xr.open_dataset(path, engine="h5md", convert_units=True) as ds:
        read = frame_reader(ds.position.variable)
        assert read is not None
        for _ in range(3):
            with scratch.scratch_buffers():
                for lo in range(0, 40, 8):
                    got = read(lo, lo + 8)
                    assert got.dtype == np.float32
                    np.testing.assert_array_equal(got, value[lo:lo + 8] * np.float32(10))
        np.testing.assert_array_equal(ds.position.values, value * np.float32(10))
    with xr.open_dataset(path, engine="h5md") as ds:
        np.testing.assert_array_equal(ds.position.values, value)


def test_none_where_xarray_must_index(adk_h5md, tmp_path):
    with xr.open_dataset(adk_h5md, engine="h5md") as ds:
        var = ds.position.variable
        assert frame_reader(var[::-1]) is None  # a reversed time
        assert frame_reader(var[:, ::2]) is None  # a stride along atoms
        assert frame_reader(var[:, [1, 5, 9]]) is None  # a list of atoms
        assert frame_reader(var[3]) is None  # an integer drops time
        assert frame_reader(var.transpose("atom", "time", "spatial")) is None
    with xr.open_dataset(adk_h5md, engine="h5md", chunks={}) as ds:
        assert frame_reader(ds.position.variable) is None  # dask-backed
    with xr.open_dataset(adk_h5md, engine="h5md") as ds:
        loaded = ds.position.load()
        assert frame_reader(loaded.variable) is None  # in memory
    assert frame_reader(xr.Variable(("time", "atom"), np.zeros((3, 2)))) is None


def test_without_xarrays_wrappers_rmsd_reads_through_xarray(adk_h5md, adk_positions,
                                                           monkeypatch):
    """Should a release of xarray drop or rename its lazy-indexing wrappers, the fast path
    turns off (None) and RMSD tasks index through xarray, with the same numbers."""
    import h5mdx
    import h5mdx.engine.frames as frames

    with xr.open_dataset(adk_h5md, engine="h5md") as ds:
        fast = h5mdx.rmsd(ds.position, frames_per_block=30).values
        monkeypatch.setattr(frames, "_LAZY", None)
        assert frame_reader(ds.position.variable) is None
        slow = h5mdx.rmsd(ds.position, frames_per_block=30)
        tasks = dict(slow.data.__dask_graph__()).values()
        assert all(isinstance(task[1], xr.Variable) for task in tasks)
        np.testing.assert_array_equal(slow.values, fast)


def test_warm_plans_the_direct_reads_before_any_read(tmp_path, monkeypatch):
    """Planning (where the chunks lie) is a task's warm-up, not its first read; the RMSD
    task records it in its ``warmup`` phase."""
    from h5mdx.analysis import blocks
    from h5mdx.format import direct, reader_cache

    path = str(tmp_path / "w.h5md")
    pos = np.random.default_rng(2).normal(size=(40, 30, 3)).astype(np.float32)
    write_h5md(path, {"all": {"position": {"value": pos, "chunks": (1, 30, 3),
                                           "step": np.arange(40)}}})
    name = "/particles/all/position/value"
    with xr.open_dataset(path, engine="h5md") as ds:
        read = frame_reader(ds.position.variable)
        assert reader_cache.cached(path, name) is reader_cache.UNPLANNED
        read.warm()
        planned = direct.DirectReader if direct.enabled() else type(reader_cache.UNPLANNED)
        assert isinstance(reader_cache.cached(path, name), planned)  # H5MDX_DIRECT_READ=0: none
        reader_cache._CACHE.clear()
        phases = []
        real = FrameReader.warm

        def warm(self):
            phases.append(sorted(timer_phases))
            real(self)

        timer_phases: set[str] = set()
        real_phase = blocks.BlockTimer.phase

        def phase(self, name):
            timer_phases.add(name)
            return real_phase(self, name)

        monkeypatch.setattr(FrameReader, "warm", warm)
        monkeypatch.setattr(blocks.BlockTimer, "phase", phase)
        out = blocks._lazy_block(read, pos[0].astype(np.float64) - pos[0].mean(0), None,
                                      True, "numpy", 0, 40, step=10)
        assert phases == [["warmup"]]  # inside the warm-up phase, before any read
        assert out.shape == (40,) and out[0] < 1e-4
        assert isinstance(reader_cache.cached(path, name), planned)


def test_bound_reads_equal_calls(adk_h5md, adk_positions, tmp_path):
    """A task's bound reader (the direct reader found once) reads what each call reads,
    along every axis, with unit scaling and fill values."""
    with xr.open_dataset(adk_h5md, engine="h5md") as ds:
        block = ds.position.variable[30:70]
        for var, want in ((block, adk_positions[30:70]),
                          (block[10:20, 100:200, 1:3], adk_positions[40:50, 100:200, 1:3])):
            read = frame_reader(var)
            bound = read.bind()
            for a, b in ((0, 1), (0, 10), (3, 7), (9, 10), (5, 5)):
                np.testing.assert_array_equal(bound(a, b), want[a:b])
                np.testing.assert_array_equal(bound(a, b), read(a, b))
    value = np.arange(5 * 4 * 3, dtype=np.float32).reshape(5, 4, 3)
    value[2, 1, 0] = -1.0
    path = write_h5md(tmp_path / "nm.h5md", particles={"all": {"position": dict(
        value=value, step=np.arange(5), unit="nm", fillvalue=-1.0)}})
    with xr.open_dataset(path, engine="h5md", convert_units=True) as ds:
        got = frame_reader(ds.position.variable).bind()(1, 4)
        np.testing.assert_array_equal(got, ds.position.variable[1:4].values)
        assert np.isnan(got[1, 1, 0]) and got[0, 0, 0] == pytest.approx(10 * value[1, 0, 0])


def test_bound_reader_turns_to_h5py_at_an_unallocated_chunk(tmp_path):
    """A chunk never written (its values are the fill value) is found in the middle of a
    task: that read and the task's next ones go through h5py, with the same values; the
    dataset's other reads stay direct (every later read went through h5py before)."""
    import h5py

    from h5mdx.format import direct, reader_cache

    pos = np.random.default_rng(5).normal(size=(40, 6, 3)).astype(np.float32)
    path = write_h5md(tmp_path / "holes.h5md", particles={"all": {"position": dict(
        value=pos, step=np.arange(40))}})
    name = "/particles/all/position/value"
    with h5py.File(path, "r+") as f:
        del f[name]
        d = f.create_dataset(name, shape=pos.shape, dtype="f4", chunks=(10, 6, 3),
                             fillvalue=0.0)
        d[:20] = pos[:20]  # the chunks of frames 20-39 stay unallocated
    with xr.open_dataset(path, engine="h5md") as ds:
        var = ds.position.variable
        read = frame_reader(var)
        read.warm()
        bound = read.bind()
        np.testing.assert_array_equal(bound(0, 20), pos[:20])
        if direct.enabled():
            assert isinstance(reader_cache.cached(path, name), direct.DirectReader)
        np.testing.assert_array_equal(bound(15, 30), var[15:30].values)
        np.testing.assert_array_equal(bound(15, 30)[:5], pos[15:20])
        assert np.isnan(bound(30, 40)).all()  # the fill value, as NaN
        if direct.enabled():  # the stored frames are still read directly
            assert isinstance(reader_cache.cached(path, name), direct.DirectReader)
        np.testing.assert_array_equal(bound(0, 10), pos[:10])


def test_each_bind_refuses_a_file_rewritten_on_disk(tmp_path):
    """The check that the file is unchanged moves from each read to each bind (each task):
    the next task refuses the new file (its frames are not those the Dataset describes)."""
    import os

    first = np.zeros((20, 5, 3), dtype=np.float32)
    path = write_h5md(tmp_path / "re.h5md", particles={"all": {"position": dict(
        value=first, step=np.arange(20), chunks=(5, 5, 3))}})
    with xr.open_dataset(path, engine="h5md", cache=False) as ds:
        read = frame_reader(ds.position.variable)
        np.testing.assert_array_equal(read.bind()(0, 20), first)
        ds.close()
        second = np.ones((20, 5, 3), dtype=np.float32)
        os.unlink(path)  # a new inode, as a writer that replaces the file atomically leaves
        write_h5md(path, particles={"all": {"position": dict(
            value=second, step=np.arange(20), chunks=(5, 5, 3))}})
        with pytest.raises(H5MDReadError, match="was (replaced or )?rewritten"):
            read.bind()(0, 20)


@pytest.mark.parametrize("fixture", ["adk_h5md", "adk_h5md_blocked"])
def test_strided_frames(fixture, adk_positions, request):
    """A stride along time (``isel(time=slice(a, b, k))``): every read, the bound reader,
    and the runs of bytes a compiled reader reads (one a frame) give xarray's frames."""
    from h5mdx.format import direct

    path = request.getfixturevalue(fixture)
    with xr.open_dataset(path, engine="h5md") as ds:
        for key in (slice(None, None, 2), slice(3, 90, 7), slice(5, 97, 3)):
            var = ds.position.variable[key]
            want = adk_positions[key]
            read = frame_reader(var)
            assert read is not None and read.step == key.step
            bound = read.bind()
            for a, b in ((0, 1), (0, len(want)), (2, 9), (4, 4)):
                np.testing.assert_array_equal(read(a, b), want[a:b])
                np.testing.assert_array_equal(bound(a, b), want[a:b])
            runs = read.bind_runs()
            if not direct.enabled():  # the suite's second run: h5py reads everything
                assert runs is None
                continue
            assert runs is not None  # float32, unscaled, whole frames
            fd, offsets, nbytes = runs(2, 9)
            assert len(offsets) == 7 and set(nbytes.tolist()) == {3341 * 3 * 4}
            got = np.stack([np.frombuffer(os.pread(fd, int(n), int(o)), dtype=np.float32)
                            for o, n in zip(offsets, nbytes, strict=True)])
            np.testing.assert_array_equal(got.reshape(7, 3341, 3), want[2:9])
            assert len(runs(4, 4)[1]) == 0
