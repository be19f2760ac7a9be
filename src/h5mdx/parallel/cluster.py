"""Dask workers as SLURM jobs (dask-jobqueue), correct by default for h5mdx.

:func:`slurm` builds a :class:`dask_jobqueue.SLURMCluster` from dask's own
configuration (the ``jobqueue.slurm`` section of the user's dask config files,
the ecosystem convention) with the function's arguments as overrides, and with
the defaults that H5MD analysis needs:

- ``export HDF5_USE_FILE_LOCKING=FALSE`` in the job prologue (HDF5's file locks
  fail or hang on many parallel file systems, Lustre and NFS among them);
- one single-threaded worker process per core (HDF5 serialises the calls of one
  process, so processes, not threads, read in parallel);
- the workers run the interpreter of the caller (``sys.executable``, dask-jobqueue's
  default unless the config names another);
- the network interface ``"lo"`` for scheduler and workers when every node of
  the SLURM cluster is this machine (a single-node test cluster), the default
  interface otherwise;
- every job carries a job name unique to the cluster, so that its jobs can be
  cancelled for sure;
- the jobs are released when the cluster is closed, when the ``with`` block of
  :func:`slurm_client` is left (also by Ctrl-C), at interpreter exit, and on
  SIGTERM/SIGHUP (turned into ``SystemExit`` so that clean-up code runs).

:func:`wait_for_workers` waits for the workers and, instead of hanging, raises
:class:`WorkerTimeoutError` that says what SLURM thinks of the jobs
(``"0 of 2 workers after 60 s: jobs 12, 13 are PENDING (Resources)"``).
:func:`job_script_preview` shows the job script without SLURM.

dask-jobqueue and distributed are imported when a function needs them.

Examples
--------
>>> from h5mdx.parallel.cluster import slurm_client  # doctest: +SKIP
>>> with slurm_client(jobs=2, walltime="00:20:00") as client:  # doctest: +SKIP
...     series = h5mdx.rmsd(ds.position, select="name CA").compute()
"""

from __future__ import annotations

import atexit
import contextlib
import getpass
import inspect
import math
import os
import re
import shutil
import signal
import socket
import subprocess
import threading
import time
import uuid
import warnings
import weakref
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

from h5mdx._subprocess import run as _run  # bounded; tests replace this name
from h5mdx.errors import H5MDError
from h5mdx.timing.capture import client_workers

__all__ = [
    "ENDED_STATES",
    "HDF5_PROLOGUE",
    "SlurmError",
    "WorkerTimeoutError",
    "add_cli_arguments",
    "add_job_options",
    "annotate_job_ids",
    "cli_client",
    "job_ids",
    "job_script_preview",
    "job_states",
    "release",
    "single_node_interface",
    "slurm",
    "slurm_client",
    "slurm_client_from_args",
    "slurm_options",
    "wait_for_workers",
    "worker_job_ids",
]

#: The prologue line that turns HDF5's file locking off in every worker job.
HDF5_PROLOGUE = "export HDF5_USE_FILE_LOCKING=FALSE"

#: Environment variable that sets the default network interface (e.g. ``ib0``).
INTERFACE_ENV = "H5MDX_SLURM_INTERFACE"

#: Memory per core when neither the argument nor the dask config gives one.
DEFAULT_MEMORY_PER_CORE_GIB = 2

#: Default seconds that :func:`slurm_client` waits for its workers.
DEFAULT_TIMEOUT = 120.0

#: SLURM job states after which a job will never run again (nor start a worker).
ENDED_STATES = frozenset({
    "BOOT_FAIL", "CANCELLED", "COMPLETED", "DEADLINE", "FAILED", "NODE_FAIL",
    "OUT_OF_MEMORY", "PREEMPTED", "REVOKED", "SPECIAL_EXIT", "TIMEOUT",
})

#: States of jobs that are ended or being torn down (nothing left to cancel).
_GONE = ENDED_STATES | {"ENDED", "COMPLETING"}

#: What to do about a pending job, by squeue reason.
_REASON_HINTS = {
    "Resources": "the nodes have not enough free CPUs or memory for these jobs now; ask for "
                 "fewer or smaller jobs (jobs=/cores=/memory=, --jobs/--cores/--memory) or "
                 "wait longer (timeout=, --slurm-timeout)",
    "Priority": "other jobs come first in the queue; wait longer (timeout=, --slurm-timeout) "
                "or use another partition (queue=, --queue)",
    "PartitionTimeLimit": "the walltime is above the partition's limit; ask for less "
                          "(walltime=, --walltime) or use another partition (queue=, --queue)",
    "PartitionNodeLimit": "the partition cannot give that many nodes or CPUs to one job; ask "
                          "for fewer cores per job (cores=, --cores)",
    "PartitionConfig": "the job asks for more than the partition has or allows (CPUs, "
                       "nodes, memory or time: scontrol show partition); ask for less, or "
                       "use another partition",
    "ReqNodeNotAvail": "the requested nodes are down, drained or reserved (see sinfo)",
    "PartitionDown": "the partition is down (see sinfo)",
    "PartitionInactive": "the partition is inactive (see sinfo)",
    "QOSMaxJobsPerUserLimit": "your QOS allows fewer running jobs; ask for fewer jobs with more "
                              "cores each (jobs=, cores=)",
    "AssocMaxJobsLimit": "your account allows fewer running jobs; ask for fewer jobs with more "
                         "cores each (jobs=, cores=)",
    "AssocGrpCpuLimit": "your account's CPU limit is reached; ask for fewer cores",
    "InvalidAccount": "the account is not valid for you (account=, --account)",
    "InvalidQOS": "the QOS is not valid for you",
    "Dependency": "the jobs wait for other jobs",
    "DependencyNeverSatisfied": "a job it depends on ended as its dependency cannot "
                                "accept (--dependency): submit without it",
    "BadConstraints": "no node has the features asked for (--constraint; sinfo -o "
                      "'%N %f' lists them)",
    "AccountNotAllowed": "the account may not use this partition (account=, --account; "
                         "queue=, --queue)",
    "QOSMaxWallDurationPerJobLimit": "the walltime is above your QOS's limit per job; ask "
                                     "for less (walltime=, --walltime)",
    "QOSMaxCpuPerJobLimit": "the job asks for more CPUs than your QOS allows one job; ask "
                            "for fewer cores per job (cores=, --cores)",
    "QOSMaxNodePerJobLimit": "the job asks for more nodes than your QOS allows one job",
}

#: Pending reasons that no wait ends: the job as asked can never start there.
NEVER_STARTS = frozenset({"PartitionConfig", "PartitionNodeLimit", "PartitionTimeLimit",
                          "InvalidAccount", "InvalidQOS", "AccountNotAllowed",
                          "DependencyNeverSatisfied", "BadConstraints",
                          "QOSMaxWallDurationPerJobLimit", "QOSMaxCpuPerJobLimit",
                          "QOSMaxNodePerJobLimit"})


def reason_key(reason: str) -> str:
    """A pending reason as the tables here name it: its first part (``"Resources,
    Priority"`` is ``Resources``).

    Parameters
    ----------
    reason : str
        squeue's or scontrol's reason.

    Returns
    -------
    str
    """
    return reason.split(",")[0].strip()


def pending_hint(reason: str) -> str | None:
    """What to do about a job pending for ``reason`` (squeue's or scontrol's), or None.

    Parameters
    ----------
    reason : str

    Returns
    -------
    str or None
    """
    return _REASON_HINTS.get(reason_key(reason))


#: SLURM's time formats, and its words for no limit (``UNLIMITED``, ``INFINITE``, any case:
#: sbatch takes them, where a partition allows it; they were refused as "not a SLURM time").
_WALLTIME = re.compile(
    r"^(\d+|\d+:\d{1,2}|\d+:\d{1,2}:\d{1,2}|\d+-\d+|\d+-\d+:\d{1,2}|\d+-\d+:\d{1,2}:\d{1,2}"
    r"|(?i:unlimited|infinite))$"
)

class SlurmError(H5MDError, OSError):
    """A SLURM command failed or rejected a job (e.g. an invalid partition or account)."""


class WorkerTimeoutError(H5MDError, TimeoutError):
    """Fewer dask workers than asked for joined in time.

    Attributes
    ----------
    n_workers, wanted : int
        Workers that joined, and workers asked for.
    states : dict
        ``{job_id: (state, reason)}`` as squeue reported them (``("ENDED", "")`` for
        jobs no longer queued).
    """

    def __init__(self, message: str, n_workers: int = 0, wanted: int = 0,
                 states: Mapping[str, tuple[str, str]] | None = None) -> None:
        super().__init__(message)
        self.n_workers = n_workers
        self.wanted = wanted
        self.states = dict(states or {})

    def __reduce__(self) -> tuple:
        return (type(self), (str(self), self.n_workers, self.wanted, self.states))


# ----------------------------------------------------------------------------------- options


def _config(key: str, config_name: str = "slurm") -> Any:
    import dask.config

    return dask.config.get(f"jobqueue.{config_name}.{key}", None)


def _first(*values: Any) -> Any:
    for v in values:
        if v is not None:
            return v
    return None


def _short(host: str) -> str:
    return host.split(".")[0].lower()


_INTERFACE_CACHE: dict[str, str | None] = {}


def single_node_interface(timeout: float = 10.0) -> str | None:
    """``"lo"`` when every node of the SLURM cluster is this machine, else None.

    Asks ``sinfo`` for the node names (once per process). A scheduler bound to the
    loopback interface is reachable only from this machine, which is exactly
    right for a single-node cluster on localhost and wrong anywhere else.

    Parameters
    ----------
    timeout : float, optional
        Seconds to wait for ``sinfo``.

    Returns
    -------
    str or None
        ``"lo"``, or None (use dask's default interface) when SLURM has other
        nodes or does not answer.
    """
    if "value" in _INTERFACE_CACHE:
        return _INTERFACE_CACHE["value"]
    value = None
    if shutil.which("sinfo") is not None:
        try:
            proc = _run(["sinfo", "-h", "-N", "-o", "%N"], timeout=timeout)
        except (OSError, subprocess.TimeoutExpired):
            proc = None
        if proc is not None and proc.returncode == 0:
            nodes = {_short(n) for n in proc.stdout.split()}
            here = {_short(socket.gethostname()), _short(socket.getfqdn()), "localhost"}
            if nodes and nodes <= here:
                value = "lo"
    _INTERFACE_CACHE["value"] = value
    return value


_AUTO: Any = object()


def _check_walltime(walltime: Any) -> str | None:
    if walltime is None:
        return None
    text = str(walltime).strip()
    if not _WALLTIME.match(text):
        raise ValueError(
            f"walltime {walltime!r} is not a SLURM time: use 'MM', 'HH:MM:SS', 'D-HH' or "
            "'D-HH:MM:SS' (or UNLIMITED), e.g. walltime='00:30:00' (--walltime 00:30:00)"
        )
    short = re.fullmatch(r"(\d+):(\d{1,2})", text)
    # "1:00" for an hour: the jobs, and their workers, end after a minute; "30:00" and
    # "10:30" are taken as minutes and seconds, as SLURM users write them, in silence
    if short and int(short.group(1)) <= _HOURS_OR_MINUTES:
        minutes, seconds = (int(g) for g in short.groups())
        from h5mdx.analysis.reference import _user_stacklevel

        hours = f"{minutes} h" + (f" {seconds} min" if seconds else "")
        warnings.warn(f"walltime {text!r} is {minutes} min {seconds} s (SLURM reads "
                      f"M:SS); for {hours} write '{minutes}:{seconds:02d}:00'",
                      UserWarning, stacklevel=_user_stacklevel())
    return text


#: Up to how many minutes a walltime of ``M:SS`` is said to be minutes ("1:00" is
#: 1 min to SLURM, not 1 h): no dask worker job is asked for so short a time on purpose.
_HOURS_OR_MINUTES = 4


#: The least memory per job :func:`slurm_options` takes: a bare number is bytes to dask
#: (``"4"`` is 4 bytes, not 4 GiB), and under 1 KiB dask-jobqueue failed formatting
#: ``#SBATCH --mem`` with "not all arguments converted during string formatting".
MIN_MEMORY_BYTES = 1 << 20


def _whole(value: Any, what: str) -> int:
    """``value`` as a whole number, or a ValueError naming ``what`` (2.5 cores was
    taken as 2 in silence)."""
    try:
        number = int(value)
        whole = not isinstance(value, bool) and number == float(value)
    except (TypeError, ValueError, OverflowError):
        whole = False
    if not whole:
        raise ValueError(f"{what} must be a whole number, not {value!r}")
    return number


def _check_memory(memory: Any) -> None:
    """Refuse a memory per job that is no size (``"4 gigs"``), or less than
    :data:`MIN_MEMORY_BYTES` (``"-1"``, ``"0"``, ``"4"``: bytes)."""
    from dask.utils import parse_bytes

    example = "e.g. memory='4GiB' (--memory 4GiB)"
    try:
        size = parse_bytes(memory) if isinstance(memory, str) else _whole(memory, "memory")
    except ValueError:
        raise ValueError(f"memory {memory!r} is not a size: give a number with a unit, "
                         f"{example}") from None
    if size < MIN_MEMORY_BYTES:
        raise ValueError(f"memory {memory!r} is {size} bytes per job: give at least 1 MiB, "
                         f"with a unit (a bare number is bytes), {example}")


def slurm_options(
    *,
    cores: int | None = None,
    memory: str | None = None,
    processes: int | None = None,
    walltime: str | None = None,
    queue: str | None = None,
    account: str | None = None,
    interface: str | None = _AUTO,
    python: str | None = None,
    job_script_prologue: Sequence[str] | None = None,
    scheduler_options: Mapping[str, Any] | None = None,
    log_directory: str | os.PathLike[str] | None = None,
    job_extra_directives: Sequence[str] | None = None,
    job_name: str | None = None,
    config_name: str = "slurm",
    **overrides: Any,
) -> dict[str, Any]:
    """The keyword arguments :func:`slurm` gives to ``SLURMCluster``.

    Only what h5mdx decides is in the result: the arguments given, and h5mdx's
    defaults where they differ from dask-jobqueue's. Everything else is left out,
    and ``SLURMCluster`` reads it from dask's config itself
    (``jobqueue.<config_name>.<key>``, e.g. ``jobqueue.slurm.walltime`` in
    ``~/.config/dask/jobqueue.yaml``). h5mdx reads the config only where its
    default depends on it: cores, processes and memory (defaults for what the
    config leaves unset), the network interface, the job name, and the prologue
    and scheduler options (extended, not replaced).

    Parameters
    ----------
    cores : int, optional
        Cores per job (default: the config's, else 1).
    memory : str, optional
        Memory per job, e.g. ``"4GiB"`` (default: the config's, else 2 GiB per core).
    processes : int, optional
        Worker processes per job (default: the config's, else one per core, each
        with one thread).
    walltime : str, optional
        SLURM time limit per job, e.g. ``"00:30:00"`` (default: dask-jobqueue's
        config, 30 minutes). Workers die with their job: ask for the whole run.
    queue, account : str, optional
        SLURM partition (``-p``) and account (``-A``) (default: the config's).
    interface : str or None, optional
        Network interface of the scheduler and the workers (``"ib0"``, ``"lo"``).
        Default: the config's, else ``$H5MDX_SLURM_INTERFACE``, else ``"lo"`` on a
        single-node cluster of this machine (:func:`single_node_interface`), else
        dask's choice. None means dask's choice. dask-jobqueue gives the scheduler
        the workers' interface unless ``scheduler_options`` names a ``host`` or an
        ``interface``.
    python : str, optional
        Interpreter of the workers (default: the config's, else this one,
        ``sys.executable``: dask-jobqueue's own default).
    job_script_prologue : sequence of str, optional
        Shell lines before the worker starts (``module load ...``; default: the
        config's). The line :data:`HDF5_PROLOGUE` is added unless a line sets
        ``HDF5_USE_FILE_LOCKING``.
    scheduler_options : mapping, optional
        Options of the dask scheduler (merged over the config's); its
        ``dashboard_address`` defaults to ``":0"`` (a free port; see
        ``client.dashboard_link``).
    log_directory : path-like, optional
        Where SLURM writes the jobs' output (default: the config's, else the
        submission directory).
    job_extra_directives : sequence of str, optional
        More ``#SBATCH`` options, e.g. ``["--exclusive"]`` (default: the config's).
    job_name : str, optional
        SLURM job name (default: the config's if it is not dask-jobqueue's
        ``dask-worker``, else ``h5mdx-dask-<random>``, unique to the cluster).
    config_name : str, optional
        Section of ``jobqueue`` in dask's config (default ``"slurm"``).
    **overrides
        Any other ``SLURMCluster`` argument (``death_timeout``, ``local_directory``,
        ``worker_extra_args``, ``job_mem``, ...).

    Returns
    -------
    dict
        Keyword arguments for ``dask_jobqueue.SLURMCluster``; always ``cores``,
        ``processes``, ``memory``, ``interface``, ``job_script_prologue``,
        ``scheduler_options``, ``job_name`` and ``config_name``.

    Raises
    ------
    ValueError
        For impossible values (no cores, more processes than cores, a fraction of a
        core, a memory that is no size or under 1 MiB, a malformed walltime, given or
        in the config).
    """
    cores = _whole(_first(cores, _config("cores", config_name), 1), "cores")
    if cores < 1:
        raise ValueError(f"cores must be at least 1, not {cores}")
    # dask-jobqueue's own default would be about sqrt(cores) processes of several threads
    processes = _whole(_first(processes, _config("processes", config_name), cores),
                       "processes")
    if not 1 <= processes <= cores:
        raise ValueError(
            f"processes={processes} must be between 1 and cores={cores}: each worker process "
            "needs a core (e.g. cores=4, processes=4 for four single-threaded workers)"
        )
    memory = _first(memory, _config("memory", config_name),
                    f"{DEFAULT_MEMORY_PER_CORE_GIB * cores}GiB")
    _check_memory(memory)
    # checked here (given or configured) so that a typo fails before any job is submitted
    checked = _check_walltime(_first(walltime, _config("walltime", config_name)))
    if interface is _AUTO:
        interface = _first(_config("interface", config_name),
                           os.environ.get(INTERFACE_ENV) or None)
        if interface is None:
            interface = single_node_interface()
    prologue = list(_config("job-script-prologue", config_name) or []) \
        if job_script_prologue is None else list(job_script_prologue)
    if not any("HDF5_USE_FILE_LOCKING" in line for line in prologue):
        prologue.append(HDF5_PROLOGUE)
    # given options extend the config's (SLURMCluster would replace them)
    sched = dict(_config("scheduler-options", config_name) or {})
    sched.update(scheduler_options or {})
    # a free port rather than 8787, often taken on shared login nodes (client.dashboard_link)
    sched.setdefault("dashboard_address", ":0")
    if job_name is None:
        name = _config("name", config_name)
        job_name = name if name not in (None, "dask-worker") else (
            f"h5mdx-dask-{uuid.uuid4().hex[:8]}")
    options: dict[str, Any] = {
        "cores": cores,
        "processes": processes,
        "memory": memory,
        "interface": interface,
        "job_script_prologue": prologue,
        "scheduler_options": sched,
        "job_name": job_name,
        "config_name": config_name,
    }
    given = {
        "walltime": None if walltime is None else checked,
        "queue": queue,
        "account": account,
        "python": python,
        "log_directory": None if log_directory is None else os.fspath(log_directory),
        "job_extra_directives": None if job_extra_directives is None
        else list(job_extra_directives),
    }
    options.update({k: v for k, v in given.items() if v is not None})
    options.update(overrides)
    return options


def _import_jobqueue() -> Any:
    """Import dask_jobqueue, undoing the SIGINT handler it installs on import.

    ``dask_jobqueue.runner`` sets ``signal.signal(SIGINT, lambda *_: sys.exit())``
    at import time, which turns Ctrl-C into a silent exit with status 0; h5mdx
    restores Python's ``KeyboardInterrupt`` so that an interrupted run fails.
    """
    from h5mdx._optional import import_optional

    jq = import_optional("dask_jobqueue", "dask workers as SLURM jobs")
    if threading.current_thread() is threading.main_thread():
        handler = signal.getsignal(signal.SIGINT)
        if getattr(handler, "__module__", "") == "dask_jobqueue.runner":
            signal.signal(signal.SIGINT, signal.default_int_handler)
    return jq


def _job_script(jq: Any, options: Mapping[str, Any], scheduler: str, name: str) -> str:
    """The job script of a ``SLURMCluster(**options)``, without starting a scheduler.

    ``cluster.job_script()`` is the public way, but it needs a cluster, whose
    constructor starts a scheduler. So the script comes from the cluster's job
    class (``SLURMCluster.job_cls``, public; what ``cluster.job_script()`` uses
    too), given the keywords the cluster passes on to its jobs: all but the
    cluster's own parameters (read from its public signature), ``interface``,
    ``protocol`` and ``config_name`` being passed to both.
    """
    params = inspect.signature(jq.JobQueueCluster.__init__).parameters
    cluster_only = {n for n, p in params.items() if p.kind is p.POSITIONAL_OR_KEYWORD} - {
        "self", "interface", "protocol", "config_name"}
    job_kwargs = {k: v for k, v in options.items() if k not in cluster_only}
    return jq.SLURMCluster.job_cls(scheduler=scheduler, name=name, **job_kwargs).job_script()


def job_script_preview(**kwargs: Any) -> str:
    """The job script :func:`slurm` would submit, without SLURM or a scheduler.

    Parameters
    ----------
    **kwargs
        The arguments of :func:`slurm_options`.

    Returns
    -------
    str
        The script (shebang, ``#SBATCH`` lines, prologue, worker command); the
        scheduler address is a placeholder.
    """
    jq = _import_jobqueue()
    return _job_script(jq, slurm_options(**kwargs), "tcp://<scheduler-address>:8786",
                       "h5mdx-preview")


# ------------------------------------------------------------------------------ the cluster

_LIVE: weakref.WeakSet[Any] = weakref.WeakSet()
#: The job name :func:`slurm` gave each of its clusters (scancel --name in :func:`release`).
_JOB_NAMES: weakref.WeakKeyDictionary[Any, str] = weakref.WeakKeyDictionary()
_install_lock = threading.Lock()
_installed = False


def _on_signal(signum: int, frame: Any) -> None:
    if not list(_LIVE):
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)
        return
    # An exception in the main thread runs the ``with`` blocks' exits and atexit.
    raise SystemExit(128 + signum)


#: The SIGTERM/SIGHUP handlers replaced while clusters live (restored by release()).
_previous_handlers: dict[int, Any] = {}


def _install_cleanup() -> None:
    """Release the live clusters at exit and on SIGTERM/SIGHUP (while any cluster lives)."""
    global _installed
    with _install_lock:
        if not _installed:
            _installed = True
            atexit.register(_release_all)
        if threading.current_thread() is not threading.main_thread() or _previous_handlers:
            return
        for name in ("SIGTERM", "SIGHUP"):
            sig = getattr(signal, name, None)
            if sig is not None and signal.getsignal(sig) in (signal.SIG_DFL, None):
                _previous_handlers[sig] = signal.getsignal(sig)
                signal.signal(sig, _on_signal)


def _restore_signals() -> None:
    """Put back the handlers :func:`_install_cleanup` replaced, once no cluster lives."""
    with _install_lock:
        if list(_LIVE) or threading.current_thread() is not threading.main_thread():
            return
        for sig, previous in list(_previous_handlers.items()):
            if signal.getsignal(sig) is _on_signal:
                signal.signal(sig, previous if previous is not None else signal.SIG_DFL)
            del _previous_handlers[sig]


def _release_all() -> None:
    for cluster in list(_LIVE):
        release(cluster, timeout=10.0)


#: What sbatch says where it cannot reach slurmctld (no fault of the job's options).
_NO_CONTROLLER = ("unable to contact slurm controller", "connect failure",
                  "socket timed out", "connection refused")


def _preflight(options: Mapping[str, Any], jq: Any) -> None:
    """``sbatch --test-only`` the job script: rejects bad partitions/accounts/limits now."""
    if shutil.which("sbatch") is None:
        raise SlurmError(
            "sbatch is not on PATH: run this on a SLURM login node, or install SLURM "
            "(Debian: apt-get install slurm-wlm munge; in a clone of h5mdx: bash scripts/setup.sh "
            "--slurm)"
        )
    script = _job_script(jq, options, "tcp://127.0.0.1:1", "h5mdx-preflight")
    try:
        proc = _run(["sbatch", "--test-only"], timeout=60.0, stdin=script)
    except subprocess.TimeoutExpired as err:
        raise SlurmError("sbatch --test-only did not answer within 60 s: is slurmctld up? "
                         "(sinfo)") from err
    if proc.returncode != 0:
        said = (proc.stderr.strip() or proc.stdout.strip()).replace("\n", "; ")
        if any(sign in said.lower() for sign in _NO_CONTROLLER):
            raise SlurmError(
                f"SLURM's controller does not answer: {said}. slurmctld is down or "
                "unreachable from here (scontrol ping; a local test cluster, in a clone of h5mdx: "
                "bash scripts/slurm-local.sh start); the job options are not at fault")
        raise SlurmError(
            f"SLURM rejects the worker jobs: {said}. Check queue=/account=/walltime=/cores=/"
            f"memory= (sinfo -s lists the partitions); the job script is:\n{script}"
        )


def slurm(jobs: int | None = None, *, check: bool = True, **kwargs: Any) -> Any:
    """A ``dask_jobqueue.SLURMCluster`` configured for h5mdx.

    Parameters
    ----------
    jobs : int, optional
        Submit this many worker jobs now (``cluster.scale(jobs=jobs)``).
    check : bool, default True
        First ask ``sbatch --test-only`` whether SLURM accepts the job script, so
        that a wrong partition, account or limit fails here with SLURM's reason
        instead of leaving the cluster without workers.
    **kwargs
        ``cores``, ``memory``, ``processes``, ``walltime``, ``queue``, ``account``,
        ``interface``, ``python``, ``job_script_prologue``, ``scheduler_options``,
        ``log_directory``, ``job_extra_directives``, ``job_name`` and any other
        ``SLURMCluster`` argument: see :func:`slurm_options`. Unset ones come from
        dask's config (``jobqueue.slurm``), then from h5mdx's defaults.

    Returns
    -------
    dask_jobqueue.SLURMCluster
        Use it as a context manager, or call :func:`release` (``cluster.close()``
        also cancels the jobs). Its jobs are cancelled at interpreter exit.

    Raises
    ------
    SlurmError
        If ``check`` and SLURM rejects the job script, or sbatch is missing.
    MissingDependencyError
        If dask-jobqueue is not installed (``pip install dask-jobqueue``).
    """
    jq = _import_jobqueue()
    options = slurm_options(**kwargs)
    if check:
        _preflight(options, jq)
    cluster = jq.SLURMCluster(**options)
    _JOB_NAMES[cluster] = options["job_name"]
    _LIVE.add(cluster)
    _install_cleanup()
    if jobs:
        cluster.scale(jobs=int(jobs))
    return cluster


def job_ids(cluster: Any) -> list[str]:
    """SLURM job ids of the cluster's current jobs (submitted, pending or running)."""
    ids = []
    for job in list(getattr(cluster, "workers", {}).values()):
        jid = getattr(job, "job_id", None)
        if jid:
            ids.append(str(jid))
    return sorted(set(ids), key=lambda s: (len(s), s))


def job_states(ids: Iterable[str], timeout: float = 20.0) -> dict[str, tuple[str, str]]:
    """State and reason of SLURM jobs, from ``squeue -h -j <ids> -o "%i %T %r"``.

    Parameters
    ----------
    ids : iterable of str
        Job ids.
    timeout : float, optional
        Seconds to wait for squeue.

    Returns
    -------
    dict
        ``{job_id: (state, reason)}``; a job squeue no longer lists (ended some
        time ago) is ``("ENDED", "")``, and every job is ``("UNKNOWN", why)`` when
        squeue cannot be asked.
    """
    ids = [str(i) for i in ids]
    if not ids:
        return {}
    try:
        proc = _run(["squeue", "-h", "-j", ",".join(ids), "-o", "%i %T %r"], timeout=timeout)
    except (OSError, subprocess.TimeoutExpired) as err:
        return dict.fromkeys(ids, ("UNKNOWN", f"squeue failed: {err}"))
    states: dict[str, tuple[str, str]] = {}
    for line in proc.stdout.splitlines():
        parts = line.split(None, 2)
        if len(parts) >= 2:
            reason = parts[2].strip() if len(parts) > 2 else ""
            states[parts[0]] = (parts[1], "" if reason in ("None", "(null)") else reason)
    if proc.returncode != 0 and not states:
        said = proc.stderr.strip()
        if "Invalid job id" in said:
            return dict.fromkeys(ids, ("ENDED", ""))
        return dict.fromkeys(ids, ("UNKNOWN", f"squeue failed: {said}"))
    return {i: states.get(i, ("ENDED", "")) for i in ids}


def _plural(ids: list[str]) -> str:
    return f"job {ids[0]} is" if len(ids) == 1 else f"jobs {', '.join(ids)} are"


def _describe(states: Mapping[str, tuple[str, str]], have: int = 0,
              per_job: int = 1) -> tuple[str, list[str]]:
    groups: dict[tuple[str, str], list[str]] = {}
    for jid, st in states.items():
        groups.setdefault(st, []).append(jid)
    parts, hints = [], []
    for (state, reason), ids in sorted(groups.items(), key=lambda kv: kv[1][0]):
        if state == "ENDED":
            parts.append(f"{_plural(ids)} no longer queued (ended or failed)")
            hints.append("a worker job that ends at once usually failed to start its worker: "
                         "read its output (log_directory=, or slurm-<jobid>.out in the "
                         "submission directory)")
        else:
            parts.append(f"{_plural(ids)} {state}" + (f" ({reason})" if reason else ""))
            if state == "PENDING" and reason:
                hint = pending_hint(reason)
                if hint:
                    hints.append(f"{reason}: {hint}")
            elif state == "RUNNING" and len(ids) * per_job > have:
                hints.append("running jobs whose workers did not connect: read the job output "
                             "(log_directory=) and check the network interface (interface=, "
                             f"${INTERFACE_ENV}, --interface)")
    return "; ".join(parts), hints


def _processes_per_job(cluster: Any) -> int:
    """Worker processes per job, from the public worker spec of the cluster.

    ``SpecCluster.new_spec`` is the template every job is made from; dask-jobqueue puts
    the job's options (``processes`` among them) under ``"options"``.
    """
    spec = getattr(cluster, "new_spec", None) or {}
    return max(1, int((spec.get("options") or {}).get("processes") or 1))


def _never_gives_workers(state: str, reason: str) -> bool:
    """Whether a job in ``state`` for ``reason`` will start no (more) worker: it ended,
    or it pends for a reason no wait ends (:data:`NEVER_STARTS`: a walltime above the
    partition's limit waited out the whole --wait-timeout, an hour where one was asked for
    a busy queue, before saying so)."""
    return state in _GONE or (state == "PENDING" and reason_key(reason) in NEVER_STARTS)


def wait_for_workers(cluster: Any, client: Any, n: int | None = None,
                     timeout: float = DEFAULT_TIMEOUT, poll: float = 0.5) -> int:
    """Wait until ``n`` workers have joined, or explain why not.

    Parameters
    ----------
    cluster : dask_jobqueue.SLURMCluster
        The cluster (for its job ids).
    client : distributed.Client
        A client of the cluster.
    n : int, optional
        Workers to wait for (default: all that the cluster asked for).
    timeout : float, optional
        Seconds before giving up.
    poll : float, optional
        Seconds between checks.

    Returns
    -------
    int
        The number of workers.

    Raises
    ------
    WorkerTimeoutError
        After ``timeout`` s, or as soon as every job has ended or pends for a reason
        no wait ends (``NEVER_STARTS``) while workers are missing, with the jobs'
        states: ``"0 of 2 workers after 60 s: jobs 12, 13
        are PENDING (Resources)"`` and what to do about it.
    """
    if n is None:
        n = len(getattr(cluster, "worker_spec", {})) * _processes_per_job(cluster)
    n = int(n)
    t0 = time.monotonic()
    last_check = t0
    have = client_workers(client)
    while have < n:
        now = time.monotonic()
        if now - t0 >= timeout:
            break
        if now - last_check >= 2.0:
            last_check = now
            ids = job_ids(cluster)
            if ids and all(_never_gives_workers(*s) for s in job_states(ids).values()):
                have = client_workers(client)
                if have < n:
                    break
        time.sleep(poll)
        have = client_workers(client)
    if have >= n:
        return have
    elapsed = time.monotonic() - t0
    ids = job_ids(cluster)
    states = job_states(ids)
    if states:
        per_job = _processes_per_job(cluster)
        what, hints = _describe(states, have, per_job)
    else:
        what, hints = "no job was submitted", [
            "sbatch failed or the cluster was not scaled: call cluster.scale(jobs=N) and "
            "check the job script with h5mdx.parallel.cluster.job_script_preview(...)"]
    message = f"{have} of {n} workers after {elapsed:.0f} s: {what}"
    if hints:
        message += ". " + ". ".join(dict.fromkeys(hints))
    raise WorkerTimeoutError(message, have, n, states)


def release(cluster: Any, timeout: float = 20.0) -> list[str]:
    """Close the cluster and make sure that none of its SLURM jobs is left.

    Closes the cluster (which cancels the jobs it knows), then cancels with
    ``scancel`` whatever of its jobs squeue still lists, by id and by the
    cluster's unique job name. Safe to call twice.

    Parameters
    ----------
    cluster : dask_jobqueue.SLURMCluster
        The cluster.
    timeout : float, optional
        Seconds for closing the cluster.

    Returns
    -------
    list of str
        Ids of the jobs that had to be cancelled after closing (usually none).
    """
    ids = job_ids(cluster)
    with contextlib.suppress(Exception):
        cluster.close(timeout=timeout)
    _LIVE.discard(cluster)
    _restore_signals()
    left = [i for i, (state, _) in job_states(ids).items() if state not in _GONE]
    name = _JOB_NAMES.get(cluster)  # only for clusters made by slurm(): a name of their own
    if shutil.which("scancel") is None:
        return left
    with contextlib.suppress(OSError, subprocess.TimeoutExpired):
        if left:
            _run(["scancel", *left], timeout=30.0)
        if name:
            _run(["scancel", f"--name={name}", f"--user={getpass.getuser()}"], timeout=30.0)
    return left


@contextlib.contextmanager
def slurm_client(jobs: int = 1, *, timeout: float = DEFAULT_TIMEOUT,
                 wait: bool = True, **kwargs: Any) -> Iterator[Any]:
    """A distributed client on workers in SLURM jobs, released on exit.

    Parameters
    ----------
    jobs : int, default 1
        Worker jobs to submit.
    timeout : float, optional
        Seconds to wait for all workers (:func:`wait_for_workers`).
    wait : bool, default True
        Wait for the workers before entering the block.
    **kwargs
        For :func:`slurm`.

    Yields
    ------
    distributed.Client
        Its ``cluster`` attribute is the SLURMCluster.

    Raises
    ------
    WorkerTimeoutError
        If the workers do not come in time (the jobs are cancelled first).
    ValueError
        If ``jobs`` is no whole number of at least 1.
    """
    from h5mdx._optional import import_optional

    # jobs=0 submitted nothing, waited for no worker, and the computation on the client
    # then waited for one forever
    if _whole(jobs, "jobs (--jobs)") < 1:
        raise ValueError(f"jobs (--jobs) must be at least 1, not {jobs}: without a worker "
                         "job the computation would wait for a worker forever")
    distributed = import_optional("distributed", "dask workers as SLURM jobs")
    cluster = slurm(jobs=jobs, **kwargs)
    try:
        with distributed.Client(cluster) as client:
            if wait:
                wait_for_workers(cluster, client, timeout=timeout)
            yield client
    finally:
        release(cluster)


# -------------------------------------------------------------------------------- timing


def _worker_ident() -> tuple[str, int, str | None]:
    return socket.gethostname(), os.getpid(), os.environ.get("SLURM_JOB_ID")


def worker_job_ids(client: Any) -> dict[str, str | None]:
    """``{worker address: SLURM job id}`` from each worker's ``SLURM_JOB_ID``."""
    return {addr: ident[2] for addr, ident in client.run(_worker_ident).items()}


def annotate_job_ids(run: Any, client: Any) -> Any:
    """Fill in the SLURM job id of every timing record of a run on SLURM workers.

    Each in-task record knows its host and process; the workers are asked for
    their ``SLURM_JOB_ID`` (call this while they are alive, inside the
    ``slurm_client`` block).

    Parameters
    ----------
    run : h5mdx.timing.TimingRun
        What ``h5mdx.timing.capture(backend="slurm", client=client)`` recorded.
    client : distributed.Client
        The client of the run.

    Returns
    -------
    pandas.DataFrame
        ``run.records`` with the ``slurm_job_id`` column filled.
    """
    idents = client.run(_worker_ident)
    by_proc = {(host, int(pid)): job for host, pid, job in idents.values()}
    by_addr = {addr: ident[2] for addr, ident in idents.items()}
    for rec in run.spooled:
        if rec.get("slurm_job_id") is None:
            job = by_proc.get((rec.get("host"), int(rec.get("pid", -1))))
            if job is not None:
                rec["slurm_job_id"] = job
    records = run.records
    if "slurm_job_id" in records and "worker" in records:
        missing = records["slurm_job_id"].isna()
        if missing.any():
            records.loc[missing, "slurm_job_id"] = records.loc[missing, "worker"].map(by_addr)
    return records


# ------------------------------------------------------------------------------------- CLI


def add_job_options(group: Any, *, wait_default: float | None = DEFAULT_TIMEOUT,
                    wait_help: str | None = None) -> None:
    """Add the SLURM options every h5mdx command shares to an argparse group.

    ``--walltime`` (also ``--time``), ``--queue`` (also ``--partition``), ``--account``
    and ``--wait-timeout`` (also ``--slurm-timeout`` and ``--timeout``): the same names
    in ``h5mdx rmsd --scheduler slurm`` and ``h5mdx slurm-script``. Their values land in
    ``walltime``, ``queue``, ``account`` and ``wait_timeout``.

    Parameters
    ----------
    group : argparse parser or argument group
        Where to add them.
    wait_default : float or None, optional
        Default of ``--wait-timeout`` (None: no limit).
    wait_help : str, optional
        Help of ``--wait-timeout``.
    """
    group.add_argument("--walltime", "--time", dest="walltime", metavar="T",
                       help="time limit per job, e.g. 00:30:00")
    group.add_argument("--queue", "--partition", dest="queue", metavar="Q",
                       help="SLURM partition (-p)")
    group.add_argument("--account", metavar="A", help="SLURM account (-A)")
    group.add_argument("--wait-timeout", "--slurm-timeout", "--timeout", dest="wait_timeout",
                       type=float, default=wait_default, metavar="S",
                       help=wait_help or "seconds to wait for the workers (default "
                                         f"{wait_default:g})")


def add_cli_arguments(parser: Any) -> None:
    """Add the SLURM options of ``--scheduler slurm`` to an argparse parser.

    Options: ``--jobs --cores --memory --interface --job-log-dir`` and the shared ones of
    :func:`add_job_options` (``--walltime --queue --account --wait-timeout``). Unset ones
    come from dask's config (``jobqueue.slurm``), then from h5mdx's defaults (see
    :func:`slurm_options`).
    """
    g = parser.add_argument_group(
        "SLURM (--scheduler slurm)",
        "dask workers as SLURM jobs (dask-jobqueue); unset options come from the "
        "jobqueue.slurm section of your dask config",
    )
    g.add_argument("--jobs", type=int, metavar="N",
                   help="worker jobs to submit (default: enough for --workers, else 1)")
    g.add_argument("--cores", type=int, metavar="C",
                   help="cores per job, one single-threaded worker each (default 1)")
    g.add_argument("--memory", metavar="M", help="memory per job, e.g. 4GiB (default 2GiB/core)")
    add_job_options(g)
    g.add_argument("--interface", metavar="IF",
                   help='network interface, e.g. ib0 (default: "lo" on a single-node '
                        f"cluster of this machine, ${INTERFACE_ENV})")
    g.add_argument("--job-log-dir", metavar="DIR",
                   help="directory for the worker jobs' output (default: current directory)")


def _cli_kwargs(args: Any) -> dict[str, Any]:
    kwargs: dict[str, Any] = {}
    for key in ("cores", "memory", "walltime", "queue", "account", "interface"):
        value = getattr(args, key, None)
        if value is not None:
            kwargs[key] = value
    log_dir = getattr(args, "job_log_dir", None)
    if log_dir is not None:
        os.makedirs(log_dir, exist_ok=True)
        kwargs["log_directory"] = os.path.abspath(log_dir)
    return kwargs


def slurm_client_from_args(args: Any, workers: int | None = None
                           ) -> contextlib.AbstractContextManager[Any]:
    """The client of ``--scheduler slurm``, from parsed command-line options.

    Reads the options of :func:`add_cli_arguments` (or any subset of them:
    ``jobs cores memory walltime queue account interface job_log_dir`` and
    ``slurm_timeout`` or ``wait_timeout``). The number of jobs is ``--jobs``,
    else enough jobs for ``workers`` (``ceil(workers / processes per job)``),
    else 1.

    Parameters
    ----------
    args : argparse.Namespace
        Parsed options.
    workers : int, optional
        Workers wanted when ``--jobs`` is not given (default ``args.workers``).

    Returns
    -------
    context manager
        Yields a ``distributed.Client`` whose workers have all joined; the jobs
        are cancelled when the block is left (also on Ctrl-C).
    """
    kwargs = _cli_kwargs(args)
    jobs = getattr(args, "jobs", None)
    if jobs is None:
        workers = workers if workers is not None else getattr(args, "workers", None)
        per_job = slurm_options(interface=None, **{k: v for k, v in kwargs.items()
                                                   if k != "interface"})["processes"]
        jobs = math.ceil(int(workers) / per_job) if workers else 1
    timeout = _first(getattr(args, "slurm_timeout", None), getattr(args, "wait_timeout", None),
                     DEFAULT_TIMEOUT)
    return slurm_client(jobs=int(jobs), timeout=float(timeout), **kwargs)


#: Short name of :func:`slurm_client_from_args`.
cli_client = slurm_client_from_args
