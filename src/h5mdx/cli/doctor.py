"""``h5mdx doctor``: whether MPI, parallel h5py, dask-mpi and SLURM are usable here."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from h5mdx.doctor import run_checks


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Add the ``doctor`` subcommand to ``subparsers``."""
    p = subparsers.add_parser(
        "doctor",
        help="check the parallel stack (h5py/HDF5, MPI, dask-mpi, SLURM) and say how to fix it",
        description=(
            "Report versions and whether h5py is built with MPI, mpi4py and mpirun work, "
            "dask-mpi, dask-jobqueue and SLURM are usable, with the command to fix what is "
            "missing. MPI is probed in a subprocess, so a broken MPI cannot crash this command."
        ),
    )
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.add_argument(
        "--strict",
        action="store_true",
        help="exit with status 1 when any check is missing (for scripts and CI)",
    )
    p.add_argument(
        "--timeout", type=float, default=30.0, help="seconds allowed per probe, at most a day (default 30)"
    )
    p.add_argument("file", nargs="?", help=argparse.SUPPRESS)  # for the hint below
    p.set_defaults(func=run)
    return p


#: The longest --timeout of a probe: a day (the waits for a subprocess take a whole number
#: of milliseconds that the operating system's poll must hold; 1e308 s overflowed it).
_MAX_TIMEOUT = 86_400


def run(args: argparse.Namespace) -> int:
    """Run the checks and print them; the exit status is 1 only with ``--strict``."""
    if getattr(args, "file", None):
        print(f"h5mdx doctor: error: doctor checks the parallel stack and takes no file; the "
              f"layout diagnosis of a file is part of h5mdx info: h5mdx info {args.file}",
              file=sys.stderr)
        return 2
    if not 0 < args.timeout <= _MAX_TIMEOUT:  # 1e308 ended in a traceback of selectors
        print(f"h5mdx doctor: error: --timeout must be a positive number of seconds, at "
              f"most {_MAX_TIMEOUT:,} (a day), not {args.timeout:g}", file=sys.stderr)
        return 2
    report = run_checks(timeout=args.timeout)
    if args.json:
        print(json.dumps(report.as_dict(), indent=2))
    else:
        print(report.format())
    if getattr(args, "strict", False) and not all(c.ok for c in report.checks):
        return 1
    return 0
