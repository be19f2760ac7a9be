"""sbatch scripts for the MPI-IO path, their submission, and the straggler summary.

:func:`mpi_rmsd_script` writes a batch script that runs
``mpirun -n N <venv>/bin/h5mdx mpi-rmsd TRAJ ...`` with what MPI and HDF5 need
in a job: HDF5 file locking off (``HDF5_USE_FILE_LOCKING=FALSE``), Open MPI's
run-as-root variables only when the job runs as root, and the job's working
directory set to where the script was written (so relative paths mean what they
meant there). :func:`submit` hands a script to ``sbatch`` and :func:`wait_for_job`
polls ``scontrol show job`` until it ends (no accounting database needed);
:func:`straggler_summary` (from :mod:`h5mdx.timing.report`) turns the per-rank
timing records the job saved into a short report (per-rank phases, stragglers,
imbalance, advice).

Only the standard library is imported at module level; pandas is imported by
:func:`straggler_summary`.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from h5mdx._subprocess import RUN_AS_ROOT_ENV
from h5mdx._subprocess import run as _run  # bounded; tests replace this name
from h5mdx.parallel.cluster import (
    ENDED_STATES,
    NEVER_STARTS,
    SlurmError,
    _check_walltime,
    pending_hint,
    reason_key,
)
from h5mdx.timing.report import straggler_summary

__all__ = [
    "ENDED_STATES",
    "MAX_FAILED_POLLS",
    "JobResult",
    "default_out_dir",
    "h5mdx_command",
    "job_info",
    "mpi_rmsd_script",
    "straggler_summary",
    "submit",
    "wait_for_job",
]


#: Output directory of ``mpi-rmsd`` inside the job when the command line gives none.
DEFAULT_OUT = "h5mdx-mpi-rmsd-${SLURM_JOB_ID}"

#: Default file of the job's standard output and error (``%j`` is the job id).
DEFAULT_LOG = "h5mdx-mpi-rmsd-%j.out"


def h5mdx_command() -> list[str]:
    """The ``h5mdx`` command of this installation: ``<venv>/bin/h5mdx``, or ``python -m h5mdx``.

    The path is absolute and not resolved through symlinks, so a virtual
    environment's script is found next to its ``python``.
    """
    script = Path(os.path.abspath(sys.executable)).with_name("h5mdx")
    if script.is_file() and os.access(script, os.X_OK):
        return [str(script)]
    return [os.path.abspath(sys.executable), "-m", "h5mdx"]


def _has_out(argv: Sequence[str]) -> bool:
    return any(a in ("--out", "-o") or a.startswith("--out=") or
               (a.startswith("-o") and len(a) > 2 and not a.startswith("--"))
               for a in argv)


def mpi_rmsd_script(
    rmsd_args: Sequence[str],
    *,
    ntasks: int,
    nodes: int | None = None,
    time_limit: str | None = None,
    partition: str | None = None,
    account: str | None = None,
    mem_per_cpu: str | None = None,
    job_name: str = "h5mdx-mpi-rmsd",
    log: str = DEFAULT_LOG,
    chdir: str | os.PathLike[str] | None = None,
    extra_directives: Sequence[str] = (),
    prologue: Sequence[str] = (),
    mpirun: str = "mpirun",
    mpirun_args: Sequence[str] = (),
    h5mdx: Sequence[str] | None = None,
) -> str:
    """An sbatch script that runs ``h5mdx mpi-rmsd`` on ``ntasks`` MPI ranks.

    Parameters
    ----------
    rmsd_args : sequence of str
        Arguments of ``h5mdx mpi-rmsd`` (``TRAJ --topology T --select S ...``).
        Without ``--out`` the job writes to ``h5mdx-mpi-rmsd-<jobid>`` in the
        working directory.
    ntasks : int
        MPI ranks (``#SBATCH --ntasks`` and ``mpirun -n``).
    nodes : int, optional
        ``#SBATCH --nodes``.
    time_limit : str, optional
        ``#SBATCH --time``, e.g. ``"00:30:00"``.
    partition, account : str, optional
        ``#SBATCH --partition`` and ``--account``.
    mem_per_cpu : str, optional
        ``#SBATCH --mem-per-cpu``, e.g. ``"2G"``.
    job_name : str, optional
        ``#SBATCH --job-name``.
    log : str, optional
        ``#SBATCH --output`` (stdout and stderr of the job; ``%j`` = job id).
    chdir : path-like, optional
        Working directory of the job (default: the current directory), where
        relative paths in ``rmsd_args`` and ``log`` are resolved.
    extra_directives : sequence of str
        More sbatch options, one per ``#SBATCH`` line (``"--exclusive"``).
    prologue : sequence of str
        Shell lines before ``mpirun`` (``"module load openmpi"``).
    mpirun : str, optional
        The MPI launcher: a path, or a command with its options (``"srun --mpi=pmix"``).
    mpirun_args : sequence of str
        Options of the launcher (``["--bind-to", "none"]``).
    h5mdx : sequence of str, optional
        The ``h5mdx`` command (default: :func:`h5mdx_command`).

    Returns
    -------
    str
        The script.

    Raises
    ------
    ValueError
        If ``ntasks`` or ``nodes`` is below 1, ``nodes`` above ``ntasks``,
        ``time_limit`` is no SLURM time, or
        ``mem_per_cpu`` no SLURM memory size.
    """
    ntasks = int(ntasks)
    if ntasks < 1:
        raise ValueError(f"--ntasks must be at least 1, not {ntasks}")
    if nodes is not None and int(nodes) < 1:
        raise ValueError(f"--nodes must be at least 1, not {nodes}")
    if nodes is not None and int(nodes) > ntasks:  # sbatch refused it at submission
        raise ValueError(f"--nodes {nodes} is more than --ntasks {ntasks}: each node runs "
                         f"at least one of the job's tasks; give --nodes at most {ntasks}")
    mem_per_cpu = _check_slurm_memory(mem_per_cpu)
    workdir = os.path.abspath(os.fspath(chdir) if chdir is not None else os.getcwd())
    from h5mdx._version import __version__

    directives = _directives(job_name=job_name, ntasks=ntasks, nodes=nodes,  # a SLURM time
                             time_limit=_check_walltime(time_limit), partition=partition,
                             account=account,
                             mem_per_cpu=mem_per_cpu)
    directives += [f"--output={_sbatch_word(log, '--log')}",
                   f"--chdir={_sbatch_word(workdir, '--chdir')}",
                   *(_extra_directive(d) for d in extra_directives)]
    command = [
        *map(shlex.quote, _launcher(mpirun)), "-n", str(ntasks),
        *map(shlex.quote, mpirun_args),
        *map(shlex.quote, h5mdx or h5mdx_command()), "mpi-rmsd",
        *map(shlex.quote, rmsd_args),
    ]
    if not _has_out(rmsd_args):
        command += ["--out", f'"{DEFAULT_OUT}"']
    lines = [
        "#!/bin/bash",
        *(f"#SBATCH {d}" for d in directives),
        "",
        f"# Written by h5mdx {__version__}: RMSD over {ntasks} MPI rank(s) reading one shared",
        "# H5MD file with parallel HDF5 (MPI-IO). Submit with: sbatch <this file>",
        "set -euo pipefail",
        "# HDF5 file locks fail or hang on many parallel file systems (Lustre, NFS)",
        "export HDF5_USE_FILE_LOCKING=FALSE",
        "export PYTHONUNBUFFERED=1",
        'if [ "$(id -u)" -eq 0 ]; then',
        "    # Open MPI refuses to start as root without these",
        "    export " + " ".join(f"{k}={v}" for k, v in RUN_AS_ROOT_ENV.items()),
        "fi",
        *prologue,
        'echo "h5mdx: job ${SLURM_JOB_ID:-?} on ${SLURM_JOB_NODELIST:-$(hostname)}, '
        f'{ntasks} rank(s)"',
        " ".join(command),
        "",
    ]
    return "\n".join(lines)


#: A size sbatch takes for ``--mem-per-cpu``: a whole number, in megabytes without a suffix;
#: K, M, G or T, and a B after it (SLURM's ``str_to_mbytes``: ``4GB`` was refused here
#: though sbatch takes it).
_SLURM_MEMORY = re.compile(r"^\d+([KMGTkmgt][Bb]?)?$")


def _check_slurm_memory(memory: str | None) -> str | None:
    """``memory`` as sbatch takes it, or a ValueError before the script is written
    (``"4GiB"`` or ``"4 GB"``, dask's spelling, failed only at ``sbatch``)."""
    if memory is None:
        return None
    text = str(memory).strip()
    if not _SLURM_MEMORY.match(text):
        raise ValueError(f"--mem-per-cpu {memory!r} is not a SLURM memory size: a whole "
                         "number with K, M, G or T (megabytes without), e.g. 2G or 2GB")
    return text


def _directives(*, job_name: str, ntasks: int, nodes: int | None, time_limit: str | None,
                partition: str | None, account: str | None, mem_per_cpu: str | None
                ) -> list[str]:
    """The ``#SBATCH`` options of the job's name and resources (without ``#SBATCH``)."""
    directives = [f"--job-name={_sbatch_word(job_name, '--job-name')}", f"--ntasks={ntasks}"]
    if nodes is not None:
        directives.append(f"--nodes={int(nodes)}")
    for option, value in (("time", time_limit), ("partition", partition),
                          ("account", account), ("mem-per-cpu", mem_per_cpu)):
        if value:
            directives.append(f"--{option}={_sbatch_word(value, '--' + option)}")
    return directives


def _sbatch_word(value: str, option: str | None = None) -> str:
    """``value`` as one word of an ``#SBATCH`` line: sbatch splits those lines at
    whitespace and ends them at an unquoted ``#``, but takes double quotes and backslash
    escapes (``--chdir=/scratch/my run`` set the job's directory to ``/scratch/my``: the
    job failed in the queue, its log in the wrong place). ``option``
    (``--job-name``) names the value in the error.

    Raises
    ------
    ValueError
        If ``value`` holds a line break, which would end the ``#SBATCH`` line.
    """
    text = str(value)
    if "\n" in text or "\r" in text:
        raise ValueError(f"{option + ' ' if option else ''}{text!r} holds a line break, which "
                         "no #SBATCH line can hold")
    if not re.search(r"[\s\"'\\#]", text):
        return text
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _launcher(mpirun: str) -> list[str]:
    """The words of the MPI launcher: ``"srun --mpi=pmix"`` was quoted as one command
    name, and the job failed with 'command not found'; a path that exists
    is one word, spaces and all."""
    if os.path.exists(mpirun) or not re.search(r"\s", mpirun.strip()):
        return [mpirun]
    try:
        return shlex.split(mpirun)
    except ValueError as err:
        raise ValueError(f"--mpirun {mpirun!r} cannot be split into words ({err})") from None


def _extra_directive(text: str) -> str:
    """A directive given by the user (``--sbatch``) as an ``#SBATCH`` line takes it: the
    value of ``--option=value`` as one word (``--comment=a b`` was split by sbatch), and
    no line break (one ended the line and began a line of shell in the script).
    Raises ValueError for a line break."""
    text = str(text).strip()
    if "\n" in text or "\r" in text:
        raise ValueError(f"--sbatch {text!r} holds a line break, which no #SBATCH line "
                         "can hold")
    option, eq, value = text.partition("=")
    if eq and option.startswith("-") and not re.search(r"\s", option):
        return f"{option}={_sbatch_word(value)}"
    return text


def default_out_dir(job_id: str, chdir: str | os.PathLike[str] | None = None) -> Path:
    """Where a script without ``--out`` makes the job write (``DEFAULT_OUT``:
    ``h5mdx-mpi-rmsd-${SLURM_JOB_ID}`` in the job's directory)."""
    base = Path(os.fspath(chdir) if chdir is not None else os.getcwd())
    return base / DEFAULT_OUT.replace("${SLURM_JOB_ID}", str(job_id))


@dataclass
class JobResult:
    """How a batch job ended.

    Attributes
    ----------
    job_id : str
        SLURM job id.
    state : str
        Final ``JobState`` (``COMPLETED``, ``FAILED``, ...; ``ENDED`` when SLURM
        had already forgotten the job).
    exit_code : int or None
        Exit code of the batch script (None if unknown).
    reason : str
        SLURM's ``Reason``.
    wall : float
        Seconds from submission to the end.
    info : dict
        The last ``scontrol show job`` fields.
    """

    job_id: str
    state: str
    exit_code: int | None
    reason: str = ""
    wall: float = 0.0
    info: dict[str, str] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        """The job completed with exit code 0."""
        return self.state == "COMPLETED" and self.exit_code in (0, None)


def job_info(job_id: str) -> dict[str, str] | None:
    """The fields of ``scontrol -o show job <id>`` (None once SLURM forgot the job; empty
    when scontrol failed)."""
    return _query_job(job_id)[0]


def _query_job(job_id: str) -> tuple[dict[str, str] | None, str]:
    """:func:`job_info` and, where scontrol failed (``{}``), what it said."""
    cmd = f"scontrol -o show job {job_id}"
    try:
        proc = _run(["scontrol", "-o", "show", "job", str(job_id)], timeout=30.0)
    except subprocess.TimeoutExpired:
        return {}, f"{cmd} did not answer within 30 s"
    if proc.returncode != 0:
        if "Invalid job id" in proc.stderr:
            return None, ""
        said = (proc.stderr.strip() or proc.stdout.strip()).replace("\n", "; ")
        return {}, f"{cmd} failed (exit status {proc.returncode}): {said or 'no message'}"
    info: dict[str, str] = {}
    for token in proc.stdout.split():
        key, sep, value = token.partition("=")
        if sep and key not in info:
            info[key] = value
    return info, ("" if info else f"{cmd} printed nothing")


def _scancel(job_id: str) -> None:
    if shutil.which("scancel"):
        try:
            _run(["scancel", str(job_id)], timeout=30.0)
        except subprocess.TimeoutExpired:
            pass


def submit(script: str, *, cwd: str | os.PathLike[str] | None = None,
           sbatch_args: Sequence[str] = ()) -> str:
    """Submit a batch script (given as text) with ``sbatch --parsable``.

    Parameters
    ----------
    script : str
        The script.
    cwd : path-like, optional
        Directory to submit from.
    sbatch_args : sequence of str
        More sbatch options.

    Returns
    -------
    str
        The job id.

    Raises
    ------
    SlurmError
        If sbatch is missing or rejects the job (with sbatch's reason).
    """
    if shutil.which("sbatch") is None:
        raise SlurmError(
            "sbatch is not on PATH: submit on a SLURM login node, or save the script "
            "(h5mdx slurm-script ... > job.sh) and submit it there with: sbatch job.sh"
        )
    try:
        proc = _run(["sbatch", "--parsable", *sbatch_args], timeout=120.0, stdin=script,
                    cwd=cwd)
    except subprocess.TimeoutExpired as err:
        raise SlurmError("sbatch did not answer within 120 s: is slurmctld up? (sinfo)") from err
    if proc.returncode != 0:
        said = (proc.stderr.strip() or proc.stdout.strip()).replace("\n", "; ")
        raise SlurmError(f"sbatch rejected the job: {said}")
    out = proc.stdout.strip().splitlines()
    job_id = out[-1].split(";")[0].strip() if out else ""
    if not job_id.isdigit():
        raise SlurmError(f"cannot read the job id from sbatch's output {proc.stdout!r}")
    return job_id


def _exit_code(info: Mapping[str, str]) -> int | None:
    code = info.get("ExitCode", "")
    head = code.split(":")[0]
    return int(head) if head.isdigit() else None


#: Polls in a row that SLURM may fail to answer before :func:`wait_for_job` gives up (with
#: the default poll of 1 s and scontrol's 30 s bound: from one minute to half an hour).
MAX_FAILED_POLLS = 60


def wait_for_job(job_id: str, *, timeout: float | None = None, poll: float = 1.0,
                 cancel_on_timeout: bool = True,
                 max_failed_polls: int = MAX_FAILED_POLLS) -> JobResult:
    """Wait until a job ends, polling ``scontrol show job`` (accounting not needed).

    Parameters
    ----------
    job_id : str
        The job.
    timeout : float, optional
        Seconds to wait (default: no limit).
    poll : float, optional
        Seconds between polls.
    cancel_on_timeout : bool, default True
        Cancel the job when the wait times out or is interrupted (Ctrl-C).
    max_failed_polls : int, default :data:`MAX_FAILED_POLLS`
        Give up after this many polls in a row that ``scontrol`` failed (slurmctld down
        or unreachable); one that answers starts the count again.

    Returns
    -------
    JobResult
        The final state and exit code.

    Raises
    ------
    TimeoutError
        If the job did not end within ``timeout`` (it is cancelled first), with
        its state and reason.
    SlurmError
        If the job pends for a reason no wait ends (``PartitionConfig`` and the others
        of ``h5mdx.parallel.cluster.NEVER_STARTS``: it asks for more than the partition
        has or allows; it is cancelled first), with what to do; or if ``scontrol``
        failed ``max_failed_polls`` times in a row, with its last error (the job is
        left as it is: SLURM could not be asked to cancel it either).
    """
    t0 = time.monotonic()
    last: dict[str, str] = {}
    failed = 0
    try:
        while True:
            info, error = _query_job(job_id)
            if info is None:  # purged after MinJobAge: it ended, result unknown
                return JobResult(job_id, "ENDED", None, "", time.monotonic() - t0, last)
            failed = 0 if info else failed + 1
            if failed >= max(1, max_failed_polls):  # slurmctld down: no answer will come
                raise SlurmError(_no_answer(job_id, failed, error, last))
            if info:
                last = info
                state = info.get("JobState", "")
                if state in ENDED_STATES:
                    return JobResult(job_id, state, _exit_code(info), info.get("Reason", ""),
                                     time.monotonic() - t0, info)
                reason = reason_key(info.get("Reason", ""))
                if state == "PENDING" and reason in NEVER_STARTS:  # no wait ends it
                    if cancel_on_timeout:
                        _scancel(job_id)
                    raise SlurmError(
                        f"SLURM job {job_id} can never start as asked: it is PENDING "
                        f"({reason}): {pending_hint(reason)}"
                        + ("; cancelled it" if cancel_on_timeout else ""))
            if timeout is not None and time.monotonic() - t0 > timeout:
                state = last.get("JobState", "UNKNOWN")
                reason = last.get("Reason", "")
                if cancel_on_timeout:
                    _scancel(job_id)
                raise TimeoutError(
                    f"SLURM job {job_id} did not end within {timeout:g} s: it is {state}"
                    + (f" ({reason})" if reason and reason != "None" else "")
                    + ("; cancelled it" if cancel_on_timeout else "")
                )
            time.sleep(poll)
    except KeyboardInterrupt:
        if cancel_on_timeout:
            _scancel(job_id)
        raise


def _no_answer(job_id: str, failed: int, error: str, last: Mapping[str, str]) -> str:
    """Why :func:`wait_for_job` stopped waiting on a job SLURM no longer answers for."""
    state = last.get("JobState")
    return (f"gave up waiting for SLURM job {job_id}: SLURM did not answer {failed} "
            f"poll(s) in a row (is slurmctld up? sinfo, scontrol ping); the last error: "
            f"{error}; the job was last seen "
            + (state if state else "by no poll")
            + f"; it may still run: see squeue -j {job_id} or sacct -j {job_id} once "
            "SLURM answers")
