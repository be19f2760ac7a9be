"""Capture one timing record per dask task: ``with capture() as run: result.compute()``.

Two sources are merged into one row per task:

* **Inside the task.** Tasks that wrap their work in
  :class:`~h5mdx.timing.phases.BlockTimer` (``h5mdx.rmsd`` does) append a
  record with their frame range, absolute start/stop and the split into
  phases (``io``, ``compute``, ...) to the spool directory named by
  ``H5MDX_TIMING_SPOOL``. :func:`capture` points that variable at a fresh
  directory for the duration of the ``with`` block: in ``os.environ`` for the
  local schedulers (threads share it, the processes scheduler starts its pool
  per ``compute`` and inherits it; a pool of your own, started before the block,
  does not, and :func:`capture` warns that it recorded no task) and, with a
  ``distributed`` client, on
  every worker through ``client.run``. The spooled record also carries the key
  of the dask task that produced it (see
  :func:`~h5mdx.timing.phases.current_task_key`).
* **From the scheduler.** For the local schedulers a
  :class:`dask.callbacks.Callback` notes when each task was handed to the pool
  (``pretask``) and when its result came back (``posttask``, which also gives
  the thread id or process id that ran it). For ``distributed`` a scheduler
  plugin of our own keeps *every* finished task with its worker and
  ``startstops`` in an unbounded list, so long runs lose nothing (the
  dashboard's task stream keeps only its last few thousand tasks).

Records are joined on the task key. A spooled record whose key is unknown
is joined to the scheduler record of the same worker (thread, pid or worker
address) whose time window contains it (put on the worker's clock first, see
``_clock_offsets``), the nearest such window winning.
A task run more than once (``distributed`` runs it again when a worker is lost
with its result, or while it ran) is one row, its last attempt's, with
``retries`` and ``t_retried`` (the earlier attempts and their seconds).

``t_wait`` of a task is the time its worker sat idle before the task started:
from the end of the worker's previous task (timed or not), or from the start of
the run (entering the ``with`` block) for its first task; for a ``distributed``
worker of several threads, the time the task's thread sat idle. Per worker (per
thread of such a worker), the waits and the busy times of its tasks add up to the
time from the run's start to the end of its last task. Every wait is measured on
one clock, the worker's: a ``distributed`` worker notes the run's start on its own
clock (:attr:`TimingRun.worker_t0`; a worker that joins during the block, when it
joins), so that a node whose clock is ahead of the client's does not add its
offset to its first task's wait. (pmda's "wait" instead counts from the start of the
run for every block; that is ``t_start - run.t_run_start`` here.)
"""

from __future__ import annotations

import os
import shutil
import socket
import sys
import tempfile
import threading
import time
import uuid
import warnings
from collections import defaultdict
from collections.abc import Iterator, Mapping
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

from h5mdx.timing.phases import (
    DELAY_ENV,
    MEMORY_SPOOL,
    SPOOL_ENV,
    parse_delay,
    read_spool,
    take_records,
)

__all__ = ["TimingRun", "capture"]

_TASK_BACKENDS = ("threads", "processes", "synchronous", "distributed", "dask-mpi", "slurm")
_KNOWN_PHASES = ("init_top", "init_traj", "warmup", "io", "compute", "comm_gather")
_EPS = 0.05  # seconds of slack when fitting an in-task interval into a scheduler window


def _key_split(key: str) -> str:
    from dask.utils import key_split

    return str(key_split(key))


class TimingRun:
    """What :func:`capture` recorded for one run.

    Attributes
    ----------
    run_id : str
        Identifier of the run.
    backend : str
        ``threads``, ``processes``, ``synchronous``, ``distributed``, ``dask-mpi`` or ``slurm``.
    n_workers : int
        Number of workers.
    t_run_start, t_run_stop : float
        Unix times when the ``with`` block was entered and left.
    spooled : list of dict
        The raw in-task records.
    scheduler_records : list of dict
        The raw scheduler records: ``key``, ``worker``, ``sched_start``,
        ``sched_stop`` (and ``t_transfer`` for distributed).
    meta : dict
        The run's metadata (see :func:`h5mdx.timing.records.run_metadata`).
    """

    def __init__(self, run_id: str, backend: str, n_workers: int, meta: dict[str, Any]) -> None:
        self.run_id = run_id
        self.backend = backend
        self.n_workers = int(n_workers)
        self.meta = meta
        self.t_run_start = float("nan")
        self.t_run_stop = float("nan")
        self.spooled: list[dict[str, Any]] = []
        self.scheduler_records: list[dict[str, Any]] = []
        self.all_tasks = False
        self.pid_to_worker: dict[int, str] = {}
        self.n_unmatched = 0
        #: Tasks whose in-task records left with their worker (see ``_warn_lost``).
        self.n_lost = 0
        #: The distributed workers that gave their in-task records at the end (None for
        #: the local schedulers, whose records are in the spool directory).
        self.answered: set[str] | None = None
        #: The workers the scheduler still listed at the end that did not answer within
        #: ``ANSWER_TIMEOUT_S`` (busy, or unreachable): not removed, not left.
        self.unanswered: set[str] = set()
        #: The workers the scheduler removed while the block ran (they left the cluster).
        self.removed: set[str] = set()
        #: Per distributed worker, the run's start on its own clock (when it joined, for a
        #: worker that joined during the block): its first task's wait counts from there.
        self.worker_t0: dict[str, float] = {}
        #: Per distributed worker, how far the scheduler's clock is ahead of its own, as
        #: the worker estimated it (distributed's ``scheduler_delay``).
        self.scheduler_delay: dict[str, float] = {}
        #: Whether ``n_workers`` was counted (not given): then it is the most workers the
        #: cluster had at once while the block ran.
        self.counted = False
        self._records: Any = None

    @property
    def wall(self) -> float:
        """Wall time of the ``with`` block (s)."""
        return self.t_run_stop - self.t_run_start

    @property
    def records(self) -> Any:
        """The merged records, one row per task (a validated pandas DataFrame)."""
        if self._records is None:
            self._records = _merge(self)
        return self._records

    def save(self, path: str | os.PathLike[str]) -> Path:
        """Write :attr:`records` and ``meta`` to ``.parquet`` or ``.csv``."""
        from h5mdx.timing.records import save

        return save(self.records, path, self.meta)

    def __repr__(self) -> str:
        return (
            f"<TimingRun {self.run_id} backend={self.backend} n_workers={self.n_workers} "
            f"tasks={len(self.spooled)} wall={self.wall:.3f}s>"
        )


def _local_recorder() -> Any:
    from dask.callbacks import Callback

    class _LocalTaskRecorder(Callback):
        """Start (hand-off to the pool) and stop (result back) of every local task."""

        def __init__(self) -> None:
            super().__init__()
            self.starts: dict[Any, float] = {}
            self.rows: list[dict[str, Any]] = []
            self.lock = threading.Lock()

        def _pretask(self, key: Any, dsk: Any, state: Any) -> None:
            with self.lock:
                self.starts[key] = time.time()

        def _posttask(self, key: Any, result: Any, dsk: Any, state: Any, worker_id: Any) -> None:
            t = time.time()
            with self.lock:
                start = self.starts.pop(key, float("nan"))
                self.rows.append(
                    {"key": str(key), "worker_id": worker_id, "sched_start": start,
                     "sched_stop": t}
                )

    return _LocalTaskRecorder()


def _scheduler_plugin_class() -> Any:
    from distributed.diagnostics.plugin import SchedulerPlugin

    class TaskRecorder(SchedulerPlugin):
        """Keep every finished task (unbounded, unlike the dashboard's task stream), every
        attempt that its worker's removal cut short, and the workers the scheduler
        removed."""

        def __init__(self, name: str) -> None:
            self.name = name
            self.records: list[dict[str, Any]] = []
            #: Workers the scheduler removed while the block ran, and when.
            self.removed: dict[str, float] = {}
            self.sent: dict[Any, tuple[str, float]] = {}  # key -> (worker, hand-off time)
            self.scheduler: Any = None
            #: The most workers the cluster had at once while the block ran.
            self.most = 0

        async def start(self, scheduler: Any) -> None:
            self.scheduler = scheduler
            self.most = len(scheduler.workers)

        def transition(self, key: Any, start: str, finish: str, *args: Any, **kwargs: Any) -> None:
            if finish == "processing" and self.scheduler is not None:
                ws = getattr(self.scheduler.tasks.get(key), "processing_on", None)
                if ws is not None:
                    self.sent[key] = (str(ws.address), time.time())
            if start != "processing":
                return
            sent = self.sent.pop(key, None)
            if finish in ("memory", "erred"):
                self.records.append(
                    {"key": str(key), "worker": kwargs.get("worker"),
                     "thread": kwargs.get("thread"),
                     "startstops": list(kwargs.get("startstops") or ()), "status": finish}
                )
            elif sent is not None and sent[0] not in self.scheduler.workers:
                # its worker was removed while it ran: the attempt is lost, the task
                # goes back to be run again; from its hand-off to now (scheduler's clock)
                self.records.append(
                    {"key": str(key), "worker": sent[0], "thread": None,
                     "startstops": [{"action": "lost", "start": sent[1],
                                     "stop": time.time()}], "status": "lost"})

        def add_worker(self, scheduler: Any, worker: str) -> None:
            self.most = max(self.most, len(scheduler.workers))

        def remove_worker(self, scheduler: Any, worker: str, **kwargs: Any) -> None:
            self.removed.setdefault(str(worker), time.time())

    return TaskRecorder


def _spool_plugin(values: Mapping[str, str | None], token: str) -> Any:
    """A worker plugin that sets ``values`` in the environment of every worker that joins
    while the block runs, and gives each its own back when it is unregistered.
    ``client.run`` reaches only the workers there at the start: a SLURM worker job that
    started during the block, or a worker of an adaptive cluster, timed its tasks into no
    spool, and the records lacked them.

    It belongs to the run of ``token`` (its spool's name, unique, where a run id given
    may be reused): its setup does nothing once that run has ended (``_run_ended``). A
    worker stopped during the block that woke after it could get
    the plugin's removal before its addition: the removal found nothing to remove, the
    addition set the spool variables for good, and the worker's records piled up in
    memory that nobody collected."""
    from distributed.diagnostics.plugin import WorkerPlugin

    class SpoolEnviron(WorkerPlugin):
        def __init__(self, values: Mapping[str, str | None], token: str) -> None:
            self.values = dict(values)
            self.token = token
            self.old: dict[str, str | None] = {}

        async def setup(self, worker: Any) -> None:
            if await _run_ended(worker, self.token):
                return
            # the run's start on this worker's clock (or when it joined the block)
            self.old = _set_env({**self.values, T0_ENV: repr(time.time())})

        def teardown(self, worker: Any) -> None:
            old, self.old = self.old, {}
            _set_env(old)

    return SpoolEnviron(values, token)


#: Where capture notes, in the scheduler's metadata, the runs that have ended (the last
#: part of the key is the run's token, its spool's name).
_ENDED_KEY = "h5mdx-timing-ended"


async def _run_ended(worker: Any, token: str) -> bool:
    """Whether the run of ``token`` (its spool's name) has ended, as the scheduler of
    ``worker`` says (``_end_run``); False where it cannot be asked."""
    try:
        return bool(await worker.scheduler.get_metadata(keys=[_ENDED_KEY, token],
                                                        default=False))
    except Exception:  # noqa: BLE001 - no scheduler to ask: the run goes on
        return False


async def _set_env_of_run(values: Mapping[str, str | None], token: str,
                          dask_worker: Any = None) -> dict[str, str | None] | None:
    """``_set_env`` on a worker, unless the run of ``token`` (its spool's name) has ended
    (None then): a request that reached a stopped worker only after the block ended."""
    if dask_worker is not None and await _run_ended(dask_worker, token):
        return None
    return _set_env(values)


def _end_run(client: Any, token: str) -> None:
    """Note in the scheduler that the run of ``token`` (its spool's name) has ended,
    before its worker plugin is removed: a worker that gets the plugin (or the spool
    variables) late does not take them."""
    try:
        client.set_metadata([_ENDED_KEY, token], True)
    except Exception:  # noqa: BLE001 - the scheduler is gone, and the workers with it
        pass


#: Where a distributed worker keeps, for the block, the run's start on its own clock.
T0_ENV = "H5MDX_TIMING_T0"


def _take(name: str, dask_worker: Any = None) -> dict[str, Any]:
    """A worker's in-task records of the memory spool ``name``, its :data:`T0_ENV` and its
    estimate of how far the scheduler's clock is ahead of its own (``scheduler_delay``:
    distributed adds it to the ``startstops`` it reports)."""
    delay = getattr(dask_worker, "scheduler_delay", None)
    return {"records": take_records(name), "t0": os.environ.get(T0_ENV),
            "delay": None if delay is None else float(delay)}


def _collect_plugin(dask_scheduler: Any, name: str) -> dict[str, Any]:
    plugin = dask_scheduler.plugins.get(name)
    if plugin is None:
        return {"records": [], "removed": {}, "most": 0}
    return {"records": list(plugin.records), "removed": dict(plugin.removed),
            "most": max(plugin.most, len(dask_scheduler.workers))}


def _set_env(values: Mapping[str, str | None]) -> dict[str, str | None]:
    old = {k: os.environ.get(k) for k in values}
    for k, v in values.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v
    return old


def _worker_pid() -> int:
    return os.getpid()


def _detect_backend(client: Any) -> str:
    if client is not None:
        return "distributed"
    if "distributed" in sys.modules:
        from distributed import default_client

        try:
            default_client()
        except ValueError:
            pass
        else:
            return "distributed"
    import dask

    sched = dask.config.get("scheduler", None)
    return {"threads": "threads", "threading": "threads", "processes": "processes",
            "multiprocessing": "processes", "sync": "synchronous",
            "synchronous": "synchronous", "single-threaded": "synchronous"}.get(
        str(sched), "threads")


@contextmanager
def capture(
    backend: str | None = None,
    client: Any = None,
    *,
    n_workers: int | None = None,
    run_id: str | None = None,
    meta: Mapping[str, Any] | None = None,
    env: Mapping[str, str] | None = None,
    report: str | os.PathLike[str] | None = None,
    all_tasks: bool = False,
    spool_dir: str | os.PathLike[str] | None = None,
) -> Iterator[TimingRun]:
    """Record one timing row per task of the computations in the ``with`` block.

    Parameters
    ----------
    backend : str, optional
        ``"threads"``, ``"processes"``, ``"synchronous"``, ``"distributed"``,
        ``"dask-mpi"`` or ``"slurm"`` (the last two use ``client`` like
        ``"distributed"``). Default: ``"distributed"`` if a client is given or is
        the default, else dask's configured local scheduler.
    client : distributed.Client, optional
        The client the computation runs on.
    n_workers : int, optional
        Number of workers, for the records (default: the most workers the client had
        at once while the block ran, a worker lost and started again counted once; or dask's
        ``num_workers`` setting / the CPUs its local schedulers use, within the
        process's affinity and cgroup limits).
    run_id : str, optional
        Identifier of the run (default: a random one).
    meta : mapping, optional
        More run metadata (``file``, ``layout``, ``selection``, ...).
    env : mapping, optional
        Extra environment variables for the duration, set like the spool variable
        (e.g. ``{"H5MDX_TIMING_DELAY": "40:0.5"}`` to inject a straggler).
    report : path-like, optional
        With a distributed client, also write dask's ``performance_report``
        HTML there.
    all_tasks : bool, optional
        Also give rows to tasks that spooled no in-task record (their phases are
        NaN and their kind is the key's prefix). Default: only timed tasks.
    spool_dir : path-like, optional
        Parent directory of the spool directory of the local schedulers (default:
        the system temp dir). Distributed workers keep their records in memory
        until the block ends, so workers on other nodes need no shared directory.

    Yields
    ------
    TimingRun
        Filled in when the block exits; ``run.records`` is the merged DataFrame.

    Examples
    --------
    >>> with capture(backend="threads", n_workers=2) as run:  # doctest: +SKIP
    ...     result.compute(num_workers=2)
    >>> run.records[["worker", "t_io", "t_compute", "t_wait"]]  # doctest: +SKIP
    """
    from h5mdx.timing.records import run_metadata

    backend, client = _backend_and_client(backend, client)
    if (env or {}).get(DELAY_ENV):
        parse_delay(str(dict(env or {})[DELAY_ENV]))  # here, not in every task
    distributed_like = backend in _CLIENT_BACKENDS
    counted = n_workers is None and distributed_like  # the workers may change in the block
    if n_workers is None:
        n_workers = _count_workers(backend, client)
    run_id = run_id or uuid.uuid4().hex[:12]
    run = TimingRun(
        run_id, backend, int(n_workers),
        run_metadata(backend=backend, n_workers=int(n_workers), run_id=run_id, **dict(meta or {})),
    )
    run.all_tasks = all_tasks
    run.counted = counted
    spool = tempfile.mkdtemp(prefix="h5mdx-spool-", dir=spool_dir)
    # distributed workers keep their records in memory (the client takes them at the
    # end): a worker on another node may not see this process's temp dir
    where = f"{MEMORY_SPOOL}{os.path.basename(spool)}" if distributed_like else spool
    values: dict[str, str | None] = {SPOOL_ENV: where, **dict(env or {})}
    plugin_name = f"h5mdx-timing-{run_id}"
    with ExitStack() as stack:
        stack.callback(shutil.rmtree, spool, True)
        old_local = _set_env(values)
        stack.callback(_set_env, old_local)
        recorder = None
        if distributed_like:
            _start_distributed(stack, run, client, values, plugin_name, report)
        else:
            recorder = _local_recorder()
            recorder.register()
            stack.callback(recorder.unregister)
        run.t_run_start = time.time()
        failed = True
        try:
            yield run
            failed = False
        finally:
            # a computation that failed may have run no task: that is not worth a warning
            # of its own before its error
            _finish(run, client if distributed_like else None, plugin_name, recorder, spool,
                    check=not failed)


#: Backends whose tasks run on a distributed client.
_CLIENT_BACKENDS = ("distributed", "dask-mpi", "slurm")


def _backend_and_client(backend: str | None, client: Any) -> tuple[str, Any]:
    """The backend (given or detected) and, for the distributed ones, the client."""
    from h5mdx.timing.records import BACKENDS

    if backend is None:
        backend = _detect_backend(client)
    if backend not in _TASK_BACKENDS:
        raise ValueError(
            f"capture() records dask tasks; backend {backend!r} is not one of "
            f"{', '.join(_TASK_BACKENDS)} (MPI ranks write their own records)"
        )
    assert backend in BACKENDS
    if backend in _CLIENT_BACKENDS and client is None:
        from distributed import default_client

        try:
            client = default_client()
        except ValueError as err:
            raise ValueError(
                f"capture(backend={backend!r}) needs a distributed client: pass "
                "capture(backend=..., client=client)"
            ) from err
    return backend, client


def client_workers(client: Any) -> int:
    """The workers connected to a distributed ``client`` now (all of them, not the
    first few that ``scheduler_info`` lists by default)."""
    return len(client.scheduler_info(n_workers=-1).get("workers", {}))


def _count_workers(backend: str, client: Any) -> int:
    """The client's workers, or dask's ``num_workers`` (else the CPUs it uses) of a local
    scheduler."""
    if backend in _CLIENT_BACKENDS:
        return client_workers(client)
    import dask
    import dask.system

    # dask's pools take CPU_COUNT (affinity and cgroup limits): os.cpu_count() said 64
    # workers of a job given 4 cores, and the load imbalance divided by 64
    return 1 if backend == "synchronous" else int(
        dask.config.get("num_workers", None) or dask.system.CPU_COUNT or 1
    )


def _start_distributed(stack: ExitStack, run: TimingRun, client: Any,
                       values: Mapping[str, str | None], plugin_name: str,
                       report: str | os.PathLike[str] | None) -> None:
    """Set the spool variables on the workers and register the scheduler plugin (undone
    by ``stack``); start dask's performance report if asked."""
    # the run's own token (its spool's name, unique; a run id given may be reused)
    token = str(values[SPOOL_ENV])
    answers = _run_each(client, _set_env_of_run,
                        dict.fromkeys(_worker_addresses(client), (values, token)))
    old_remote = {a: v for a, v in answers.items() if isinstance(v, dict)}
    stack.callback(_restore_remote, client, old_remote)
    _warn_silent_at_start(sorted(set(answers) - set(old_remote)), answers)
    # workers that join later: after the above, so that its restore (last) wins on these
    _bounded(client.register_plugin, _spool_plugin(values, token),
             f"{plugin_name}-spool", wait=len(old_remote) == len(answers))
    stack.callback(_unregister_worker_plugin, client, f"{plugin_name}-spool", run)
    stack.callback(_end_run, client, token)  # (first: the callbacks run last-in first)
    pids = _run_each(client, _worker_pid, dict.fromkeys(old_remote, ()))
    run.pid_to_worker = {int(pid): addr for addr, pid in pids.items() if isinstance(pid, int)}
    client.register_plugin(_scheduler_plugin_class()(plugin_name), name=plugin_name)
    stack.callback(_unregister, client, plugin_name)
    if report is not None:
        from distributed import performance_report

        from h5mdx._optional import import_optional

        import_optional("bokeh", "dask's performance_report HTML")

        stack.enter_context(performance_report(filename=os.fspath(report)))


def _warn_silent_at_start(silent: list[str], answers: Mapping[str, Any]) -> None:
    """Warn of the workers that did not take the spool variables at the start of the block
    (they did not answer in time, a frozen worker, or failed): their tasks may not be
    timed."""
    if not silent:
        return
    why = "; ".join(f"{a}: {answers[a]}" for a in silent[:3]) + ("; ..." if len(silent) > 3
                                                                 else "")
    warnings.warn(
        f"capture(): {len(silent)} worker(s) did not answer when asked, at the start of "
        f"the block, to time their tasks (stopped, or busy under a task that holds the "
        f"GIL) ({why}): their tasks may have no timing records", RuntimeWarning,
        stacklevel=5)


def _finish(run: TimingRun, client: Any, plugin_name: str, recorder: Any, spool: str,
            check: bool = True) -> None:
    """Close the run: its times, the scheduler's records (of ``client`` or ``recorder``)
    and the in-task records of the spool."""
    run.t_run_stop = time.time()
    run.meta["t_run_start"] = run.t_run_start
    run.meta["t_run_stop"] = run.t_run_stop
    run.meta["wall"] = run.wall
    if client is not None:
        collected = client.run_on_scheduler(_collect_plugin, name=plugin_name)
        run.scheduler_records = _distributed_rows(collected["records"])
        run.removed = set(collected["removed"])
        if run.counted:  # SLURM jobs that started during the block, a cluster scaled up
            # the most at once: a worker lost and started again (a nanny's restart, a new
            # SLURM job) is not one more, as the addresses that ran tasks counted it
            run.n_workers = max(run.n_workers, int(collected["most"]))
            run.meta["n_workers"] = run.n_workers
    elif recorder is not None:
        run.scheduler_records = _local_rows(recorder.rows, run.backend)
    name = os.path.basename(spool)  # a memory spool's name (distributed)
    run.spooled = read_spool(spool) + take_records(name)
    if client is not None:
        run.answered, run.unanswered = set(), set()
        for addr, got in _from_live_workers(client, _take, name).items():
            if isinstance(got, dict):  # else the error of a worker that did not answer
                run.spooled.extend(got["records"])
                run.answered.add(str(addr))
                if got["t0"]:
                    run.worker_t0[str(addr)] = float(got["t0"])
                if got.get("delay") is not None:
                    run.scheduler_delay[str(addr)] = float(got["delay"])
            elif str(addr) not in run.removed:  # still in the cluster, but no answer
                run.unanswered.add(str(addr))
    if check:
        _check_where_it_ran(run)


def _check_where_it_ran(run: TimingRun) -> None:
    """Warn where the block's computations did not run on the scheduler ``run`` records
    (its records would be empty, or labelled with the wrong scheduler)."""
    backend = run.backend
    if not run.scheduler_records and not run.spooled:
        warnings.warn(
            f"capture({backend!r}) recorded no task: nothing was computed in the block, or "
            "it ran on another scheduler than the one captured (a distributed Client that "
            "is the default takes a plain .compute(); pass its client and backend="
            "'distributed', or compute with scheduler=...)", UserWarning, stacklevel=5)
        return
    if not run.spooled and not run.all_tasks:
        warnings.warn(_untimed_message(run), UserWarning, stacklevel=5)
        return
    pids = {int(r["pid"]) for r in run.spooled if r.get("pid") is not None}
    here = os.getpid()
    if backend in _CLIENT_BACKENDS:
        # a cluster's workers may run in this process (LocalCluster(processes=False)):
        # then only the scheduler, which saw no task, tells that they ran elsewhere
        wrong = (here in pids and here not in run.pid_to_worker) or not run.scheduler_records
    elif backend == "processes":
        wrong = here in pids
    else:  # threads, synchronous: this process
        wrong = bool(pids) and pids != {here}
    if wrong:
        where = "this process" if here in pids else "other processes"
        warnings.warn(
            f"capture({backend!r}): tasks ran in {where}, not on the {backend} scheduler "
            "captured, so their records carry the wrong scheduler (compute with the "
            "scheduler you capture: .compute(scheduler=...), or pass capture(backend=...) "
            "the one that runs it)", UserWarning, stacklevel=5)


def _untimed_message(run: TimingRun) -> str:
    """Why ``run`` has scheduler records but no in-task one (its records are empty)."""
    why = ("its tasks timed nothing (only tasks that use BlockTimer, as h5mdx.rmsd's do, "
           "give rows; capture(all_tasks=True) gives the others rows too)")
    if run.backend == "processes":
        why += (", or they ran in a process pool started before capture() (a pool of your "
                "own, passed as pool= or dask.config 'pool'), whose processes never see the "
                f"{SPOOL_ENV} variable it sets: start the pool inside the with block, or "
                "let the processes scheduler start its own")
    return (f"capture({run.backend!r}) saw {len(run.scheduler_records)} task(s) run but "
            f"recorded none: {why}")


#: Seconds capture waits for a worker's answer (to set its spool variables, give its pid or
#: its records): a worker that is stopped (SIGSTOP, a node that hangs) but still connected
#: never answers, and capture's start and end waited for it forever. It is also how long
#: the scheduler tries to reach a worker when collecting records (a worker killed mid-run
#: stays listed for a while, and each call to it waited distributed's 30 s): one bound,
#: which the warnings say.
ANSWER_TIMEOUT_S = 5.0


def _worker_addresses(client: Any) -> list[str]:
    return sorted(client.scheduler_info(n_workers=-1).get("workers", {}))


def _run_each(client: Any, fn: Any, args: Mapping[str, tuple[Any, ...]]) -> dict[str, Any]:
    """``fn(*args[addr])`` on each worker ``addr`` of ``args``, all at once, each answer
    awaited at most :data:`ANSWER_TIMEOUT_S`: per worker its answer, or the error (not
    raised): a :class:`TimeoutError` where it did not answer in time. ``client.run`` has
    no bound of its own: one frozen worker made it wait forever for all."""
    import asyncio

    bound = ANSWER_TIMEOUT_S

    async def one(addr: str) -> Any:
        try:
            got = await asyncio.wait_for(client.run(
                fn, *args[addr], workers=[addr], on_error="return", asynchronous=True), bound)
        except asyncio.TimeoutError:
            return TimeoutError(f"{addr} did not answer within {bound:g} s")
        except Exception as err:  # noqa: BLE001 - said per worker, as client.run's own
            return err
        return got.get(addr, KeyError(addr)) if isinstance(got, dict) else got

    async def every() -> dict[str, Any]:
        addrs = list(args)
        return dict(zip(addrs, await asyncio.gather(*(one(a) for a in addrs)), strict=True))

    return dict(client.sync(every))


def run_on_workers(client: Any, fn: Any, *args: Any) -> dict[str, Any]:
    """``fn(*args)`` on every worker the scheduler of ``client`` lists, each answer awaited
    at most ``ANSWER_TIMEOUT_S`` seconds (``client.run`` has no bound: one frozen worker
    held it forever): per worker address its answer, or the error, not raised (a
    :class:`TimeoutError` where it did not answer in time)."""
    return _run_each(client, fn, dict.fromkeys(_worker_addresses(client), args))


def _bounded(call: Any, *args: Any, wait: bool = True) -> bool:
    """``call(*args)`` (a client call that every worker must answer: a worker plugin's
    registration) waited for at most :data:`ANSWER_TIMEOUT_S` (not at all unless ``wait``:
    a worker that did not answer before will not), in a thread of its own; whether it
    ended in time. Where it did not, the scheduler goes on with it (a frozen
    worker gets the plugin when it wakes up), and an error of it is dropped."""

    def run() -> None:
        try:
            call(*args)
        except Exception:  # noqa: BLE001 - the workers that matter are said elsewhere
            pass

    thread = threading.Thread(target=run, name="h5mdx-capture-call", daemon=True)
    thread.start()
    thread.join(ANSWER_TIMEOUT_S if wait else 0.0)
    return not thread.is_alive()


def _from_live_workers(client: Any, fn: Any, *args: Any) -> dict[str, Any]:
    """``fn(*args)`` on the workers the scheduler lists (:func:`_run_each`), an error
    returned (not raised) for one that died, which is tried for :data:`ANSWER_TIMEOUT_S`
    (where the scheduler runs in this process: a local or SLURM cluster), or that did not
    answer within :data:`ANSWER_TIMEOUT_S`."""
    import dask

    connect = f"{ANSWER_TIMEOUT_S:g}s"
    with dask.config.set({"distributed.comm.timeouts.connect": connect}):
        return _run_each(client, fn, dict.fromkeys(_worker_addresses(client), args))


def _restore_remote(client: Any, old: Mapping[str, Mapping[str, str | None]]) -> None:
    try:
        live = set(_worker_addresses(client))
    except Exception:  # noqa: BLE001 - the cluster is going: nothing to restore
        return
    # a worker that left during the run (killed, or its job ended) needs no clean-up
    _run_each(client, _set_env, {a: (v,) for a, v in old.items() if a in live})


def _unregister_worker_plugin(client: Any, name: str, run: TimingRun) -> None:
    # errors: already gone with the workers; no wait for the ones that did not answer
    _bounded(client.unregister_worker_plugin, name, wait=not run.unanswered)


def _unregister(client: Any, name: str) -> None:
    try:
        client.unregister_scheduler_plugin(name)
    except Exception:  # noqa: BLE001 - already gone with the scheduler
        pass


def _local_worker_name(backend: str, worker_id: Any) -> str:
    if backend == "processes":
        return f"pid-{worker_id}"
    if backend == "synchronous":
        return "main"
    return f"thread-{worker_id}"


def _local_rows(rows: list[dict[str, Any]], backend: str) -> list[dict[str, Any]]:
    out = []
    for r in rows:
        out.append({**r, "worker": _local_worker_name(backend, r["worker_id"])})
    return out


def _distributed_rows(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out = []
    for r in rows:
        compute = [s for s in r["startstops"] if s.get("action") == "compute"]
        transfer = [s for s in r["startstops"] if s.get("action") == "transfer"]
        if compute:
            start = min(s["start"] for s in compute)
            stop = max(s["stop"] for s in compute)
        elif r["startstops"]:
            start = min(s["start"] for s in r["startstops"])
            stop = max(s["stop"] for s in r["startstops"])
        else:
            continue
        out.append({
            "key": r["key"], "worker": r["worker"], "worker_id": r.get("thread"),
            "sched_start": float(start), "sched_stop": float(stop),
            "t_transfer": float(sum(s["stop"] - s["start"] for s in transfer)),
            "status": r.get("status", "memory"),
        })
    return out


def _spooled_worker(run: TimingRun, rec: Mapping[str, Any]) -> str:
    if run.backend in ("threads", "processes", "synchronous"):
        ident = rec.get("pid") if run.backend == "processes" else rec.get("thread")
        return _local_worker_name(run.backend, ident)
    return run.pid_to_worker.get(int(rec.get("pid", -1)), f"{rec.get('host')}:{rec.get('pid')}")


def _match(run: TimingRun) -> list[tuple[dict[str, Any], dict[str, Any] | None]]:
    """Each in-task record (by start) with its scheduler record: by the task's key, else
    (a record of no known key) the one of its worker whose window holds it, the nearest.
    The windows are on the scheduler's clock and the in-task times on the worker's: they
    are compared with the worker's clock offset (:func:`_clock_offsets`, from the tasks
    matched by key) added to the windows; on a node whose clock was 30 s behind, no
    window held a record and every such record was left unmatched."""
    by_key: dict[str, list[dict[str, Any]]] = defaultdict(list)
    by_worker: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for s in run.scheduler_records:
        by_key[s["key"]].append(s)
        by_worker[s["worker"]].append(s)
    used: set[int] = set()
    recs = sorted(run.spooled, key=lambda r: r["t_start"])
    found: list[dict[str, Any] | None] = []
    for rec in recs:
        cands = [s for s in by_key.get(str(rec.get("task_key")), []) if id(s) not in used]
        found.append(_nearest(rec, cands, 0.0) if cands else None)
        if cands:
            used.add(id(found[-1]))
    offsets = _clock_offsets(run, [(r, s) for r, s in zip(recs, found, strict=True)
                                   if s is not None])
    for i, rec in enumerate(recs):
        if found[i] is not None:
            continue
        worker = _spooled_worker(run, rec)
        off = offsets.get(str(worker), 0.0)
        cands = [
            s for s in by_worker.get(worker, [])
            if id(s) not in used
            and s["sched_start"] + off - _EPS <= rec["t_start"]
            and rec["t_stop"] <= s["sched_stop"] + off + _EPS
        ]
        if cands:
            found[i] = _nearest(rec, cands, off)
            used.add(id(found[i]))
    return list(zip(recs, found, strict=True))


def _nearest(rec: Mapping[str, Any], cands: list[dict[str, Any]],
             offset: float) -> dict[str, Any]:
    """The scheduler record of ``cands`` whose window (plus ``offset``) is nearest the
    in-task record ``rec``'s."""
    return min(cands, key=lambda s: (abs(s["sched_stop"] + offset - rec["t_stop"])
                                     + abs(s["sched_start"] + offset - rec["t_start"])))


def _task_row(run: TimingRun, rec: Mapping[str, Any], s: Mapping[str, Any] | None,
              slurm: str | None) -> dict[str, Any]:
    """The row of an in-task record and its scheduler record (None if unmatched)."""
    nan = float("nan")
    worker = s["worker"] if s is not None else _spooled_worker(run, rec)
    row = {
        "run_id": run.run_id, "backend": run.backend, "n_workers": run.n_workers,
        "worker": str(worker), "host": rec.get("host", socket.gethostname()),
        "rank": rec.get("rank"), "slurm_job_id": rec.get("slurm_job_id", slurm),
        "task_key": s["key"] if s is not None else str(
            rec.get("task_key")
            or f"{rec.get('kind', 'task')}-{rec['frame_start']}-{rec['frame_stop']}"
        ),
        "kind": rec.get("kind", "task"),
        "frame_start": rec.get("frame_start"), "frame_stop": rec.get("frame_stop"),
        "t_start": float(rec["t_start"]), "t_stop": float(rec["t_stop"]),
        "wall": float(rec["t_stop"]) - float(rec["t_start"]),
        "bytes_read": rec.get("bytes_read"),
        "sched_start": s["sched_start"] if s is not None else nan,
        "sched_stop": s["sched_stop"] if s is not None else nan,
    }
    for phase in _KNOWN_PHASES:
        row[f"t_{phase}"] = float(rec.get(f"t_{phase}", 0.0 if phase == "warmup" else nan))
    if s is not None and "t_transfer" in s:
        row["t_transfer"] = s["t_transfer"]
    return row


def _untimed_row(run: TimingRun, s: Mapping[str, Any], slurm: str | None,
                 offset: float = 0.0) -> dict[str, Any]:
    """The row of a task that spooled no in-task record (phases NaN, kind from its key);
    its ``t_start`` and ``t_stop`` are the scheduler's plus ``offset``, on its worker's
    clock (see :func:`_clock_offsets`)."""
    nan = float("nan")
    return {
        "run_id": run.run_id, "backend": run.backend, "n_workers": run.n_workers,
        "worker": str(s["worker"]), "host": socket.gethostname(), "rank": None,
        "slurm_job_id": slurm, "task_key": s["key"], "kind": _key_split(s["key"]),
        "frame_start": None, "frame_stop": None,
        "t_start": s["sched_start"] + offset, "t_stop": s["sched_stop"] + offset,
        "wall": s["sched_stop"] - s["sched_start"], "bytes_read": None,
        "sched_start": s["sched_start"], "sched_stop": s["sched_stop"],
        **{f"t_{p}": nan for p in _KNOWN_PHASES},
        **({"t_transfer": s["t_transfer"]} if "t_transfer" in s else {}),
        "status": s.get("status", "memory"),
    }


def _set_waits(rows: list[dict[str, Any]],
               intervals: Mapping[tuple[str, Any], list[tuple[float, float, int]]],
               t0: float, worker_t0: Mapping[str, float]) -> None:
    """``t_wait`` of each row: the idle time of its worker (of its thread, for a worker
    of several threads: one key ``(worker, thread)`` of ``intervals``) since its previous
    task, or since the run's start: ``worker_t0`` of the worker (on its clock), else
    ``t0``."""
    for (worker, _), ivs in intervals.items():
        last = worker_t0.get(worker, t0)
        for start, stop, idx in sorted(ivs):
            if idx >= 0:
                rows[idx]["t_wait"] = max(0.0, start - last)
            last = max(last, stop)


def _clock_offsets(run: TimingRun,
                   pairs: list[tuple[dict[str, Any], dict[str, Any] | None]]) -> dict[str, float]:
    """Per distributed worker, what to add to a scheduler time (its ``startstops``, which
    the worker reports on the scheduler's clock) to put it on the worker's own clock, where
    the in-task records and :attr:`TimingRun.worker_t0` are: the median of in-task start
    less scheduler start of its timed tasks, else minus the worker's ``scheduler_delay``.
    Untimed tasks' intervals were left on the scheduler's clock: on a node whose clock is
    30 s behind, an untimed task waited 30 s that never happened. The local schedulers
    have one clock: no offsets."""
    import numpy as np

    if run.backend not in _CLIENT_BACKENDS:
        return {}
    diffs: dict[str, list[float]] = defaultdict(list)
    for rec, s in pairs:
        if s is not None and np.isfinite(s["sched_start"]):
            diffs[str(s["worker"])].append(float(rec["t_start"]) - float(s["sched_start"]))
    offsets = {w: -d for w, d in run.scheduler_delay.items()}
    offsets.update({w: float(np.median(d)) for w, d in diffs.items()})
    return offsets


def _warn_lost(run: TimingRun, matched: list[dict[str, Any]],
               others: list[dict[str, Any]]) -> None:
    """Warn of the timed tasks that have no row because their in-task records were not
    collected: the records lacked them, and nothing said so. Such a task is one the
    scheduler saw finish on a worker that gave no records at the end, of a kind (key
    prefix) other tasks were timed in, and not run again elsewhere;
    :attr:`TimingRun.n_lost` counts them. Two causes are told apart, by the scheduler's
    own word: a worker it removed, or no longer lists, *left* the cluster before the end
    of the block (retired, its SLURM job's walltime ended, scaled down, killed), taking
    the records it kept in memory; a worker it still lists did not answer within
    :data:`ANSWER_TIMEOUT_S` (busy under a task that holds the GIL, or
    unreachable): it has not left, its records were not collected."""
    if run.answered is None or not matched:
        return
    timed = {_key_split(s["key"]) for s in matched}
    done = {s["key"] for s in matched}
    lost = [s for s in others if str(s["worker"]) not in run.answered
            and s.get("status") != "lost"  # cut short by its worker's removal: no record
            and s["key"] not in done and _key_split(s["key"]) in timed]
    run.n_lost = len({s["key"] for s in lost})
    silent = [s for s in lost if str(s["worker"]) in run.unanswered]
    left = [s for s in lost if str(s["worker"]) not in run.unanswered]
    lack = ("their phases (all_tasks=True gave them rows without)" if run.all_tasks
            else "these tasks")
    for group, why, went, fix in (
            (left, "that left before the end of the run", "left with them",
             "keep the workers until the block ends"),
            (silent, f"that did not answer within {ANSWER_TIMEOUT_S:g} s when asked for "
             "their records at the end of the run, though the scheduler still lists them "
             "(busy under a task that holds the GIL, or unreachable)", "were not collected",
             "let the workers' other work finish before the block ends")):
        if not group:
            continue
        gone = sorted({str(s["worker"]) for s in group})
        n = len({s["key"] for s in group})
        where = f"{', '.join(gone[:3])}{', ...' if len(gone) > 3 else ''}"
        warnings.warn(
            f"{n} timed task(s) ran on {len(gone)} worker(s) {why} ({where}): their "
            f"in-task timing records {went}, so the records lack {lack}; {fix}",
            RuntimeWarning, stacklevel=4)


def _one_row_per_task(rows: list[dict[str, Any]], n_timed: int, all_tasks: bool,
                      removed: set[str]) -> list[dict[str, Any]]:
    """One row per attempt that counts: an attempt lost with its worker (cut short by the
    worker's removal, or finished on a worker the scheduler then removed, ``removed``)
    that was run again is no row of its own but a retry of the next attempt of its key,
    which has ``retries`` (the attempts folded into it) and ``t_retried`` (their seconds,
    on the workers that ran them). A key computed twice in the block on workers that
    stayed keeps both rows. ``rows[:n_timed]`` are timed, the others untimed (kept if
    ``all_tasks``)."""
    by_key: dict[str, list[int]] = defaultdict(list)
    for i, row in enumerate(rows):
        by_key[str(row["task_key"])].append(i)
    out = []
    for idxs in by_key.values():
        # attempts in the order they ended, a timed one after an untimed one at a tie
        idxs.sort(key=lambda i: (rows[i]["t_stop"], i < n_timed))
        retried: list[float] = []
        for n, i in enumerate(idxs):
            row = rows[i]
            lost = row.get("status") == "lost" or str(row["worker"]) in removed
            if lost and n < len(idxs) - 1:  # run again after this one
                retried.append(float(row["wall"]))
                continue
            row["retries"] = len(retried)
            row["t_retried"] = float(sum(w for w in retried if w == w))  # NaN left out
            retried = []
            if (i < n_timed or all_tasks) and row.pop("status", None) != "lost":
                out.append(row)
    return out


def _merge(run: TimingRun) -> Any:
    import numpy as np
    import pandas as pd

    from h5mdx.timing.records import to_frame

    slurm = os.environ.get("SLURM_JOB_ID")
    pairs = _match(run)
    matched_ids = {id(s) for _, s in pairs if s is not None}
    run.n_unmatched = sum(s is None for _, s in pairs)
    if run.n_unmatched and run.scheduler_records:
        warnings.warn(
            f"{run.n_unmatched} of {len(pairs)} in-task timing records could not be matched "
            "to a scheduler record; their worker comes from the in-task record",
            RuntimeWarning,
            stacklevel=3,
        )
    rows = [_task_row(run, rec, s, slurm) for rec, s in pairs]
    n_timed = len(rows)
    # Untimed tasks and attempts: their intervals count for the workers' idle time, and
    # they give rows (kept if asked, or as an earlier attempt of a task).
    others = [s for s in run.scheduler_records if id(s) not in matched_ids]
    _warn_lost(run, [s for _, s in pairs if s is not None], others)
    # idle time per thread of a worker: a distributed worker may run tasks side by side
    lanes = run.backend in _CLIENT_BACKENDS
    intervals: dict[tuple[str, Any], list[tuple[float, float, int]]] = defaultdict(list)
    for i, (row, (rec, _)) in enumerate(zip(rows, pairs, strict=True)):
        lane = rec.get("thread") if lanes else None
        intervals[(row["worker"], lane)].append((row["t_start"], row["t_stop"], i))
    offsets = _clock_offsets(run, pairs)
    for s in others:
        if not np.isfinite(s["sched_start"]):
            continue
        row = _untimed_row(run, s, slurm, offsets.get(str(s["worker"]), 0.0))
        rows.append(row)
        lane = s.get("worker_id") if lanes else None
        intervals[(str(s["worker"]), lane)].append((row["t_start"], row["t_stop"], len(rows) - 1))
    _set_waits(rows, intervals, run.t_run_start, run.worker_t0)
    rows = _one_row_per_task(rows, n_timed, run.all_tasks, run.removed)
    if not rows:
        from h5mdx.timing.records import empty

        return empty()
    df = pd.DataFrame(rows)
    for col in ("rank", "frame_start", "frame_stop", "bytes_read"):
        df[col] = pd.array(
            [None if v is None or (isinstance(v, float) and np.isnan(v)) else int(v)
             for v in df[col]], dtype="Int64")
    df = df.sort_values(["t_start", "worker"]).reset_index(drop=True)
    return to_frame(df, run.meta)
