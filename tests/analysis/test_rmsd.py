"""h5mdx.rmsd, ds.md.rmsd and ``h5mdx rmsd``: laziness, inputs, timing and the CLI.

``test_rmsd_paths.py`` checks the C-alpha series on every execution path; this module
checks what is read from disk and when, every kind of input (pure numpy, dask, Zarr,
other references and weights), the per-block timing records, and the CLI end to end.
Every value is compared with MDAnalysis 2.x.
"""

from __future__ import annotations

import csv
import re
import subprocess
import sys
import warnings

import dask
import dask.array as da
import h5py
import numpy as np
import pytest
import xarray as xr
from MDAnalysis.analysis import rms
from MDAnalysisTests.datafiles import PSF

import h5mdx
import h5mdx.engine.arrays
from h5mdx._machine import usable_cpus
from h5mdx.cli import main as cli_main
from h5mdx.errors import TopologyError
from h5mdx.testing import write_h5md
from h5mdx.timing.phases import SPOOL_ENV, read_spool

ATOL = 1e-4  # Angstrom; float32 positions


def _mda_rmsd(universe, select="name CA", **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return rms.RMSD(universe, select=select, **kw).run().results.rmsd[:, 2]


def _plain_rmsd(frames, ref, **kw):
    return np.array([rms.rmsd(x, ref, center=True, **kw) for x in frames])


@pytest.fixture(scope="module")
def ca(adk_universe):
    return adk_universe.select_atoms("name CA").indices


@pytest.fixture(scope="module")
def expected_ca(adk_universe):
    return _mda_rmsd(adk_universe)


@pytest.fixture(scope="module")
def memory_position(adk_positions):
    """Positions as a plain in-memory DataArray, as a user would build one."""
    n_frames, n_atoms, _ = adk_positions.shape
    return xr.DataArray(
        adk_positions,
        dims=("time", "atom", "spatial"),
        coords={"time": np.arange(n_frames) * 1.0, "atom": np.arange(n_atoms),
                "spatial": ["x", "y", "z"]},
        attrs={"units": "Angstrom", "topology": PSF},
        name="position",
    )


# --- what is read, and when -------------------------------------------------------------


@pytest.fixture
def read_log(monkeypatch):
    """Every key the h5md backend reads from disk (in this process)."""
    keys = []
    original = h5mdx.engine.arrays.H5MDArray._getitem

    def logged(self, key):
        keys.append(key)
        return original(self, key)

    monkeypatch.setattr(h5mdx.engine.arrays.H5MDArray, "_getitem", logged)
    rows_reader = h5mdx.engine.arrays.H5MDArray.rows_reader

    def logged_rows(self, first, rest):  # a task's reads (engine.frames.FrameReader.bind)
        read = rows_reader(self, first, rest)

        def logged_read(a, b):
            keys.append((slice(first + a, first + b, 1), *rest))
            return read(a, b)
        return logged_read

    monkeypatch.setattr(h5mdx.engine.arrays.H5MDArray, "rows_reader", logged_rows)
    rows_runs = h5mdx.engine.arrays.H5MDArray.rows_runs

    def logged_runs(self, first, rest):  # a task's fused read (rmsd._fused_block)
        runs = rows_runs(self, first, rest)
        if runs is None:
            return None

        def logged_run(a, b):
            keys.append((slice(first + a, first + b, 1), *rest))
            return runs(a, b)
        return logged_run

    monkeypatch.setattr(h5mdx.engine.arrays.H5MDArray, "rows_runs", logged_runs)
    return keys


def test_reads_only_selected_atoms_once_per_block(adk_h5md_blocked, ca, expected_ca, read_log):
    with xr.open_dataset(adk_h5md_blocked, engine="h5md", topology=PSF) as ds:
        read_log.clear()
        lazy = ds.md.rmsd(select="name CA", frames_per_block=30)
        # building the graph reads the reference frame only, for the selected atoms
        assert len(read_log) == 1
        assert read_log[0][0] == 0
        np.testing.assert_array_equal(read_log[0][1], ca)
        read_log.clear()
        got = lazy.compute(scheduler="sync")
    assert_close(got, expected_ca)
    _assert_whole_frames_per_block(read_log)


def _assert_whole_frames_per_block(read_log):
    """One read per block of 30 frames; the chunks hold whole frames, so each block reads
    its whole frames (no extra chunk) in one call and the kernel reads the C-alpha atoms
    in place."""
    assert sorted((k[0].start, k[0].stop) for k in read_log) == [(0, 30), (30, 60), (60, 90),
                                                                 (90, 98)]
    for key in read_log:
        assert key[1] == slice(None) or (key[1].start, key[1].stop) == (0, 3341)


def test_open_chunks_read_like_the_lazy_open(adk_h5md_blocked, expected_ca, read_log):
    """``chunks={...}``: the rmsd tasks read whole frames, block for block, like a lazy open
    (planned for 4 workers, whose tasks a lazy open makes 30 frames each: as the blocks)."""
    # the backend tells xarray the stored chunks, so xarray warns of blocks that split them
    with pytest.warns(UserWarning, match="separate the stored chunks"):
        ds = xr.open_dataset(adk_h5md_blocked, engine="h5md", topology=PSF,
                             chunks={"time": 30})
    with ds:
        with dask.config.set(scheduler="processes", num_workers=4):
            lazy = ds.md.rmsd(select="name CA")
        read_log.clear()
        got = lazy.compute(scheduler="sync")
    assert_close(got, expected_ca)
    _assert_whole_frames_per_block(read_log)


def test_atom_split_chunks_read_only_selected_atoms(adk_pyh5md, ca, expected_ca, read_log):
    """pyh5md's (32, 128, 3) chunks: the selection goes to the backend as indices."""
    with xr.open_dataset(adk_pyh5md, engine="h5md", topology=PSF) as ds:
        read_log.clear()
        got = ds.md.rmsd(select="name CA", frames_per_block=32).compute(scheduler="sync")
    assert_close(got, expected_ca)
    assert len(read_log) == 1 + 4
    for key in read_log:
        np.testing.assert_array_equal(key[1], ca)


def test_timing_records_split_io_and_compute(adk_h5md_blocked, ca, expected_ca, tmp_path,
                                             monkeypatch):
    monkeypatch.setenv(SPOOL_ENV, str(tmp_path))
    with xr.open_dataset(adk_h5md_blocked, engine="h5md", topology=PSF) as ds:
        got = ds.md.rmsd(select="name CA", frames_per_block=20).compute(scheduler="threads")
    assert_close(got, expected_ca)
    records = sorted(read_spool(tmp_path), key=lambda r: r["frame_start"])
    assert [(r["frame_start"], r["frame_stop"]) for r in records] == [
        (0, 20), (20, 40), (40, 60), (60, 80), (80, 98)]
    for r in records:
        assert r["kind"] == "rmsd"
        assert r["t_io"] > 0 and r["t_compute"] > 0
        assert r["t_io"] + r["t_compute"] <= r["wall"] + 1e-6
        # whole-frame chunks: whole frames are read (the same chunks as the C-alpha slab)
        assert r["bytes_read"] == (r["frame_stop"] - r["frame_start"]) * 3341 * 3 * 4
        assert r["t_warmup"] >= 0


# --- inputs -----------------------------------------------------------------------------


def assert_close(got, expected, atol=ATOL):
    got = np.asarray(got.values if isinstance(got, xr.DataArray) else got)
    assert got.shape == np.shape(expected)
    np.testing.assert_allclose(got, expected, rtol=0, atol=atol)


def test_pure_numpy_dataarray(memory_position, adk_universe, adk_positions, ca, expected_ca):
    lazy = h5mdx.rmsd(memory_position, select="name CA")  # topology from attrs
    assert isinstance(lazy.data, da.Array)
    got = lazy.compute()
    assert_close(got, expected_ca)
    assert got.attrs["units"] == "Angstrom"
    np.testing.assert_array_equal(got.time.values, memory_position.time.values)
    # integer indices on a DataArray with no atom coordinate
    bare = xr.DataArray(adk_positions, dims=("time", "atom", "spatial"))
    assert_close(h5mdx.rmsd(bare, select=ca).compute(), expected_ca)
    # mass weights from the topology named in attrs (no mass coordinate)
    assert "mass" not in memory_position.coords
    assert_close(h5mdx.rmsd(memory_position, select="backbone", weights="mass").compute(),
                 _mda_rmsd(adk_universe, select="backbone", weights="mass"))


def test_dask_array_built_by_hand(memory_position, adk_positions, ca):
    chunked = memory_position.chunk({"time": 25})
    sub = chunked.isel(time=slice(3, 95, 4))
    got = h5mdx.rmsd(sub, reference=2, select="name CA").compute(scheduler="processes",
                                                                   num_workers=2)
    frames = adk_positions[3:95:4][:, ca]
    assert_close(got, _plain_rmsd(frames, frames[2], superposition=True))
    np.testing.assert_array_equal(got.time.values, sub.time.values)


def _zarr_store(memory_position, tmp_path, frames_per_chunk):
    """adk's positions written to a Zarr store in chunks of ``frames_per_chunk`` frames."""
    store = tmp_path / "adk.zarr"
    position = memory_position.drop_vars("spatial").chunk({"time": frames_per_chunk})
    # a step coordinate in the positions' chunks, as xarray writes one by default
    position = position.assign_coords(step=position.time.astype(np.int64) * 10)
    xr.Dataset({"position": position}, attrs={"topology": PSF}).to_zarr(store,
                                                                         consolidated=False)
    return store


def test_zarr_store(memory_position, tmp_path, expected_ca):
    store = _zarr_store(memory_position, tmp_path, 33)
    with xr.open_zarr(store, consolidated=False) as ds, \
            dask.config.set(scheduler="threads", num_workers=2):
        assert ds.position.chunks is not None
        lazy = ds.md.rmsd(select="name CA")
        # whole 33-frame chunks, one run for each of the 2 threads
        assert lazy.chunks == ((66, 32),)
        assert_close(lazy.compute(scheduler="threads"), expected_ca)


@pytest.mark.parametrize("chunks", [{}, None])
def test_zarr_chunks_run_together_into_tasks(memory_position, tmp_path, expected_ca, chunks):
    """Zarr chunks of whole frames (10 frames here): the tasks read runs of whole chunks,
    as large as an HDF5 file's tasks for the same workers (2 processes: 50 and 48 frames),
    not a task per chunk; opened with dask blocks or lazily, the numbers stay."""
    store = _zarr_store(memory_position, tmp_path, 10)
    with dask.config.set(scheduler="processes", num_workers=2), \
            xr.open_dataset(store, engine="zarr", consolidated=False, chunks=chunks) as ds:
        lazy = ds.md.rmsd(select="name CA")
        assert lazy.chunks == ((50, 48),)
        # the step coordinate's 10 chunks give no tasks either: read where it is computed
        assert set(lazy.__dask_graph__().layers) == {lazy.data.name}
        got = lazy.compute()
        assert_close(got, expected_ca)
        np.testing.assert_array_equal(got.step.values, np.arange(98) * 10)


def test_zarr_tasks_read_nothing_ahead(memory_position, adk_h5md_blocked, tmp_path, ca,
                                       expected_ca, monkeypatch):
    """zarr reads with I/O threads of its own: its tasks get no reader thread beside them
    (unknown threads, read-ahead depth 0), where an HDF5 file's tasks on the same
    scheduler (one thread, a spare core) do."""
    from h5mdx.analysis import blocks

    store = _zarr_store(memory_position, tmp_path, 10)
    asked = []
    real = blocks.read_ahead_depth

    def depth(host_threads=None, process_threads=None):
        asked.append(host_threads)
        return real(host_threads, process_threads)

    monkeypatch.setattr(blocks, "read_ahead_depth", depth)
    monkeypatch.delenv("H5MDX_READ_AHEAD", raising=False)
    with dask.config.set(scheduler="threads", num_workers=1), \
            xr.open_dataset(store, engine="zarr", consolidated=False, chunks=None) as zs, \
            xr.open_dataset(adk_h5md_blocked, engine="h5md") as hs:
        assert_close(h5mdx.rmsd(zs.position, select=ca).compute(scheduler="sync"),
                     expected_ca)
        assert set(asked) == {None}
        asked.clear()
        h5mdx.rmsd(hs.position, select=ca).compute(scheduler="sync")
        assert set(asked) == {1}


@pytest.mark.parametrize("workers", [1, 2])
def test_lazy_reads_keep_to_the_stored_chunks(memory_position, adk_universe, tmp_path,
                                              monkeypatch, workers):
    """Frames 13 on of a store in 10-frame chunks: the tasks end on chunk boundaries (the
    first takes frames 13-19 too), and each reads frames up to the first boundary, then
    whole chunks (a read across a boundary decodes two chunks); the numbers stay."""
    from h5mdx.analysis import blocks, plan

    store = _zarr_store(memory_position, tmp_path, 10)
    monkeypatch.setattr(plan, "READ_STEP_BYTES", 20 * 3341 * 3 * 4)  # 2 chunks a read
    spans = []
    real = blocks.read_ahead

    def recording(read, task_spans, depth=0):
        spans.append(list(task_spans))
        return real(read, task_spans, depth)

    monkeypatch.setattr(blocks, "read_ahead", recording)
    expected = _mda_rmsd(adk_universe, select="all", ref_frame=13)[13:]
    with dask.config.set(scheduler="threads", num_workers=workers), \
            xr.open_dataset(store, engine="zarr", consolidated=False, chunks=None) as ds:
        lazy = h5mdx.rmsd(ds.position.isel(time=slice(13, None)))  # whole frames a read
        ends = np.cumsum(lazy.chunks[0])
        assert all((13 + e) % 10 == 0 for e in ends[:-1]) and ends[-1] == 85
        assert len(lazy.chunks[0]) >= workers
        assert_close(lazy.compute(scheduler="sync"), expected)
    # the tasks run in dask's order: each is known by its size (57 and 28 frames for 2)
    first_frame = dict(zip(lazy.chunks[0], np.concatenate([[0], ends[:-1]]), strict=True))
    assert len(spans) == len(first_frame) == len(lazy.chunks[0])
    for task in spans:
        first = first_frame[task[-1][1]]
        assert all((13 + first + a) % 10 == 0 for a, _b in task[1:]), (first, task)
        assert all(b - a <= 20 for a, b in task), task
    assert (0, 7) in [task[0] for task in spans]  # frames 13-19: up to the first boundary


@pytest.mark.parametrize("mapped", ["", "1"])
@pytest.mark.parametrize("chunks", [None, {"time": 10}])
@pytest.mark.parametrize("key", [slice(None, None, 2), slice(3, 90, 7)])
def test_strided_frames_read_by_the_compiled_reader(adk_h5md_blocked, adk_universe, ca,
                                                    monkeypatch, chunks, key, mapped):
    """``isel(time=slice(a, b, k))``, opened lazily or with ``chunks=``: each task reads
    its frames in one compiled call (a run of bytes a frame), not a strided box through
    h5py a read, even where mapped reads are asked for (a mapping a frame ran 3.6x
    slower); the numbers equal MDAnalysis' over the same frames."""
    from h5mdx.analysis import blocks
    from h5mdx.analysis.qcp import has_numba

    done = []
    real = blocks._fused_block

    def spy(*args):
        done.append(real(*args))
        return done[-1]

    monkeypatch.setattr(blocks, "_fused_block", spy)
    monkeypatch.delenv(blocks.FUSED_READ_ENV, raising=False)
    monkeypatch.setenv(blocks.MAPPED_READ_ENV, mapped)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        expected = rms.RMSD(adk_universe, select="name CA", ref_frame=key.start or 0).run(
            start=key.start, stop=key.stop, step=key.step).results.rmsd[:, 2]
        ds = xr.open_dataset(adk_h5md_blocked, engine="h5md", chunks=chunks)
    with ds, dask.config.set(scheduler="threads", num_workers=1):  # a spare core: read-ahead
        got = h5mdx.rmsd(ds.position.isel(time=key), select=ca).compute(scheduler="sync")
    assert_close(got, expected)
    from h5mdx.format import direct

    if has_numba() and direct.enabled():  # numba's reader, of the bytes direct reads find
        assert sum(done) == len(expected)


def test_references(adk_h5md_blocked, adk_universe, adk_positions, ca):
    import MDAnalysis as mda

    with xr.open_dataset(adk_h5md_blocked, engine="h5md", topology=PSF) as ds:
        # a whole-system frame of another Dataset: the selected atoms are taken from it
        other = xr.open_dataset(adk_h5md_blocked, engine="h5md", topology=PSF)
        got = ds.md.rmsd(other.position.isel(time=57), select="name CA").compute()
        assert_close(got, _mda_rmsd(adk_universe, ref_frame=57))
        # the frame as a Dataset, as the guide says (an xarray TypeError)
        got = ds.md.rmsd(select="name CA", reference=other.isel(time=57)).compute()
        assert_close(got, _mda_rmsd(adk_universe, ref_frame=57))
        with pytest.raises(TypeError, match="a reference Dataset must hold 'position'"):
            ds.md.rmsd(select="name CA", reference=other[["step"]].isel(time=57))
        other.close()
        # an external structure: frame 30 rotated and moved, as an MDAnalysis Universe
        theta = 0.7
        rot = np.array([[np.cos(theta), -np.sin(theta), 0.0],
                        [np.sin(theta), np.cos(theta), 0.0], [0.0, 0.0, 1.0]])
        moved = (adk_positions[30].astype(np.float64) @ rot.T + [5.0, -3.0, 12.0])
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            ref_u = mda.Universe(PSF, moved[None].astype(np.float32))  # in memory
        expected = _mda_rmsd(adk_universe, reference=ref_u)
        assert expected[30] < 1e-3
        assert_close(ds.md.rmsd(ref_u.atoms.positions, select="name CA").compute(), expected)
        assert_close(ds.md.rmsd(ref_u.atoms.positions[ca], select="name CA").compute(),
                     expected)
        # full-length weights are indexed by the selection like the reference
        w = np.linspace(1.0, 3.0, ds.sizes["atom"])
        expected_w = _plain_rmsd(adk_positions[:, ca], adk_positions[0, ca], weights=w[ca],
                                 superposition=True)
        assert_close(ds.md.rmsd(select="name CA", weights=w).compute(), expected_w)


def test_empty_and_tiny_selections(adk_h5md_blocked, adk_positions, ca):
    with xr.open_dataset(adk_h5md_blocked, engine="h5md", topology=PSF, chunks={}) as ds:
        empty = ds.isel(time=slice(5, 5)).md.rmsd(adk_positions[0, ca], select="name CA")
        assert empty.sizes["time"] == 0
        assert empty.compute().values.shape == (0,)
        # one atom: nothing to superpose, RMSD 0 after centring
        one = ds.md.rmsd(select=[17]).compute()
        np.testing.assert_allclose(one.values, 0.0, atol=1e-6)


def test_rechunk_warning_points_at_the_caller(adk_h5md_blocked, adk_universe):
    with xr.open_dataset(adk_h5md_blocked, engine="h5md", topology=PSF) as ds:
        split = ds.chunk({"time": 49, "atom": 1000})
        with pytest.warns(UserWarning, match=r"chunks=\{'atom': -1, 'spatial': -1\}") as rec:
            lazy = split.md.rmsd()
        assert rec[0].filename == __file__
        assert lazy.data.numblocks == (2,)
        assert_close(lazy.compute(), _mda_rmsd(adk_universe, select="all"))


def test_integer_select_is_atom_indices_on_a_subset(memory_position, adk_universe):
    """Integers in select= are atom indices, as everything else is matched (and as
    MDAnalysis' ``AtomGroup.indices``): on positions of a subset of the atoms they were
    taken as positions along ``atom`` and compared other atoms (O, HB2, HA for C-alphas),
    silently."""
    ca = adk_universe.select_atoms("name CA and resid 100:110")
    sub = memory_position.isel(atom=slice(1500, 1800))
    got = h5mdx.rmsd(sub, select=ca.indices).values
    np.testing.assert_allclose(got, h5mdx.rmsd(memory_position, select=ca.indices).values,
                               atol=1e-6)
    assert_close(got, _mda_rmsd(adk_universe, select="name CA and resid 100:110"))
    with pytest.raises(IndexError, match=r"\[0\] are not atoms of these positions "
                                         r"\(300 atoms, indices 1500-1799\)"):
        h5mdx.rmsd(sub, select=[0, 1600])


def test_argument_errors(memory_position):
    with pytest.raises(ValueError, match="boolean mask must have 3341"):
        h5mdx.rmsd(memory_position, select=np.ones(5, bool))
    with pytest.raises(IndexError, match=r"atom indices \[5000\] are not atoms"):
        h5mdx.rmsd(memory_position, select=[0, 5000])
    with pytest.raises(IndexError, match=r"atom indices \[-1\] are not atoms"):
        h5mdx.rmsd(memory_position, select=[-1, 0, 1])
    with pytest.raises(ValueError, match="weights has 7 entries"):
        h5mdx.rmsd(memory_position, weights=np.ones(7))
    with pytest.raises(ValueError, match="weights must be None, 'mass'"):
        h5mdx.rmsd(memory_position, weights="charge")
    with pytest.raises(TopologyError, match="'resname XYZ'"):
        h5mdx.rmsd(memory_position, select="resname XYZ")
    with pytest.raises(TopologyError, match="needs masses"):
        h5mdx.rmsd(memory_position.assign_attrs(topology=None), weights="mass")
    with pytest.raises(ValueError, match="needs a 'position' variable"):
        xr.Dataset({"velocity": memory_position}).md.rmsd()


def test_rmsd_of_a_group_without_positions_names_the_file_and_group(tmp_path):
    """``h5mdx rmsd FILE --group observables`` (``ds.md.rmsd`` of the observables) said
    only "needs a 'position' variable", not of which file and group."""
    path = write_h5md(tmp_path / "obs.h5md", {"g": {"position": dict(
        value=np.zeros((2, 1, 3)), step=np.arange(2))}}, observables={
        "energy": dict(value=np.arange(2.0), step=np.arange(2))})
    with xr.open_dataset(path, engine="h5md", group="observables") as ds:
        with pytest.raises(ValueError, match=r"needs a 'position' variable on \(time, atom, "
                           r"spatial\): .*obs\.h5md \[/observables\] holds energy, no "
                           r"position$"):
            ds.md.rmsd()


def test_first_hour_mistakes_are_one_clear_error(adk_h5md, adk_universe):
    """A Dataset or a numpy array given as positions failed inside xarray; a selection
    string given as the (first, positional) reference said nothing of select=; an
    AtomGroup as select= was refused."""
    with xr.open_dataset(adk_h5md, engine="h5md", topology=PSF) as ds:
        with pytest.raises(TypeError, match=r"not a Dataset: or use ds.md.rmsd"):
            h5mdx.rmsd(ds)
        with pytest.raises(TypeError, match=r"not ndarray: wrap an array"):
            h5mdx.rmsd(ds.position.values)
        with pytest.raises(TypeError, match=r"did you mean select='name CA'\?"):
            ds.md.rmsd("name CA")
        with pytest.raises(TopologyError, match=r"adk.*: the selection 'name XYZ' matches"):
            ds.md.rmsd(select="name XYZ")  # errors through ds.md.rmsd name the file too
        with pytest.raises(IndexError, match=r"out of range for 98 frames \(of .*adk"):
            ds.md.rmsd(98)
        ca = adk_universe.select_atoms("name CA")
        np.testing.assert_allclose(ds.md.rmsd(select=ca).values,
                                   ds.md.rmsd(select="name CA").values, atol=1e-9)


def test_the_engine_forgotten_and_no_masses_say_what_to_do(adk_h5md):
    """xarray opens an H5MD file without engine="h5md" as an empty Dataset (h5netcdf);
    ds.md.rmsd said only that it needs positions. weights='mass' without masses advised
    the call just made. Both name the file now."""
    pytest.importorskip("h5netcdf")
    import warnings as _w

    with _w.catch_warnings():
        _w.simplefilter("ignore")
        plain = xr.open_dataset(adk_h5md, engine="h5netcdf")
    with plain, pytest.raises(ValueError, match=r"is an H5MD file opened without the h5md "
                                                r"engine; open it with .*engine='h5md'"):
        plain.md.rmsd()
    with xr.open_dataset(adk_h5md, engine="h5md") as ds:
        assert "mass" not in ds
        with pytest.raises(TopologyError, match=r"needs masses: .*adk.* has no 'mass' element "
                                                r"and no topology is attached"):
            ds.md.rmsd(weights="mass")


@pytest.fixture
def adk_with_masses(tmp_path, adk_universe):
    """adk converted by ``h5mdx convert`` (which writes the masses), without the names it
    writes beside them (VMD's structure module: a file of masses alone, as other writers'
    are), and MDAnalysis' mass-weighted RMSD of all atoms."""
    from MDAnalysisTests.datafiles import DCD

    from h5mdx.layout.convert import convert

    path = tmp_path / "adk.h5md"
    convert(PSF, [DCD], path, progress=False)
    with h5py.File(path, "r+") as f:
        del f["parameters/vmd_structure"]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        want = rms.RMSD(adk_universe, select="all", weights="mass").run().results.rmsd[:, 2]
    return path, want


def test_mass_weights_from_the_files_own_masses(tmp_path, adk_with_masses, capsys):
    """A file that stores its masses (``h5mdx convert`` writes them) needs no topology for
    ``weights="mass"``: the accessor and the command line take the file's ``mass``."""
    from h5mdx.cli import main

    path, want = adk_with_masses
    with xr.open_dataset(path, engine="h5md") as ds:
        assert "mass" in ds and ds.attrs.get("topology") is None
        got = ds.md.rmsd(weights="mass").compute(scheduler="sync")
        with pytest.raises(TopologyError, match="weights=ds.mass"):
            h5mdx.rmsd(ds.position, weights="mass")  # the positions alone carry no masses
        np.testing.assert_array_equal(
            h5mdx.rmsd(ds.position, weights=ds.mass).compute(scheduler="sync").values,
            got.values)
    assert_close(got, want)
    out = tmp_path / "r.csv"
    assert main(["rmsd", str(path), "--weights", "mass", "--scheduler", "threads",
                 "--no-progress", "--out", str(out)]) == 0
    written = np.loadtxt(out, delimiter=",", skiprows=1, usecols=-1)
    np.testing.assert_allclose(written, want, atol=1e-4)


def test_mass_weights_from_parts_concatenated_along_time(adk_with_masses):
    """``open_mfdataset`` (``data_vars="all"``, xarray's default) puts ``mass`` on
    (time, atom): the same masses every frame are the file's masses; masses that change
    give an error that names the dimensions (the advice repeated the call that failed)."""
    path, want = adk_with_masses
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with xr.open_dataset(path, engine="h5md") as ds:
            parts = [ds.isel(time=slice(0, 40)), ds.isel(time=slice(40, None))]
            joined = xr.concat(parts, dim="time", data_vars="all")
            assert joined.mass.dims == ("time", "atom")
            assert_close(joined.md.rmsd(weights="mass").compute(scheduler="sync"), want)
            with pytest.raises(ValueError, match=r"on \('time', 'atom'\); expected 3341, one "
                               "per atom"):
                joined.md.rmsd(weights=joined.mass)
            changed = joined.assign(mass=joined.mass.where(joined.time < joined.time[-1], 1.0))
            with pytest.raises(ValueError, match=r"changes along \['time'\]; pick the masses"):
                changed.md.rmsd(weights="mass")


# --- one harder variant on every execution path ----------------------------------------


@pytest.mark.filterwarnings("ignore:The specified chunks separate the stored chunks")
@pytest.mark.parametrize("path", ["numpy-memory", "dask-threads", "dask-processes",
                                  "distributed"])
def test_weighted_strided_variant_on_every_path(adk_h5md, adk_universe, adk_positions, ca,
                                                path, request):
    with xr.open_dataset(adk_h5md, engine="h5md", topology=PSF,
                         chunks=None if path == "numpy-memory" else {"time": 16}) as ds:
        if path == "numpy-memory":
            ds = ds.load()
        sub = ds.isel(time=slice(90, 2, -3))  # reversed and strided
        lazy = sub.md.rmsd(7, select="name CA", weights="mass")
        if path == "distributed":
            got = request.getfixturevalue("local_client").compute(lazy).result()
        else:
            with dask.config.set(scheduler=path.removeprefix("dask-").replace(
                    "numpy-memory", "threads"), num_workers=2):
                got = lazy.compute()
    frames = adk_positions[90:2:-3][:, ca]
    masses = adk_universe.atoms.masses[ca]
    assert_close(got, _plain_rmsd(frames, frames[7], weights=masses, superposition=True))
    np.testing.assert_array_equal(got.step.values, sub.step.values)


# --- the CLI ----------------------------------------------------------------------------


def test_cli_threads_csv_and_plot(adk_h5md_blocked, expected_ca, tmp_path, capsys):
    out, png = tmp_path / "rmsd.csv", tmp_path / "rmsd.png"
    rc = cli_main(["rmsd", adk_h5md_blocked, "--topology", PSF, "--select", "name CA",
                   "--scheduler", "threads", "--workers", "2", "--chunk-mib", "0.5",
                   "--out", str(out), "--plot", str(png), "--no-progress"])
    assert rc == 0
    text = capsys.readouterr().out
    assert "98 frames" in text and "frames/s" in text
    with open(out, newline="") as fh:
        rows = list(csv.DictReader(fh))
    assert [int(r["frame"]) for r in rows] == list(range(98))
    assert_close(np.array([float(r["rmsd"]) for r in rows]), expected_ca)
    assert png.stat().st_size > 1000
    top = int(np.argmax(expected_ca))  # the series in one line, as gmx rms users look for
    assert (f"rmsd (Å): first {expected_ca[0]:.4f}, last {expected_ca[-1]:.4f}, mean "
            f"{expected_ca.mean():.4f}, max {expected_ca[top]:.4f} at time") in text
    assert f"(frame {top})" in text and "--out rmsd.csv" not in text
    assert cli_main(["rmsd", adk_h5md_blocked, "--no-progress"]) == 0
    assert "; the series: --out rmsd.csv" in capsys.readouterr().out


def test_missing_optional_packages_are_named_before_the_work(adk_h5md, tmp_path, capsys,
                                                             monkeypatch):
    """``--plot`` without matplotlib failed after the RMSD, with the series written and
    "No module named 'matplotlib'"; ``bench`` without pyarrow and ``info`` of a Zarr
    store without zarr alike: each is refused first, naming the pip
    line."""
    out, png = tmp_path / "r.csv", tmp_path / "r.png"
    computed = []
    import importlib

    monkeypatch.setattr(importlib.import_module("h5mdx.analysis.rmsd"), "_centred_reference",
                        lambda *a, **k: computed.append(a))
    for module in ("matplotlib", "pyarrow", "zarr"):
        monkeypatch.setitem(sys.modules, module, None)  # "import matplotlib" fails
    assert cli_main(["rmsd", adk_h5md, "--out", str(out), "--plot", str(png),
                     "--no-progress"]) == 1
    err = capsys.readouterr().err
    assert "'matplotlib' is needed for the plot" in err and "pip install matplotlib" in err
    assert not computed and not out.exists()
    assert cli_main(["bench", adk_h5md, "--analysis", "read", "--scheduler", "threads",
                     "--workers", "1", "--out", str(tmp_path / "b"), "--no-progress"]) == 1
    assert "pip install pyarrow" in capsys.readouterr().err
    monkeypatch.delitem(sys.modules, "pyarrow")  # the plots are asked for too
    assert cli_main(["bench", adk_h5md, "--analysis", "read", "--scheduler", "threads",
                     "--workers", "1", "--out", str(tmp_path / "b"), "--no-progress"]) == 1
    assert "pip install matplotlib" in capsys.readouterr().err
    assert not (tmp_path / "b").exists()
    (tmp_path / "s.zarr").mkdir()
    assert cli_main(["info", str(tmp_path / "s.zarr")]) == 1
    assert "pip install zarr" in capsys.readouterr().err


def test_cli_processes_netcdf(adk_h5md, adk_universe, tmp_path):
    out = tmp_path / "rmsd.nc"
    rc = cli_main(["rmsd", adk_h5md, "--topology", PSF, "--select", "backbone",
                   "--reference", "20", "--scheduler", "processes", "--workers", "2",
                   "--out", str(out), "--no-progress"])
    assert rc == 0
    with xr.open_dataarray(out) as got:
        assert got.name == "rmsd" and got.attrs["units"] == "Angstrom"
        assert_close(got, _mda_rmsd(adk_universe, select="backbone", ref_frame=20))


def test_cli_default_auto_threads(adk_h5md_blocked, expected_ca, tmp_path, capsys,
                                  monkeypatch):
    monkeypatch.setenv("H5MDX_DIRECT_READ", "1")  # the suite's second run turns them off
    out = tmp_path / "rmsd.csv"
    rc = cli_main(["rmsd", adk_h5md_blocked, "--topology", PSF, "--select", "name CA",
                   "--out", str(out)])
    assert rc == 0
    captured = capsys.readouterr()
    assert "scheduler threads (threads of one process read position in parallel)" in captured.err
    assert f"on threads with {usable_cpus()} workers" in captured.out
    with open(out, newline="") as fh:
        values = np.array([float(r["rmsd"]) for r in csv.DictReader(fh)])
    assert_close(values, expected_ca)


def test_cli_auto_distributed_where_hdf5_reads(adk_h5md_fletcher, expected_ca, tmp_path,
                                               capsys, monkeypatch):
    monkeypatch.setenv("H5MDX_DIRECT_READ", "1")
    out = tmp_path / "rmsd.csv"
    rc = cli_main(["rmsd", adk_h5md_fletcher, "--topology", PSF, "--select", "name CA",
                   "--workers", "2", "--out", str(out)])
    assert rc == 0
    captured = capsys.readouterr()
    assert "scheduler distributed (position is read through HDF5" in captured.err
    assert "filters (3,)" in captured.err
    assert "on distributed with 2 workers" in captured.out
    with open(out, newline="") as fh:
        values = np.array([float(r["rmsd"]) for r in csv.DictReader(fh)])
    assert_close(values, expected_ca)


def test_cli_select_needs_topology(adk_h5md, capsys):
    assert cli_main(["rmsd", adk_h5md, "--select", "name CA"]) == 2
    err = capsys.readouterr().err
    assert "--select 'name CA' needs --topology" in err
    assert cli_main(["rmsd", adk_h5md, "--workers", "0"]) == 2
    assert "--workers must be at least 1, not 0" in capsys.readouterr().err


def test_cli_slurm_options_need_the_slurm_scheduler(adk_h5md, tmp_path, capsys):
    """--jobs, --cores, --walltime (the SLURM group) with another scheduler were ignored and
    the RMSD ran locally, not a word said: refused before the run."""
    out = tmp_path / "rmsd.csv"
    assert cli_main(["rmsd", adk_h5md, "--scheduler", "threads", "--jobs", "3", "--cores",
                     "4", "--walltime", "00:10:00", "--out", str(out), "--no-progress"]) == 2
    assert ("--jobs, --cores, --walltime apply to --scheduler slurm, not threads: add "
            "--scheduler slurm, or leave them out") in capsys.readouterr().err
    assert not out.exists()
    assert cli_main(["rmsd", adk_h5md, "--timeout", "30", "--out", str(out)]) == 2
    assert "--wait-timeout applies to --scheduler slurm, not auto" in capsys.readouterr().err


def test_cli_rejects_bad_chunk_size(adk_h5md, capsys):
    assert cli_main(["rmsd", adk_h5md, "--chunk-mib", "-1", "--scheduler", "threads"]) == 2
    assert "--chunk-mib must be a positive, finite number of MiB, not -1" in capsys.readouterr().err


# ----------------------------------------------------------------------------- found by an audit


def test_a_topology_of_another_system_is_refused(adk_h5md):
    """rmsd(topology=...) checks the topology against the positions' file, as the engine
    does at open: a wrong one picked atoms of another system by index before."""
    from MDAnalysisTests.datafiles import GRO, PSF_TRICLINIC

    with xr.open_dataset(adk_h5md, engine="h5md") as ds:
        for top in (GRO, PSF_TRICLINIC):  # 47681 and 375 atoms; adk has 3341
            for kw in ({"select": "name CA"}, {"weights": "mass"}):
                with pytest.raises(TopologyError, match="has .* atoms but the positions come "
                                   "from a trajectory of 3341"):
                    h5mdx.rmsd(ds.position, topology=top, **kw)


def test_references_are_matched_by_atom(adk_h5md, adk_universe, ca):
    """A DataArray reference (or weights) is taken by its atom coordinate, whatever the
    order of the selection; an MDAnalysis Universe or AtomGroup is a reference; a plain
    array that could hold either all atoms or the selected ones is refused."""
    perm = np.random.default_rng(1).permutation(ca)
    with xr.open_dataset(adk_h5md, engine="h5md", topology=PSF) as ds:
        want = _mda_rmsd(adk_universe, ref_frame=7)
        ref = ds.position.isel(time=7, atom=ca)
        np.testing.assert_allclose(ds.md.rmsd(ref, select=perm).values, want, atol=ATOL)
        np.testing.assert_allclose(ds.md.rmsd(ref, select=ca).values, want, atol=ATOL)
        adk_universe.trajectory[7]
        for given in (adk_universe, adk_universe.select_atoms("name CA")):
            got = ds.md.rmsd(given, select="name CA").values
            np.testing.assert_allclose(got, want, atol=ATOL)
        adk_universe.trajectory[0]
        masses = ds.mass if "mass" in ds else xr.DataArray(adk_universe.atoms.masses,
                                                            dims="atom",
                                                            coords={"atom": ds.atom.values})
        heavy = ds.md.rmsd(7, select=perm, weights=masses).values
        np.testing.assert_allclose(
            heavy, _mda_rmsd(adk_universe, ref_frame=7, weights="mass"), atol=ATOL)
        rev = np.arange(ds.sizes["atom"])[::-1]
        full = ds.position.isel(time=7).values
        with pytest.raises(ValueError, match="cannot tell which it holds"):
            ds.md.rmsd(full, select=rev)
        with pytest.raises(ValueError, match="cannot tell which it holds"):
            ds.md.rmsd(7, select=rev, weights=np.ones(ds.sizes["atom"]))


def test_a_reference_of_another_file_is_selected_as_mdanalysis_does(adk_h5md, adk_universe):
    """A Universe of the same protein from another file (the GRO of MDAnalysisTests: OPLS-AA
    atom order, solvent after it): the selection string is applied to it, as MDAnalysis'
    rms.RMSD does. It was matched by atom index, and 10 of 214 "C-alphas" were HB1 (0.15 Å
    off, silently). Matched by index (no selection string) its other names are refused.
   """
    import MDAnalysis as mda
    from MDAnalysisTests.datafiles import GRO

    gro = mda.Universe(GRO)
    protein = mda.Merge(gro.select_atoms("protein"))  # as many atoms as the PSF's
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        want = rms.RMSD(adk_universe, gro, select="name CA").run().results.rmsd[:, 2]
    with xr.open_dataset(adk_h5md, engine="h5md", topology=PSF) as ds:
        for ref in (gro, protein, protein.atoms):
            assert_close(ds.md.rmsd(ref, select="name CA").values, want)
        with pytest.raises(TopologyError, match=r"matches 214 atoms of the positions and "
                                                r"\d+ of the reference"):
            ds.md.rmsd(gro, select="name CA or name OW")  # the PSF has no water
        with pytest.raises(TopologyError, match=r"another name in it \(atom \d+ is "):
            ds.md.rmsd(protein)



def test_a_frame_of_another_dataset_with_other_atom_names_is_refused(adk_h5md, adk_universe):
    """A frame of another Dataset (a crystal structure, a file of its own numbering) is
    matched by atom index; where it names its atoms (its ``name`` coordinate) and the
    names differ from the compared atoms', the docs promise a TopologyError. Only a
    Universe's names were checked: such a frame gave RMSDs to the wrong atoms (24 Å off)
    in silence."""
    with xr.open_dataset(adk_h5md, engine="h5md", topology=PSF) as ds:
        frame = ds.isel(time=[7]).load()
        want = _mda_rmsd(adk_universe, ref_frame=7)
        assert_close(ds.md.rmsd(frame.isel(time=0), select="name CA").values, want)
        perm = np.random.default_rng(1).permutation(ds.sizes["atom"])
        other = frame.isel(atom=perm).assign_coords(atom=np.arange(ds.sizes["atom"]))
        with pytest.raises(TopologyError, match=r"another name in it \(atom \d+ is 'CA' "):
            ds.md.rmsd(other.isel(time=0), select="name CA")
        with pytest.raises(TopologyError, match="another name in it"):
            h5mdx.rmsd(ds.position, other.position.isel(time=0), select="backbone")

def test_unusable_arguments_are_one_clear_error(adk_h5md):
    with xr.open_dataset(adk_h5md, engine="h5md", topology=PSF) as ds:
        with pytest.raises(TypeError, match="not True"):
            ds.md.rmsd(True)
        with pytest.raises(TypeError, match="not 2.0"):
            ds.md.rmsd(2.0)
        with pytest.raises(TopologyError, match="the selection is empty"):
            ds.md.rmsd(select=[])
        with pytest.raises(ValueError, match="hold no frames"):
            ds.isel(time=slice(5, 5)).md.rmsd()



def test_positions_without_frames_or_atoms_name_their_file(tmp_path):
    """ds.md.rmsd() of a file written before its first frame said "the positions hold no
    frames (an empty time slice?)", and of a file without atoms "no atoms to compare",
    from deep in the kernel: neither named the file."""
    from h5mdx.testing import write_h5md

    for name, shape in (("no_frames", (0, 4, 3)), ("no_atoms", (3, 0, 3))):
        path = write_h5md(tmp_path / f"{name}.h5md", {"all": {"position": {
            "value": np.zeros(shape, np.float32), "step": 1, "time": 1.0}}})
        with xr.open_dataset(path, engine="h5md") as ds:
            where = " [/particles/all/position]"
            what = "hold no frames" if name == "no_frames" else "hold none"
            with pytest.raises(ValueError, match=f"the positions \\(of {re.escape(path)}"
                               f"{re.escape(where)}\\) {what}"):
                ds.md.rmsd()


def test_a_frame_index_held_in_a_0d_array_and_a_reference_on_other_dims(adk_h5md):
    """The frame of the largest RMSD, ``series.argmax("time")``, is a 0-d DataArray: it
    failed with xarray's "Dimensions {'atom', 'spatial'} do not exist" (and a 0-d numpy
    integer was refused); a DataArray on other dimensions is said so."""
    with xr.open_dataset(adk_h5md, engine="h5md", topology=PSF) as ds:
        series = ds.md.rmsd(select="name CA")
        far = int(series.argmax("time"))
        want = ds.md.rmsd(far, select="name CA").values
        for ref in (series.argmax("time"), np.array(far)):
            got = ds.md.rmsd(ref, select="name CA")
            np.testing.assert_array_equal(got.values, want)
            assert got.attrs["reference_frame"] == far
        parts = [ds.isel(time=slice(0, 40)), ds.isel(time=slice(40, None))]
        assert_close(h5mdx.rmsd(parts, series.argmax("time"), select="name CA").values, want)
        with pytest.raises(ValueError, match=r"on \(atom, spatial\), not time on \(\): a "
                                             "frame index is an integer"):
            ds.md.rmsd(ds.time.isel(time=5), select="name CA")
        with pytest.raises(ValueError, match=r"not position on \('atom',\)"):
            ds.md.rmsd(ds.position.isel(time=2, spatial=0), select="name CA")

def test_the_result_says_how_it_was_computed_and_odd_outputs_are_refused(adk_h5md, tmp_path):
    from h5mdx.analysis.series import write_series

    with xr.open_dataset(adk_h5md, engine="h5md", topology=PSF) as ds:
        r = ds.md.rmsd(-1, select="name CA", weights="mass").compute()
    assert r.attrs["reference_frame"] == 97 and r.attrs["weights"] == "mass"  # -1 as an index
    assert r.attrs["superposition"] == 1 and r.attrs["n_atoms"] == 214
    assert r.attrs["selection"] == "name CA" and r.attrs["units"] == "Angstrom"
    with pytest.raises(ValueError, match=r"as .csv \(or .txt\) or .nc"):
        write_series(tmp_path / "r.parquet", r)
    back = xr.open_dataarray(write_series(tmp_path / "r.nc", r))
    assert back.attrs["superposition"] == 1
    back.close()
    with xr.open_dataarray(write_series(tmp_path / "R.NC", r)) as back:  # was CSV text
        np.testing.assert_array_equal(back, r)


@pytest.mark.parametrize("name", ["r.nc", "r.csv"])
def test_a_series_that_fails_to_compute_leaves_the_file_there_as_it_was(
        adk_h5md_fletcher, tmp_path, name):
    """write_series of a lazy series whose read failed (a damaged chunk) left the .nc
    written before replaced by one of NaN RMSD values, which read back without an
    error; the series is now computed first and the file renamed into place."""
    import shutil

    import h5py

    from h5mdx.analysis.series import write_series
    from h5mdx.errors import H5MDReadError

    damaged = tmp_path / "damaged.h5md"
    shutil.copy(adk_h5md_fletcher, damaged)
    with h5py.File(damaged, "r") as f:
        offset = f["particles/trajectory/position/value"].id.get_chunk_info(3).byte_offset
    with open(damaged, "r+b") as fh:  # frames 30-39 fail their Fletcher-32 checksum
        fh.seek(offset + 64)
        fh.write(b"\xff" * 64)
    with xr.open_dataset(adk_h5md_fletcher, engine="h5md") as ds:
        good = h5mdx.rmsd(ds.position, select=np.arange(0, 3341, 7)).compute()
    path = write_series(tmp_path / name, good)
    before = path.read_bytes()
    with xr.open_dataset(damaged, engine="h5md") as ds, \
            pytest.raises(H5MDReadError, match="damaged.h5md"):
        write_series(path, h5mdx.rmsd(ds.position, select=np.arange(0, 3341, 7)))
    assert path.read_bytes() == before
    sidecar = [] if name.endswith(".nc") else ["r.meta.json"]  # a CSV's units, kept too
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["damaged.h5md", name,
                                                                 *sidecar])
    if name.endswith(".nc"):
        with xr.open_dataarray(path) as back:
            np.testing.assert_array_equal(back.values, good.values)
            assert np.isfinite(back.values).all()


def test_reference_without_positions_for_some_atoms_warns(adk_positions):
    """An absent particle (NaN) in the reference frame makes every RMSD NaN: said at
    once, naming the frame and the count (the CLI alone said it, after the run)."""
    pos = np.array(adk_positions[:4, :50], dtype=np.float64)
    pos[0, 7] = np.nan
    da_pos = xr.DataArray(pos, dims=("time", "atom", "spatial"))
    with pytest.warns(RuntimeWarning, match="frame 0 has no position for 1 of the 50 atoms"):
        out = h5mdx.rmsd(da_pos).values
    assert np.isnan(out).all()
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        out = h5mdx.rmsd(da_pos, reference=1).values
    assert np.isnan(out[0]) and np.isfinite(out[1:]).all()


def test_a_reference_in_another_length_unit_is_converted(adk_positions):
    """A frame of another Dataset (a crystal structure opened with convert_units=True, in
    Å) as the reference of positions in nm: converted, as a Universe reference is (it was
    taken as nm: 24 nm for 0); lengths h5mdx cannot convert are refused."""
    pos_nm = np.array(adk_positions[:5, :60], dtype=np.float64) / 10.0
    positions = xr.DataArray(pos_nm, dims=("time", "atom", "spatial"), attrs={"units": "nm"})
    ref_a = xr.DataArray(pos_nm[2] * 10.0, dims=("atom", "spatial"),
                         attrs={"units": "Angstrom"})
    want = h5mdx.rmsd(positions, reference=2).values
    np.testing.assert_allclose(h5mdx.rmsd(positions, reference=ref_a).values, want, atol=1e-6)
    assert want[2] < 1e-6 and want.max() > 0.05
    with pytest.raises(ValueError, match="'ps' and the positions in 'nm'"):
        h5mdx.rmsd(positions, reference=ref_a.assign_attrs(units="ps"))


def test_a_small_first_job_does_not_wait_for_the_compiled_kernel(adk_h5md):
    """Loading the compiled kernel costs 0.5-0.8 s; the first C-alpha RMSD of 98 frames
    took that where numpy needs 0.02 s. Under kernel="auto" a small job (under 2 million
    atom-frames) in a process that has not loaded it runs the numpy kernel; asked for,
    numba still runs."""
    pytest.importorskip("numba")
    script = (
        "import sys, numpy as np, xarray as xr, h5mdx\n"
        f"ds = xr.open_dataset({str(adk_h5md)!r}, engine='h5md')\n"
        "sel = np.arange(0, 3341, 16)\n"
        "small = ds.md.rmsd(select=sel).values\n"
        "print('numba' in sys.modules)\n"
        "compiled = ds.md.rmsd(select=sel, kernel='numba').values\n"
        "print('numba' in sys.modules, float(np.abs(small - compiled).max()) < 1e-5)\n"
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         check=True).stdout.split()
    assert out == ["False", "True", "True"]


def test_selections_in_an_atom_group_topology_of_a_subset_file(tmp_path, adk_h5md,
                                                               adk_universe, expected_ca):
    """A file of the C-alphas alone opened with topology=<the C-alpha AtomGroup>: a
    selection ran on the whole Universe and its indices (4, 21, 45, ...) matched 15 of the
    file's atoms 0..213 by chance, in silence: an RMSD 0.44 Å off. Selections
    are made in the group, and index it."""
    ca = adk_universe.select_atoms("name CA")
    with xr.open_dataset(adk_h5md, engine="h5md") as ds:
        ds.isel(atom=ca.indices).md.to_h5md(tmp_path / "ca.h5md")
    with xr.open_dataset(tmp_path / "ca.h5md", engine="h5md", topology=ca) as sub:
        for select in ("name CA", "all", None):
            series = sub.md.rmsd(select=select)
            assert series.attrs["n_atoms"] == 214, select
            assert np.abs(series.values - expected_ca).max() < ATOL, select
        assert sub.md.rmsd(select="resid 1:50").attrs["n_atoms"] == 50
    with xr.open_dataset(tmp_path / "ca.h5md", engine="h5md", topology=ca,
                         select="resid 1:50") as part:
        np.testing.assert_array_equal(part.atom.values, np.arange(50))
        with xr.open_dataset(adk_h5md, engine="h5md") as ds:
            np.testing.assert_array_equal(part.position.values,
                                          ds.position.values[:, ca.indices[:50]])


def test_a_subset_file_opened_with_the_whole_systems_topology(tmp_path, adk_h5md,
                                                             adk_universe, expected_ca,
                                                             capsys):
    """A file of selected atoms (to_h5md of ds.isel(atom=...), convert --select) keeps
    their indices in its id; opened with the whole system's topology it was refused (214
    vs 3341 atoms). The id finds the atoms in the topology: the atom coordinate
    holds their indices, and selections, integer atom indices and masses are the
    topology's."""
    ca = adk_universe.select_atoms("name CA")
    first50 = adk_universe.select_atoms("name CA and resid 1:50")
    with xr.open_dataset(adk_h5md, engine="h5md", topology=PSF) as ds:
        ds.isel(atom=ca.indices).md.to_h5md(tmp_path / "ca.h5md")
    with xr.open_dataset(tmp_path / "ca.h5md", engine="h5md", topology=PSF) as sub:
        np.testing.assert_array_equal(sub.atom.values, ca.indices)
        assert set(sub.name.values) == {"CA"} and sub.atom.attrs["subset_of"] == 3341
        for select in ("name CA", "all", None, ca.indices):
            assert np.abs(sub.md.rmsd(select=select).values - expected_ca).max() < ATOL
        expected = _mda_rmsd(adk_universe, "name CA and resid 1:50", weights="mass")
        for select in ("resid 1:50", first50.indices, first50):
            series = sub.md.rmsd(select=select, weights="mass")
            assert series.attrs["n_atoms"] == 50
            assert np.abs(series.values - expected).max() < ATOL
        # a subset of the subset keeps the indices
        sub.isel(atom=slice(0, 50)).md.to_h5md(tmp_path / "ca50.h5md")
    with xr.open_dataset(tmp_path / "ca50.h5md", engine="h5md", topology=PSF) as part, \
            xr.open_dataset(tmp_path / "ca.h5md", engine="h5md", topology=PSF,
                            select="resid 1:50") as chosen:
        np.testing.assert_array_equal(part.atom.values, first50.indices)
        np.testing.assert_array_equal(chosen.atom.values, first50.indices)
        np.testing.assert_array_equal(chosen.position.values, part.position.values)
    # given to rmsd, not at open, the whole system's topology finds no ids: the error
    # says where to give it
    with xr.open_dataset(tmp_path / "ca.h5md", engine="h5md") as plain, \
            pytest.raises(TopologyError, match=r"has 3341 atoms but the positions come from "
                          r"a trajectory of 214; .*; for a file of selected atoms, open it "
                          r"with the whole system's topology"):
        h5mdx.rmsd(plain.position, select="name CA", topology=PSF)
    out = tmp_path / "ca.csv"
    assert cli_main(["rmsd", str(tmp_path / "ca.h5md"), "--topology", PSF, "--select",
                     "name CA", "--no-progress", "--out", str(out)]) == 0
    with open(out) as f:
        got = np.array([float(row["rmsd"]) for row in csv.DictReader(f)])
    assert np.abs(got - expected_ca).max() < ATOL
    assert cli_main(["info", str(tmp_path / "ca.h5md")]) == 0
    assert "\n  selected atoms: id holds their indices in the system they come from, whose " \
           "topology finds them (--topology, topology=)\n" in capsys.readouterr().out



def test_a_file_of_all_atoms_in_another_order_takes_the_topology_by_its_id(
        tmp_path, adk_h5md, adk_universe):
    """to_h5md of ds.isel(atom=perm) keeps each atom's index as its id, as for a selection;
    opened with the topology of as many atoms the id was ignored and the topology's
    atoms laid on the file's slots in order: names, masses and selections of other atoms,
    and a Universe reference selected with the string in another order than the compared
    atoms (25 Å off, silently)."""
    import MDAnalysis as mda
    from MDAnalysisTests.datafiles import CRD

    perm = np.random.default_rng(5).permutation(adk_universe.atoms.n_atoms)
    with xr.open_dataset(adk_h5md, engine="h5md", topology=PSF) as ds:
        ds.isel(atom=perm).md.to_h5md(tmp_path / "perm.h5md")
    crd = mda.Universe(PSF, CRD)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        to_crd = rms.RMSD(adk_universe, crd, select="backbone",
                          weights="mass").run().results.rmsd[:, 2]
    with xr.open_dataset(tmp_path / "perm.h5md", engine="h5md", topology=PSF) as p:
        np.testing.assert_array_equal(p.atom.values, perm)
        np.testing.assert_array_equal(p["name"].values, adk_universe.atoms.names[perm])
        assert_close(p.md.rmsd(7, select="name CA").values,
                     _mda_rmsd(adk_universe, ref_frame=7))
        assert_close(p.md.rmsd(crd, select="backbone", weights="mass").values, to_crd)
        # labels that are no permutation of the topology's indices: taken in order, as before
        p.drop_vars("id").assign_coords(atom=perm + 1).md.to_h5md(tmp_path / "labels.h5md")
    with xr.open_dataset(tmp_path / "labels.h5md", engine="h5md", topology=PSF) as q:
        np.testing.assert_array_equal(q.atom.values, np.arange(perm.size))

def test_a_subset_file_with_a_topology_it_does_not_index(tmp_path, adk_h5md, adk_universe):
    """Ids that are not h5mdx's indices of selected atoms (another program's particle
    tags), or a topology whose atoms at those indices have other masses (another system),
    are refused with an error saying which, and how to pass the atoms meant."""
    import h5py

    ca = adk_universe.select_atoms("name CA")
    with xr.open_dataset(adk_h5md, engine="h5md", topology=PSF) as ds:
        ds.isel(atom=ca.indices).md.to_h5md(tmp_path / "ca.h5md")
    tagged, heavy = tmp_path / "tagged.h5md", tmp_path / "heavy.h5md"
    for path in (tagged, heavy):
        path.write_bytes((tmp_path / "ca.h5md").read_bytes())
    with h5py.File(tagged, "r+") as f:
        del f["particles/trajectory/id"].attrs["long_name"]
    with h5py.File(heavy, "r+") as f:
        f["particles/trajectory/mass"][5] = 32.06
    with pytest.raises(TopologyError, match=r"has 3341 atoms but /particles/trajectory "
                       r"has 214; its id \(\[4, 21, 45\]\.\.\.\) does not say.*u\.atoms\[ids\]"):
        xr.open_dataset(tagged, engine="h5md", topology=PSF)
    with pytest.raises(TopologyError, match=r"the atoms of /particles/trajectory's id in the "
                       r"topology .*adk.psf' have other masses than the file's: 1 of 214 "
                       r"atoms differ \(atom 102: 12\.011 u in the topology, 32\.06 u in the file\)"):
        xr.open_dataset(heavy, engine="h5md", topology=PSF)
    with xr.open_dataset(tagged, engine="h5md", topology=ca) as sub:  # the way out
        assert set(sub.name.values) == {"CA"}


def test_a_trajectory_in_two_files_as_the_guide_opens_it(tmp_path, adk_h5md, expected_ca):
    """docs/guide/data-model.md, "A trajectory in several files": open_mfdataset joins
    the parts along time, per-atom variables stay per atom, and the RMSD over both parts is
    MDAnalysis' over the whole run."""
    with xr.open_dataset(adk_h5md, engine="h5md") as ds:
        ds.isel(time=slice(0, 50)).md.to_h5md(tmp_path / "run-1.h5md")
        ds.isel(time=slice(50, None)).md.to_h5md(tmp_path / "run-2.h5md")
    with warnings.catch_warnings():
        warnings.simplefilter("error", FutureWarning)
        ds = xr.open_mfdataset([tmp_path / "run-1.h5md", tmp_path / "run-2.h5md"],
                               engine="h5md", combine="nested", concat_dim="time",
                               data_vars="minimal", coords="minimal", compat="override",
                               chunks={}, topology=PSF)
    with ds, xr.open_dataset(tmp_path / "run-1.h5md", engine="h5md", topology=PSF) as part:
        assert ds.sizes["time"] == 98 and ds.position.chunks[0] == (50, 48)
        # nothing per atom (or fixed) repeated along time
        assert {k: v.dims for k, v in ds.variables.items()} == \
            {k: v.dims for k, v in part.variables.items()}
        assert np.abs(ds.md.rmsd(select="name CA").values - expected_ca).max() < ATOL


def test_to_zarr_of_a_lazily_opened_dataset_keeps_whole_frames(tmp_path, adk_h5md,
                                                               expected_ca, ca):
    """ds.to_zarr of a Dataset opened without chunks= let Zarr split the frames
    ((25, 1671, 2)), and the RMSD's warning then spoke of the h5md engine.
    ds.md.to_zarr writes whole frames; the warning on a store that splits them says how to
    write it."""
    with xr.open_dataset(adk_h5md, engine="h5md") as ds:
        with warnings.catch_warnings():  # zarr's notes on v3 strings, consolidated metadata
            warnings.simplefilter("ignore")
            ds.to_zarr(tmp_path / "plain.zarr")
        assert ds.md.to_zarr(tmp_path / "frames.zarr") == str(tmp_path / "frames.zarr")
        with pytest.raises(FileExistsError):
            ds.md.to_zarr(tmp_path / "frames.zarr")
        ds.isel(atom=ca).md.to_zarr(tmp_path / "frames.zarr", overwrite=True,
                                    frames_per_chunk=10)
    with xr.open_zarr(tmp_path / "frames.zarr") as store:
        assert store.position.encoding["chunks"] == (10, 214, 3)
        np.testing.assert_array_equal(store.atom.values, ca)
        assert np.abs(store.md.rmsd().values - expected_ca).max() < ATOL
    with xr.open_zarr(tmp_path / "plain.zarr") as store:
        split = store.position.encoding["chunks"]
        assert split[1:] != (3341, 3)
        with pytest.warns(UserWarning, match=rf"rechunking once\. The store's chunks "
                          rf"\({split[0]}, {split[1]}, {split[2]}\) split the frames: "
                          r"write it with ds\.md\.to_zarr"):
            series = store.md.rmsd(select=ca)
        assert np.abs(series.values - expected_ca).max() < ATOL


@pytest.mark.parametrize("given", ["no", "False", None, 2])
def test_superposition_other_than_a_bool_is_refused(adk_h5md, given):
    """``superposition="no"`` (a truthy string) gave the RMSD after superposition in
    silence (helper audit66): anything but a bool, 0 or 1 is refused; 0 is False."""
    with xr.open_dataset(adk_h5md, engine="h5md") as ds:
        with pytest.raises(TypeError, match="superposition must be True or False"):
            h5mdx.rmsd(ds.position, select=np.arange(10), superposition=given)
        centred = h5mdx.rmsd(ds.position, select=np.arange(10), superposition=0).values
        np.testing.assert_array_equal(
            centred, h5mdx.rmsd(ds.position, select=np.arange(10), superposition=False).values)
        assert centred[5] > h5mdx.rmsd(ds.position, select=np.arange(10)).values[5]


def test_parts_in_other_units_join_in_the_first_parts_units(adk_positions, expected_ca,
                                                            tmp_path):
    """A run in two files opened on their own, the first in nm and ns, the second in Å and
    ps: the second part's RMSD was joined as it was, 10x too large under the first's
    "nm" (frame 40: 3.95 "nm"), and its times 1000x. Now the series
    is in the first part's units throughout; a part without a unit is taken to be in the
    first's, with a warning."""
    n = len(adk_positions)
    first = write_h5md(tmp_path / "a.h5md", {"all": {"position": dict(
        value=adk_positions[:40] / 10, step=np.arange(40), time=np.arange(40) * 1e-3,
        unit="nm", time_unit="ns")}})
    second = write_h5md(tmp_path / "b.h5md", {"all": {"position": dict(
        value=adk_positions[40:], step=np.arange(40, n), time=np.arange(40, n) * 1.0,
        unit="Angstrom")}})
    bare = write_h5md(tmp_path / "c.h5md", {"all": {"position": dict(
        value=adk_positions[40:] / 10, step=np.arange(40, n), time=np.arange(40, n) * 1e-3,
        unit=None, time_unit="ns")}})
    with xr.open_dataset(first, engine="h5md", topology=PSF) as a, \
            xr.open_dataset(second, engine="h5md", topology=PSF) as b, \
            xr.open_dataset(bare, engine="h5md", topology=PSF) as c:
        for ref in (0, 50):
            got = h5mdx.rmsd([a.position, b.position], ref, select="name CA").compute()
            want = h5mdx.rmsd([a.position, c.position.assign_attrs(units="nm")], ref,
                              select="name CA").values
            assert got.attrs["units"] == "nm" and got.name == "rmsd"
            assert got["time"].attrs["units"] == "ns"
            np.testing.assert_allclose(got["time"].values, np.arange(n) * 1e-3, rtol=1e-12)
            assert_close(got.values, want)
            if ref == 0:
                assert_close(got.values * 10, expected_ca)
        with pytest.warns(RuntimeWarning, match="part 1 of the trajectory has its RMSD in "
                                                "no unit, the first part in nm"):
            got = h5mdx.rmsd([a.position, c.position], select="name CA").values
        assert_close(got * 10, expected_ca)


def test_cli_summary_of_a_file_without_units(adk_positions, expected_ca, tmp_path, capsys):
    """A file whose positions name no unit: the summary said "rmsd (): first ...", as if
    the unit had been lost; it now says the values are in the file's own, unnamed unit
   ."""
    path = write_h5md(tmp_path / "bare.h5md", {"all": {"position": dict(
        value=adk_positions, step=1, time=1.0, unit=None, time_unit=None)}})
    out = tmp_path / "rmsd.csv"
    assert cli_main(["rmsd", path, "--topology", PSF, "--select", "name CA", "--scheduler",
                     "threads", "--workers", "2", "--out", str(out), "--no-progress"]) == 0
    text = capsys.readouterr().out
    assert (f"rmsd (the file's length unit, which it does not name): first "
            f"{expected_ca[0]:.4f}, last {expected_ca[-1]:.4f}") in text
    assert "rmsd ()" not in text
    assert_close(np.genfromtxt(out, delimiter=",", names=True)["rmsd"], expected_ca)


def test_an_unknown_kernel_is_refused_when_the_series_is_made(adk_h5md):
    """kernel="fast" gave a lazy series that failed only at compute time, inside every
    task (on a cluster's workers, after the graph was sent)."""
    with xr.open_dataset(adk_h5md, engine="h5md", topology=PSF) as ds:
        for position in (ds.position, ds.position.chunk({"time": 10})):
            with pytest.raises(ValueError, match="kernel must be 'auto', 'numpy' or "
                                                 "'numba', not 'fast'"):
                h5mdx.rmsd(position, select="name CA", kernel="fast")


def test_a_block_of_a_fraction_of_frames_is_refused(adk_h5md):
    """frames_per_block=2.5 ran blocks of 2 frames in silence; a whole number
    of frames, numpy's too, is taken as before."""
    with xr.open_dataset(adk_h5md, engine="h5md", topology=PSF) as ds:
        for bad in (2.5, "10", True):
            for position in (ds.position, ds.position.chunk({"time": 10})):  # dask too
                with pytest.raises(TypeError, match="frames_per_block must be a whole "
                                                    "number"):
                    h5mdx.rmsd(position, select="name CA", frames_per_block=bad)
        got = h5mdx.rmsd(ds.position, select="name CA", frames_per_block=np.int64(10))
        assert got.chunks == ((10,) * 9 + (8,),)


@pytest.mark.parametrize(("option", "bad", "match"), [
    ("frames_per_block", 0, "frames_per_block must be at least 1, not 0"),
    ("frames_per_block", -3, "frames_per_block must be at least 1, not -3"),
    ("chunk_mib", 0, "chunk_mib must be positive and finite, not 0"),
    ("chunk_mib", -1.0, "chunk_mib must be positive and finite, not -1.0"),
    ("chunk_mib", float("nan"), "chunk_mib must be positive and finite, not nan"),
    ("chunk_mib", float("inf"), "chunk_mib must be positive and finite, not inf"),
    ("chunk_mib", "5", "chunk_mib must be positive and finite, not '5'"),
])
def test_blocks_of_no_frames_are_refused_on_every_path(adk_h5md, option, bad, match):
    """frames_per_block=0 or -3 and chunk_mib=0, -1, nan or "5" were taken in silence for
    dask-backed positions (which they do not apply to), and chunk_mib="5" failed on a
    lazy open as "'>' not supported between instances of 'str' and 'int'"."""
    with xr.open_dataset(adk_h5md, engine="h5md", topology=PSF) as ds, \
            xr.open_dataset(adk_h5md, engine="h5md", topology=PSF, chunks={}) as opened:
        for position in (ds.position, ds.position.chunk({"time": 10}), opened.position):
            with pytest.raises(ValueError, match=re.escape(match)):
                h5mdx.rmsd(position, select="name CA", **{option: bad})
        got = h5mdx.rmsd(ds.position.chunk({"time": 10}), select="name CA", chunk_mib=1)
        want = h5mdx.rmsd(ds.position, select="name CA", frames_per_block=7)
        np.testing.assert_allclose(got.values, want.values, rtol=0, atol=1e-6)


def test_the_reference_frame_is_named_by_its_step_and_time(adk_h5md, tmp_path):
    """``reference_frame`` is an index into the positions given: on a slice of the file, 0
    is the file's frame 10, and nothing said so; the step and time of that frame do."""
    from h5mdx.analysis.series import write_series

    with xr.open_dataset(adk_h5md, engine="h5md", topology=PSF) as ds:
        tail = ds.isel(time=slice(10, None))
        r = tail.md.rmsd(select="name CA")
        step10, time10 = int(ds.step[10]), float(ds.time[10])
        assert r.attrs["reference_frame"] == 0
        assert r.attrs["reference_step"] == step10 and r.attrs["reference_time"] == time10
        last = ds.md.rmsd(-1, select="name CA")
        assert last.attrs["reference_step"] == int(ds.step[97])
        parts = [ds.isel(time=slice(0, 40)), ds.isel(time=slice(40, None))]
        joined = h5mdx.rmsd(parts, 50, select="name CA")
        assert joined.attrs["reference_frame"] == 50
        assert joined.attrs["reference_step"] == int(ds.step[50])
        assert joined.attrs["reference_time"] == float(ds.time[50])
        back = xr.open_dataarray(write_series(tmp_path / "r.nc", r))
        assert back.attrs["reference_step"] == step10
        back.close()


def test_a_csv_series_states_its_units_in_a_sidecar(adk_h5md, tmp_path):
    """rmsd.csv said no units (time in ps? RMSD in Å or nm?): its sidecar rmsd.meta.json
    does, with the series' attrs, and pandas.read_csv reads the same four columns."""
    import json

    import pandas as pd

    from h5mdx.analysis.series import write_series

    with xr.open_dataset(adk_h5md, engine="h5md", topology=PSF, convert_units=True) as ds:
        r = ds.isel(time=slice(10, None)).md.rmsd(select="name CA").compute()
    path = write_series(tmp_path / "rmsd.csv", r)
    table = pd.read_csv(path)
    assert list(table.columns) == ["frame", "time", "step", "rmsd"]
    np.testing.assert_allclose(table["rmsd"], r.values, rtol=1e-9)
    meta = json.loads((tmp_path / "rmsd.meta.json").read_text())
    assert meta["units"] == {"frame": None, "time": "ps", "step": None, "rmsd": "Angstrom"}
    assert meta["attrs"]["reference_step"] == int(r.step[0])
    assert meta["attrs"]["selection"] == "name CA" and meta["attrs"]["n_atoms"] == 214
    # the CSV's digest: a sidecar left beside another CSV (a write stopped between the
    # two renames) is told from its own
    from h5mdx._replace import CSV_DIGEST, csv_digest, read_sidecar

    assert meta[CSV_DIGEST] == csv_digest(path)
    assert read_sidecar(path)["units"] == meta["units"]
    write_series(tmp_path / "rmsd.nc", r)  # netCDF says its units itself: no sidecar
    assert sorted(p.name for p in tmp_path.iterdir()) == ["rmsd.csv", "rmsd.meta.json",
                                                          "rmsd.nc"]


def test_a_reference_of_another_file_is_named(adk_h5md):
    """A reference that is no frame index (a frame of another file, a Universe, an array)
    left the result saying nothing of what the series was compared with."""
    with xr.open_dataset(adk_h5md, engine="h5md", topology=PSF) as ds, \
            xr.open_dataset(adk_h5md, engine="h5md", topology=PSF) as other:
        r = ds.md.rmsd(other.isel(time=5), select="name CA")
        assert r.attrs["reference"] == (f"a frame of {adk_h5md}, step {int(other.step[5])}, "
                                        f"time {float(other.time[5])}")
        assert "reference_frame" not in r.attrs
        arr = ds.md.rmsd(np.zeros((214, 3)), select="name CA")
        assert arr.attrs["reference"] == "an array of positions"
        import MDAnalysis as mda
        from MDAnalysisTests.datafiles import DCD

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            universe = mda.Universe(PSF, DCD)
        universe.trajectory[3]
        u = ds.md.rmsd(universe, select="name CA")
        assert u.attrs["reference"].startswith("frame 3 of the MDAnalysis Universe ")


def test_blocks_asked_of_dask_backed_positions_are_said_not_to_apply(adk_h5md):
    """frames_per_block= and chunk_mib= on positions a dask array already cuts (one task
    per dask chunk) were dropped in silence: 10 frames per task asked, 25 given."""
    with xr.open_dataset(adk_h5md, engine="h5md", topology=PSF) as ds:
        position = ds.position.load().chunk({"time": 25})
        with pytest.warns(RuntimeWarning, match=r"frames_per_block=10 does not apply to "
                          r"dask-backed positions: one task per dask chunk along time "
                          r"\(here of 23, 25 frames\)"):
            r = h5mdx.rmsd(position, select="name CA", frames_per_block=10)
        assert r.chunks == ((25, 25, 25, 23),)
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            h5mdx.rmsd(position, select="name CA")
