"""``h5mdx example``: the main job on a real-size adenylate-kinase trajectory.

Builds once (cached under --out by frame count) an H5MD trajectory of --frames
frames (default 30,000: 1.2 GB) from the adk PSF/DCD shipped with
MDAnalysisTests -- frames 0-97 are the DCD's, the others the same frames moved
rigidly with 0.05 Å of seeded noise -- in chunks of 100 whole frames. Then it
times the C-alpha RMSD on a local dask cluster against this machine's read floor
(plain h5py) in paired rounds, runs it once more with per-task timing, times
MDAnalysis on a sample of frames, and writes report.html with the RMSD plot, the
task Gantt chart and the per-worker bars.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any


def _non_negative(text: str) -> int:
    try:
        value = int(text)
    except ValueError as err:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from err
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected a number of frames >= 0, got {value}")
    return value


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    from h5mdx.examples import DEFAULT_FRAMES

    p = subparsers.add_parser(
        "example",
        help="run the main job on a real-size adk trajectory (no SLURM, no MPI needed)",
        description=__doc__.replace("``", ""),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--out", default="h5mdx-example",
                   help="output directory (default h5mdx-example)")
    p.add_argument("--frames", type=int, default=DEFAULT_FRAMES,
                   help=f"frames of the trajectory (default {DEFAULT_FRAMES:,}, ~1.2 GB; "
                        "at least 98; no more than the free disk space in --out holds)")
    p.add_argument("--workers", type=int, default=None,
                   help="dask worker processes, at most the CPUs this process may use "
                        "(default 2, or 1 on one CPU)")
    p.add_argument("--select", default="name CA",
                   help="MDAnalysis atom selection (default 'name CA')")
    p.add_argument("--mda-frames", type=_non_negative, default=300,
                   help="frames MDAnalysis runs on for the comparison (default 300; 0: skip)")
    p.add_argument("--no-progress", action="store_true", help="no progress bars")
    p.add_argument("--overwrite", action="store_true",
                   help="replace files in --out of the names the example writes "
                        "(report.html, rmsd.csv, adk-FRAMES.h5md, ...) that an earlier run "
                        "did not write")
    p.set_defaults(func=run)
    return p


def run(args: argparse.Namespace) -> int:
    from h5mdx.examples import run_example, summary_lines

    if args.frames < 98:
        print(f"h5mdx example: --frames must be at least 98 (the frames of the adk DCD), "
              f"not {args.frames}", file=sys.stderr)
        return 2
    if _workers_refused(args):
        return 2
    if os.path.exists(args.out) and not os.path.isdir(args.out):
        print(f"h5mdx example: --out {args.out!r} is a file; the example writes its "
              "trajectory and report into a directory", file=sys.stderr)
        return 2
    problem = _out_problem(args.out)
    if problem:
        print(f"h5mdx example: --out {args.out!r}: {problem}", file=sys.stderr)
        return 2
    problem = _space_problem(args.out, args.frames)
    if problem:
        print(f"h5mdx example: --frames {args.frames}: {problem}", file=sys.stderr)
        return 2
    problem = _selection_problem(args.select)
    if problem:
        print(f"h5mdx example: --select {args.select!r}: {problem}", file=sys.stderr)
        return 2
    argv = ["--out", args.out, "--frames", str(args.frames), "--workers", str(args.workers),
            "--select", args.select, "--mda-frames", str(args.mda_frames)]
    result = run_example(args.out, args.frames, workers=args.workers, select=args.select,
                         mda_frames=args.mda_frames, progress=not args.no_progress, argv=argv,
                         overwrite=args.overwrite)
    print()
    print("\n".join(summary_lines(result)))
    return 0


def _workers_refused(args: argparse.Namespace) -> bool:
    """Whether ``--workers`` is refused (said on stderr); sets its default. The example
    times the RMSD against the read floor with as many reader processes: more processes
    than this process's CPUs time their contention (:func:`h5mdx.cli._usage.workers_problem`)."""
    from h5mdx._machine import usable_cpus
    from h5mdx.cli._usage import workers_problem

    if args.workers is None:
        args.workers = min(2, usable_cpus())
    problem = workers_problem(args.workers, "the example times worker processes against "
                                            "the read floor")
    if problem:
        print(f"h5mdx example: {problem}", file=sys.stderr)
    return problem is not None


def _out_problem(out: str) -> str | None:
    """Why the example cannot write into ``out`` (None: it can), by the check of h5mdx
    rmsd's outputs: --out /proc/x was said as a disk of 0.0 GB free, 'give fewer frames'
   ."""
    from pathlib import Path

    from h5mdx.analysis.series import check_writable

    try:
        check_writable(Path(out) / "report.html", "the report")
    except (ValueError, PermissionError) as err:
        return str(err)
    return None


#: Bytes of one frame of the example's positions: 3,341 atoms x 3 float32.
_FRAME_BYTES = 3341 * 3 * 4


def _space_problem(out: str, frames: int) -> str | None:
    """Why the trajectory of ``frames`` frames cannot be built in ``out`` (None: it can):
    more bytes than the disk there has free. ``--frames 99999999999`` (4 PB) started
    building, to fill the disk."""
    import shutil

    from h5mdx.examples.trajectory import is_cached

    if is_cached(os.path.join(out, f"adk-{frames}.h5md"), frames):
        return None
    where = os.path.abspath(out)
    while not os.path.isdir(where):  # the nearest directory that exists
        where = os.path.dirname(where)
    need, free = frames * _FRAME_BYTES, shutil.disk_usage(where).free
    if need <= free:
        return None
    return (f"the trajectory needs {need / 1e9:,.1f} GB ({_FRAME_BYTES:,} bytes a frame), "
            f"and the disk of {out!r} has {free / 1e9:,.1f} GB free; give fewer frames")


def _selection_problem(select: str) -> str | None:
    """Why MDAnalysis cannot use ``select`` on the example's reference frame (None: it can).

    The topology with the DCD's frames, whose first is the example's frame 0 (the RMSD's
    reference): a selection by position (``around``, ``prop z``, ...) is made there, by
    h5mdx and by MDAnalysis; on the topology alone it was refused ('AtomGroup has no
    attribute dimensions').
    """
    import warnings

    import MDAnalysis as mda
    from MDAnalysisTests.datafiles import DCD

    from h5mdx.testing import adk_topology

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        u = mda.Universe(adk_topology(), DCD)
    try:
        n = u.select_atoms(select).n_atoms
    except Exception as err:  # noqa: BLE001 - MDAnalysis' SelectionError and friends
        return f"{type(err).__name__}: {err}"
    return None if n else "matches no atoms"
