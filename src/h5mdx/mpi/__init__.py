"""The MPI paths of h5mdx: parallel HDF5 (MPI-IO) and dask-mpi.

This package is opt-in: it is the only part of h5mdx that imports
:mod:`mpi4py`, and ``import h5mdx`` never imports it. It needs the ``mpi`` extra
(``mpi4py``, ``dask-mpi``) and, for the MPI-IO path, an h5py built against a
parallel HDF5 (``bash scripts/setup.sh --mpi``, or conda-forge's
``h5py=*=mpi_openmpi*``).

Modules
-------
:mod:`h5mdx.mpi.io`
    Open a file with ``driver="mpio"`` and read chunk-aligned slabs of frames,
    independently or collectively.
:mod:`h5mdx.mpi.rmsd`
    The SPMD RMSD program behind ``mpirun -n N h5mdx mpi-rmsd``.
:mod:`h5mdx.mpi.launch`
    A dask cluster inside an MPI job with dask-mpi (``h5mdx rmsd --scheduler dask-mpi``).
"""

from __future__ import annotations

import os
from typing import Any

import h5py

from h5mdx._optional import import_optional
from h5mdx.errors import MissingDependencyError

__all__ = [
    "PARALLEL_H5PY_HINT",
    "comm_world",
    "has_parallel_h5py",
    "launched_by_mpirun",
    "launched_ranks",
    "ranks_by_text",
    "ranks_phrase",
    "require_parallel_h5py",
]

#: What to do when h5py has no MPI support: rebuild the h5py installed (a plain
#: ``pip install --no-binary=h5py h5py`` answers 'Requirement already satisfied', and
#: pip's cache would give back the serial build).
PARALLEL_H5PY_HINT = (
    "h5py is not built with MPI: CC=mpicc HDF5_MPI=ON pip install --force-reinstall "
    "--no-deps --no-cache-dir --no-binary=h5py h5py (against a parallel HDF5: on Debian add "
    "HDF5_PKGCONFIG_NAME=hdf5-openmpi), conda install -c conda-forge "
    "'h5py=*=mpi_openmpi*', or in a clone of h5mdx bash scripts/setup.sh --mpi"
)

#: Environment variables that MPI launchers (Open MPI, MPICH/Hydra, PMIx, SLURM) set.
_LAUNCHER_VARS = (
    "OMPI_COMM_WORLD_SIZE",
    "PMI_SIZE",
    "PMIX_RANK",
    "MPI_LOCALNRANKS",
    "SLURM_STEP_NUM_TASKS",
)


def has_parallel_h5py() -> bool:
    """Whether the installed h5py was built against a parallel (MPI) HDF5."""
    return bool(h5py.get_config().mpi)


def require_parallel_h5py() -> None:
    """Raise :class:`~h5mdx.errors.MissingDependencyError` unless h5py has MPI support.

    Raises
    ------
    MissingDependencyError
        With the command that installs a parallel h5py.
    """
    if not has_parallel_h5py():
        raise MissingDependencyError(
            f"{PARALLEL_H5PY_HINT} (h5py {h5py.version.version} with HDF5 "
            f"{h5py.version.hdf5_version} is a serial build)"
        )


def comm_world() -> Any:
    """``mpi4py.MPI.COMM_WORLD`` (imports mpi4py, which initialises MPI).

    Returns
    -------
    mpi4py.MPI.Intracomm
    """
    mpi = import_optional("mpi4py.MPI", "the MPI paths (mpirun, parallel HDF5, dask-mpi)")
    return mpi.COMM_WORLD


def launched_by_mpirun() -> bool:
    """Whether this process was started by an MPI launcher (mpirun, mpiexec, srun)."""
    return any(var in os.environ for var in _LAUNCHER_VARS)


def launched_ranks() -> int:
    """How many ranks the MPI launcher that started this process started (Open MPI's
    ``OMPI_COMM_WORLD_SIZE``, MPICH's ``PMI_SIZE``); 1 where none says.

    Returns
    -------
    int
    """
    for var in ("OMPI_COMM_WORLD_SIZE", "PMI_SIZE"):
        try:
            return max(1, int(os.environ[var]))
        except (KeyError, ValueError):
            continue
    return 1


def ranks_phrase(ranks: list[int], size: int) -> str:
    """The ranks of a job of ``size`` ranks in words: ``all 4 ranks``, ``rank 2 of 4``,
    ``ranks 0-2, 5 of 8``.

    Parameters
    ----------
    ranks : list of int
        Ranks, ascending.
    size : int
        Ranks of the job.

    Returns
    -------
    str

    Examples
    --------
    >>> ranks_phrase([0, 1, 2, 5], 8), ranks_phrase([3], 4), ranks_phrase([0, 1], 2)
    ('ranks 0-2, 5 of 8', 'rank 3 of 4', 'all 2 ranks')
    """
    if len(ranks) == size:
        return f"all {size} ranks"
    spans: list[list[int]] = []
    for r in ranks:
        if spans and r == spans[-1][1] + 1:
            spans[-1][1] = r
        else:
            spans.append([r, r])
    text = ", ".join(f"{a}" if a == b else f"{a}-{b}" for a, b in spans)
    return f"{'rank' if len(ranks) == 1 else 'ranks'} {text} of {size}"


def ranks_by_text(seen: list[str | None]) -> dict[str, list[int]]:
    """Each distinct text of ``seen`` (one entry a rank, as an ``allgather`` gives them;
    None or "" where a rank has none) and the ranks that gave it, ascending: what a job
    says once, naming its ranks.

    Parameters
    ----------
    seen : list of str or None

    Returns
    -------
    dict of str to list of int

    Examples
    --------
    >>> ranks_by_text(["bad file", None, "bad file", ""])
    {'bad file': [0, 2]}
    """
    by_text: dict[str, list[int]] = {}
    for rank, text in enumerate(seen):
        if text:
            by_text.setdefault(text, []).append(rank)
    return by_text
