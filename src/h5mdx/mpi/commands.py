"""Command lines that run the MPI backends, for runners and benchmarks (no mpi4py import).

A runner outside :mod:`h5mdx.mpi` (e.g. ``h5mdx bench``) must not import
mpi4py; it starts the MPI backends as ``mpirun`` subprocesses built here and
reads the ``timing.csv`` they write.
"""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Mapping, Sequence

from h5mdx._subprocess import allow_run_as_root

__all__ = ["dask_mpi_command", "mpi_env", "mpi_io_command", "mpirun_prefix"]


def mpirun_prefix(n: int, *, oversubscribe: bool = True, mpirun: str | None = None) -> list[str]:
    """``["mpirun", "-n", n, "--bind-to", "none", "--oversubscribe"]`` (or ``$H5MDX_MPIRUN``).

    Parameters
    ----------
    n : int
        Number of ranks.
    oversubscribe : bool, optional
        Allow more ranks than cores (Open MPI's ``--oversubscribe``).
    mpirun : str, optional
        The launcher (default: ``$H5MDX_MPIRUN`` or ``mpirun`` on PATH).

    Raises
    ------
    FileNotFoundError
        If no launcher is found.
    """
    launcher = mpirun or os.environ.get("H5MDX_MPIRUN") or shutil.which("mpirun")
    if not launcher:
        raise FileNotFoundError(
            "mpirun not found: install Open MPI (bash scripts/setup.sh --mpi, or "
            "apt-get install openmpi-bin) or set H5MDX_MPIRUN to your MPI launcher"
        )
    cmd = [launcher, "-n", str(int(n))]
    if "mpirun" in os.path.basename(launcher) or "mpiexec" in os.path.basename(launcher):
        # Open MPI: several small jobs on one machine must not all be pinned to core 0
        cmd += ["--bind-to", "none"]
        if oversubscribe:
            cmd.append("--oversubscribe")
    return cmd


def mpi_env(base: Mapping[str, str] | None = None, *, as_root: bool | None = None) -> dict[str, str]:
    """An environment for ``mpirun``: allows root (in containers/CI) and oversubscription,
    and turns HDF5 file locking off unless the caller set it."""
    env = allow_run_as_root(base, as_root=as_root)
    env.setdefault("OMPI_MCA_rmaps_base_oversubscribe", "1")
    env.setdefault("HDF5_USE_FILE_LOCKING", "FALSE")
    return env


def mpi_io_command(
    n: int,
    trajectory: str,
    out: str,
    *,
    topology: str | None = None,
    select: str | None = None,
    options: Sequence[str] = (),
    python: str | None = None,
) -> list[str]:
    """``mpirun -n N python -m h5mdx mpi-rmsd TRAJ ... --out OUT`` (backend ``mpi-io``)."""
    argv = [python or sys.executable, "-m", "h5mdx", "mpi-rmsd", os.fspath(trajectory),
            "--out", os.fspath(out), "--quiet"]
    if topology:
        argv += ["--topology", os.fspath(topology)]
    if select:
        argv += ["--select", select]
    return [*mpirun_prefix(n), *argv, *options]


def dask_mpi_command(
    n_workers: int,
    trajectory: str,
    out: str,
    *,
    topology: str | None = None,
    select: str | None = None,
    python: str | None = None,
) -> list[str]:
    """``mpirun -n N+2 ...`` running :func:`h5mdx.mpi.launch.rmsd_dask_mpi` (backend
    ``dask-mpi``): rank 0 scheduler, rank 1 client, ``n_workers`` worker ranks."""
    code = (
        "import sys; from h5mdx.mpi.launch import rmsd_dask_mpi; "
        "rmsd_dask_mpi(sys.argv[1], out=sys.argv[2], topology=sys.argv[3] or None, "
        "select=sys.argv[4] or None)"
    )
    return [*mpirun_prefix(n_workers + 2), python or sys.executable, "-c", code,
            os.fspath(trajectory), os.fspath(out), os.fspath(topology or ""), select or ""]
