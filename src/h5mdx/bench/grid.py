"""The scaling grid behind ``h5mdx bench``: runs, records, summary, plots and report.

A :class:`Workload` knows how to build the lazy computation for a given
number of frames per dask block; :func:`run_grid` runs it for every
scheduler x workers N x blocks-per-worker M x repeat, each run inside
:func:`h5mdx.timing.capture`, with ``ceil(n_frames / (N * M))`` frames per block
(M = 1: one block per worker; M = 3: the over-subscription experiment, three
blocks per worker so that fast workers can take work from slow ones).

Two workloads come with h5mdx: :func:`rmsd_workload` (``h5mdx.rmsd`` on an
H5MD file, the studies' benchmark) and :func:`read_workload` (read each block
of an HDF5 dataset and reduce it: I/O with a small, tunable compute part).
Anything else is a ``Workload(build, n_frames)`` whose tasks use
:class:`~h5mdx.timing.phases.BlockTimer`.

Scheduler details: ``threads`` and ``processes`` are dask's local schedulers
(the processes scheduler gets a new pool for every run, made as dask makes it, whose
workers end at once on Ctrl-C or SIGTERM -- its start-up is part of the measured
time -- and is given ``chunksize=1`` so that every block can go to a different
process); ``distributed`` uses a ``LocalCluster`` of N
single-threaded worker processes per N, started once. Before the timed runs of
each scheduler and N, one untimed run warms up imports, pools and the page cache.
"""

from __future__ import annotations

import contextlib
import math
import os
import re
import sys
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from h5mdx._progress import progress_bar
from h5mdx._replace import keep_stat, replacing, write_with_sidecar
from h5mdx.parallel.schedulers import SCHEDULERS as _ALL_SCHEDULERS
from h5mdx.timing.phases import BlockTimer
from h5mdx.timing.report import render_table

__all__ = [
    "MPI_BACKENDS",
    "SCHEDULERS",
    "BenchResult",
    "Workload",
    "frames_per_block",
    "read_workload",
    "render_report",
    "rmsd_workload",
    "selection_problem",
    "run_grid",
    "write_outputs",
]

#: Backends run as ``mpirun`` subprocesses (:mod:`h5mdx.mpi.commands`): the MPI-IO SPMD
#: program and dask on a dask-mpi cluster. Their records come from the files they write.
MPI_BACKENDS = ("mpi-io", "dask-mpi")
#: Schedulers the grid can run (those of :data:`h5mdx.parallel.schedulers.SCHEDULERS` but
#: SLURM).
SCHEDULERS = tuple(s for s in _ALL_SCHEDULERS if s != "slurm")


def frames_per_block(n_frames: int, n_workers: int, blocks_per_worker: int) -> int:
    """Frames per dask block for N workers and M blocks per worker: ``ceil(n / (N M))``.

    Examples
    --------
    >>> frames_per_block(98, 2, 3)
    17
    """
    if n_frames < 1 or n_workers < 1 or blocks_per_worker < 1:
        raise ValueError(
            f"need n_frames, n_workers and blocks_per_worker >= 1, got "
            f"{n_frames}, {n_workers}, {blocks_per_worker}"
        )
    return max(1, math.ceil(n_frames / (n_workers * blocks_per_worker)))


@dataclass
class Workload:
    """A computation to benchmark.

    Parameters
    ----------
    build : callable
        ``build(frames_per_block) -> lazy dask collection`` whose tasks time
        themselves with :class:`~h5mdx.timing.phases.BlockTimer`.
    n_frames : int
        Number of frames the computation covers.
    meta : dict, optional
        Run metadata (``file``, ``layout``, ``selection``, ``analysis``, ...).
    close : callable, optional
        Called once when the grid is done (e.g. to close opened datasets).
    """

    build: Callable[[int], Any]
    n_frames: int
    meta: dict[str, Any] = field(default_factory=dict)
    close: Callable[[], None] | None = None


def _read_block(
    frames: np.ndarray, path: str, dataset: str, repeat: int, kind: str
) -> np.ndarray:
    """Read frames ``[frames[0], frames[-1]]`` of ``dataset`` and reduce each frame."""
    import h5py

    a, b = int(frames[0]), int(frames[-1]) + 1
    with BlockTimer(a, b, kind=kind) as timer:
        with timer.phase("io"):
            with h5py.File(path, "r") as f:
                x = f[dataset][a:b]
            timer.bytes_read += x.nbytes
        with timer.phase("compute"):
            x = np.asarray(x, dtype=np.float64)
            acc = np.zeros(b - a)
            for _ in range(max(1, repeat)):
                acc += np.sqrt((x * x).reshape(b - a, -1).sum(axis=1))
    return acc


def _position_dataset(path: str) -> tuple[str, tuple[int, ...] | None, int]:
    import h5py

    from h5mdx.errors import H5MDFormatError
    from h5mdx.format.h5md import open_h5md, scan

    # a directory or a file that is not HDF5 said so, not h5py's "[Errno 21] Unable to
    # open file (file read failed: ...)" or "file signature not found"
    open_h5md(path).close()
    try:
        info = scan(path)
    except (OSError, ValueError):
        info = None
    if info is not None:
        # time-dependent positions first: a group's time-independent position (one
        # structure, shape (atoms, 3)) was taken for a trajectory of as many frames as
        # atoms when its group came first
        found = [el for el in (g.elements.get("position") for g in info.particles.values())
                 if el is not None]
        framed = [el for el in found if len(el.shape) >= 1]
        if found and not framed:  # a position of shape (): "tuple index out of range"
            raise H5MDFormatError(path, found[0].value_path,
                                  f"the position dataset has shape {found[0].shape}: no "
                                  "frames to read (H5MD's are (frames, particles, dimension))")
        found = framed
        if found:
            el = min(found, key=lambda el: not el.time_dependent)  # the first of them
            return el.value_path, el.chunks, int(el.shape[0])
    with open_h5md(path) as f:
        names: list[str] = []
        f.visititems(lambda n, o: names.append(n) if isinstance(o, h5py.Dataset)
                     and o.ndim >= 1 else None)
        if not names:
            raise ValueError(f"{path}: no dataset to read; pass dataset='/path/in/file'")
        d = f[names[0]]
        return d.name, d.chunks, int(d.shape[0])


def read_workload(
    path: str | os.PathLike[str], dataset: str | None = None, *, repeat: int = 1
) -> Workload:
    """Read every block of an HDF5 dataset and reduce it (an I/O-heavy workload).

    Each task opens the file, reads its frames (phase ``io``) and computes the
    norm of every frame ``repeat`` times (phase ``compute``).

    Parameters
    ----------
    path : path-like
        An H5MD or plain HDF5 file.
    dataset : str, optional
        The dataset (axis 0 = frames); default the first ``position`` of an H5MD
        file, else the first dataset.
    repeat : int, optional
        How often the reduction is repeated (scales the compute phase).

    Returns
    -------
    Workload
    """
    import dask.array as da
    import h5py

    path = os.fspath(path)
    if dataset is None:
        dataset, chunks, n_frames = _position_dataset(path)
    else:
        with h5py.File(path, "r") as f:
            d = f[dataset]
            chunks, n_frames = d.chunks, int(d.shape[0])

    def build(fpb: int) -> Any:
        return da.arange(n_frames, chunks=fpb).map_blocks(
            _read_block, path=path, dataset=dataset, repeat=repeat, kind="read",
            dtype=np.float64, meta=np.array((), dtype=np.float64),  # dask need not call it
        )

    meta = {"analysis": "read", "file": path, "dataset": dataset,
            "layout": {"hdf5_chunks": None if chunks is None else list(chunks)},
            "selection": None, "repeat": repeat}
    return Workload(build, n_frames, meta)


def selection_problem(trajectory: str | os.PathLike[str], select: str | None,
                      topology: str | None) -> str | None:
    """Why ``select`` cannot be made on ``trajectory`` without a topology (None: it can,
    or there is no selection): the file holds no atom names. Said by ``h5mdx bench``
    before the grid, and by :func:`rmsd_workload`."""
    from h5mdx.engine.topology import holds_topology

    if select is None or topology is not None or holds_topology(os.fspath(trajectory)):
        return None
    return (f"--select {select!r} needs --topology (a PSF, PDB, GRO, TPR, ... of the same "
            f"atoms): {os.fspath(trajectory)} holds no atom names (GROMACS' H5MD files hold "
            "their topology, and files with VMD's structure module)")


def rmsd_workload(
    trajectory: str | os.PathLike[str],
    topology: str | None = None,
    select: str | None = None,
    **rmsd_kwargs: Any,
) -> Workload:
    """RMSD with :func:`h5mdx.rmsd` (the studies' benchmark) for the grid.

    Parameters
    ----------
    trajectory : path-like
        The H5MD file.
    topology : str, optional
        Topology file for the selection.
    select : str, optional
        MDAnalysis selection string.
    **rmsd_kwargs
        More arguments of :func:`h5mdx.rmsd` (e.g. ``reference=0``).

    Returns
    -------
    Workload
    """
    import xarray as xr

    try:
        from h5mdx.analysis.rmsd import rmsd
    except ImportError as err:
        raise ImportError(
            f"h5mdx.rmsd is not available ({err}); benchmark reading alone with "
            "h5mdx bench --analysis read"
        ) from err
    trajectory = os.fspath(trajectory)
    problem = selection_problem(trajectory, select, topology)
    if problem:
        raise ValueError(problem)
    value_path, chunks, n_frames = _position_dataset(trajectory)
    if topology is not None or select is not None or rmsd_kwargs:
        # a selection that matches nothing, a topology of other atoms: said before the grid
        with xr.open_dataset(trajectory, engine="h5md", topology=topology) as ds:
            rmsd(ds["position"], select=select, **rmsd_kwargs)
    opened: list[Any] = []

    def build(fpb: int) -> Any:
        # lazily indexed (no chunks=): rmsd builds one task per block of fpb frames that
        # reads its block itself, so the records split t_io from t_compute
        ds = xr.open_dataset(trajectory, engine="h5md", topology=topology)
        opened.append(ds)
        return rmsd(ds["position"], select=select, frames_per_block=fpb, **rmsd_kwargs)

    def close() -> None:
        while opened:
            opened.pop().close()

    meta = {"analysis": "rmsd", "file": trajectory, "topology": topology,
            "layout": {"hdf5_chunks": None if chunks is None else list(chunks),
                       "dataset": value_path},
            "selection": select, "rmsd_kwargs": {k: repr(v) for k, v in rmsd_kwargs.items()},
            # what the MPI backends would not compute (compared by value, not by text:
            # reference=np.int64(0) is their reference 0)
            "mpi_rmsd_differs": {k: repr(v) for k, v in rmsd_kwargs.items()
                                 if k in _MPI_RMSD_DEFAULTS and not _is_default(k, v)}}
    return Workload(build, n_frames, meta, close)


def _is_default(name: str, value: Any) -> bool:
    """Whether ``value`` of the RMSD argument ``name`` is the MPI backends' default."""
    default = _MPI_RMSD_DEFAULTS[name]
    if default is None or isinstance(value, str):
        return value is default
    try:
        return bool(value == default)
    except (TypeError, ValueError):  # an array: no default
        return False


@dataclass
class BenchResult:
    """Everything a grid produced.

    Attributes
    ----------
    records : pandas.DataFrame
        All tasks of all runs (the timing schema).
    runs : pandas.DataFrame
        One row per run (:func:`~h5mdx.timing.stragglers.run_table`).
    speedup : pandas.DataFrame
        S(N) and E(N) (:func:`~h5mdx.timing.stragglers.speedup`).
    metas : list of dict
        The runs' metadata.
    advice : list of str
        :func:`~h5mdx.timing.stragglers.advice` over the largest-N runs.
    files : dict
        Files written by :func:`write_outputs`.
    """

    records: Any
    runs: Any
    speedup: Any
    metas: list[dict[str, Any]]
    advice: list[str]
    files: dict[str, str] = field(default_factory=dict)


def _compute(obj: Any, scheduler: str, n_workers: int, client: Any) -> Any:
    import dask

    if scheduler == "distributed":
        return client.compute(obj, sync=True)
    if scheduler == "processes":
        from h5mdx.parallel.schedulers import process_pool

        # a pool per run, as dask's own, but whose workers end at once with Ctrl-C or
        # SIGTERM: dask's waited for their tasks (a --delay's minutes) before it exited
        with process_pool(n_workers) as pool:
            return dask.compute(obj, scheduler="processes", num_workers=n_workers,
                                chunksize=1, pool=pool)
    return dask.compute(obj, scheduler=scheduler, num_workers=n_workers)


def run_grid(
    workload: Workload,
    *,
    schedulers: Iterable[str] = ("threads",),
    workers: Iterable[int] = (1, 2),
    blocks_per_worker: Iterable[int] = (1,),
    repeats: int = 1,
    out: str | os.PathLike[str] | None = None,
    env: Mapping[str, str] | None = None,
    progress: bool = True,
    on_run: Callable[[dict[str, Any]], None] | None = None,
) -> BenchResult:
    """Run ``workload`` for every scheduler x N x M x repeat and collect the records.

    Parameters
    ----------
    workload : Workload
        What to run.
    schedulers : iterable of str, optional
        Among :data:`SCHEDULERS`.
    workers : iterable of int, optional
        Worker counts N.
    blocks_per_worker : iterable of int, optional
        Blocks per worker M (``n_frames / (N M)`` frames per block).
    repeats : int, optional
        Runs per configuration.
    out : path-like, optional
        Output directory; if given, :func:`write_outputs` writes everything there.
    env : mapping, optional
        Extra environment variables for the runs (e.g. ``H5MDX_TIMING_DELAY``).
    progress : bool, optional
        Show a rich progress bar (on stderr).
    on_run : callable, optional
        Called with each run's metadata after the run.

    Returns
    -------
    BenchResult
    """
    import pandas as pd

    from h5mdx.timing.stragglers import advice, run_table, speedup

    schedulers = list(dict.fromkeys(schedulers))
    bad = [s for s in schedulers if s not in SCHEDULERS]
    if bad:
        raise ValueError(f"unknown scheduler(s) {bad}; valid options are: {', '.join(SCHEDULERS)}")
    workers = sorted({int(n) for n in workers})
    blocks = sorted({int(m) for m in blocks_per_worker})
    if not workers or min(workers) < 1 or not blocks or min(blocks) < 1 or repeats < 1:
        raise ValueError("workers, blocks-per-worker and repeats must be positive integers")
    _check_mpi_backends(schedulers)
    _check_mpi_workload(workload, schedulers)
    total = sum(len(workers) * (1 if s in MPI_BACKENDS else len(blocks)) * repeats
                for s in schedulers)
    frames: list[Any] = []
    metas: list[dict[str, Any]] = []
    bench_id = time.strftime("%Y%m%dT%H%M%S")

    def collect(records: Any, meta: dict[str, Any]) -> None:
        frames.append(records)
        metas.append(meta)
        if on_run is not None:
            on_run(meta)

    def result_of_runs() -> BenchResult:
        records = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()
        runs = run_table(records, metas)
        table = speedup(runs)
        top = records[records["n_workers"] == records["n_workers"].max()]
        return BenchResult(records, runs, table, metas, advice(top, table))

    try:
        with progress_bar(total, "runs", progress, unit=None, elapsed=True,
                          stderr=True) as bar:
            for scheduler in schedulers:
                for n in workers:
                    if scheduler in MPI_BACKENDS:
                        _mpi_runs(workload, scheduler, n, repeats, env, bench_id, bar, collect)
                    else:
                        _dask_runs(workload, scheduler, n, blocks, repeats, env, bench_id, bar,
                                   collect)
    except BaseException:
        if frames and out is not None:  # the runs that finished are kept, and said so
            write_outputs(result_of_runs(), out)
            print(f"h5mdx bench: {len(metas)} of {total} runs finished before the error; "
                  f"their records and tables are in {os.fspath(out)}", file=sys.stderr)
        raise
    finally:
        if workload.close is not None:
            workload.close()
    result = result_of_runs()
    if out is not None:
        write_outputs(result, out)
    return result


def _mpi_runs(workload: Workload, scheduler: str, n: int, repeats: int,
              env: Mapping[str, str] | None, bench_id: str, bar: Any,
              collect: Callable[[Any, dict[str, Any]], None]) -> None:
    """The repeats of an MPI backend with ``n`` ranks or workers.

    One block per rank (mpi-io) or the engine's blocks (dask-mpi): M does not apply;
    each run is a fresh mpirun, timed end to end by its ranks.
    """
    for rep in range(repeats):
        run_id = f"{scheduler}-n{n}-r{rep}"
        bar.describe(f"{scheduler} N={n} repeat {rep + 1}")
        recs, meta = _run_mpi(scheduler, n, workload, run_id, env)
        meta.update(bench_id=bench_id, repeat=rep, blocks_per_worker=1)
        collect(recs, meta)
        bar.advance()


def _dask_runs(workload: Workload, scheduler: str, n: int, blocks: list[int], repeats: int,
               env: Mapping[str, str] | None, bench_id: str, bar: Any,
               collect: Callable[[Any, dict[str, Any]], None]) -> None:
    """Every M and repeat of a dask scheduler with ``n`` workers, after an untimed warm-up."""
    from h5mdx.timing.capture import capture

    with _cluster(scheduler, n) as client:
        # untimed warm-up: imports, thread pools, page cache
        _compute(workload.build(frames_per_block(workload.n_frames, n, 1)), scheduler, n, client)
        for m in blocks:
            fpb = frames_per_block(workload.n_frames, n, m)
            for rep in range(repeats):
                run_id = f"{scheduler}-n{n}-m{m}-r{rep}"
                bar.describe(f"{scheduler} N={n} M={m} repeat {rep + 1}")
                obj = workload.build(fpb)
                meta = {**workload.meta, "bench_id": bench_id, "blocks_per_worker": m,
                        "repeat": rep, "frames_per_block": fpb, "n_frames": workload.n_frames}
                layout = dict(meta.get("layout") or {})
                layout["dask_time_chunk"] = fpb
                meta["layout"] = layout
                with capture(backend=scheduler, client=client, n_workers=n, run_id=run_id,
                             meta=meta, env=env) as run:
                    _compute(obj, scheduler, n, client)
                collect(run.records, run.meta)
                bar.advance()


def _check_mpi_backends(schedulers: Sequence[str]) -> None:
    """Refuse, before any run, an MPI backend whose modules are missing (the grid ran
    the other schedulers, then failed in ``mpirun``). Looked up, not imported: only
    :mod:`h5mdx.mpi` imports mpi4py."""
    import importlib.util

    from h5mdx.errors import MissingDependencyError

    needs = {"mpi-io": ("mpi4py",), "dask-mpi": ("mpi4py", "dask_mpi")}
    for backend in (s for s in schedulers if s in needs):
        missing = [m for m in needs[backend] if importlib.util.find_spec(m) is None]
        if missing:
            raise MissingDependencyError(
                f"the {backend} backend needs {' and '.join(missing)}: pip install "
                f"{' '.join(m.replace('_', '-') for m in missing)} (and an MPI build of h5py "
                "for mpi-io), or leave it out of --scheduler")


#: Arguments of :func:`h5mdx.rmsd` that change the series, and their defaults: the MPI
#: backends run the RMSD with these defaults (``h5mdx mpi-rmsd``, ``rmsd_dask_mpi``).
_MPI_RMSD_DEFAULTS = {"reference": 0, "weights": None, "superposition": True}


def _check_mpi_workload(workload: Workload, schedulers: Sequence[str]) -> None:
    """Refuse, before any run, a workload the MPI backends would not run as the dask
    schedulers do: another analysis than the RMSD (refused after the other schedulers
    had run), or an RMSD of another reference, weights or superposition, which they
    left out: the grid timed two computations side by side as one."""
    mpi = [s for s in schedulers if s in MPI_BACKENDS]
    if not mpi:
        return
    meta = workload.meta
    if meta.get("analysis") != "rmsd":
        raise ValueError(f"the {mpi[0]} backend runs the rmsd analysis only (--analysis rmsd)")
    other = meta.get("mpi_rmsd_differs") or {}
    if other:
        said = ", ".join(f"{k}={v}" for k, v in other.items())
        raise ValueError(
            f"the {' and '.join(mpi)} backend(s) run the RMSD with reference=0, no weights "
            f"and superposition, not {said}: the grid would time another computation "
            "beside the dask schedulers'; leave them out of the workload or the MPI "
            "backends out of schedulers")


def _child_error(stderr: str) -> str:
    """What a failed ``mpirun`` said: its ranks' error lines (each once), else its last
    lines; never a traceback cut in the middle."""
    lines = [ln.strip() for ln in stderr.splitlines() if ln.strip()]
    # a rank's own line ('rank 1 of 4 failed: '), or rank 0's for several ('all 4 ranks
    # failed: ', 'ranks 0-2, 5 of 8 failed: '), which fell to Open MPI's closing lines
    # ('Process name: ...', 'Exit code: 1')
    said = [ln for ln in lines if re.search(
        r"(: error: |\branks? [\d, -]+ of \d+ failed: |\ball \d+ ranks failed: )", ln)]
    if not said:
        said = [ln for ln in lines if not ln.startswith(("File ", "Traceback", "^"))][-3:]
    return "; ".join(dict.fromkeys(said)) or "(no message)"


def _run_mpi(backend: str, n: int, workload: Workload, run_id: str,
             env: Mapping[str, str] | None) -> tuple[Any, dict[str, Any]]:
    """Run the RMSD of ``workload`` with ``n`` MPI ranks (mpi-io) or workers (dask-mpi)."""
    import tempfile

    from h5mdx._subprocess import run
    from h5mdx.mpi.commands import dask_mpi_command, mpi_env, mpi_io_command
    from h5mdx.timing.records import load

    spec = workload.meta
    if spec.get("analysis") != "rmsd":
        raise ValueError(f"the {backend} backend runs the rmsd analysis only (--analysis rmsd)")
    make = mpi_io_command if backend == "mpi-io" else dask_mpi_command
    with tempfile.TemporaryDirectory(prefix="h5mdx-bench-") as tmp:
        cmd = make(n, spec["file"], tmp, topology=spec.get("topology"),
                   select=spec.get("selection"))
        proc = run(cmd, timeout=1800, env=mpi_env({**os.environ, **dict(env or {})}))
        if proc.returncode != 0:  # the ranks' own one-line errors, not a traceback
            raise ChildProcessError(f"{backend} with N={n} failed (exit {proc.returncode}): "
                                    f"{_child_error(proc.stderr)}")
        records, meta = load(os.path.join(tmp, "timing.csv"))
    records = records.copy()
    records["run_id"] = run_id
    records["n_workers"] = n
    meta = {**dict(meta or {}), **spec, "run_id": run_id, "backend": backend, "n_workers": n}
    if backend == "mpi-io":
        meta.pop("wall", None)  # the span of the rank records is the run's wall time
    return records, meta


@contextlib.contextmanager
def _cluster(scheduler: str, n_workers: int) -> Iterator[Any]:
    """A LocalCluster + Client for ``distributed`` (None for the local schedulers), both
    closed with the block, and the cluster also where its client fails to start (its
    worker processes were left running)."""
    if scheduler != "distributed":
        yield None
        return
    from h5mdx._optional import import_optional

    import_optional("distributed", "h5mdx bench --scheduler distributed")
    from distributed import Client

    from h5mdx.parallel.local import local_cluster
    from h5mdx.parallel.workers import warm_up_workers

    with local_cluster(n_workers) as cluster, Client(cluster) as client:
        # every worker imports the task's modules and loads the kernel before any timed
        # run, as h5mdx rmsd's workers do: a worker that had run no task of the untimed
        # warm-up imported them when it first took another's output, 0.3-0.9 s of one
        # timed run of tasks of milliseconds (S(2) = 0.05 in notebook 02)
        warm_up_workers(client)
        yield client


def _fmt(x: Any, spec: str = ".3g") -> str:
    try:
        return "" if x is None or (isinstance(x, float) and math.isnan(x)) else format(x, spec)
    except (TypeError, ValueError):
        return str(x)


def summary_rows(result: BenchResult) -> tuple[list[str], list[list[str]]]:
    """Header and rows of the summary table (one row per scheduler, N and M)."""
    runs = result.runs.copy()
    runs["blocks_per_worker"] = runs["blocks_per_worker"].fillna(1)
    g = runs.groupby(["backend", "blocks_per_worker", "n_workers"], sort=True)
    agg = g.agg(n_runs=("wall", "size"), tasks=("n_tasks", "median"),
                imbalance=("load_imbalance", "median"), stragglers=("n_stragglers", "sum"),
                r_io=("R_comp_io", "median")).reset_index()
    sp = result.speedup.copy()
    if "blocks_per_worker" not in sp:
        sp["blocks_per_worker"] = 1.0
    sp["blocks_per_worker"] = sp["blocks_per_worker"].fillna(1)
    agg = agg.merge(sp[["backend", "blocks_per_worker", "n_workers", "t_N", "S", "E"]],
                    on=["backend", "blocks_per_worker", "n_workers"], how="left")
    header = ["scheduler", "N", "M", "tasks", "runs", "t_N (s)", "S(N)", "E(N)",
              "imbalance", "stragglers", "R_comp/IO"]
    rows = [[str(r.backend), str(int(r.n_workers)), str(int(r.blocks_per_worker)),
             _fmt(r.tasks, ".0f"), str(int(r.n_runs)), _fmt(r.t_N, ".3f"), _fmt(r.S, ".2f"),
             _fmt(r.E, ".2f"), _fmt(r.imbalance, ".2f"), str(int(r.stragglers)),
             _fmt(r.r_io, ".2g")] for r in agg.itertuples()]
    return header, rows



def _n_frames(result: BenchResult) -> int | None:
    """The frames of the benchmark: from a run's metadata, else from its records (an MPI
    run's metadata does not give them)."""
    for meta in result.metas:
        if meta.get("n_frames") is not None:
            return int(meta["n_frames"])
    records = result.records
    if len(records) and "frame_stop" in records:
        import pandas as pd

        stop = records["frame_stop"].max()  # NA where no record gives its frames
        return None if pd.isna(stop) else int(stop)
    return None

def render_report(result: BenchResult, images: Mapping[str, str] | None = None) -> str:
    """A short Markdown report of a grid: setup, summary table, advice, figures."""
    meta = result.metas[0] if result.metas else {}
    header, rows = summary_rows(result)
    versions = meta.get("versions", {})
    machine = meta.get("machine", {})
    # the file's layout; the dask blocks differ by run (n_frames / (N M), said below): the
    # first run's, shown here, passed for every run's
    hdf5 = {k: v for k, v in (meta.get("layout") or {}).items() if k != "dask_time_chunk"}
    lines = [
        "# h5mdx bench report",
        "",
        f"- analysis: {meta.get('analysis', '?')} on `{meta.get('file')}`"
        + (f" (selection `{meta['selection']}`)" if meta.get("selection") else ""),
        f"- frames: {_n_frames(result)}; HDF5 layout: {hdf5}",
        f"- machine: {machine.get('hostname')} ({machine.get('cpu_count')} CPUs); "
        + ", ".join(f"{k} {v}" for k, v in versions.items() if v),
        f"- runs: {len(result.metas)}; started {meta.get('timestamp')}",
        "",
        "S(N) = t_1 / t_N and E(N) = S(N) / N use t_N, the median wall time of the repeats "
        "less the warm-up (loading the kernel: reported beside, not counted as work);",
        "M is the number of blocks per worker (frames per block = n_frames / (N M));",
        "tasks, imbalance and R_comp/IO are medians over the runs, stragglers the tasks "
        "flagged in all of them.",
        "",
        render_table(rows, header, fmt="markdown"),
        "",
        "## Advice",
        "",
    ]
    lines += [f"- {a}" for a in result.advice] or ["- nothing stands out."]
    if images:
        lines += ["", "## Figures", ""]
        lines += [f"![{name}]({rel})" for name, rel in images.items()]
    return "\n".join(lines) + "\n"


def write_outputs(result: BenchResult, out: str | os.PathLike[str]) -> dict[str, str]:
    """Write records (per run and combined), tables, plots and ``report.md`` to ``out``.

    The earlier ``report.md`` is removed first and the new one written last: a
    ``report.md`` in ``out`` is the report of the files beside it (a write stopped half-way
    leaves none).

    Returns
    -------
    dict
        Name -> path of every file written (also stored in ``result.files``).
    """
    from h5mdx.timing.plots import plot_gantt, plot_per_worker, plot_scaling
    from h5mdx.timing.records import save

    out = Path(out)
    earlier = _earlier_files(out)  # before its records.parquet, which names them, is replaced
    # the earlier report first, the new one last: a bench stopped while writing (killed, a
    # full disk) left the earlier report.md beside this bench's records and tables
    report = out / "report.md"
    earlier_report = report.stat() if report.is_file() else None  # its group and mode
    with contextlib.suppress(FileNotFoundError):  # through a link: the file, the link kept
        Path(os.path.realpath(report)).unlink()
    (out / "runs").mkdir(parents=True, exist_ok=True)
    files: dict[str, str] = {}
    for meta in result.metas:
        rid = meta["run_id"]
        df = result.records[result.records["run_id"] == rid].reset_index(drop=True)
        files[f"run:{rid}"] = str(save(df, out / "runs" / f"{rid}.parquet", meta))
    combined = {"runs": result.metas, "bench_id": result.metas[0].get("bench_id")
                if result.metas else None}
    files["records"] = str(save(result.records, out / "records.parquet", combined))
    files["runs"] = str(_write_table(result.runs, out / "runs.csv", RUNS_UNITS, index=True))
    files["speedup"] = str(_write_table(result.speedup, out / "speedup.csv", SPEEDUP_UNITS,
                                        index=False))
    images: dict[str, str] = {}
    if result.speedup["S"].notna().any():
        plot_scaling(result.speedup, out / "scaling.png")
        images["speed-up and efficiency"] = "scaling.png"
    for backend in result.runs["backend"].unique():
        sub = result.runs[result.runs["backend"] == backend]
        rid = str(sub.sort_values(["n_workers", "blocks_per_worker", "repeat"]).index[-1])
        gantt, bars = f"gantt-{rid}.png", f"workers-{rid}.png"
        plot_gantt(result.records, rid, out / gantt)
        plot_per_worker(result.records, rid, out / bars)
        images[f"tasks of {rid}"] = gantt
        images[f"time per worker of {rid}"] = bars
    files.update({f"plot:{k}": str(out / v) for k, v in images.items()})
    with replacing(report) as tmp:  # a write stopped half-way: none, never one cut short
        tmp.write_text(render_report(result, images), encoding="utf-8")
        if earlier_report is not None:
            keep_stat(earlier_report, tmp)
    files["report"] = str(report)
    written = {Path(f).resolve() for f in files.values()}
    for path in earlier:  # left beside the new ones, they passed for this bench's
        if path.resolve() not in written:
            path.unlink(missing_ok=True)
    result.files = files
    return files


#: The units of ``runs.csv``'s columns that have one, in its sidecar ``runs.meta.json`` as
#: ``timing.csv``'s (``units``): its times said no unit, only report.md's table "(s)".
RUNS_UNITS: dict[str, str] = {
    "wall": "s", "warmup": "s", "busy": "s", "n_frames": "frames",
    "load_imbalance": "1 (the busiest worker's work / the mean)",
    "R_comp_io": "1 (compute time / I/O time)", "R_comp_comm": "1 (compute / communication)",
}
#: The units of ``speedup.csv``'s columns, in ``speedup.meta.json``.
SPEEDUP_UNITS: dict[str, str] = {
    "t_N": "s (median wall time less warm-up)", "t_N_min": "s", "t_N_max": "s",
    "warmup": "s", "n_frames": "frames", "S": "1 (t_1 / t_N)", "E": "1 (S / n_workers)",
}


def _write_table(table: Any, path: Path, units: Mapping[str, str], *, index: bool) -> Path:
    """``table`` as CSV at ``path``, with the sidecar ``<stem>.meta.json`` that says its
    columns' units (``{"units": {column: unit}}``, as :func:`h5mdx.timing.records.save`
    writes beside ``timing.csv``, with the CSV's digest); both written under temporary
    names, then renamed (:func:`h5mdx._replace.write_with_sidecar`)."""
    columns = set(table.columns) | ({table.index.name} if index else set())
    meta = {"units": {c: u for c, u in units.items() if c in columns}}
    write_with_sidecar(path, lambda tmp: table.to_csv(tmp, index=index), meta, indent=1,
                       sort_keys=True)
    return path


def _earlier_files(out: Path) -> list[Path]:
    """The run records and figures an earlier bench wrote to ``out``, by the runs its
    ``records.parquet`` names (none where there is none: no other file is touched)."""
    from h5mdx.timing.records import load

    try:
        _, meta = load(out / "records.parquet")
    except (OSError, ValueError):
        return []
    rids = [str(m.get("run_id")) for m in meta.get("runs") or () if isinstance(m, Mapping)]
    return [out / "scaling.png", *(path for rid in rids for path in (
        out / "runs" / f"{rid}.parquet", out / f"gantt-{rid}.png", out / f"workers-{rid}.png"))]
