"""Live trajectories: a writer process appends frames in SWMR mode while we read."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import textwrap
import time

import h5py
import numpy as np
import pytest
import xarray as xr

import h5mdx.engine.live
from h5mdx.analysis.rmsd import rmsd
from h5mdx.errors import H5MDFormatError, H5MDReadError

N_FRAMES = 40

WRITER = """
import sys, time
import h5py, numpy as np
from MDAnalysisTests.datafiles import PSF, DCD
import MDAnalysis as mda
import warnings; warnings.simplefilter("ignore")
u = mda.Universe(PSF, DCD)
n = u.atoms.n_atoms
path, n_frames, pause = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
with h5py.File(path, "w", libver="latest") as f:
    f.create_group("h5md").attrs["version"] = np.array([1, 1])
    f["h5md"].create_group("author").attrs["name"] = "swmr test"
    g = f.create_group("particles/trajectory")
    box = g.create_group("box")
    box.attrs["dimension"] = 3
    box.attrs["boundary"] = np.array([b"periodic"] * 3)
    v = g.create_dataset("position/value", shape=(0, n, 3), maxshape=(None, n, 3),
                         chunks=(1, n, 3), dtype="f4")
    v.attrs["unit"] = "Angstrom"
    s = g.create_dataset("position/step", shape=(0,), maxshape=(None,), chunks=(64,), dtype="i8")
    t = g.create_dataset("position/time", shape=(0,), maxshape=(None,), chunks=(64,), dtype="f8")
    t.attrs["unit"] = "ps"
    e = box.create_dataset("edges/value", shape=(0, 3), maxshape=(None, 3), chunks=(64, 3),
                           dtype="f4")
    box["edges/step"] = s  # shared sampling (hard links)
    box["edges/time"] = t
    f.swmr_mode = True
    print("ready", flush=True)
    for i, ts in enumerate(u.trajectory[:n_frames]):
        for d, val in ((v, ts.positions), (e, np.full(3, 80.0 + i, dtype=np.float32))):
            d.resize(i + 1, axis=0); d[i] = val; d.flush()
        for d, val in ((s, i * 100), (t, i * 1.0)):
            d.resize(i + 1, axis=0); d[i] = val; d.flush()
        time.sleep(pause)
print("done", flush=True)
"""


@contextlib.contextmanager
def _writer(path, n_frames, pause):
    """The writer process for the block: killed at its end if still running, its pipe
    closed (left open, it was a ResourceWarning in a later test)."""
    with subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(WRITER), str(path), str(n_frames), str(pause)],
        stdout=subprocess.PIPE, text=True,
    ) as proc:
        try:
            yield proc
        finally:
            if proc.poll() is None:
                proc.kill()


def _record(section, data):
    out = os.environ.get("H5MDX_RELIABILITY_OUT")
    if out:
        with open(out, "a", encoding="utf-8") as fh:
            fh.write(json.dumps({"section": section, **data}) + "\n")


def test_swmr_reader_sees_growing_file(tmp_path, adk_positions):
    path = tmp_path / "live.h5md"
    with _writer(path, N_FRAMES, 0.05) as proc:
        assert proc.stdout.readline().strip() == "ready"
        seen = []
        ds = None
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            assert proc.poll() in (None, 0), "the writer failed"
            ds = (xr.open_dataset(path, engine="h5md", swmr=True) if ds is None
                  else h5mdx.engine.live.refresh(ds))
            n = h5mdx.engine.live.n_frames(ds)
            seen.append(n)
            # the frames shown so far are exactly the frames written
            np.testing.assert_array_equal(ds.position.values, adk_positions[:n])
            np.testing.assert_array_equal(ds.step.values, np.arange(n) * 100)
            assert ds.box_edges.sizes["time"] == n
            np.testing.assert_array_equal(ds.box_edges.values[:, 0], 80.0 + np.arange(n))
            if n == N_FRAMES:
                break
            time.sleep(0.1)
        ds.close()
        assert proc.wait(timeout=60) == 0
    distinct = sorted(set(seen))
    assert seen[-1] == N_FRAMES
    assert len(distinct) >= 3, seen  # it really was read while growing
    _record("swmr", {"frames_written": N_FRAMES, "refreshes": len(seen),
                     "distinct_lengths_seen": len(distinct)})


def test_live_rmsd_equals_finished_file(tmp_path):
    path = tmp_path / "live_rmsd.h5md"
    with _writer(path, N_FRAMES, 0.03) as proc:
        assert proc.stdout.readline().strip() == "ready"
        partial = None
        for ds in h5mdx.engine.live.follow(path, interval=0.05, timeout=30, chunks={}):
            if h5mdx.engine.live.n_frames(ds) >= 10:
                partial = rmsd(ds.position, 0).compute()
                break
        assert proc.wait(timeout=60) == 0
    assert partial is not None and partial.sizes["time"] >= 10
    with xr.open_dataset(path, engine="h5md", chunks={}) as done:
        full = rmsd(done.position, 0).compute()
    n = partial.sizes["time"]
    np.testing.assert_allclose(partial.values, full.values[:n], rtol=0, atol=1e-6)


def test_follow_stops_after_timeout(tmp_path):
    """It stops, and says what it found (it stopped in silence)."""
    path = tmp_path / "never.h5md"
    t0 = time.monotonic()
    with pytest.warns(RuntimeWarning, match=r"stopped after 0.3 s without a frame; the "
                      "last look found: .*No such file"):
        assert list(h5mdx.engine.live.follow(path, interval=0.05, timeout=0.3)) == []
    assert time.monotonic() - t0 < 5


def test_follow_until_reads_the_dataset_before_it_is_closed(tmp_path):
    """``until`` was asked after the Dataset was closed: one that read its data reopened
    the file, and held it open after follow() ended (the writer, or a plain open of the
    finished file in this process, then failed: "file is already open for read-only").
   """
    path = str(tmp_path / "until.h5md")
    with h5py.File(path, "w", libver="latest") as f:
        f.create_group("h5md").attrs["version"] = np.array([1, 1])
        el = f.create_group("particles/g/position")
        el["value"], el["step"] = np.arange(18.0).reshape(2, 3, 3), np.arange(2)
        f["particles/g"].create_group("box").attrs.update(
            {"dimension": 3, "boundary": ["none"] * 3})
    seen = []

    def until(ds):
        seen.append(float(ds.position[-1].max()))
        return True

    for ds in h5mdx.engine.live.follow(path, interval=0.05, timeout=5, until=until):
        assert h5mdx.engine.live.n_frames(ds) == 2
    assert seen == [17.0]
    assert not [fid for fid in h5py.h5f.get_obj_ids(h5py.h5f.OBJ_ALL, h5py.h5f.OBJ_FILE)
                if os.path.samefile(fid.name, path)]
    with h5py.File(path, "r+") as f:  # the writer goes on
        f["particles/g/position/step"][1] = 5
    del ds


def test_a_file_open_without_swmr_in_this_process_is_named(tmp_path):
    """HDF5 refuses swmr=True for a file this process has open without it: the error
    says so (it blamed the file's format), and follow() raises it at once (it waited
    out its timeout in silence)."""
    path = tmp_path / "done.h5md"
    with h5py.File(path, "w", libver="latest") as f:
        f.create_group("h5md").attrs["version"] = np.array([1, 1])
        el = f.create_group("particles/g/position")
        el["value"], el["step"] = np.zeros((2, 3, 3)), np.arange(2)
        f["particles/g"].create_group("box").attrs.update(
            {"dimension": 3, "boundary": ["none"] * 3})
    with xr.open_dataset(path, engine="h5md") as ds:
        ds.load()
        with pytest.raises(H5MDFormatError, match="this process has it open without "
                           r"swmr=True already.*close that one first \(ds.close\(\)\)"):
            xr.open_dataset(path, engine="h5md", swmr=True)
        t0 = time.monotonic()
        with pytest.raises(H5MDFormatError, match="without swmr=True already"):
            list(h5mdx.engine.live.follow(path, interval=0.05, timeout=30))
        assert time.monotonic() - t0 < 10
    with xr.open_dataset(path, engine="h5md", swmr=True) as live:  # closed: it opens
        assert live.sizes["time"] == 2


def test_swmr_on_non_swmr_file_is_clear(tmp_path):
    path = tmp_path / "old.h5md"
    with h5py.File(path, "w", libver="earliest") as f:
        f.create_group("h5md").attrs["version"] = np.array([1, 1])
    try:
        xr.open_dataset(path, engine="h5md", swmr=True).close()
    except H5MDFormatError as err:
        assert "swmr" in str(err).lower()
    else:
        pytest.skip("this HDF5 opens pre-1.10 files with swmr=True")


def test_a_file_being_written_opened_without_swmr_says_so(tmp_path):
    """A writer holds the file: the error says to open it with swmr=True (it said the
    file was truncated or corrupt)."""
    path = tmp_path / "live.h5md"
    with _writer(path, N_FRAMES, 0.05) as proc:
        assert proc.stdout.readline().strip() == "ready"
        with pytest.raises((H5MDFormatError, H5MDReadError)) as err:
            xr.open_dataset(path, engine="h5md")
        text = str(err.value)
        assert "swmr=True" in text and "truncated or corrupt" not in text
        assert proc.wait(timeout=60) == 0


def test_refresh_opens_the_file_as_it_was_opened(tmp_path):
    """refresh reopened with the group, topology and selection alone: a Dataset opened
    with convert_units=True came back in nm, drop_variables and chunks were lost, and a
    Dataset of several dask blocks raised."""
    path = tmp_path / "nm.h5md"
    with h5py.File(path, "w", libver="latest") as f:
        f.create_group("h5md").attrs["version"] = np.array([1, 1])
        g = f.create_group("particles/g")
        g.create_group("box").attrs.update({"dimension": 3, "boundary": ["none"] * 3})
        for name, unit in (("position", "nm"), ("velocity", "nm ps-1")):
            el = g.create_group(name)
            el.create_dataset("value", data=np.ones((40, 5, 3)), chunks=(4, 5, 3)
                              ).attrs["unit"] = unit
            el["step"] = np.arange(40)
    ds = xr.open_dataset(path, engine="h5md", convert_units=True, drop_variables=["velocity"],
                         chunks={"time": 16}, chunk_mib=0.001)  # preferred: blocks of 8
    again = h5mdx.engine.live.refresh(ds)
    with again:
        assert again.position.attrs["units"] == "Angstrom"
        np.testing.assert_array_equal(again.position, 10.0)
        assert "velocity" not in again
        assert again.position.chunks[0] == (16, 16, 8)
    ds = xr.open_dataset(path, engine="h5md", chunks={}, chunk_mib=0.001)  # blocks of 8
    assert ds.chunks["time"] == (8,) * 5  # step in the same blocks (it had one)
    again = h5mdx.engine.live.refresh(ds)
    with again:
        assert again.chunks["time"] == (8,) * 5 and "velocity" in again


def _linked_twice(path):
    """A file written for SWMR whose box (time-dependent edges in chunks of 2 frames) is
    one group linked into two particles groups."""
    with h5py.File(path, "w", libver="latest") as f:
        f.create_group("h5md").attrs["version"] = np.array([1, 1], dtype=np.int32)
        for name in ("a", "b"):
            g = f.create_group(f"particles/{name}")
            g.create_dataset("position/value", data=np.arange(48.0).reshape(8, 2, 3) + 1,
                             maxshape=(None, 2, 3), chunks=(2, 2, 3))
            if name == "a":
                g.create_dataset("position/step", data=np.arange(8) * 10, maxshape=(None,),
                                 chunks=(2,))
                box = g.create_group("box")
                box.attrs["dimension"] = 3
                box.attrs["boundary"] = np.array([b"periodic"] * 3)
                box.create_dataset("edges/value", data=np.arange(24.0).reshape(8, 3) + 1,
                                   maxshape=(None, 3), chunks=(2, 3))
                box["edges/step"] = g["position/step"]
            else:
                g["position/step"] = f["particles/a/position/step"]
                g["box"] = f["particles/a/box"]


def test_a_dataset_read_through_two_handles_of_a_live_file(tmp_path, monkeypatch):
    """HDF5's refresh of a dataset (H5Drefresh, 1.10 to 2.0) corrupts every open handle of
    it where two are open: a box linked into two particles groups, opened live, read its
    second group's edges as "can't insert duplicate key", and a second handle of a step
    dataset read [0, 1, 0, 1] for [0, 1, 2, 3]. The arrays of a process share one handle
    per dataset, and a handle is refreshed only where it is the one open."""
    from h5mdx.format.h5md import refresh_alone

    path = tmp_path / "linked.h5"
    _linked_twice(path)
    with xr.open_datatree(path, engine="h5md") as tree:
        want = tree["particles/a"].box_edges.values
    assert want[:, 0].tolist() == [1.0, 4.0, 7.0, 10.0, 13.0, 16.0, 19.0, 22.0]
    for direct in ("1", "0"):
        monkeypatch.setenv("H5MDX_DIRECT_READ", direct)
        with xr.open_datatree(path, engine="h5md", swmr=True) as tree:
            for name in ("a", "b", "a", "b"):
                np.testing.assert_array_equal(tree[f"particles/{name}"].box_edges.values, want)

    with h5py.File(path, "r", swmr=True) as f:
        one = f["particles/a/position/step"]
        assert refresh_alone(one)
        two = f["particles/b/position/step"]  # the same dataset, linked twice
        assert not refresh_alone(two)  # a second handle: not refreshed
        np.testing.assert_array_equal(one[()], np.arange(8) * 10)
        np.testing.assert_array_equal(two[()], np.arange(8) * 10)
        del two
        assert refresh_alone(one)
        np.testing.assert_array_equal(one[()], np.arange(8) * 10)


_GROWER = """
import sys, h5py, numpy as np
path = sys.argv[1]
with h5py.File(path, "w", libver="latest") as f:
    f.create_group("h5md").attrs["version"] = np.array([1, 1])
    f["h5md"].create_group("author").attrs["name"] = "t"
    g = f.create_group("particles/trajectory")
    box = g.create_group("box")
    box.attrs["dimension"] = 3
    box.attrs["boundary"] = np.array([b"none"] * 3)
    v = g.create_dataset("position/value", shape=(0, 20000, 3), maxshape=(None, 20000, 3),
                         chunks=(2, 20000, 3), dtype="f8")
    s = g.create_dataset("position/step", shape=(0,), maxshape=(None,), chunks=(2,), dtype="i8")
    f.swmr_mode = True
    n = 0
    def grow(k):
        global n
        for i in range(n, n + k):
            v.resize(i + 1, axis=0); v[i] = i; v.flush()
            s.resize(i + 1, axis=0); s[i] = i * 10; s.flush()
        n += k
    grow(4)
    print("ready", flush=True)
    for line in sys.stdin:
        grow(int(line))
        print("ok", flush=True)
"""


@contextlib.contextmanager
def _grower(path):
    """The _GROWER process for the block, once it said "ready": its input closed at the
    end (it stops), waited for, its pipes closed (as :func:`_writer`'s)."""
    with subprocess.Popen([sys.executable, "-c", _GROWER, str(path)], stdin=subprocess.PIPE,
                          stdout=subprocess.PIPE, text=True) as proc:
        try:
            assert proc.stdout.readline().strip() == "ready"
            yield proc
        finally:
            proc.stdin.close()
            proc.wait(timeout=60)


def _grow(proc, frames):
    """Have the _GROWER process write ``frames`` more frames, and wait until it has."""
    proc.stdin.write(f"{frames}\n")
    proc.stdin.flush()
    assert proc.stdout.readline().strip() == "ok"


@pytest.mark.parametrize("direct", ["0", "1"])
def test_a_second_open_of_a_live_file_sees_new_frames(tmp_path, monkeypatch, direct):
    """A Dataset of a live file that was read holds no HDF5 handle that keeps a later open
    (or ``live.refresh``) of the file from seeing the frames written since (it saw 4 of 8:
    its handles were second handles, never refreshed)."""
    monkeypatch.setenv("H5MDX_DIRECT_READ", direct)
    path = tmp_path / "grows.h5"
    with _grower(path) as proc:
        with xr.open_dataset(path, engine="h5md", swmr=True) as first:
            assert first.position[:, 0, 0].values.tolist() == [0, 1, 2, 3]  # partly: lazy
            _grow(proc, 4)
            with xr.open_dataset(path, engine="h5md", swmr=True) as second:
                assert second.sizes["time"] == 8
                second = h5mdx.engine.live.refresh(second)
                assert second.position[:, 0, 0].values.tolist() == list(range(8))
                second.close()


def test_closing_one_live_dataset_fails_no_read_of_another(tmp_path, monkeypatch):
    """Two Datasets of one live file, one read in a thread while the other is closed: the
    close invalidated a handle the other's arrays read through (they shared one per
    dataset), and its reads failed with "invalid dataset identifier"."""
    import threading

    monkeypatch.setenv("H5MDX_DIRECT_READ", "0")
    path = tmp_path / "two.h5"
    with h5py.File(path, "w", libver="latest") as f:
        f.create_group("h5md").attrs["version"] = np.array([1, 1], dtype=np.int32)
        f.create_group("h5md/author").attrs["name"] = "me"
        g = f.create_group("particles/trajectory")
        g.create_dataset("position/value", data=np.zeros((40, 500, 3)),
                         maxshape=(None, 500, 3), chunks=(1, 500, 3))
        g.create_dataset("position/step", data=np.arange(40), maxshape=(None,), chunks=(8,))
        box = g.create_group("box")
        box.attrs["dimension"] = 3
        box.attrs["boundary"] = np.array([b"none"] * 3)
    failed: list[BaseException] = []
    for _ in range(60):
        one = xr.open_dataset(path, engine="h5md", swmr=True, cache=False)
        assert one.position[0].values.shape == (500, 3)
        two = xr.open_dataset(path, engine="h5md", swmr=True, cache=False)
        stop = threading.Event()

        def read(two=two, stop=stop):
            i = 0
            while not stop.is_set():
                try:
                    assert two.position[i % 40].values.shape == (500, 3)
                except Exception as err:  # noqa: BLE001 - what the test looks for
                    failed.append(err)
                    return
                i += 1

        t = threading.Thread(target=read)
        t.start()
        time.sleep(0.005)
        one.close()
        time.sleep(0.005)
        stop.set()
        t.join()
        two.close()
    assert not failed, failed[:2]


def test_a_failed_live_read_keeps_no_handle(tmp_path, monkeypatch):
    """A read of a live file that fails holds no HDF5 handle through its exception (kept
    by the caller, or as IPython's last): a later open saw 4 of 8 frames while it lived,
    its handle made the scan's a second handle, never refreshed."""
    from h5mdx.engine.arrays import H5MDArray

    monkeypatch.setenv("H5MDX_DIRECT_READ", "0")
    path = tmp_path / "grows.h5"
    with _grower(path) as proc:
        with xr.open_dataset(path, engine="h5md", swmr=True) as first:
            raw = first.position.variable._data
            while not isinstance(raw, H5MDArray):
                raw = raw.array
            with pytest.raises(h5mdx.errors.H5MDReadError) as failed:
                raw._read_locked((np.array([3, 1]), slice(None), slice(None)))  # not sorted
            _grow(proc, 4)
            with xr.open_dataset(path, engine="h5md", swmr=True) as second:
                assert second.sizes["time"] == 8
            del failed


def _run_file(path, positions):
    """A finished run's file, written beside ``path`` and renamed over it."""
    tmp = f"{path}.tmp"
    with h5py.File(tmp, "w", libver="latest") as f:
        f.create_group("h5md").attrs["version"] = np.array([1, 1])
        el = f.create_group("particles/all/position")
        el.create_dataset("value", data=positions, maxshape=(None, *positions.shape[1:]))
        el.create_dataset("step", data=np.arange(len(positions)) * 10, maxshape=(None,))
    os.replace(tmp, path)


def test_follow_yields_a_new_run_written_over_the_file(tmp_path, adk_positions):
    """A new run renamed over the file (or the file written again, shorter) was yielded
    only once it held more frames than the old one, as if they were appended: a run of 3
    frames never, one of 6 after one of 5 as 'one new frame'."""
    import warnings

    path = str(tmp_path / "run.h5md")
    _run_file(path, adk_positions[:5, :10])
    frames = h5mdx.engine.live.follow(path, interval=0.01, timeout=2)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", h5mdx.errors.H5MDConformanceWarning)
        np.testing.assert_array_equal(next(frames).position.values, adk_positions[:5, :10])
        _run_file(path, adk_positions[10:13, :10])
        with pytest.warns(RuntimeWarning, match="the file holds 3 frames, 5 before: another "
                          "run, whose frames are yielded from its first"):
            ds = next(frames)
        np.testing.assert_array_equal(ds.position.values, adk_positions[10:13, :10])
        _run_file(path, adk_positions[20:26, :10])
        with pytest.warns(RuntimeWarning, match="the file was replaced: another run"):
            ds = next(frames)
        np.testing.assert_array_equal(ds.position.values, adk_positions[20:26, :10])
    frames.close()


def test_a_live_file_replaced_under_its_name_is_refused_at_its_reopen(tmp_path, adk_positions):
    """A Dataset opened with swmr=True keeps no state of its file (it grows): a new run
    renamed over it was read through the first run's shapes when xarray's file cache
    (or a worker process) opened it again by name. Now another inode, or
    fewer bytes, is refused; a file that grew in place still reads."""
    import warnings

    paths = [str(tmp_path / f"run{i}.h5md") for i in range(2)]
    _run_file(paths[0], adk_positions[:5, :10])
    _run_file(paths[1], adk_positions[:4, :12])
    with warnings.catch_warnings(), xr.set_options(file_cache_maxsize=1):
        warnings.simplefilter("ignore", h5mdx.errors.H5MDConformanceWarning)
        live = xr.open_dataset(paths[0], engine="h5md", swmr=True)
        other = xr.open_dataset(paths[1], engine="h5md", swmr=True)
        try:
            first = live.position[:2].values  # xarray keeps no copy of it
            other.position[:1].load()  # the cache closes the first file
            # a part again (a whole load is kept in memory): the file reopened as it was
            np.testing.assert_array_equal(live.position[:3].values, adk_positions[:3, :10])
            other.position[:1].load()
            _run_file(paths[0], adk_positions[20:26, :10])  # a new run, as large or larger
            with pytest.raises(H5MDReadError, match=r"run0\.h5md: was replaced since it was "
                               r"opened with swmr=True \(another file took its name"):
                live.position[:3].load()
        finally:
            live.close()
            other.close()
    np.testing.assert_array_equal(first, adk_positions[:2, :10])
