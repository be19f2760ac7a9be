"""``h5mdx slurm-script mpi-rmsd TRAJ ... --ntasks N``: an sbatch script for the MPI-IO path.

Prints the script (``> job.sh``), or with ``--submit`` submits it, waits for the
job, prints its output and the straggler summary of the per-rank timings it
saved. Every argument that is not an option of ``slurm-script`` goes to
``h5mdx mpi-rmsd``.
"""

from __future__ import annotations

import argparse
import os
import re
import shlex
import sys
from pathlib import Path
from typing import Any

from h5mdx.parallel.cluster import add_job_options

PROGRAMS = ("mpi-rmsd",)


def _slurm_options(parser: argparse.ArgumentParser) -> None:
    # Long options only: mpi-rmsd's short options (-t, -s, -o, -q) pass through untouched.
    g = parser.add_argument_group("job options (sbatch)")
    g.add_argument("--ntasks", type=int, metavar="N", help="MPI ranks (required)")
    g.add_argument("--nodes", type=int, metavar="N", help="nodes (default: SLURM's choice)")
    # --walltime/--time, --queue/--partition, --account, --wait-timeout/--timeout: shared
    add_job_options(g, wait_default=None,
                    wait_help="with --submit: seconds to wait before cancelling the job "
                              "(default: no limit)")
    g.add_argument("--mem-per-cpu", metavar="M", help="memory per CPU, e.g. 2G")
    g.add_argument("--job-name", metavar="NAME", help="job name (default h5mdx-mpi-rmsd)")
    g.add_argument("--log", metavar="FILE",
                   help="job output file, %%j = job id (default h5mdx-mpi-rmsd-%%j.out)")
    g.add_argument("--chdir", metavar="DIR",
                   help="working directory of the job (default: the current directory)")
    g.add_argument("--sbatch", dest="directives", action="append", default=None,
                   metavar="OPTION", help="another #SBATCH option, e.g. --sbatch=--exclusive "
                                          "(repeatable)")
    g.add_argument("--prologue", action="append", default=None, metavar="LINE",
                   help='a shell line before mpirun, e.g. "module load openmpi" (repeatable)')
    g.add_argument("--mpirun", metavar="CMD",
                   help='MPI launcher, with its options (default mpirun; "srun --mpi=pmix")')
    g.add_argument("--mpirun-args", metavar="ARGS",
                   help='options of the launcher, e.g. "--bind-to none"')
    s = parser.add_argument_group("submission")
    s.add_argument("--submit", action="store_true",
                   help="submit with sbatch, wait, print the job output and the straggler "
                        "summary")


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Register the ``slurm-script`` subcommand."""
    p = subparsers.add_parser(
        "slurm-script",
        allow_abbrev=False,
        help="write (or --submit) an sbatch script that runs h5mdx mpi-rmsd under mpirun",
        description=(
            "Write an sbatch script that runs 'mpirun -n N h5mdx mpi-rmsd TRAJ ...' with "
            "HDF5 file locking off and Open MPI's run-as-root variables when run as root. "
            "Arguments after the program that are not options of slurm-script go to the "
            "program. Example: h5mdx slurm-script mpi-rmsd adk.h5md --topology adk.psf "
            "--select 'name CA' --ntasks 4 --time 00:20:00 > job.sh"
        ),
    )
    p.add_argument("program", choices=PROGRAMS, help="the h5mdx program the job runs")
    p.add_argument("program_args", nargs=argparse.REMAINDER, metavar="ARGS",
                   help="arguments of the program (TRAJ --topology T --select S ...)")
    _slurm_options(p)
    p.set_defaults(func=run)
    return p


def _split(args: argparse.Namespace) -> tuple[argparse.Namespace, list[str]]:
    """Take the slurm-script options out of the program's arguments (they may come last)."""
    extra = argparse.ArgumentParser(add_help=False, allow_abbrev=False)
    _slurm_options(extra)
    defaults = vars(extra.parse_known_args([])[0])  # every option's default, by dest
    found, rest = extra.parse_known_args(list(args.program_args))
    for dest, default in defaults.items():
        value = getattr(found, dest)
        if value != default:
            before = getattr(args, dest, default)
            if isinstance(value, list) and isinstance(before, list):
                value = before + value
            setattr(args, dest, value)
    return args, rest


def _program_namespace(program: str, argv: list[str]) -> argparse.Namespace:
    """Parse the program's arguments with its own parser (errors show its usage)."""
    from h5mdx.cli.mpi import add_parser as add_mpi_rmsd

    parser = argparse.ArgumentParser(prog="h5mdx slurm-script")
    add_mpi_rmsd(parser.add_subparsers(dest="program"))
    return parser.parse_args([program, *argv])


def _check_chdir(chdir: str, submit: bool) -> None:
    """Refuse (``--submit``) or warn of a ``--chdir`` that is no directory: --submit
    failed with a bare '[Errno 2] No such file or directory: DIR', naming no option, and
    a script's job starts elsewhere (SLURM falls back to /tmp), its relative paths lost
   ."""
    if os.path.isdir(chdir):
        return
    said = f"--chdir {chdir}: no such directory, where the job would start"
    if submit:
        raise ValueError(said)
    import warnings

    warnings.warn(f"{said}; the job will fail unless it exists when it runs", UserWarning,
                  stacklevel=3)


def _warn_missing_inputs(program_ns: argparse.Namespace, chdir: str) -> None:
    """Warn of a trajectory or topology the job will not find from its directory: the job
    would fail in the queue, after its wait."""
    import warnings

    for what in ("trajectory", "topology"):
        path = getattr(program_ns, what, None)
        if path and not os.path.exists(os.path.join(chdir, os.path.expanduser(path))):
            warnings.warn(f"the {what} {path!r} does not exist (seen from {chdir}, where the "
                          "job starts); the job will fail unless it is there when it runs",
                          UserWarning, stacklevel=2)


def _mpirun_args(text: str | None) -> list[str]:
    """The words of ``--mpirun-args``, split as the shell does; a ValueError naming the
    option where they cannot be (an unclosed quote said only 'No closing quotation')."""
    try:
        return shlex.split(text or "")
    except ValueError as err:
        raise ValueError(f"--mpirun-args {text!r}: {err} (the launcher's options are split "
                         "as the shell splits words)") from None


#: sbatch's file name patterns known at submission: %j (job id), %A (an array's job
#: id: the job's own otherwise), %x (job name), %u (user name), %% (a %); a number between
#: the % and the letter pads with zeros (%5j)
_LOG_PATTERN = re.compile(r"%(\d*)([jAxu%])")


def _log_name(log: str, job_id: str, job_name: str) -> str:
    """The name sbatch gives the job's output ``log`` (``--output``): only ``%j`` was
    replaced, so ``--log %x-%j.out`` made --submit look for ``%x-4242.out``, print no
    output of the job and name a file that does not exist."""
    import getpass

    def one(m: re.Match[str]) -> str:
        width, letter = m.group(1), m.group(2)
        if letter == "%":
            return "%"
        if letter == "x":
            return job_name
        if letter == "u":
            try:
                return getpass.getuser()
            except (KeyError, OSError):
                return m.group(0)
        return job_id.zfill(int(width)) if width else job_id

    return _LOG_PATTERN.sub(one, log)


def _script(args: argparse.Namespace, rest: list[str], program_ns: argparse.Namespace,
            chdir: str, log: str) -> str:
    """The sbatch script of the options; a ValueError naming the option whose value
    SLURM, the script or the program (``program_ns``, its options) cannot take."""
    from h5mdx.parallel.batch import mpi_rmsd_script

    if args.ntasks is None:
        raise ValueError("--ntasks N is required: the number of MPI ranks of the job")
    from h5mdx.cli.mpi import _usage_problem

    problem = _usage_problem(program_ns)  # the job's mpi-rmsd would refuse it, after its wait
    if problem:
        raise ValueError(problem)
    if args.wait_timeout is not None and not args.wait_timeout > 0:  # nan, 0, -5
        raise ValueError(f"--wait-timeout must be a positive number of seconds, not "
                         f"{args.wait_timeout:g}")
    _check_chdir(chdir, args.submit)
    return mpi_rmsd_script(
        rest,
        ntasks=args.ntasks,
        nodes=args.nodes,
        time_limit=args.walltime,
        partition=args.queue,
        account=args.account,
        mem_per_cpu=args.mem_per_cpu,
        job_name=args.job_name or "h5mdx-mpi-rmsd",
        log=log,
        chdir=chdir,
        extra_directives=args.directives or (),
        prologue=args.prologue or (),
        mpirun=args.mpirun or "mpirun",
        mpirun_args=_mpirun_args(args.mpirun_args),
    )


def run(args: argparse.Namespace) -> int:
    """Print or submit the script."""
    from h5mdx.parallel.batch import (
        DEFAULT_LOG,
        _has_out,
        default_out_dir,
        straggler_summary,
        submit,
        wait_for_job,
    )

    args, rest = _split(args)
    program_ns = _program_namespace(args.program, rest)
    if program_ns.out is not None and not _has_out(rest):
        # spelt so that the script did not see it (-qo DIR, --ou DIR): its default --out
        # came last and won, and --submit looked for the records in DIR
        rest = [*rest, "--out", program_ns.out]
    chdir = os.path.abspath(args.chdir) if args.chdir else os.getcwd()
    log = args.log or DEFAULT_LOG
    try:  # the option values: usage errors (exit 2), as argparse's, not failures (exit 1)
        script = _script(args, rest, program_ns, chdir, log)
    except ValueError as err:
        from h5mdx.cli._usage import UsageError

        raise UsageError(str(err)) from None
    _warn_missing_inputs(program_ns, chdir)
    if not args.submit:
        sys.stdout.write(script)
        return 0

    job_id = submit(script, cwd=chdir)
    print(f"submitted SLURM job {job_id} ({args.ntasks} rank(s)); waiting for it to end",
          file=sys.stderr, flush=True)
    result = wait_for_job(job_id, timeout=args.wait_timeout)
    log_path = Path(chdir) / _log_name(log, job_id, args.job_name or "h5mdx-mpi-rmsd")
    if log_path.is_file():
        sys.stdout.write(log_path.read_text(encoding="utf-8", errors="replace"))
    state = result.state + (f" (exit code {result.exit_code})"
                            if result.exit_code not in (None, 0) else "")
    print(f"SLURM job {job_id}: {state} after {result.wall:.1f} s; output in {log_path}")
    out = Path(program_ns.out) if program_ns.out else default_out_dir(job_id, chdir)
    if not out.is_absolute():
        out = Path(chdir) / out
    timing = out / "timing.csv"
    if not timing.is_file():
        print(f"h5mdx slurm-script: no timing records in {out} (the job did not finish its "
              f"run; see {log_path})", file=sys.stderr)
        return 1
    from h5mdx.timing.records import load

    records, meta = load(timing)
    if not records["slurm_job_id"].astype(str).eq(job_id).all():  # an earlier run's
        print(f"h5mdx slurm-script: the timing records in {out} are not job {job_id}'s but "
              f"an earlier run's (the job did not finish its run; see {log_path})",
              file=sys.stderr)
        return 1
    print(f"timing records: {timing}")
    print(straggler_summary(records, meta))
    return 0 if result.ok or (result.state == "ENDED") else 1
