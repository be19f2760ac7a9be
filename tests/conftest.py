"""Shared fixtures: H5MD files generated from the data that ships in MDAnalysisTests."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

mda = pytest.importorskip("MDAnalysis")
datafiles = pytest.importorskip("MDAnalysisTests.datafiles")

PSF = datafiles.PSF
DCD = datafiles.DCD


def pytest_collection_modifyitems(config, items):
    """MPI and SLURM tests start mpirun or SLURM jobs: they belong to the slow run."""
    for item in items:
        if item.get_closest_marker("mpi") or item.get_closest_marker("slurm"):
            item.add_marker(pytest.mark.slow)


@pytest.fixture(scope="session", autouse=True)
def _compiled_kernel_loaded():
    """The compiled kernel loaded once for the session, as in any process that has run a
    job of some size: kernel="auto" then takes it for the small test trajectories too (a
    small first job takes the numpy kernel, h5mdx.analysis.plan._SMALL_WORK), so that the
    tests of the compiled read paths do not depend on the order they run in."""
    from h5mdx.analysis.qcp import has_numba, warm_up

    if has_numba():
        warm_up("numba")


@pytest.fixture(scope="session")
def adk_universe():
    """The adenylate kinase PSF/DCD trajectory (3341 atoms, 98 frames)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return mda.Universe(PSF, DCD)


def _write_mda(path, universe, chunks, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with mda.Writer(str(path), n_atoms=universe.atoms.n_atoms, chunks=chunks, **kwargs) as w:
            for _ts in universe.trajectory:
                w.write(universe.atoms)
    return str(path)


@pytest.fixture(scope="session")
def adk_h5md(tmp_path_factory, adk_universe):
    """adk written by MDAnalysis' H5MDWriter with its default chunks (1, n_atoms, 3)."""
    path = tmp_path_factory.mktemp("adk") / "adk_mda.h5md"
    return _write_mda(path, adk_universe, None)


@pytest.fixture(scope="session")
def adk_h5md_blocked(tmp_path_factory, adk_universe):
    """adk written by MDAnalysis' H5MDWriter with time-blocked chunks (10, n_atoms, 3)."""
    path = tmp_path_factory.mktemp("adk") / "adk_blocked.h5md"
    return _write_mda(path, adk_universe, (10, adk_universe.atoms.n_atoms, 3))


@pytest.fixture(scope="session")
def adk_h5md_fletcher(tmp_path_factory, adk_h5md_blocked):
    """adk_h5md_blocked with its positions stored with the Fletcher-32 checksum filter:
    a filter only HDF5 reads (no direct reads, so threads of one process take turns)."""
    import shutil

    import h5py

    path = tmp_path_factory.mktemp("adk") / "adk_fletcher.h5md"
    shutil.copy(adk_h5md_blocked, path)
    with h5py.File(path, "r+") as f:
        element = f["particles/trajectory/position"]
        values = element["value"][()]
        del element["value"]
        element.create_dataset("value", data=values, chunks=(10, *values.shape[1:]),
                               fletcher32=True)
    return str(path)


@pytest.fixture(scope="session")
def adk_positions(adk_universe):
    """All adk positions in memory, float32 (n_frames, n_atoms, 3)."""
    return np.stack([ts.positions.copy() for ts in adk_universe.trajectory])


@pytest.fixture(scope="session")
def adk_pyh5md(tmp_path_factory, adk_universe, adk_positions):
    """adk written with pyh5md: its default chunks (32, 128, 3), linear box, species."""
    pyh5md = pytest.importorskip("pyh5md")
    path = tmp_path_factory.mktemp("adk") / "adk_pyh5md.h5md"
    n = adk_universe.atoms.n_atoms
    with pyh5md.File(str(path), "w", creator="pyh5md-test", creator_version="1") as f:
        part = f.particles_group("all")
        part.create_box(dimension=3, boundary=["periodic"] * 3, store="fixed",
                        data=np.array([80.0, 90.0, 100.0]))
        pos = pyh5md.element(part, "position", store="time", shape=(n, 3),
                             dtype=np.float32, time=True)
        pos.value.attrs["unit"] = "Angstrom"
        pos.time.attrs["unit"] = "ps"
        pyh5md.element(part, "species", store="fixed",
                       data=np.arange(n, dtype=np.int32) % 5)
        for i, xyz in enumerate(adk_positions):
            pos.append(xyz, i * 10, i * 0.5)
    return str(path)


@pytest.fixture(scope="module")
def local_client():
    """A 2-process distributed LocalCluster client (h5mdx's recommended configuration).

    Module-scoped: while it lives it is dask's default scheduler, so it must not leak into
    modules that expect the local schedulers.
    """
    distributed = pytest.importorskip("distributed")
    from h5mdx.parallel import local_cluster

    with local_cluster(2, dashboard=True) as cluster, \
            distributed.Client(cluster) as client:
        yield client

