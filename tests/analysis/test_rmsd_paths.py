"""h5mdx.rmsd equals MDAnalysis' RMSD on every input and execution path."""

from __future__ import annotations

import contextlib
import warnings

import dask
import numpy as np
import pytest
import xarray as xr
from MDAnalysis.analysis import rms
from MDAnalysisTests.datafiles import PSF

import h5mdx
from h5mdx.analysis.qcp import has_numba
from h5mdx.errors import TopologyError
from h5mdx.testing import assert_rmsd_close


def _mda_rmsd(universe, select="name CA", **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return rms.RMSD(universe, select=select, **kw).run().results.rmsd[:, 2]


@pytest.fixture(scope="module")
def expected_ca(adk_universe):
    return _mda_rmsd(adk_universe)


@pytest.fixture(params=["numpy-memory", "lazy-threads", "lazy-processes", "dask-threads",
                        "dask-processes", "dask-derived", "distributed"])
def path(request):
    return request.param


def _open(adk_h5md_blocked, path):
    chunks = {} if path.startswith("dask") else None
    ds = xr.open_dataset(adk_h5md_blocked, engine="h5md", topology=PSF, chunks=chunks,
                         chunk_mib=0.5)
    if path == "numpy-memory":
        ds = ds.load()
    if path == "dask-derived":
        # any dask operation on the positions: rmsd takes the dask blocks as they come
        with xr.set_options(keep_attrs=True):
            ds["position"] = ds.position + 0.0
    return ds


def _compute(result, path, request):
    if path == "distributed":
        client = request.getfixturevalue("local_client")
        return client.compute(result).result()
    scheduler = "processes" if path.endswith("processes") else "threads"
    with dask.config.set(scheduler=scheduler, num_workers=2, chunksize=1):
        return result.compute()


def test_every_path_equals_mdanalysis(adk_h5md_blocked, expected_ca, path, request):
    ds = _open(adk_h5md_blocked, path)
    said = pytest.warns(RuntimeWarning, match="frames_per_block=20 does not apply to "
                        "dask-backed") if path == "dask-derived" else contextlib.nullcontext()
    with said:  # a dask operation's blocks are the tasks: 20 frames per task not applied
        lazy = h5mdx.rmsd(ds.position, select="name CA", frames_per_block=20)
    assert lazy.name == "rmsd"
    assert lazy.dims == ("time",)
    got = _compute(lazy, path, request)
    assert_rmsd_close(got, expected_ca, atol=1e-4)
    assert got.attrs["units"] == "Angstrom"
    np.testing.assert_array_equal(got.step.values, ds.step.values)
    ds.close()


def test_accessor_and_variants(adk_h5md, adk_universe, adk_positions):
    ds = xr.open_dataset(adk_h5md, engine="h5md", topology=PSF)
    # all atoms
    assert_rmsd_close(ds.md.rmsd().compute(), _mda_rmsd(adk_universe, select="all"))
    # mass weights
    assert_rmsd_close(ds.md.rmsd(select="backbone", weights="mass").compute(),
                      _mda_rmsd(adk_universe, select="backbone", weights="mass"))
    # another reference frame
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        expected = rms.RMSD(adk_universe, select="name CA", ref_frame=40).run()
    assert_rmsd_close(ds.md.rmsd(40, select="name CA").compute(), expected.results.rmsd[:, 2])
    # an external reference: a frame of another Dataset, and a plain array
    ca = adk_universe.select_atoms("name CA").indices
    ref = adk_positions[60, ca] + 3.0
    via_array = ds.md.rmsd(ref, select="name CA").compute()
    other = xr.open_dataset(adk_h5md, engine="h5md", topology=PSF, select="name CA")
    via_da = ds.md.rmsd(other.position.isel(time=[60]) + 3.0, select="name CA").compute()
    expected_ext = np.array([rms.rmsd(x[ca], ref, center=True, superposition=True)
                             for x in adk_positions])
    assert_rmsd_close(via_array, expected_ext)
    assert_rmsd_close(via_da, expected_ext)
    other.close()
    # superposition=False
    plain = np.array([rms.rmsd(x[ca], adk_positions[0, ca], center=True, superposition=False)
                      for x in adk_positions])
    assert_rmsd_close(ds.md.rmsd(select="name CA", superposition=False).compute(), plain)
    # strided and sliced trajectories
    sub = ds.isel(time=slice(10, 90, 3))
    expected_sub = np.array([rms.rmsd(x[ca], adk_positions[10, ca], center=True,
                                      superposition=True) for x in adk_positions[10:90:3]])
    got = sub.md.rmsd(select="name CA").compute()
    assert_rmsd_close(got, expected_sub)
    np.testing.assert_array_equal(got.time.values, sub.time.values)
    # integer indices and boolean masks select the same atoms as the string
    mask = np.zeros(ds.sizes["atom"], bool)
    mask[ca] = True
    assert_rmsd_close(ds.md.rmsd(select=ca).compute(), ds.md.rmsd(select=mask).compute(),
                      atol=1e-12)
    ds.close()


def test_opened_with_select_reads_only_those_atoms(adk_h5md, expected_ca):
    with xr.open_dataset(adk_h5md, engine="h5md", topology=PSF, select="name CA") as ds:
        assert ds.sizes["atom"] == 214
        assert_rmsd_close(h5mdx.rmsd(ds.position).compute(), expected_ca)
        # string selections still resolve through the attached topology
        assert_rmsd_close(h5mdx.rmsd(ds.position, select="name CA").compute(), expected_ca)


@pytest.mark.skipif(not has_numba(), reason="numba not installed")
def test_kernels_give_the_same_numbers(adk_h5md):
    with xr.open_dataset(adk_h5md, engine="h5md", topology=PSF) as ds:
        a = ds.md.rmsd(select="name CA", kernel="numpy").compute()
        b = ds.md.rmsd(select="name CA", kernel="numba").compute()
    assert_rmsd_close(a, b, atol=1e-6)


def test_split_atom_chunks_warn_and_still_agree(adk_h5md, adk_universe):
    with pytest.warns(UserWarning, match="separate the stored chunks") as told:
        ds = xr.open_dataset(adk_h5md, engine="h5md", topology=PSF,
                             chunks={"time": 49, "atom": 1000})
    assert any('dimension "atom"' in str(w.message) for w in told)
    with ds:
        with pytest.warns(UserWarning, match="rechunking once"):
            lazy = ds.md.rmsd()
        assert_rmsd_close(lazy.compute(scheduler="threads"),
                          _mda_rmsd(adk_universe, select="all"))


def test_open_chunks_read_through_the_backend_in_the_users_blocks(adk_h5md_blocked, expected_ca):
    """``chunks={...}``: the tasks read the file lazily (no dask getter tasks), block for
    block as the user chunked it, and give the same numbers."""
    with pytest.warns(UserWarning, match="separate the stored chunks"):
        ds = xr.open_dataset(adk_h5md_blocked, engine="h5md", topology=PSF,
                             chunks={"time": 40})
    with ds:
        lazy = h5mdx.rmsd(ds.position, select="name CA")
        assert lazy.chunks == ((40, 40, 18),)
        graph = dict(lazy.data.__dask_graph__())
        assert len(graph) == 3
        assert not any("open_dataset" in str(k) for k in graph)
        got = lazy.compute(scheduler="threads")
        assert_rmsd_close(got, expected_ca, atol=1e-4)
        # after any dask operation the dask blocks are used as they are
        derived = h5mdx.rmsd(ds.position * 1.0, select="name CA")
        assert any("open_dataset" in str(k) for k in dict(derived.data.__dask_graph__()))
        assert_rmsd_close(derived.compute(scheduler="threads"), expected_ca, atol=1e-4)


@pytest.mark.filterwarnings("ignore:The specified chunks separate:UserWarning")
@pytest.mark.parametrize("config, tasks", [
    ({"scheduler": "processes", "num_workers": 2}, (50, 48)),  # as a lazy open's (50, 48)
    ({"scheduler": "threads", "num_workers": 4}, (30, 30, 30, 8)),
])
def test_open_blocks_run_together_into_tasks_as_large_as_a_lazy_opens(
        adk_h5md_blocked, expected_ca, config, tasks):
    """``chunks={"time": 10}``: 10 blocks of the open; each task takes a run of whole
    blocks, as many frames as a lazily opened file's task for these workers (each task
    costs the scheduler a few ms), reading them lazily; the numbers stay."""
    with dask.config.set(**config), \
            xr.open_dataset(adk_h5md_blocked, engine="h5md", topology=PSF,
                            chunks={"time": 10}) as ds:
        assert len(ds.position.chunks[0]) == 10
        lazy = h5mdx.rmsd(ds.position, select="name CA")
        assert lazy.chunks == (tasks,)
        assert not any("open_dataset" in str(k) for k in dict(lazy.data.__dask_graph__()))
        # nor any for its coordinates: ``step`` (dask blocks of the open too) is read where
        # the result is computed, not by a getter task per block on the workers
        assert ds.step.chunks is not None
        assert set(lazy.__dask_graph__().layers) == {lazy.data.name}
        got = lazy.compute()
        assert_rmsd_close(got, expected_ca, atol=1e-4)
        np.testing.assert_array_equal(got.step.values, ds.step.values)
        np.testing.assert_array_equal(got.time.values, ds.time.values)
        # frames_per_block sizes the runs too; a block is never split
        assert h5mdx.rmsd(ds.position, select="name CA", frames_per_block=25).chunks == \
            ((20, 20, 20, 20, 18),)
        assert h5mdx.rmsd(ds.position, select="name CA", frames_per_block=5).chunks == \
            ((10,) * 9 + (8,),)


@pytest.mark.filterwarnings("ignore:The specified chunks separate:UserWarning")
def test_compressed_positions_stream_whole_chunks(layouts, adk_universe, expected_ca):
    """A task reads compressed chunks a few whole chunks at a time, each decoded once
    into a reused buffer, as it streams uncompressed ones: the blocks of the open merge
    into a task per worker, none of which holds more than one read."""
    from h5mdx.analysis.plan import _read_step

    with dask.config.set(scheduler="processes", num_workers=2), \
            xr.open_dataset(layouts["gzip"], engine="h5md", chunks={"time": 10}) as ds:
        step = _read_step(ds.position)
        assert step is not None and step % 10 == 0  # whole stored chunks of 10 frames
        lazy = h5mdx.rmsd(ds.position, select=adk_universe.select_atoms("name CA").indices)
        assert lazy.chunks == ((50, 48),)
        assert_rmsd_close(lazy.compute(scheduler="sync"), expected_ca, atol=1e-4)


def test_one_task_per_block_and_reference_read_once(adk_h5md_blocked):
    with xr.open_dataset(adk_h5md_blocked, engine="h5md", topology=PSF) as ds:
        lazy = ds.md.rmsd(select="name CA", frames_per_block=10)
        graph = dict(lazy.data.__dask_graph__())
        assert len(graph) == 10  # 98 frames, 10 per block: one task per block
        assert lazy.data.chunks == ((10,) * 9 + (8,),)


def test_errors(adk_h5md):
    with xr.open_dataset(adk_h5md, engine="h5md") as ds:
        with pytest.raises(TopologyError, match="needs a topology"):
            h5mdx.rmsd(ds.position, select="name CA")
        with pytest.raises(ValueError, match=r"\(time, atom, spatial\)"):
            h5mdx.rmsd(ds.position.isel(spatial=0))
        with pytest.raises(IndexError, match="out of range"):
            h5mdx.rmsd(ds.position, reference=500)
        with pytest.raises(ValueError, match="reference has 5 atoms"):
            h5mdx.rmsd(ds.position, reference=np.zeros((5, 3)))
    with xr.open_dataset(adk_h5md, engine="h5md", topology=PSF) as ds:
        with pytest.raises(TopologyError, match="matches no atom"):
            ds.md.rmsd(select="name XX")


def test_lazy_tasks_read_frames_past_xarray(adk_h5md_blocked, adk_pyh5md, expected_ca):
    """Whole frames of a lazily opened file (or opened with ``chunks=``): each task reads
    through a FrameReader (no xarray indexing per read); a selection that goes to the backend (atoms split across
    chunks) keeps the lazily indexed Variable. Both give MDAnalysis' numbers."""
    from h5mdx.engine.frames import FrameReader

    cases = ((adk_h5md_blocked, None, FrameReader), (adk_h5md_blocked, {"time": 40}, FrameReader),
             (adk_pyh5md, None, xr.Variable))
    for path, chunks, expected in cases:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            ds = xr.open_dataset(path, engine="h5md", topology=PSF, chunks=chunks)
        with ds:
            lazy = h5mdx.rmsd(ds.position, select="name CA", frames_per_block=30)
            tasks = dict(lazy.data.__dask_graph__()).values()
            assert all(isinstance(task[1], expected) for task in tasks)
            assert_rmsd_close(lazy.compute(scheduler="sync"), expected_ca, atol=1e-4)


@pytest.mark.parametrize("config, tasks", [
    ({"scheduler": "sync"}, (98,)),  # one worker: the engine's block, all 98 frames
    ({"scheduler": "threads", "num_workers": 4}, (30, 30, 30, 8)),  # whole 10-frame chunks
    ({"scheduler": "processes", "num_workers": 2}, (50, 48)),
])
def test_default_blocks_share_out_over_the_workers(adk_h5md_blocked, expected_ca, config,
                                                   tasks):
    """Without frames_per_block, the blocks shrink (in whole HDF5 chunks) until every
    worker of the default scheduler gets as many as the others; the numbers stay."""
    with dask.config.set(**config), \
            xr.open_dataset(adk_h5md_blocked, engine="h5md", topology=PSF) as ds:
        lazy = h5mdx.rmsd(ds.position, select="name CA")
        assert lazy.chunks == (tasks,)
        assert_rmsd_close(lazy.compute(), expected_ca, atol=1e-4)


def test_default_blocks_follow_the_default_client(adk_h5md_blocked, expected_ca, local_client):
    threads = sum(local_client.nthreads().values())
    with xr.open_dataset(adk_h5md_blocked, engine="h5md", topology=PSF) as ds:
        lazy = h5mdx.rmsd(ds.position, select="name CA")
        assert len(lazy.chunks[0]) == threads == 2
        assert_rmsd_close(local_client.compute(lazy).result(), expected_ca, atol=1e-4)


def test_chunk_mib_sets_the_blocks_in_place_of_the_engines(adk_h5md_blocked, expected_ca):
    """``chunk_mib=`` gives blocks of whole frames and HDF5 chunks near that size (40 kB a
    frame, 10-frame chunks here); blocks that differ give tasks of other names, so the two
    results never share keys with different tasks behind them."""
    with dask.config.set(scheduler="sync"), \
            xr.open_dataset(adk_h5md_blocked, engine="h5md", topology=PSF) as ds:
        default = h5mdx.rmsd(ds.position, select="name CA")
        small = h5mdx.rmsd(ds.position, select="name CA", chunk_mib=0.5)
        assert default.chunks == ((98,),)
        assert small.chunks == ((10,) * 9 + (8,),)
        assert small.data.name != default.data.name
        assert h5mdx.rmsd(ds.position, select="name CA", chunk_mib=0.5).data.name == \
            small.data.name
        assert_rmsd_close(small.compute(), expected_ca, atol=1e-4)
        np.testing.assert_array_equal(small.values, default.values)
        with pytest.raises(ValueError, match="chunk_mib must be positive"):
            h5mdx.rmsd(ds.position, select="name CA", chunk_mib=0)


def _sparse_trajectory(path, n_frames, n_atoms, **kwargs):
    """An H5MD file of ``n_frames`` frames whose chunks are never written (all zero): its
    size on disk is that of its metadata, whatever its length."""
    import h5py

    with h5py.File(path, "w") as f:
        f.create_group("h5md").attrs["version"] = np.array([1, 1])
        f["h5md"].create_group("author").attrs["name"] = "test"
        f["h5md"].create_group("creator").attrs.update({"name": "test", "version": "1"})
        f.create_group("particles/trajectory/box").attrs.update(
            {"dimension": 3, "boundary": ["none"] * 3})
        g = f.create_group("particles/trajectory/position")
        g.create_dataset("value", shape=(n_frames, n_atoms, 3), dtype=np.float32,
                         chunks=(100, n_atoms, 3), **kwargs)
        g.create_dataset("step", data=np.arange(n_frames))
        g.create_dataset("time", data=np.arange(n_frames, dtype=np.float64))
    return str(path)


@pytest.mark.filterwarnings("ignore:.*were never written")  # sparse on purpose
@pytest.mark.parametrize("workers, blocks, mib", [
    (2, 8, (448, 512)),  # 3,823 MiB: 4 rounds of 2 tasks, the largest blocks
    (16, 32, (112, 128)),  # 4 rounds would be 60 MiB: 128 MiB, shared out as 2 rounds
    (1, 8, (448, 512)),
])
def test_streamed_blocks_are_large_but_leave_rounds_per_worker(tmp_path, monkeypatch, workers,
                                                               blocks, mib):
    """Tasks that stream an HDF5 file 4 MiB at a time get blocks of up to 512 MiB (fewer
    tasks, less scheduler time), no larger than leaves each worker 4 rounds, never below
    128 MiB; compressed chunks, streamed too (whole chunks a read), get the same blocks."""
    from h5mdx.format.h5md import _storage as h5md

    monkeypatch.setattr(h5md, "MAX_ABSENT_ELEMENTS", 2**40)  # a 4 GB file never written
    frame_mib = 3341 * 3 * 4 / 2**20
    plain = _sparse_trajectory(tmp_path / "plain.h5md", 100_000, 3341)
    packed = _sparse_trajectory(tmp_path / "gzip.h5md", 100_000, 3341, compression="gzip")
    with dask.config.set(scheduler="threads", num_workers=workers):
        with xr.open_dataset(plain, engine="h5md") as ds:
            chunks = h5mdx.rmsd(ds.position, select=np.arange(0, 3341, 15)).chunks[0]
        assert len(chunks) == blocks
        assert all(c % 100 == 0 for c in chunks[:-1])  # whole HDF5 chunks
        assert mib[0] <= max(chunks) * frame_mib <= mib[1]
        with xr.open_dataset(packed, engine="h5md") as ds:
            assert h5mdx.rmsd(ds.position, select=np.arange(0, 3341, 15)).chunks[0] == chunks
    # a scheduler whose workers are unknown (a plain function): the open's chunk_mib stands
    with dask.config.set(scheduler=dask.get):
        with xr.open_dataset(plain, engine="h5md", chunk_mib=300) as ds:
            chunks = h5mdx.rmsd(ds.position, select=np.arange(0, 3341, 15)).chunks[0]
        assert 250 <= max(chunks) * frame_mib <= 300
