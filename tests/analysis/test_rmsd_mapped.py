"""RMSD tasks that run the kernel on a mapping of the file (``H5MDX_MAPPED_READ=1``,
``rmsd._mapped_block``) give the numbers of the ordinary path, bit for bit, on every
layout that qualifies; the ordinary path takes over wherever it does not, and where the
file turns out shorter than its runs."""

from __future__ import annotations

import os

import dask
import numpy as np
import pytest
import xarray as xr
from MDAnalysisTests.datafiles import PSF

import h5mdx
from h5mdx.analysis import blocks
from h5mdx.analysis import qcp as qcp_mod
from h5mdx.analysis import rmsd as rmsd_mod
from h5mdx.format import mapped
from h5mdx.testing import assert_rmsd_close, write_h5md
from h5mdx.timing import phases
from rmsd_layouts import WHOLE_FRAMES, cut_the_second_task_short, rmsd_of

pytestmark = pytest.mark.skipif(
    not qcp_mod.has_numba() or not qcp_mod._PREAD or not mapped.available(),
    reason="the mapped read needs numba and mmap")


@pytest.fixture
def windows(monkeypatch):
    """Frames in each window a task's kernel ran on (``map_rows``' calls of ``each``)."""
    seen: list[int] = []
    real = mapped.map_rows

    def recording(fd, offsets, nbytes, row_shape, dtype, each, **kw):
        def counted(rows):
            seen.append(len(rows))
            each(rows)

        return real(fd, offsets, nbytes, row_shape, dtype, counted, **kw)

    monkeypatch.setattr(mapped, "map_rows", recording)
    return seen


def _rmsd(path, select, mapped_env, monkeypatch, scheduler="threads", **kw):
    return rmsd_of(path, select, rmsd_mod.MAPPED_READ_ENV, mapped_env, monkeypatch, scheduler, **kw)


@pytest.mark.parametrize("layout", WHOLE_FRAMES)
@pytest.mark.parametrize("select", ["name CA", "all"])
def test_mapped_equals_the_ordinary_path_and_mdanalysis(layouts, layout, select, expected,
                                                        windows, monkeypatch):
    ordinary = _rmsd(layouts[layout], select, "0", monkeypatch)
    assert windows == []
    got = _rmsd(layouts[layout], select, "1", monkeypatch)
    assert sum(windows) == 98  # every frame; a window per run of chunks adjacent on disk
    if layout.startswith("contiguous"):
        assert sorted(windows) == [18, 40, 40]  # one window per task of 40
    np.testing.assert_array_equal(got, ordinary)
    assert_rmsd_close(got, expected[select], atol=1e-4)


def test_windows_of_a_few_frames_weights_and_centring_only(layouts, adk_universe, windows,
                                                           monkeypatch):
    # 3 frames a window (plus 5 bytes): tasks of 40 frames end on a window of 1
    monkeypatch.setattr(mapped, "WINDOW_BYTES", 3 * 3341 * 12 + 5)
    path = layouts["7-frame chunks"]
    for kw in ({}, {"superposition": False}, {"weights": "mass"}):
        ordinary = _rmsd(path, "name CA", "0", monkeypatch, **kw)
        windows.clear()
        got = _rmsd(path, "name CA", "1", monkeypatch, **kw)
        assert sum(windows) == 98 and max(windows) == 3
        np.testing.assert_array_equal(got, ordinary)


@pytest.mark.parametrize("layout", ["gzip", "atoms split"])
def test_layouts_that_cannot_be_mapped_go_the_ordinary_way(layouts, layout, expected,
                                                           windows, monkeypatch):
    got = _rmsd(layouts[layout], "name CA", "1", monkeypatch)
    assert windows == []
    assert_rmsd_close(got, expected["name CA"], atol=1e-4)


def test_converted_units_are_not_mapped(tmp_path, adk_positions, windows, monkeypatch):
    """nm served as Angstrom: the values are not the mapping's bytes, so the task does not
    run on the mapping (the fused read, which scales each read, takes it)."""
    nm = tmp_path / "nm.h5md"
    write_h5md(nm, {"all": {"position": dict(value=adk_positions / 10, step=1, time=1.0,
                                             unit="nm")}})
    got = {}
    fused = []
    real = blocks._fused_block
    monkeypatch.setattr(blocks, "_fused_block",
                        lambda *a: fused.append(1) or real(*a))
    monkeypatch.setenv(rmsd_mod.FUSED_READ_ENV, "1")
    for env in ("1", "0"):
        monkeypatch.setenv(rmsd_mod.MAPPED_READ_ENV, env)
        with xr.open_dataset(nm, engine="h5md", convert_units=True) as ds:
            got[env] = h5mdx.rmsd(ds.position, frames_per_block=40).compute(
                scheduler="sync").values
    assert windows == [] and len(fused) == 6  # 3 tasks a run, each read by the fused kernel
    np.testing.assert_array_equal(got["1"], got["0"])


def test_distributed_workers_map_their_frames(layouts, expected, monkeypatch):
    """On a ``distributed`` cluster of processes (which inherit the setting), the same
    numbers; the tasks' timings show each mapped its frames (I/O is the mapping)."""
    distributed = pytest.importorskip("distributed")
    monkeypatch.setenv(rmsd_mod.MAPPED_READ_ENV, "1")
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                  dashboard_address=None) as cluster, \
            distributed.Client(cluster) as client, \
            xr.open_dataset(layouts["contiguous"], engine="h5md", topology=PSF) as ds:
        got = h5mdx.rmsd(ds.position, select="name CA").compute(scheduler=client).values
        flags = client.run(rmsd_mod.mapped_read)
    assert all(flags.values())
    assert_rmsd_close(got, expected["name CA"], atol=1e-4)


def test_mapped_read_setting(monkeypatch):
    monkeypatch.delenv(rmsd_mod.MAPPED_READ_ENV, raising=False)
    assert not rmsd_mod.mapped_read()
    monkeypatch.setenv(rmsd_mod.MAPPED_READ_ENV, "1")
    assert rmsd_mod.mapped_read()
    monkeypatch.setenv(rmsd_mod.MAPPED_READ_ENV, "0")
    assert not rmsd_mod.mapped_read()
    monkeypatch.setenv(rmsd_mod.MAPPED_READ_ENV, "yes")
    with pytest.raises(ValueError, match="H5MDX_MAPPED_READ must be 0 or 1"):
        rmsd_mod.mapped_read()


def test_runs_past_the_end_of_the_file_leave_the_rest_to_the_ordinary_path(
        layouts, windows, monkeypatch):
    """A run past the end of the file (as after a truncation) is never mapped (which
    would kill the process on the first touch): the frames before it are mapped, and the
    ordinary read of the remaining frames gives the right values."""
    path = layouts["contiguous"]
    ordinary = _rmsd(path, "name CA", "0", monkeypatch)
    cut_the_second_task_short(path, monkeypatch)
    got = _rmsd(path, "name CA", "1", monkeypatch)
    assert sorted(windows) == [18, 30, 40]
    np.testing.assert_array_equal(got, ordinary)


def test_a_truncated_file_gives_the_ordinary_error_not_a_crash(tmp_path, adk_positions,
                                                               monkeypatch):
    """Truncated after it was opened: the mapped path maps nothing past the new end, and
    the ordinary read says which file and element could not be read."""
    from rmsd_layouts import write_positions

    path = write_positions(tmp_path / "cut.h5md", adk_positions)
    monkeypatch.setenv(rmsd_mod.MAPPED_READ_ENV, "1")
    with xr.open_dataset(path, engine="h5md") as ds:
        lazy = h5mdx.rmsd(ds.position, frames_per_block=40)
        with open(path, "r+b") as f:
            f.truncate(os.path.getsize(path) - 30 * 3341 * 12)
        with pytest.raises(Exception, match="cut.h5md") as err:
            lazy.compute(scheduler="sync")
    assert "particles/all/position" in str(err.value)


def test_frames_the_fast_kernel_flags_are_computed_exactly(layouts, monkeypatch):
    """A frame equal to the reference is a double root for QCP's Newton iteration; on the
    mapping too it is computed again by the exact path."""
    path = layouts["contiguous"]
    monkeypatch.setenv(rmsd_mod.MAPPED_READ_ENV, "1")
    with xr.open_dataset(path, engine="h5md") as ds, dask.config.set(scheduler="threads"):
        got = h5mdx.rmsd(ds.position, reference=17, frames_per_block=40).values
    assert got[17] == pytest.approx(0.0, abs=1e-3)
    assert (got >= 0).all()


def test_a_mapped_task_times_its_mappings_and_its_kernel(layouts, tmp_path, monkeypatch):
    monkeypatch.setenv(phases.SPOOL_ENV, str(tmp_path))
    _rmsd(layouts["contiguous"], "all", "1", monkeypatch)
    records = phases.read_spool(tmp_path)
    assert len(records) == 3
    for rec in records:
        assert rec["t_io"] > 0 and rec["t_compute"] > 0
        assert rec["t_io"] + rec["t_compute"] <= rec["wall"]
        assert rec["bytes_read"] == (rec["frame_stop"] - rec["frame_start"]) * 3341 * 12
