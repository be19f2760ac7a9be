"""``mpirun -n N h5mdx mpi-rmsd TRAJ ...``: RMSD over MPI ranks with parallel HDF5.

Only parses arguments: :mod:`h5mdx.mpi` (and so mpi4py) is imported inside
:func:`run`, so ``h5mdx --help`` works without MPI.
"""

from __future__ import annotations

import argparse
from typing import Any


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Register the ``mpi-rmsd`` subcommand."""
    p = subparsers.add_parser(
        "mpi-rmsd",
        help="RMSD over MPI ranks reading one shared file with parallel HDF5 (run under mpirun)",
        description=(
            "RMSD after optimal superposition, computed by every MPI rank on a balanced, "
            "chunk-aligned block of frames read with HDF5's MPI-IO driver; rank 0 gathers the "
            "series and writes it with per-rank timings (t_init_top, t_init_traj, t_io, "
            "t_compute, t_wait, t_comm_gather). Run as: mpirun -n N h5mdx mpi-rmsd TRAJ ..."
        ),
    )
    p.add_argument("trajectory", metavar="TRAJ", help="an H5MD file every rank can read")
    p.add_argument("--topology", "-t", help="topology file (PSF, PDB, GRO, TPR, ...)")
    p.add_argument("--select", "-s", help='MDAnalysis selection, e.g. "name CA" (default: all)')
    p.add_argument("--reference", type=int, default=0, help="reference frame index (default 0)")
    p.add_argument("--out", "-o", metavar="DIR",
                   help="directory for rmsd.csv (or .nc) and timing records")
    p.add_argument("--format", dest="out_format", choices=("csv", "nc"), default="csv",
                   help="format of the RMSD file (default csv)")
    p.add_argument("--read", choices=("step", "block", "frame"), default="step",
                   help="step (default): whole chunks of about 4 MiB at a time into one "
                        "reused buffer; block: each rank's block at once; frame: frame by "
                        "frame (the last two are the studies' ways)")
    p.add_argument("--read-mib", type=float, default=4.0, metavar="MIB",
                   help="with --read step: MiB per read, in whole chunks (default 4)")
    p.add_argument("--selected-only", action="store_true",
                   help="read only the selected atoms from disk (hyperslab selection)")
    p.add_argument("--collective", action="store_true",
                   help="collective MPI-IO transfers (default: independent)")
    p.add_argument("--topology-on-root", action="store_true",
                   help="rank 0 reads the topology and broadcasts the selection")
    p.add_argument("--weights", choices=("mass",), default=None, help="mass-weighted RMSD (the topology's masses, else the file's mass element)")
    p.add_argument("--no-superposition", dest="superposition", action="store_false",
                   help="centre only, do not rotate")
    p.add_argument("--no-convert-units", dest="convert_units", action="store_false",
                   help="report the RMSD in the file's length unit (default: Angstrom)")
    p.add_argument("--group", help="particles group (default: the one with positions)")
    p.add_argument("--run-id", help="identifier of this run in the timing records")
    p.add_argument("--quiet", "-q", action="store_true", help="print nothing on success")
    p.set_defaults(func=run)
    return p


#: Where MPI launchers (Open MPI, MPICH/Hydra, PMIx, srun) put the rank of a process.
_RANK_VARS = ("OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK", "SLURM_PROCID")


def _usage_problem(args: argparse.Namespace) -> str | None:
    """What is wrong with the option values (None: nothing), said before MPI starts (and
    by ``h5mdx slurm-script`` before the job is written): --read-mib 0 was refused by
    every rank with exit status 1 and a --debug hint, as a failure of the run, in Python
    terms (read_mib), and a job script carried it into the queue."""
    if not 0 < args.read_mib < float("inf"):  # nan, inf, 0, -1
        return f"--read-mib must be a positive, finite number of MiB, not {args.read_mib:g}"
    from h5mdx.cli._usage import mib_problem

    problem = mib_problem(args.read_mib)
    return f"--read-mib {problem}" if problem else None


def _out_problem(out: str | None) -> str | None:
    """Why ``--out`` cannot be written here (None: it can), by the check of h5mdx rmsd's
    outputs: said by every rank with exit status 1 once MPI had started).
    Not checked by ``h5mdx slurm-script``: the job writes on the cluster's file
    systems, not necessarily this machine's."""
    if out is None:
        return None
    from h5mdx.analysis.series import check_outputs

    try:
        check_outputs(directory=out)
    except (ValueError, PermissionError) as err:
        return f"--out {out!r}: {err}"
    return None


def _first_rank() -> bool:
    """Whether this process is the first rank of its job, by its launcher's word (before
    MPI starts), or was started by none."""
    import os

    return os.environ.get(next((v for v in _RANK_VARS if v in os.environ), ""), "0") == "0"


def run(args: argparse.Namespace) -> int:
    """Run ``mpi-rmsd`` (on every rank)."""
    problem = _usage_problem(args) or _out_problem(args.out)
    # Said once, by the first rank (the launcher's), which gives the job its status; the
    # others end with 0: one that ended first with a failure had mpirun kill the first
    # rank before it printed its line, and the job failed without a word.
    if problem:
        if _first_rank():
            from h5mdx.cli._usage import UsageError

            raise UsageError(problem)
        return 0
    from h5mdx.errors import MissingDependencyError
    from h5mdx.mpi import require_parallel_h5py

    try:
        require_parallel_h5py()
    except MissingDependencyError:  # every rank's h5py is serial: said by the first alone
        if _first_rank():  # (64 ranks printed the same line 64 times)
            raise
        return 0  # the first rank's status is the job's (see above)
    from h5mdx.mpi.rmsd import MPIRMSDOptions, OptionError, main

    options = MPIRMSDOptions(
        trajectory=args.trajectory,
        topology=args.topology,
        select=args.select,
        reference=args.reference,
        out=args.out,
        read=args.read,
        read_mib=args.read_mib,
        selected_only=args.selected_only,
        collective=args.collective,
        topology_on_root=args.topology_on_root,
        weights=args.weights,
        superposition=args.superposition,
        group=args.group,
        out_format=args.out_format,
        convert_units=args.convert_units,
        run_id=args.run_id,
    )
    try:
        return main(options, verbose=not args.quiet)
    except OptionError as err:  # on one rank it goes up as it is: a usage error, exit 2
        from h5mdx.cli._usage import UsageError

        raise UsageError(str(err)) from err
