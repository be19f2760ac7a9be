"""The schedulers of h5mdx, by one set of names, and running a dask computation on them.

:data:`SCHEDULERS` is the one vocabulary every command uses (``h5mdx rmsd --scheduler``,
``h5mdx bench --scheduler``, the ``backend`` column of timing records); :func:`canonical`
accepts the old spellings (``mpi`` for ``dask-mpi``) with a note.

:func:`scheduler_context` activates ``threads``, ``processes``, ``distributed`` (a
local cluster of worker processes) or ``slurm`` (workers in SLURM jobs) and yields
the distributed client where there is one; :func:`compute` computes a collection
on it with a progress bar. Used by ``h5mdx rmsd`` and the worked example (``h5mdx example``).
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import time
from collections.abc import Iterator, Sequence
from typing import Any

from h5mdx._signals import interrupts_deferred
from h5mdx.errors import H5MDReadError
from h5mdx.timing.capture import client_workers

__all__ = ["ALIASES", "SCHEDULERS", "canonical", "compute", "compute_rmsd", "local_scheduler",
           "process_pool", "quiet_logging", "scheduler_context"]

#: Every scheduler h5mdx runs on: dask's local schedulers, a local cluster of worker
#: processes, SLURM workers (dask-jobqueue), a dask cluster inside an MPI job (dask-mpi)
#: and the SPMD program on parallel HDF5 (MPI-IO). Commands accept the subsets they run.
SCHEDULERS = ("threads", "processes", "distributed", "slurm", "dask-mpi", "mpi-io")

#: Old names -> their names in :data:`SCHEDULERS`.
ALIASES = {"mpi": "dask-mpi"}


def canonical(name: str) -> str:
    """The name of a scheduler in :data:`SCHEDULERS` (old spellings noted on stderr).

    Examples
    --------
    >>> canonical("distributed")
    'distributed'
    """
    new = ALIASES.get(name)
    if new is not None:
        print(f"h5mdx: note: scheduler {name!r} is now called {new!r}", file=sys.stderr)
        return new
    return name


def local_scheduler(ds: Any, name: str = "position") -> tuple[str, str]:
    """The faster scheduler on this machine for an analysis of ``ds[name]``, and why.

    ``"threads"`` where threads of one process read the variable in parallel (h5mdx's
    direct reads, :mod:`h5mdx.format.direct`): no worker processes to start, nothing to
    send between them, and every task sees the kernel loaded once. Else
    ``"distributed"``: HDF5 runs one call at a time in a process, so only processes read
    in parallel. On 2 and 16 cores the threaded scheduler ran the RMSD faster than a
    local cluster of as many processes (``benchmarks/bench_cli.py``, ``bench_scale.py``).

    Parameters
    ----------
    ds : xarray.Dataset
        Opened with ``engine="h5md"`` (without ``chunks``).
    name : str
        The variable the analysis reads.

    Returns
    -------
    (str, str)
        The scheduler and the reason, for the user.
    """
    from h5mdx.engine.arrays import why_reads_take_turns

    if name not in ds.variables:  # nothing to read: the analysis says what is missing
        return "threads", f"no {name} to read"
    why = why_reads_take_turns(ds[name])
    if why is None:
        return "threads", f"threads of one process read {name} in parallel"
    return "distributed", f"{name} is read through HDF5, one call at a time per process ({why})"


#: The loggers of a cluster's machinery (:func:`quiet_logging`).
_CLUSTER_LOGGERS = ("distributed", "tornado", "asyncio")


@contextlib.contextmanager
def _hushed_teardown() -> Iterator[None]:
    """Where the block ends in an exception (Ctrl-C, SIGTERM, a failed run), silence the
    cluster's loggers for the teardown that follows (up to the end of the enclosing
    :func:`quiet_logging`): closing a cluster with work in flight logs its own races, such as
    asyncio's "Future exception was never retrieved" of a scheduler broadcast to a worker
    already closing, which say nothing to the user that the error itself does not."""
    try:
        yield
    except BaseException:
        for name in _CLUSTER_LOGGERS:
            logging.getLogger(name).setLevel(logging.CRITICAL)
        raise


@contextlib.contextmanager
def _error_kept(manager: Any) -> Iterator[Any]:
    """Enter ``manager`` (a cluster, a client); where the block raises, a failure of the
    manager's own exit does not replace the block's error. Closing a local cluster whose
    nanny was restarting a worker killed under a task failed with distributed's
    "can only join a started process", and that AssertionError reached the user in place
    of the error naming the file and the task's frames."""
    value = manager.__enter__()
    try:
        yield value
    except BaseException as err:
        try:
            manager.__exit__(type(err), err, err.__traceback__)
        except Exception as close_err:  # the block's error says what went wrong
            logging.getLogger(__name__).debug("closing %r after %r failed: %r", manager,
                                              err, close_err)
        raise
    manager.__exit__(None, None, None)


@contextlib.contextmanager
def quiet_logging() -> Iterator[None]:
    """Silence the INFO logs of distributed, tornado and asyncio while a cluster runs."""
    loggers = [logging.getLogger(n) for n in _CLUSTER_LOGGERS]
    levels = [lg.level for lg in loggers]
    for lg in loggers:
        lg.setLevel(logging.ERROR)
    try:
        yield
    finally:
        for lg, lv in zip(loggers, levels, strict=True):
            lg.setLevel(lv)


@contextlib.contextmanager
def scheduler_context(scheduler: str, workers: int, args: Any = None,
                      warm: bool = True) -> Iterator[Any]:
    """Activate a dask scheduler; yields the distributed Client (or None).

    ``warm=False``: the threads scheduler leaves the compiled kernel unloaded (the caller
    loads the kernel its graph runs, as :func:`compute_rmsd` does)."""
    import dask

    if scheduler == "threads":
        if warm:
            from h5mdx.analysis.qcp import warm_up

            warm_up()  # the threads share this process's kernel
        with dask.config.set(scheduler="threads", num_workers=workers):
            yield None
    elif scheduler == "processes":
        with process_pool(workers) as pool, dask.config.set(
                scheduler="processes", num_workers=workers, chunksize=1, pool=pool):
            yield None
    elif scheduler == "distributed":
        from h5mdx._optional import import_optional
        from h5mdx.parallel.local import local_cluster

        distributed = import_optional("distributed", "--scheduler distributed")
        # the workers log a failed task with its traceback ("Compute Failed"); the error
        # itself reaches this process, which reports it in one line
        with quiet_logging(), _error_kept(local_cluster(
                workers, silence_logs=logging.CRITICAL)) as cluster, \
                _error_kept(distributed.Client(cluster)) as client:
            from h5mdx.parallel.workers import warm_up_workers

            warm_up_workers(client)
            with _hushed_teardown():
                yield client
    elif scheduler == "slurm":
        from h5mdx.parallel import cluster as slurm_cluster

        with quiet_logging(), \
                _error_kept(slurm_cluster.slurm_client_from_args(args, workers)) as client:
            from h5mdx.parallel.workers import warm_up_workers

            warm_up_workers(client)  # as a local cluster's: loading is not the first task's
            with _hushed_teardown():
                yield client
    else:  # pragma: no cover - argparse restricts the choices
        raise ValueError(f"unknown scheduler {scheduler!r}")


@contextlib.contextmanager
def process_pool(workers: int) -> Iterator[Any]:
    """The worker processes of the processes scheduler, made as dask makes them, and
    ended with the block: at once where it ends in an exception (Ctrl-C, SIGTERM), for
    dask's own pool waits for the tasks running (minutes) and its workers outlived a
    process that SIGTERM ended."""
    from concurrent.futures import ProcessPoolExecutor
    from functools import partial

    import dask.multiprocessing as dmp

    if os.environ.get("PYTHONHASHSEED") in (None, "0"):
        os.environ["PYTHONHASHSEED"] = "6640"  # as dask: the same hashes in every worker
    pool = ProcessPoolExecutor(workers, mp_context=dmp.get_context(),
                               initializer=partial(dmp.initialize_worker_process,
                                                   user_initializer=None))
    try:
        with interrupts_deferred():  # born deaf to Ctrl-C, which ends them from here
            list(pool.map(time.sleep, [0.05] * workers))  # busy, so that all start now
        yield pool
    except BaseException:
        terminate = getattr(pool, "terminate_workers", None)  # Python 3.14
        if terminate is not None:
            terminate()
        else:
            for process in list(getattr(pool, "_processes", {}).values()):
                process.terminate()
        pool.shutdown(wait=False, cancel_futures=True)
        raise
    pool.shutdown(wait=True)


def _is_terminal(stream: Any) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):  # replaced, or closed
        return False


def compute(client: Any, result: Any, enabled: bool) -> Any:
    """Compute ``result`` (on ``client``, or the active local scheduler) with a progress bar on
    stderr where stderr is a terminal (a log file, e.g. a SLURM job's, would keep every
    redraw of the bar)."""
    enabled = enabled and _is_terminal(sys.stderr)
    if client is not None:
        if not enabled:
            return client.compute(result).result()
        from distributed import progress

        # persist: one future per task, so the bar advances per block (a single future from
        # client.compute would sit at 0% until the whole result is gathered)
        persisted = client.persist(result)
        progress(persisted, notebook=False)
        print(file=sys.stderr)
        return persisted.compute()
    kwargs = _local_get()
    if enabled:
        from dask.diagnostics import ProgressBar

        with ProgressBar(out=sys.stderr):
            return result.compute(**kwargs)
    return result.compute(**kwargs)


def _local_get() -> dict[str, Any]:
    """``scheduler=`` the function of the local scheduler configured by name, if any.

    Given a scheduler's name, dask imports ``distributed`` (where installed) to look for
    a client: 0.3-0.4 s at the first compute of a process, more than the RMSD of a
    gigabyte takes (``benchmarks/results/cli-2core.md``). Given the function, it does not.
    """
    import dask

    name = dask.config.get("scheduler", None)
    if name in ("threads", "threading"):
        import dask.threaded

        return {"scheduler": dask.threaded.get}
    if name in ("processes", "multiprocessing"):
        import dask.multiprocessing

        return {"scheduler": dask.multiprocessing.get}
    return {}


def _rmsd_of_parts(parts: Sequence[Any], reference: Any, options: dict[str, Any]) -> Any:
    """The lazy RMSD of a trajectory in parts (Datasets opened one by one): each part's
    as ``ds.md.rmsd`` gives it (its own masses where ``weights="mass"``), read as that
    part alone would be, to one reference, joined along time."""
    from h5mdx.analysis.rmsd import join_parts, reference_of_parts

    # a frame index: that frame of the part that holds it, a Dataset (its box too, for a
    # selection by distance, made on that frame in every part)
    ref, frame = reference_of_parts(list(parts), reference)
    return join_parts([p.md.rmsd(ref, **options) for p in parts], frame)


def _warm_up_for(ds: Any, lazy: Any, kernel: str) -> None:
    """Load the kernel that the tasks of ``lazy`` (the RMSD of ``ds``, or of its parts)
    run, before the clock starts: none where ``rmsd`` gave a small job the numpy kernel.
    The threads scheduler's warm-up loaded numba and its kernel (0.5-1 s) before the graph
    chose numpy for such a job."""
    from h5mdx.analysis.plan import _small_work_kernel
    from h5mdx.analysis.qcp import warm_up

    n_atoms = int(lazy.attrs.get("n_atoms", 0))
    for part in ds if isinstance(ds, (list, tuple)) else [ds]:  # each chose by its frames
        warm_up(_small_work_kernel(kernel, int(part.sizes.get("time", 0)) * n_atoms))


def _capture(timing: str, scheduler: str, client: Any, workers: int, ds: Any,
             select: Any) -> Any:
    """The :func:`h5mdx.timing.capture` of :func:`compute_rmsd`."""
    from h5mdx.timing import capture

    first = ds[0] if isinstance(ds, (list, tuple)) else ds
    return capture(backend=scheduler, client=client, n_workers=workers,
                   meta={"file": first.attrs.get("source"), "selection": select})


def _worker_died(err: BaseException, lazy: Any, ds: Any) -> H5MDReadError | None:
    """A worker process that died under an RMSD task, said as the file and frames of the
    task: ``distributed``'s ``KilledWorker`` (the task and the last worker are known)
    and the processes scheduler's ``BrokenProcessPool`` (neither is). Both reached the
    command line as a bare traceback naming a task key, or nothing at all. None for any
    other error."""
    from concurrent.futures.process import BrokenProcessPool

    from h5mdx.analysis.plan import task_frames

    dist = sys.modules.get("distributed")
    killed = dist is not None and isinstance(err, dist.KilledWorker)
    if not killed and not isinstance(err, BrokenProcessPool):
        return None
    parts = ds if isinstance(ds, (list, tuple)) else [ds]
    files = [str(p["position"].encoding.get("source") or p.attrs.get("source") or "")
             for p in parts if "position" in p]
    how = "killed, out of memory, or crashed: see the workers' logs"
    if not killed:
        return H5MDReadError(", ".join(f for f in files if f) or None, None,
                             f"a worker process ended abruptly ({how}) while computing "
                             "the RMSD; the frames it held are not known")
    task = task_frames(lazy.data.__dask_graph__(), err.task)  # type: ignore[attr-defined]
    filename, h5path, start, stop = task or (None, None, 0, 0)
    frames = f"frames {start}-{stop - 1}" if task else f"task {err.task!r}"  # type: ignore[attr-defined]
    worker = getattr(err.last_worker, "address", err.last_worker)  # type: ignore[attr-defined]
    return H5MDReadError(filename or ", ".join(f for f in files if f) or None, h5path,
                         f"computing the RMSD of {frames} failed: each of the "
                         f"{err.allowed_failures + 1} workers that ran it died "  # type: ignore[attr-defined]
                         f"({how}; the last, {worker})")


def compute_rmsd(ds: Any, *, select: Any, reference: int = 0, weights: Any = None,
                 superposition: bool = True, scheduler: str = "distributed", workers: int = 2,
                 frames_per_block: int | None = None, kernel: str = "auto",
                 progress: bool = True, timing: str | None = None, args: Any = None,
                 chunk_mib: float | None = None) -> tuple[Any, float, int]:
    """Compute the RMSD of an opened Dataset (or a list of them: a trajectory's parts, in
    the order of their frames) on a scheduler; returns (result, seconds,
    workers): the workers that ran it (a cluster's, once joined: SLURM jobs of several
    processes, or ``--jobs`` fewer than ``workers`` asked).

    With ``timing`` (a directory), per-task timing records go to ``timing/timing.csv``.
    ``frames_per_block`` and ``chunk_mib`` as for :func:`h5mdx.rmsd` (None: its defaults).
    """
    with contextlib.ExitStack() as stack:
        run = None
        if timing and scheduler == "processes":
            # the pool's processes take the spool from their environment when they start:
            # captured after the pool started, their tasks recorded nothing
            run = stack.enter_context(_capture(timing, scheduler, None, workers, ds, select))
        client = stack.enter_context(scheduler_context(scheduler, workers, args, warm=False))
        if client is not None:
            workers = client_workers(client) or workers
        options = {"select": select, "weights": weights, "superposition": superposition,
                   "frames_per_block": frames_per_block, "chunk_mib": chunk_mib,
                   "kernel": kernel}
        lazy = (_rmsd_of_parts(ds, reference, options) if isinstance(ds, (list, tuple))
                else ds.md.rmsd(reference, **options))
        if scheduler == "threads":
            _warm_up_for(ds, lazy, kernel)
        t0 = time.perf_counter()
        if timing and run is None:
            run = stack.enter_context(_capture(timing, scheduler, client, workers, ds, select))
        try:
            result = compute(client, lazy, progress)
        except Exception as err:
            died = _worker_died(err, lazy, ds)
            if died is None:
                raise
            raise died from err
        seconds = time.perf_counter() - t0
        stack.close()  # last entered first: a capture collects before its cluster closes
    if run is not None and timing:
        # made here, not before the run: one interrupted or failed left it empty
        os.makedirs(timing, exist_ok=True)
        run.save(os.path.join(timing, "timing.csv"))
    return result, seconds, workers
