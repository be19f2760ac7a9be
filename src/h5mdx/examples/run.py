"""The example's run: the RMSD and the read floor in paired rounds, then the outputs.

:func:`run_example` builds (or reuses) the trajectory, times the RMSD on a local cluster
against the read floor and raw reads of the same bytes (:mod:`h5mdx.floor`) in paired
rounds, runs it once more with per-task timing, times MDAnalysis on a sample, and writes
the outputs into a staging directory, published together when all were written.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import time
import warnings
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from h5mdx.examples.report import (
    ExampleResult,
    figure,
    machine_description,
    plot_rmsd,
    plural,
    rmsd_title,
    write_report,
)
from h5mdx.examples.trajectory import (
    DEFAULT_FRAMES,
    SYNTHETIC,
    build_adk_trajectory,
    describe_file,
    is_cached,
    is_example_file,
    remove_dead_builds,
)
from h5mdx.floor import floor_figures, floor_reader, floor_slabs

__all__ = ["OUTPUTS", "ROUNDS", "foreign_outputs", "mdanalysis_sample_rate", "run_example"]


def mdanalysis_sample_rate(path: str | os.PathLike[str], topology: str, select: str = "name CA",
                           frames: int = 300) -> dict[str, Any]:
    """Time MDAnalysis' ``RMSD`` on the first ``frames`` frames of ``path``.

    Only ``RMSD.run`` is timed (not building the Universe), serially, as
    MDAnalysis runs by default.

    Parameters
    ----------
    path : path-like
        The H5MD file (read by MDAnalysis' own H5MD reader).
    topology : str
        Topology file.
    select : str, default "name CA"
        Atom selection.
    frames : int, default 300
        Frames to run on (capped at the trajectory's length).

    Returns
    -------
    dict
        ``version, frames, seconds, frames_per_s`` and ``rmsd`` (numpy array, Å).
    """
    from h5mdx._optional import import_optional

    mda = import_optional("MDAnalysis", "the MDAnalysis comparison")
    from MDAnalysis.analysis import rms

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        u = mda.Universe(topology, os.fspath(path))
        n = min(int(frames), u.trajectory.n_frames)
        analysis = rms.RMSD(u, select=select)
        t0 = time.perf_counter()
        analysis.run(stop=n)
        seconds = time.perf_counter() - t0
    return {"version": mda.__version__, "frames": n, "seconds": seconds,
            "frames_per_s": n / seconds, "rmsd": np.asarray(analysis.results.rmsd[:, 2])}


#: Rounds of the example's timed comparison: each times the read floor and the RMSD once.
ROUNDS = 5


def _run_rmsd(path: str, out: str, select: str, workers: int, readers: int, progress: bool,
              rounds: int = ROUNDS) -> tuple[Any, dict[str, Any], int, dict[str, float]]:
    """The RMSD and the read floor in paired rounds, then one run with per-task timing.

    The cluster (modules imported and kernel loaded on each worker) and the floor's reader
    processes start first; one untimed pass of each opens the file everywhere and warms the page cache.
    Then each of ``rounds`` rounds times one plain-h5py read of the positions
    (:func:`floor_reader`) and one RMSD on the cluster, back to back (their order
    alternating), so that both see the same spell of a shared machine; a last RMSD
    runs under :func:`h5mdx.timing.capture` (with the progress bar) for
    ``out/timing.csv``.

    ``readers``: the floor's reading processes (:func:`floor_slabs`), counted once by the
    caller, which says them first. Returns the result, the paired timings (``floor``: :func:`read_floor`'s dict from the
    median floor read; ``rmsd_seconds``, ``floor_seconds``: each round's), the number of
    selected atoms and the warm-up per worker.
    """
    import xarray as xr

    import h5mdx  # noqa: F401 - registers the engine and the ds.md accessor
    from h5mdx.engine.arrays import why_reads_take_turns
    from h5mdx.parallel.schedulers import compute as _progress
    from h5mdx.parallel.schedulers import scheduler_context
    from h5mdx.parallel.workers import warm_up_seconds
    from h5mdx.testing import adk_topology
    from h5mdx.timing import capture

    with xr.open_dataset(path, engine="h5md", topology=adk_topology()) as ds, \
            scheduler_context("distributed", workers) as client, \
            floor_reader(path, workers) as read:
        warm = warm_up_seconds(client)  # scheduler_context loaded the kernel on each worker
        lazy = ds.md.rmsd(0, select=select)
        # the atoms the RMSD compares: a selection by position is made on frame 0 (the
        # topology alone has no positions to make it on)
        n_selected = int(lazy.attrs["n_atoms"])
        # whether the RMSD reads the chunks itself or through h5py (H5MDX_DIRECT_READ=0,
        # a filter): the summary says which, not the first whatever happened
        via_h5py = why_reads_take_turns(ds["position"])

        def rmsd_once() -> float:
            t0 = time.perf_counter()
            future = client.compute(lazy)
            future.result()
            seconds = time.perf_counter() - t0
            future.release()  # forgotten before the next round asks for the same keys
            return seconds

        # one untimed pass each: every worker opens the file and locates its chunks, the
        # readers open it too, the page cache is warm; the rounds measure the steady state
        _, nbytes = read()
        read(raw=True)
        rmsd_once()
        floor_t: list[float] = []
        raw_t: list[float] = []
        rmsd_t: list[float] = []
        for r in range(max(1, rounds)):
            if r % 2:
                rmsd_t.append(rmsd_once())
                floor_t.append(read()[0])
                raw_t.append(read(raw=True)[0])
            else:
                raw_t.append(read(raw=True)[0])
                floor_t.append(read()[0])
                rmsd_t.append(rmsd_once())
        with capture(backend="distributed", client=client, n_workers=workers,
                     meta={"file": path, "selection": select, "warmup": warm}) as run:
            result = _progress(client, lazy, progress)
        run.save(os.path.join(out, "timing.csv"))
    n = int(result.sizes["time"])
    floor = floor_figures(readers, n, nbytes, float(np.median(floor_t)))
    raw = floor_figures(readers, n, nbytes, float(np.median(raw_t)))
    return result, {"floor": floor, "raw": raw, "floor_seconds": floor_t,
                    "raw_seconds": raw_t, "rmsd_seconds": rmsd_t, "via_h5py": via_h5py}, \
        n_selected, warm


#: The files a run publishes into its output directory (the RMSD's timing records, the
#: series, the rounds and :func:`write_report`'s)
OUTPUTS = ("rmsd.csv", "rmsd.meta.json", "rmsd.png", "timing.csv", "timing.meta.json",
           "rounds.json", "gantt.png", "workers.png", "report.html")

#: The list, in the output directory, of the files the last run published: the next run
#: replaces those, and refuses to replace files of the same names it did not write
_MANIFEST = ".h5mdx-example.json"


def foreign_outputs(out: str | os.PathLike[str]) -> list[str]:
    """The files in ``out`` that a run would replace but no earlier run wrote.

    An earlier run is known by its list of published files; a run of a version that
    wrote no list, by its ``report.html``.
    """
    out = os.fspath(out)
    present = [name for name in OUTPUTS if os.path.lexists(os.path.join(out, name))]
    try:
        with open(os.path.join(out, _MANIFEST), encoding="utf-8") as fh:
            ours = set(json.load(fh)["files"])
    except (OSError, ValueError, KeyError, TypeError):
        ours = set(OUTPUTS) if _is_our_report(os.path.join(out, "report.html")) else set()
    return [name for name in present if name not in ours]


def _is_our_report(path: str) -> bool:
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            return "<title>h5mdx example report</title>" in fh.read(4096)
    except OSError:
        return False


#: The directory, in the output directory, where a run writes its outputs before they
#: take their names together (by host and process, ``.example-partial-HOST-PID``: one
#: killed leaves it, the next run on that host removes it)
_STAGE = ".example-partial-"


def _stage_owner(name: str) -> tuple[str, int] | None:
    """The host and process of a stage directory's name (a name of no host, of an
    earlier version: this host), or None where ``name`` is no stage's."""
    from h5mdx._replace import host_name

    if not name.startswith(_STAGE):
        return None
    host, _, pid = name[len(_STAGE):].rpartition("-")
    return (host or host_name(), int(pid)) if pid.isdigit() else None


@contextlib.contextmanager
def _staged(out: str) -> Iterator[str]:
    """A fresh staging directory in ``out`` for the block, removed where it ends in an
    exception (Ctrl-C included); those of processes of this host no longer running go
    first (another host's process may still be running: an output directory on a
    shared file system, its stage named by a process number of that host)."""
    from h5mdx._replace import host_name, pid_alive

    here = host_name()
    for name in os.listdir(out):
        owner = _stage_owner(name)
        if owner is not None and owner[0] == here and owner[1] != os.getpid() \
                and not pid_alive(owner[1]):
            shutil.rmtree(os.path.join(out, name), ignore_errors=True)
    stage = os.path.join(out, f"{_STAGE}{here}-{os.getpid()}")
    shutil.rmtree(stage, ignore_errors=True)
    os.makedirs(stage)
    try:
        yield stage
    except BaseException:
        shutil.rmtree(stage, ignore_errors=True)
        raise


def _write_manifest(out: str, names: list[str], complete: bool) -> None:
    """Write the list of the run's files into ``out``, whole or not at all."""
    from h5mdx._replace import replacing

    with replacing(os.path.join(out, _MANIFEST)) as tmp:
        tmp.write_text(json.dumps({"files": names, "complete": complete}), encoding="utf-8")


def _publish(res: ExampleResult, out: str) -> None:
    """Move the staged outputs into ``out`` (each a rename, after all were written), and
    point ``res`` at them.

    The renames are one file at a time: a run stopped between two (killed, a full disk)
    left the new report.html beside the plots and series of the run before, one page
    telling of two runs. Now the earlier report.html goes first and the new one comes
    last, and the list of files says ``"complete": false`` until it is in place: a
    report.html in ``out`` is always the report of the files beside it."""
    from h5mdx._replace import fsync_path, keep_mode

    stage = res.out
    names = sorted(os.listdir(stage), key=lambda n: (n == "report.html", n))  # it last
    for name in names:  # the group and mode of the file each replaces, and on disk
        keep_mode(Path(out, name), Path(stage, name))  # before their names (a power
        fsync_path(Path(stage, name))  # loss: no empty files)
    _write_manifest(out, names, complete=False)  # the next run knows them as its own
    with contextlib.suppress(FileNotFoundError):
        os.unlink(os.path.join(out, "report.html"))
    for name in names:
        os.replace(os.path.join(stage, name), os.path.join(out, name))
    fsync_path(Path(out))
    _write_manifest(out, sorted(names), complete=True)
    res.files = {key: os.path.join(out, os.path.basename(p)) for key, p in res.files.items()}
    shutil.rmtree(stage, ignore_errors=True)
    res.out = out


def _ratios(read_seconds: list[float], paired: dict[str, Any]) -> list[float]:
    """Each round's RMSD speed over its read: the read's seconds over the RMSD's."""
    return [r / t for r, t in zip(read_seconds, paired["rmsd_seconds"], strict=True)]


def run_example(
    out: str | os.PathLike[str] = "h5mdx-example",
    frames: int = DEFAULT_FRAMES,
    *,
    workers: int = 2,
    select: str = "name CA",
    mda_frames: int = 300,
    progress: bool = True,
    echo: Callable[[str], None] = print,
    argv: Sequence[str] | None = None,
    overwrite: bool = False,
) -> ExampleResult:
    """Build (or reuse) the example trajectory, time the RMSD, compare, write the report.

    Parameters
    ----------
    out : path-like, default "h5mdx-example"
        Output directory (created); the trajectory is cached there as
        ``adk-<frames>.h5md``.
    frames : int, default 30,000
        Frames of the trajectory.
    workers : int, default 2
        Worker processes of the local dask cluster (and h5py readers of the floor).
    select : str, default "name CA"
        MDAnalysis selection for the RMSD.
    mda_frames : int, default 300
        Frames MDAnalysis runs on (0: skip the comparison).
    progress : bool, default True
        Progress bars.
    echo : callable, default print
        Receives a line for each step as it starts.
    argv : sequence of str, optional
        The command's options, shown in the report to reproduce it.
    overwrite : bool, default False
        Replace files in ``out`` of the names the run writes (:data:`OUTPUTS`, and the
        trajectory ``adk-<frames>.h5md``) that an earlier run did not write; without it
        such files are refused before any work.

    Returns
    -------
    ExampleResult

    Raises
    ------
    FileExistsError
        ``out`` holds files of the run's output names that are not an earlier run's,
        and ``overwrite`` is False.
    """
    from h5mdx.analysis.series import write_series
    from h5mdx.testing import adk_topology
    from h5mdx.timing.records import load

    out = os.fspath(out)
    path = os.path.join(out, f"adk-{frames}.h5md")
    foreign = [] if overwrite or not os.path.isdir(out) else foreign_outputs(out)
    if not overwrite and os.path.lexists(path) and not is_example_file(path):
        foreign.append(os.path.basename(path))  # rebuilt in its place: a file of the user's
    if foreign:
        raise FileExistsError(f"{out!r} holds {', '.join(foreign)}, which the example would "
                              "replace and an earlier run did not write; pass "
                              "overwrite=True (--overwrite on the command line) to replace "
                              "them, or give another --out (out=)")
    os.makedirs(out, exist_ok=True)
    remove_dead_builds(out)  # a killed build of another size left its partial file
    t0 = time.perf_counter()
    cached = is_cached(path, frames)
    build_adk_trajectory(path, frames, progress=progress)
    built = None if cached else time.perf_counter() - t0
    n_frames, n_atoms, nbytes, chunks = describe_file(path)
    echo(f"trajectory: {path}  {n_frames:,} frames x {n_atoms:,} atoms, {figure(nbytes / 1e9)} GB, "
         f"chunks {chunks}, uncompressed "
         + ("(cached)" if built is None else f"(built in {built:.1f} s)"))
    echo(f"machine: {machine_description()}")
    echo(f"trajectory: {SYNTHETIC}")
    readers = len(floor_slabs(path, workers))  # fewer where there are fewer chunks
    echo(f"{rmsd_title(select)} ({select!r}) on a local dask.distributed cluster of "
         f"{plural(workers, 'worker process', 'worker processes')} against the h5py "
         f"read floor ({readers} h5py reader process(es)) and raw reads of the same bytes: "
         f"{ROUNDS} rounds timing all three, then one run with per-task timing ...")
    with _staged(out) as stage:  # the outputs appear together, or the last run's stay
        result, paired, n_selected, warm = _run_rmsd(path, stage, select, workers, readers,
                                                     progress)
        files = {"rmsd_plot": os.path.join(stage, "rmsd.png"),
                 "rmsd": os.path.join(stage, "rmsd.csv"),  # units: rmsd.meta.json
                 "rmsd_meta": os.path.join(stage, "rmsd.meta.json"),
                 "timing": os.path.join(stage, "timing.csv"),
                 # the run's metadata (machine, versions, warm-up) beside timing.csv
                 "timing_meta": os.path.join(stage, "timing.meta.json")}
        write_series(files["rmsd"], result)
        plot_rmsd(result, files["rmsd_plot"], select=select)
        records, _ = load(files["timing"])
        mda = None
        if mda_frames > 0:
            echo(f"MDAnalysis RMSD on the first {min(mda_frames, n_frames)} frames ...")
            mda = mdanalysis_sample_rate(path, adk_topology(), select, mda_frames)
        res = ExampleResult(out=stage, trajectory=path, n_frames=n_frames, n_atoms=n_atoms,
                            n_selected=n_selected, nbytes=nbytes, chunks=chunks,
                            built_seconds=built, workers=workers, select=select,
                            seconds=float(np.median(paired["rmsd_seconds"])), rmsd=result,
                            floor=paired["floor"], mda=mda, records=records, warmup=warm,
                            files=files, ratios=_ratios(paired["floor_seconds"], paired),
                            raw=paired["raw"],
                            raw_ratios=_ratios(paired["raw_seconds"], paired),
                            via_h5py=paired["via_h5py"],
                            rounds={k: paired[f"{k}_seconds"] for k in ("rmsd", "floor", "raw")},
                            argv=list(argv or []))
        res.files["rounds"] = os.path.join(stage, "rounds.json")
        with open(res.files["rounds"], "w", encoding="utf-8") as fh:
            # the floor's and raw reads' processes too: fewer than the workers where the
            # positions have fewer chunks (a file of one chunk is read by one)
            json.dump({"seconds": res.rounds, "frames": n_frames, "bytes": nbytes,
                       "workers": workers, "readers": readers, "select": select}, fh,
                      indent=1)
        res.files.update(write_report(res))
        _publish(res, out)
    return res
