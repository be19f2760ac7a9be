"""A dask cluster inside an MPI job, with dask-mpi.

``mpirun -n N h5mdx rmsd TRAJ ... --scheduler dask-mpi`` runs the ordinary dask
path on a cluster that dask-mpi starts inside the MPI job: rank 0 runs the
scheduler, rank 1 the client (the analysis script), ranks 2..N-1 one
single-threaded worker each. MPI only bootstraps the cluster (the scheduler
address is broadcast); the data moves over TCP on the loopback interface.

Choices, measured on the project's machines (see ``shared/RECIPES.md``):

- ``worker_class="distributed.Worker"``: dask-mpi's Nanny workers fork
  processes that are not MPI processes, and a task touching MPI in them
  aborted and restarted forever;
- ``interface="lo"`` by default (single node); pass the fast network interface
  (``ib0``, ``hsn0``, ...) on a cluster;
- dask tasks open the file with the default HDF5 driver: MPI collectives from
  inside tasks can deadlock, so the MPI-IO path is a separate SPMD program
  (:mod:`h5mdx.mpi.rmsd`);
- ``distributed`` logging at ``warning`` or above: at shutdown the workers log
  ``CommClosedError ... Stream is closed`` tracebacks even on success.
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np

from h5mdx._optional import import_optional
from h5mdx.analysis.series import write_outputs
from h5mdx.mpi import comm_world, ranks_by_text, ranks_phrase

__all__ = [
    "MIN_RANKS",
    "dask_mpi_client",
    "quiet_distributed_logging",
    "ranks_problem",
    "refused_on_any_rank",
    "rmsd_dask_mpi",
    "warm_up_workers",
    "worker_ranks",

]

#: dask-mpi needs a scheduler, a client and at least one worker.
MIN_RANKS = 3

#: Loggers that print connection-closed tracebacks when a cluster shuts down.
_NOISY_LOGGERS = ("distributed", "tornado", "asyncio")


def refused_on_any_rank(message: str | None) -> bool:
    """Whether any rank of the job refused to start: each rank's ``message`` (None where
    it did not refuse), said once by rank 0.

    Every rank checks the same options before dask-mpi starts, and refused them with the
    same line, once per rank. A line every rank gave is said as it is; one
    that only some ranks gave (a file that only they cannot see) names them.

    Parameters
    ----------
    message : str or None
        What this rank would print (its lines, ending in a newline); ``""`` where it
        refused and says why itself (an error it raises after this call).

    Returns
    -------
    bool
        True where some rank refused: every rank then leaves.
    """
    comm = comm_world()
    seen = comm.allgather(message)
    if comm.Get_rank() == 0:
        for text, ranks in ranks_by_text(seen).items():
            size = len(seen)
            sys.stderr.write(text if len(ranks) == size
                             else f"({ranks_phrase(ranks, size)}) {text}")
        sys.stderr.flush()
    return any(text is not None for text in seen)


def quiet_distributed_logging(level: str = "error") -> None:
    """Raise the level of the ``distributed`` (and tornado/asyncio) loggers.

    Parameters
    ----------
    level : str, optional
        ``"warning"``, ``"error"`` or ``"critical"``.
    """
    dask = import_optional("dask", "dask-mpi")
    os.environ["DASK_LOGGING__DISTRIBUTED"] = level
    dask.config.set({"logging.distributed": level})
    numeric = getattr(logging, level.upper())
    for name in _NOISY_LOGGERS:
        logging.getLogger(name).setLevel(numeric)


def ranks_problem(size: int, workers: int | None = None) -> str | None:
    """What is wrong with a dask-mpi job of ``size`` ranks asked for ``workers`` workers
    (None: nothing): fewer than :data:`MIN_RANKS` ranks, or ``workers`` not the ranks
    less the scheduler's and the client's. Said by ``h5mdx rmsd --scheduler dask-mpi``
    before anything starts, and by :func:`dask_mpi_client` and :func:`rmsd_dask_mpi`.

    >>> ranks_problem(4, 2) is None
    True
    """
    if size < MIN_RANKS:  # first: with 1 rank, --workers 5 was said as "-1 workers"
        return (f"--scheduler dask-mpi needs at least {MIN_RANKS} MPI ranks (scheduler, "
                f"client, one worker) but the job has {size}: run it as mpirun -n 4 h5mdx "
                "rmsd ... --scheduler dask-mpi")
    if workers is not None and workers != size - 2:
        return (f"--scheduler dask-mpi runs one worker on each rank but the scheduler's and "
                f"the client's: {size} ranks give {size - 2} workers, not {workers} (run "
                f"mpirun -n {workers + 2}, or leave --workers out)")
    return None


@contextmanager
def dask_mpi_client(
    *,
    interface: str | None = "lo",
    nthreads: int = 1,
    local_directory: str | None = None,
    memory_limit: str | int | float = "auto",
    log_level: str = "error",
    cluster_log_level: str = "critical",
    env: dict[str, str] | None = None,
    comm: Any = None,
) -> Iterator[Any]:
    """Start a dask cluster over the ranks of an MPI job; yield a Client on rank 1.

    Every rank must enter this context. Rank 0 (scheduler) and ranks 2+
    (workers) block until the client is done, then yield ``None``: the caller
    must then skip the client work and return (exit status 0). On rank 1 a
    connected :class:`distributed.Client` is yielded; leaving the block (also
    by an exception) closes the client and shuts the whole cluster down.

    Parameters
    ----------
    interface : str or None, optional
        Network interface for the scheduler and workers (default ``"lo"``, one node).
    nthreads : int, optional
        Threads per worker (1: HDF5 serialises calls within a process anyway).
    local_directory : str, optional
        Scratch directory of the workers.
    memory_limit : str, int or float, optional
        Per-worker memory limit (dask's syntax).
    log_level : str, optional
        Level of the ``distributed`` loggers on the client rank.
    cluster_log_level : str, optional
        Level on the scheduler and worker ranks. At shutdown a worker whose heartbeat
        meets the closed scheduler logs an ERROR with a ``CommClosedError`` traceback
        even on success; task failures reach the client as exceptions anyway.
    env : dict, optional
        Environment variables to set on every rank before the cluster starts
        (e.g. ``H5MDX_TIMING_SPOOL`` for timing capture in the workers).
    comm : mpi4py.MPI.Intracomm, optional
        Default ``MPI.COMM_WORLD``.

    Yields
    ------
    distributed.Client or None

    Raises
    ------
    ValueError
        If the job has fewer than :data:`MIN_RANKS` ranks.

    Examples
    --------
    Run with ``mpirun -n 4 python script.py``::

        with dask_mpi_client() as client:
            if client is not None:
                print(client.submit(sum, [1, 2]).result())
    """
    dask_mpi = import_optional("dask_mpi", "dask clusters inside MPI jobs (--scheduler dask-mpi)")
    distributed = import_optional("distributed", "dask clusters inside MPI jobs")
    if comm is None:
        comm = comm_world()
    size = comm.Get_size()
    problem = ranks_problem(size)
    if problem:
        raise ValueError(problem)
    for key, value in (env or {}).items():
        os.environ[key] = value
    quiet_distributed_logging(log_level if comm.Get_rank() == 1 else cluster_log_level)
    is_client = dask_mpi.initialize(
        interface=interface,
        nthreads=nthreads,
        local_directory=local_directory,
        memory_limit=memory_limit,
        dashboard=False,
        dashboard_address=":0",  # the HTTP server still starts: never clash on 8787
        worker_class="distributed.Worker",
        comm=comm,
        exit=False,
    )
    if not is_client:
        yield None
        return
    client = distributed.Client()
    try:
        client.wait_for_workers(size - 2, timeout=60)
        yield client
    finally:
        try:
            client.shutdown()
        finally:
            client.close()


def warm_up_workers(client: Any, warm_up: Any) -> dict[str, float]:
    """``warm_up()`` (the seconds it took) on every worker of ``client``, each answer
    awaited for a bounded time (``h5mdx.timing.capture.run_on_workers``): a frozen
    rank held the whole job at its start without a word. The workers that did not answer
    (or failed) are named, with their ranks, in one warning, and the run goes on; the
    seconds of those that did, by worker address."""
    import warnings

    from h5mdx.timing.capture import ANSWER_TIMEOUT_S, run_on_workers

    answers = run_on_workers(client, warm_up)
    warm = {str(a): float(v) for a, v in answers.items() if isinstance(v, (int, float))}
    silent = sorted(str(a) for a in answers if str(a) not in warm)
    if silent:
        ranks = worker_ranks(client)
        named = [f"rank {ranks[a]} ({a})" if a in ranks else a for a in silent]
        why = "; ".join(f"{n}: {answers[a]}" for n, a in zip(named[:3], silent, strict=False))
        warnings.warn(
            f"dask-mpi: {len(silent)} worker(s) did not load the RMSD kernel at start-up "
            f"within {ANSWER_TIMEOUT_S:g} s ({why}{'; ...' if len(silent) > 3 else ''}): "
            "stopped, or busy; the run goes on, and their first tasks may be slow",
            RuntimeWarning, stacklevel=2)
    return warm


def worker_ranks(client: Any) -> dict[str, int]:
    """Map the address of every dask-mpi worker to its MPI rank (dask-mpi names workers
    after their rank)."""
    info = client.scheduler_info(n_workers=-1).get("workers", {})
    out: dict[str, int] = {}
    for addr, w in info.items():
        try:
            out[addr] = int(w.get("name"))
        except (TypeError, ValueError):
            continue
    return out


def with_ranks(records: Any, ranks: dict[str, int]) -> Any:
    """``records`` (a timing DataFrame) with the ``rank`` of each row's worker (from
    :func:`worker_ranks`). A row whose worker is not in ``ranks`` (a worker not named
    after its rank, or lost before the map was taken) got rank NaN and no word: it keeps
    an empty rank, and a warning names the worker(s), once."""
    import warnings

    frame = records.copy()
    frame["rank"] = frame["worker"].map(ranks).astype("Int64")
    missing = sorted({str(w) for w in frame.loc[frame["rank"].isna(), "worker"]})
    if missing:
        n = int(frame["rank"].isna().sum())
        shown = ", ".join(missing[:5]) + (", ..." if len(missing) > 5 else "")
        warnings.warn(
            f"{n} timing record(s) of {len(missing)} dask-mpi worker(s) whose MPI rank is "
            f"not known ({shown}): not named after its rank by dask-mpi, or gone from the "
            "cluster before the ranks were asked; their rank is left empty",
            RuntimeWarning, stacklevel=2)
    return frame


def file_rmsd(trajectory: str, *, topology: str | None, group: str | None,
              convert_units: bool, select: Any = None, **options: Any) -> Any:
    """The RMSD of ``trajectory`` as :func:`rmsd_dask_mpi` computes it on its cluster (on
    the current dask scheduler): the file opened lazily (no dask chunks: each task reads
    its own block of the selected atoms, timed as t_io inside the task, h5mdx.rmsd's
    preferred path), a selection by distance made in the file's box at the reference
    frame, as ``h5mdx rmsd`` makes it with its other schedulers."""
    import xarray as xr

    from h5mdx.analysis.rmsd import rmsd

    with xr.open_dataset(trajectory, engine="h5md", topology=topology, group=group,
                         convert_units=convert_units) as ds:
        box = ds.get("box_edges") if isinstance(select, str) else None
        return rmsd(ds["position"], select=select, box=box, **options).compute()


def rmsd_dask_mpi(
    trajectory: str,
    *,
    topology: str | None = None,
    select: str | None = None,
    reference: int = 0,
    weights: str | None = None,
    superposition: bool = True,
    group: str | None = None,
    frames_per_block: int | None = None,
    chunk_mib: float | None = None,
    kernel: str = "auto",
    workers: int | None = None,
    out: str | None = None,
    rmsd_file: str | None = None,
    plot: str | None = None,
    timing: str | None = None,
    convert_units: bool = True,
    run_id: str | None = None,
    interface: str | None = "lo",
    comm: Any = None,
) -> np.ndarray | None:
    """RMSD with :func:`h5mdx.rmsd` on a dask-mpi cluster; every rank must call it.

    The client rank (1) opens the file lazily with the ``h5md`` engine (tasks of
    whole HDF5 chunks that read their own frames), computes the RMSD on the cluster under
    :func:`h5mdx.timing.capture` (one record per task, backend ``"dask-mpi"``, with the
    worker's MPI rank) and, with ``out``, writes ``rmsd.csv`` and ``timing.csv``
    (+ ``timing.meta.json``) there. The run's wall time covers opening the topology and
    the file too, like the MPI-IO path's.

    Parameters
    ----------
    trajectory : str
        The H5MD file.
    topology, select, reference, weights, superposition, frames_per_block, chunk_mib, kernel
        As for :func:`h5mdx.rmsd`.
    group : str, optional
        The particles group (default: the only one).
    workers : int, optional
        The number of workers expected: the job's ranks less two (scheduler and client);
        another number is an error on every rank.
    out : str, optional
        Output directory for ``timing.csv`` (and ``rmsd.csv`` unless ``rmsd_file``).
    rmsd_file : str, optional
        Where to write the series instead (``.csv`` or ``.nc``).
    plot : str, optional
        A PNG plot of the series.
    timing : str, optional
        Directory for ``timing.csv`` instead of ``out`` (as ``h5mdx rmsd --timing``).
    convert_units : bool, optional
        Positions (and so the RMSD) in Angstrom, as ``h5mdx rmsd`` does.
    run_id : str, optional
        Identifier of the run in the timing records.
    interface : str or None, optional
        Network interface of the cluster (default loopback).
    comm : mpi4py.MPI.Intracomm, optional
        Default ``MPI.COMM_WORLD``.

    Returns
    -------
    numpy.ndarray or None
        The RMSD series on the client rank; None on the scheduler and worker ranks.

    Raises
    ------
    ValueError
        If ``workers`` is not the job's ranks less two.
    """
    if comm is None:
        comm = comm_world()
    n_workers = comm.Get_size() - 2
    problem = ranks_problem(comm.Get_size(), workers)
    if problem:
        raise ValueError(problem)
    timing = timing or out
    with dask_mpi_client(interface=interface, comm=comm) as client:
        if client is None:
            return None
        from h5mdx.analysis.qcp import warm_up
        from h5mdx.timing import capture

        # every worker loads the kernel now, as h5mdx's other clusters do when they
        # start: a first task that did would look like a straggler (seconds in ``meta``)
        warm = warm_up_workers(client, warm_up)
        meta = {"file": trajectory, "selection": select, "topology": topology,
                "reference": reference, "weights": weights, "n_ranks": comm.Get_size(),
                "interface": interface, "warm_up_s": warm}
        if timing:
            os.makedirs(timing, exist_ok=True)
        ranks = worker_ranks(client)  # a worker lost in the run is known by its rank still
        with capture(backend="dask-mpi", client=client, n_workers=n_workers, run_id=run_id,
                     meta=meta) as run:
            result = file_rmsd(trajectory, topology=topology, group=group,
                               convert_units=convert_units, reference=reference,
                               select=select, weights=weights, superposition=superposition,
                               frames_per_block=frames_per_block, chunk_mib=chunk_mib,
                               kernel=kernel)
        ranks.update(worker_ranks(client))
    frame = with_ranks(run.records, ranks)
    if out and not rmsd_file:
        rmsd_file = str(Path(out) / "rmsd.csv")
    write_outputs(result, rmsd_file, plot)
    if timing:
        from h5mdx.timing.records import save

        save(frame, Path(timing) / "timing.csv", run.meta)
    return np.asarray(result.values, dtype=np.float64)
