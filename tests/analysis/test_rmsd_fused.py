"""RMSD tasks that read and compute in one compiled call (``rmsd._fused_block``) give the
numbers of the ordinary path, bit for bit, on every layout that qualifies, and the
ordinary path takes over wherever it does not."""

from __future__ import annotations

import os
import warnings

import dask
import h5py
import numpy as np
import pytest
import xarray as xr
from MDAnalysis.analysis import rms
from MDAnalysisTests.datafiles import PSF

import h5mdx
from h5mdx.analysis import blocks
from h5mdx.analysis import qcp as qcp_mod
from h5mdx.analysis import rmsd as rmsd_mod
from h5mdx.format import direct
from h5mdx.testing import assert_rmsd_close, write_h5md
from h5mdx.timing import phases
from rmsd_layouts import WHOLE_FRAMES, cut_the_second_task_short, rmsd_of, write_positions

pytestmark = pytest.mark.skipif(not qcp_mod.has_numba() or not qcp_mod._PREAD,
                                reason="the fused kernel needs numba and pread")


FUSED = WHOLE_FRAMES


@pytest.fixture
def calls(monkeypatch):
    """Frames each task's fused call read (``from_file``)."""
    seen: list[int] = []
    real = qcp_mod.PreparedQCP.from_file

    def recording(self, fd, offsets, nbytes, frames, out, **kw):
        got = real(self, fd, offsets, nbytes, frames, out, **kw)
        if len(out):
            seen.append(got[0])
        return got

    monkeypatch.setattr(qcp_mod.PreparedQCP, "from_file", recording)
    return seen


def _rmsd(path, select, env, monkeypatch, scheduler="threads", **kw):
    return rmsd_of(path, select, rmsd_mod.FUSED_READ_ENV, env, monkeypatch, scheduler, **kw)


@pytest.mark.parametrize("layout", FUSED)
@pytest.mark.parametrize("select", ["name CA", "all"])
def test_fused_equals_the_ordinary_path_and_mdanalysis(layouts, layout, select, expected,
                                                       calls, monkeypatch):
    ordinary = _rmsd(layouts[layout], select, "0", monkeypatch)
    assert calls == []
    fused = _rmsd(layouts[layout], select, "1", monkeypatch)
    assert sorted(calls) == [18, 40, 40]  # every frame, in the 3 tasks of 40 frames
    np.testing.assert_array_equal(fused, ordinary)
    assert_rmsd_close(fused, expected[select], atol=1e-4)


def test_reads_of_one_frame_more_than_the_buffer_and_weights(layouts, expected, calls,
                                                             monkeypatch, adk_universe):
    # 3 frames a read: 40 frames a task end on a read of 1
    monkeypatch.setattr(blocks, "FUSED_READ_BYTES", 3 * 3341 * 12 + 5)
    path = layouts["7-frame chunks"]
    for kw in ({}, {"superposition": False}, {"weights": "mass"}):
        ordinary = _rmsd(path, "name CA", "0", monkeypatch, **kw)
        calls.clear()
        fused = _rmsd(path, "name CA", "1", monkeypatch, **kw)
        assert sorted(calls) == [18, 40, 40]
        np.testing.assert_array_equal(fused, ordinary)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        mass = rms.RMSD(adk_universe, select="name CA",
                        weights="mass").run().results.rmsd[:, 2]
    assert_rmsd_close(fused, mass, atol=1e-4)


@pytest.mark.parametrize("layout", ["gzip", "atoms split"])
def test_layouts_the_kernel_cannot_read_go_the_ordinary_way(layouts, layout, expected, calls,
                                                            monkeypatch):
    got = _rmsd(layouts[layout], "name CA", "1", monkeypatch)
    assert calls == []
    assert_rmsd_close(got, expected["name CA"], atol=1e-4)


def test_fill_values_are_not_fused(tmp_path, adk_positions, calls, monkeypatch):
    # a fill value becomes NaN: that is not in the bytes
    filled = adk_positions.copy()
    filled[5, 0] = -999.0
    path = write_positions(tmp_path / "fill.h5md", filled, fillvalue=-999.0)
    got = _rmsd(path, "all", "1", monkeypatch)
    assert calls == [] and np.isnan(got[5]) and np.isfinite(np.delete(got, 5)).all()


@pytest.mark.parametrize("select", [None, "name CA", "twice"])
def test_converted_units_are_fused_bit_for_bit(tmp_path, adk_positions, expected, calls,
                                              monkeypatch, select):
    """nm converted to Angstrom: the kernel scales each read as the backend does (float32
    times 10 in float32), so the fused RMSD equals the ordinary path's bit for bit; an
    atom selected twice is scaled once. The ordinary path, reading ahead or not, gives
    the same numbers again."""
    nm = tmp_path / "nm.h5md"
    write_h5md(nm, {"all": {"position": dict(value=adk_positions / 10, step=1, time=1.0,
                                             unit="nm")}})
    kw = {"topology": PSF} if select == "name CA" else {}
    twice = np.array([7, 7, 300, 2, 2000, 3000, 3000])
    if select == "twice":
        select = twice
    got = {}
    from h5mdx.engine.frames import READ_AHEAD_ENV

    for env, ahead in (("1", "0"), ("0", "0"), ("0", "2")):
        monkeypatch.setenv(rmsd_mod.FUSED_READ_ENV, env)
        monkeypatch.setenv(READ_AHEAD_ENV, ahead)
        calls.clear()
        with xr.open_dataset(nm, engine="h5md", convert_units=True, **kw) as ds:
            assert ds.position.attrs["units"] in ("Angstrom", "Å", "angstrom")
            got[env + ahead] = h5mdx.rmsd(ds.position, select=select,
                                          frames_per_block=40).compute(scheduler="sync").values
            in_memory = h5mdx.rmsd(ds.position.load(), select=select).values
        assert sorted(calls) == ([18, 40, 40] if env == "1" else [])
    got["1"] = got["10"]
    np.testing.assert_array_equal(got["1"], got["00"])
    np.testing.assert_array_equal(got["1"], got["02"])
    np.testing.assert_array_equal(got["1"], in_memory)
    if isinstance(select, str) or select is None:
        assert_rmsd_close(got["1"], expected["all" if select is None else select], atol=1e-4)
    else:  # the RMSD of those atoms (7, 2 and 3000 counted twice) from the file's numbers
        ref = adk_positions[0, select].astype(np.float64)
        want = h5mdx.analysis.qcp.rmsd_qcp(ref, (adk_positions[:, select] / 10 * 10))
        np.testing.assert_allclose(got["1"], want, atol=1e-4)


def test_by_default_only_tasks_that_do_not_read_ahead_fuse(layouts, calls, monkeypatch):
    monkeypatch.setattr("h5mdx.engine.frames._cpus", lambda: 2)
    _rmsd(layouts["contiguous"], "name CA", None, monkeypatch, scheduler="sync")
    assert calls == []  # one task at a time, a spare core: it reads ahead instead
    _rmsd(layouts["contiguous"], "name CA", None, monkeypatch, scheduler="threads")
    assert sorted(calls) == [18, 40, 40]  # 2 at once on 2 cores: no reader threads


def test_fused_read_setting(monkeypatch):
    monkeypatch.delenv(rmsd_mod.FUSED_READ_ENV, raising=False)
    assert rmsd_mod.fused_read(0) and not rmsd_mod.fused_read(2)
    assert rmsd_mod.fused_read(2, strided=True)  # strided frames: read by the kernel
    monkeypatch.setenv(rmsd_mod.FUSED_READ_ENV, "1")
    assert rmsd_mod.fused_read(2)
    monkeypatch.setenv(rmsd_mod.FUSED_READ_ENV, "0")
    assert not rmsd_mod.fused_read(0) and not rmsd_mod.fused_read(0, strided=True)
    monkeypatch.setenv(rmsd_mod.FUSED_READ_ENV, "yes")
    with pytest.raises(ValueError, match="H5MDX_FUSED_READ must be 0 or 1"):
        rmsd_mod.fused_read(0)


def test_a_read_that_fails_midway_leaves_the_rest_to_the_ordinary_path(layouts, calls,
                                                                       monkeypatch):
    """The fused kernel stops at a read past the end of the file; the ordinary read of
    the remaining frames gives the right values (and would name the file if it failed)."""
    path = layouts["contiguous"]
    ordinary = _rmsd(path, "name CA", "0", monkeypatch)
    cut_the_second_task_short(path, monkeypatch)
    got = _rmsd(path, "name CA", "1", monkeypatch)
    assert sorted(calls) == [18, 30, 40]
    np.testing.assert_array_equal(got, ordinary)


def test_frames_the_fast_kernel_flags_are_computed_exactly(layouts, monkeypatch):
    """A frame equal to the reference is a double root for QCP's Newton iteration; the
    kernel flags it and the task computes it again by the exact path."""
    path = layouts["contiguous"]
    monkeypatch.setenv(rmsd_mod.FUSED_READ_ENV, "1")
    with xr.open_dataset(path, engine="h5md") as ds, dask.config.set(scheduler="threads"):
        got = h5mdx.rmsd(ds.position, reference=17, frames_per_block=40).values
    assert got[17] == pytest.approx(0.0, abs=1e-3)
    assert (got >= 0).all()


def test_rods_the_fast_kernel_flags_are_exact_through_the_fused_path(tmp_path, monkeypatch):
    """Rigidly moved rods are near-double roots on every frame (test_qcp): each comes back
    flagged from the compiled read-and-compute call and is solved again exactly."""
    from h5mdx.analysis.qcp import rmsd_qcp

    rng = np.random.default_rng(5)
    rod = np.c_[np.linspace(0.0, 10.0, 20), np.zeros(20), np.zeros(20)]
    moved = [rod]
    for _ in range(49):
        q = rng.normal(size=4)
        a, b, c, d = q / np.linalg.norm(q)
        rot = np.array([[a*a + b*b - c*c - d*d, 2*(b*c - a*d), 2*(b*d + a*c)],
                        [2*(b*c + a*d), a*a - b*b + c*c - d*d, 2*(c*d - a*b)],
                        [2*(b*d - a*c), 2*(c*d + a*b), a*a - b*b - c*c + d*d]])
        moved.append(rod @ rot.T + rng.normal(size=3) * 5)
    positions = np.stack(moved)
    path = write_positions(tmp_path / "rods.h5md", positions)
    monkeypatch.setenv(rmsd_mod.FUSED_READ_ENV, "1")
    with xr.open_dataset(path, engine="h5md") as ds, dask.config.set(scheduler="threads"):
        got = h5mdx.rmsd(ds.position, frames_per_block=20).values
    assert got.max() < 1e-6
    np.testing.assert_allclose(got, rmsd_qcp(rod, positions), atol=1e-9)


def test_a_fused_task_times_its_reads_and_its_kernel(layouts, tmp_path, monkeypatch):
    monkeypatch.setenv(phases.SPOOL_ENV, str(tmp_path))
    _rmsd(layouts["contiguous"], "all", "1", monkeypatch)
    records = phases.read_spool(tmp_path)
    assert len(records) == 3
    for rec in records:
        assert rec["t_io"] > 0 and rec["t_compute"] > 0
        assert rec["t_io"] + rec["t_compute"] <= rec["wall"]
        assert rec["bytes_read"] == (rec["frame_stop"] - rec["frame_start"]) * 3341 * 12


def test_row_runs_are_the_bytes_h5py_reads(layouts):
    for layout in ("one-frame chunks (MDAnalysis)", "7-frame chunks", "contiguous"):
        path = layouts[layout]
        with h5py.File(path, "r") as f:
            dset = f["particles/all/position/value"] if layout != FUSED[0] else \
                f["particles/trajectory/position/value"]
            reader = direct.plan_direct(dset)
            for first, stop in ((0, 98), (3, 4), (5, 40), (90, 98), (10, 10)):
                box = (slice(first, stop), slice(0, 3341), slice(0, 3))
                missing = reader.missing(box)
                if missing:
                    from h5mdx.format.chunk_index import locate_chunks

                    reader.add_locations(locate_chunks(dset, missing))
                offsets, nbytes = reader.row_runs(first, stop)
                raw = b"".join(os.pread(reader.fileno(), int(n), int(o))
                               for o, n in zip(offsets, nbytes, strict=True))
                assert raw == dset[first:stop].tobytes(), (layout, first, stop)
            reader.close()


def test_row_runs_refuse_storage_that_is_not_whole_rows(layouts):
    with h5py.File(layouts["gzip"], "r") as f:
        reader = direct.plan_direct(f["particles/all/position/value"])
        assert not reader.by_rows
        with pytest.raises(direct.Unsupported, match="whole rows"):
            reader.row_runs(0, 10)
