"""Run ``h5mdx mpi-rmsd`` with rank 1 failing in its compute phase.

Usage: ``mpirun -n 2 python fail_rank.py TRAJ OUT [raise|kill]``. The job must exit non-zero
promptly (MPI_Abort), not hang in the barrier the other ranks wait in.
"""

from __future__ import annotations

import os
import signal
import sys

import h5mdx.mpi.rmsd as mpi_rmsd
from h5mdx.cli import main
from h5mdx.mpi import comm_world

_real_open = mpi_rmsd._open


MODE = sys.argv[3] if len(sys.argv) > 3 else "raise"


def _failing_kernel(frames):
    if MODE == "kill":  # the rank dies without a word (OOM killer, node failure)
        os.kill(os.getpid(), signal.SIGKILL)
    raise RuntimeError("injected failure for the test")


def _open_failing_on_rank_1(*args, **kwargs):
    job = _real_open(*args, **kwargs)
    if comm_world().Get_rank() == 1:
        job.kernel = _failing_kernel
    return job


if __name__ == "__main__":
    mpi_rmsd._open = _open_failing_on_rank_1
    traj, out = sys.argv[1], sys.argv[2]
    sys.exit(main(["mpi-rmsd", traj, "--out", out, "--quiet"]))
