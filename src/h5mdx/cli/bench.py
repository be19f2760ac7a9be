"""``h5mdx bench TRAJ``: time an analysis over schedulers, worker counts and block counts.

For every scheduler x N workers x M blocks per worker x repeat, the analysis
runs with ``n_frames / (N M)`` frames per dask block and one timing record per
task is captured (I/O and compute split inside the task, start/stop and worker
from the scheduler). Written to --out: ``runs/<run>.parquet`` (one file per
run), ``records.parquet`` (all), ``runs.csv``, ``speedup.csv`` (times in seconds;
their units in ``runs.meta.json``, ``speedup.meta.json``), figures
(speed-up/efficiency, task Gantt chart, time per worker) and ``report.md``.
M = 3 is the over-subscription experiment (three blocks per worker). An --out that
holds an earlier bench's results is refused unless --overwrite, which replaces them.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Sequence
from typing import Any


def _int_list(text: str) -> list[int]:
    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError as err:
        raise argparse.ArgumentTypeError(f"expected integers like 1,2,4, got {text!r}") from err
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError(f"expected positive integers like 1,2,4, got {text!r}")
    return values


def _str_list(text: str) -> list[str]:
    values = [v.strip() for v in text.split(",") if v.strip()]
    if not values:  # --scheduler "" ran no run and failed in a traceback
        raise argparse.ArgumentTypeError(f"expected names like threads,processes, got {text!r}")
    return values


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Add the ``bench`` subcommand to ``subparsers``."""
    p = subparsers.add_parser(
        "bench",
        help="time an analysis over schedulers, workers and blocks (records, plots, report)",
        description=__doc__.replace("``", "") if __doc__ else None,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("trajectory", help="an H5MD file")
    p.add_argument("--topology", help="topology file (for --select)")
    p.add_argument("--select", help="MDAnalysis atom selection, e.g. 'name CA'")
    p.add_argument("--analysis", choices=("rmsd", "read"), default="rmsd",
                   help="rmsd (default) or read: read each block and reduce it (I/O only)")
    p.add_argument("--scheduler", type=_str_list, default=["threads", "processes"],
                   help="comma-separated among threads,processes,distributed,mpi-io,"
                        "dask-mpi (the MPI backends run under mpirun; M does not apply to "
                        "them) (default threads,processes)")
    p.add_argument("--workers", type=_int_list, default=None,
                   help="comma-separated worker counts N, each at most the CPUs this "
                        "process may use (default 1,2, or 1 on one CPU)")
    p.add_argument("--blocks-per-worker", type=_int_list, default=[1, 3],
                   help="comma-separated blocks per worker M (default 1,3)")
    p.add_argument("--repeats", type=int, default=3, help="runs per configuration (default 3)")
    p.add_argument("--out", default="h5mdx-bench", help="output directory (default h5mdx-bench)")
    p.add_argument("--overwrite", action="store_true",
                   help="replace the results of an earlier bench in --out")
    p.add_argument("--delay", metavar="FRAME:SECONDS[:PHASE]",
                   help="inject a straggler: sleep in the block starting at FRAME")
    p.add_argument("--no-progress", action="store_true", help="do not show the progress bar")
    p.set_defaults(func=run)
    return p


def _warn_delay_without_block(frame: int, n_frames: int, args: argparse.Namespace,
                              chunk_frames: int | None = None) -> None:
    """Warn where no block of the runs of a scheduler starts at ``frame``: the delay
    sleeps only in the task (or MPI rank) whose block starts there, so it would inject
    nothing into them. The mpi-io ranks' blocks are cut at the
    file's chunks (``chunk_frames``), not at ``n_frames / (N M)``: a delay at 49 of 98
    frames in chunks of 10 slept in the dask runs and in no mpi-io run, in silence, and
    one at 50 was said to sleep nowhere."""
    import warnings

    from h5mdx.bench.grid import MPI_BACKENDS, frames_per_block
    from h5mdx.mpi.decompose import chunk_aligned_blocks

    schedulers = getattr(args, "scheduler", None) or ["threads"]
    starts: dict[str, dict[str, range | list[int]]] = {}
    if any(s not in MPI_BACKENDS for s in schedulers):
        starts["dask"] = {f"N={n} M={m}": range(0, n_frames, frames_per_block(n_frames, n, m))
                          for n in args.workers for m in args.blocks_per_worker}
    if "mpi-io" in schedulers:
        starts["mpi-io"] = {f"mpi-io N={n}": [b.start for b in chunk_aligned_blocks(
            n_frames, n, chunk_frames) if b.n_frames] for n in args.workers}
    missed = [kind for kind, runs in starts.items()
              if not any(frame in r for r in runs.values())]
    if not missed:
        return
    runs = {k: r for kind in missed for k, r in starts[kind].items()}
    listing = "; ".join(f"{k}: {', '.join(map(str, r[:8]))}" + (", ..." if len(r) > 8 else "")
                        for k, r in runs.items())
    who = ("any run" if len(missed) == len(starts)
           else "the mpi-io runs" if missed == ["mpi-io"] else "the dask schedulers' runs")
    warnings.warn(f"--delay {args.delay}: no block of {who} starts at frame {frame}, so "
                  f"nothing sleeps{'' if who == 'any run' else ' in them'}; the blocks "
                  f"start at: {listing}", UserWarning, stacklevel=2)


#: What an earlier bench left in its --out (:func:`h5mdx.bench.grid.write_outputs`).
_EARLIER = ("records.parquet", "report.md", "runs")


def _check_out(out: str, overwrite: bool) -> None:
    """Refuse an ``out`` that holds an earlier bench's results, unless ``overwrite``: a
    second bench replaced its records and report and left its other runs' files in
    runs/ beside the new ones."""
    found = [name for name in _EARLIER if os.path.exists(os.path.join(out, name))]
    if found and not overwrite:
        raise ValueError(f"--out {out!r} holds the results of an earlier bench "
                         f"({', '.join(found)}); pass --overwrite to replace them, or give "
                         "another --out")


def _usage_problem(args: argparse.Namespace, schedulers: Sequence[str],
                   parse_delay: Callable[[str, str], object]) -> str | None:
    """What is wrong with the options (None: nothing), checked before the grid: these
    were said with exit status 1 and a --debug hint, as failures of the run."""
    bad = [s for s in args.scheduler if s not in schedulers]
    if bad:
        return (f"--scheduler: unknown scheduler{'s' if len(bad) > 1 else ''} "
                f"{', '.join(map(repr, bad))}; valid ones are: {', '.join(schedulers)}")
    from h5mdx._machine import usable_cpus
    from h5mdx.cli._usage import workers_problem

    if args.workers is None:  # the default fits the CPUs: 2 workers are refused on one
        args.workers = [n for n in (1, 2) if n <= usable_cpus()]
    problem = workers_problem(max(args.workers), "the bench times worker processes (and "
                              "MPI ranks) of this machine")
    if problem:
        return problem
    if args.repeats < 1:
        return f"--repeats must be at least 1, not {args.repeats}"
    if args.analysis == "read" and (args.select is not None or args.topology is not None):
        return "--analysis read reads every atom: --select and --topology apply to " \
               "--analysis rmsd"
    from h5mdx.bench.grid import selection_problem

    problem = selection_problem(args.trajectory, args.select, args.topology)
    if problem:  # said after the file was opened, with exit status 1
        return problem
    if os.path.exists(args.out) and not os.path.isdir(args.out):
        return (f"--out {args.out!r} is a file; the bench writes its records, figures and "
                "report into a directory")
    try:
        _check_out(args.out, args.overwrite)
        if args.delay:
            parse_delay(args.delay, "--delay")  # before the grid, not in its middle
    except ValueError as err:
        return str(err)
    return _unwritable(args.out)


def _unwritable(out: str) -> str | None:
    """Why the bench cannot write its records into ``out`` (None: it can): --out /proc/x
    failed with '[Errno 2] No such file or directory' after the whole grid ran).
    The check of h5mdx rmsd's outputs
    (:func:`h5mdx.analysis.series.check_writable`)."""
    from pathlib import Path

    from h5mdx.analysis.series import check_writable

    try:
        check_writable(Path(out) / "records.parquet", "the bench's records")
    except (ValueError, PermissionError) as err:
        return f"--out {out!r}: {err}"
    return None


def run(args: argparse.Namespace) -> int:
    """Run the grid, print the summary table and the advice; return the exit code."""
    from h5mdx.bench.grid import (
        SCHEDULERS,
        read_workload,
        rmsd_workload,
        run_grid,
        summary_rows,
    )
    from h5mdx.timing.phases import DELAY_ENV, parse_delay

    problem = _usage_problem(args, SCHEDULERS, parse_delay)
    if problem:  # a usage error, as argparse's: exit status 2 and no --debug hint
        print(f"h5mdx bench: {problem}", file=sys.stderr)
        return 2
    from h5mdx._optional import import_optional

    import_optional("pyarrow", "the bench's records (Parquet)")  # before the grid too
    import_optional("matplotlib", "the bench's plots")
    if args.analysis == "rmsd":
        workload = rmsd_workload(args.trajectory, topology=args.topology, select=args.select)
    else:
        workload = read_workload(args.trajectory)
    env = {DELAY_ENV: args.delay} if args.delay else None
    if args.delay:
        chunks = (workload.meta.get("layout") or {}).get("hdf5_chunks")
        _warn_delay_without_block(parse_delay(args.delay)[0], workload.n_frames, args,
                                  chunks[0] if chunks else None)
    result = run_grid(
        workload,
        schedulers=args.scheduler,
        workers=args.workers,
        blocks_per_worker=args.blocks_per_worker,
        repeats=args.repeats,
        out=args.out,
        env=env,
        progress=not args.no_progress,
    )
    from h5mdx.timing.report import render_table

    header, rows = summary_rows(result)
    print(render_table(rows, header, fmt="rich", title=f"h5mdx bench: {args.analysis} on "
                       f"{args.trajectory}", color=sys.stdout.isatty()))
    if 1 not in args.workers:  # the columns S(N), E(N) stood empty, nothing said why
        print("• S(N) and E(N) are measured against t_1, the time of a 1-worker run: "
              f"--workers {','.join(map(str, args.workers))} has none, so they are left "
              f"empty (--workers 1,{','.join(map(str, args.workers))} gives them)")
    for sentence in result.advice:
        print(f"• {sentence}")
    print(f"records, figures and report.md written to {args.out}/")
    return 0
