"""MPI-IO vs dask-mpi vs local dask processes: C-alpha RMSD of the ~1 GB adk file.

In one run, for N = 1, 2 and 4 workers (4 is oversubscribed on a 2-core machine
and labelled so), median of ``--repeats`` runs after a warm-up:

- ``mpi-io``: ``mpirun -n N h5mdx mpi-rmsd`` (parallel HDF5, one block per rank, read
  4 MiB of whole chunks at a time into one buffer: ``--read step``, the default);
- ``mpi-io-block``: the same with ``--read block``, each rank's block read at once (the
  studies' "load into memory", and h5mdx's default until ``--read step``);
- ``dask-mpi``: ``mpirun -n N+2 ...`` with :func:`h5mdx.mpi.launch.rmsd_dask_mpi`
  (scheduler and client ranks on top of N single-threaded workers);
- ``processes``: a ``distributed.LocalCluster`` of N single-threaded worker processes.

Every run writes its per-rank/per-task timing records (common schema); the
script then computes S(N) = t_1 / t_N and E(N) = S(N) / N per backend from the
median run wall time (topology + file open + read + compute + gather, without
process start-up, which is reported separately for the MPI runs), counts
stragglers (task/rank wall > 1.5 x the median of its run) and wait times, and
writes ``benchmarks/results/mpi.json``, ``mpi.md``, all records
(``mpi-records.csv``) and plots.

Run: ``nice .venv/bin/python benchmarks/bench_mpi.py [--frames 29988] [--repeats 3]``
(needs mpirun, mpi4py, dask-mpi and an MPI-enabled h5py).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any

import h5py
import numpy as np

HERE = Path(__file__).resolve().parent
DATA = HERE / "data"
RESULTS = HERE / "results"
SELECT = "name CA"


# ----------------------------------------------------------------------------- data


def adk_frames() -> np.ndarray:
    import MDAnalysis as mda
    from MDAnalysisTests.datafiles import DCD, PSF

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        u = mda.Universe(PSF, DCD)
    return np.stack([ts.positions.copy() for ts in u.trajectory])


def build_file(n_frames: int, chunk: int) -> Path:
    """The adk frames repeated to ``n_frames`` with (chunk, n_atoms, 3) chunks (cached)."""
    path = DATA / f"adk-{n_frames}-c{chunk}.h5md"
    if path.exists():
        return path
    DATA.mkdir(parents=True, exist_ok=True)
    frames = adk_frames()
    n_atoms = frames.shape[1]
    tmp = path.with_suffix(".tmp")
    with h5py.File(tmp, "w") as f:
        h = f.create_group("h5md")
        h.attrs["version"] = np.array([1, 1], dtype=np.int32)
        h.create_group("author").attrs["name"] = "bench_mpi"
        c = h.create_group("creator")
        c.attrs["name"] = "bench_mpi"
        c.attrs["version"] = "0"
        f.create_group("particles/trajectory/box").attrs.update(
            {"dimension": 3, "boundary": ["none"] * 3})
        el = f.create_group("particles/trajectory/position")
        v = el.create_dataset("value", shape=(n_frames, n_atoms, 3), dtype=np.float32,
                              chunks=(chunk, n_atoms, 3))
        v.attrs["unit"] = "Angstrom"
        for start in range(0, n_frames, len(frames)):
            stop = min(n_frames, start + len(frames))
            v[start:stop] = frames[: stop - start]
        el.create_dataset("step", data=np.arange(n_frames, dtype=np.int64))
        t = el.create_dataset("time", data=np.arange(n_frames) * 1.0)
        t.attrs["unit"] = "ps"
    os.replace(tmp, path)
    return path


# ----------------------------------------------------------------------------- runs


def _run(cmd: list[str], timeout: float = 900) -> float:
    from h5mdx.mpi.commands import mpi_env

    t0 = time.perf_counter()
    proc = subprocess.run(cmd, env=mpi_env(), capture_output=True, text=True, timeout=timeout)
    e2e = time.perf_counter() - t0
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    return e2e


def run_mpi_io(traj: Path, top: str, n: int, out: Path, options: list[str]) -> float:
    from h5mdx.mpi.commands import mpi_io_command

    return _run(mpi_io_command(n, str(traj), str(out), topology=top, select=SELECT,
                               options=options))


def run_dask_mpi(traj: Path, top: str, n: int, out: Path) -> float:
    from h5mdx.mpi.commands import dask_mpi_command

    return _run(dask_mpi_command(n, str(traj), str(out), topology=top, select=SELECT))


def run_processes(traj: Path, top: str, n: int, out: Path) -> float:
    return _run([sys.executable, __file__, "--child-processes", str(traj), top, str(n), str(out)])


def child_processes(traj: str, top: str, n: int, out: str) -> None:
    """One local-cluster run (in its own process, so nothing is cached between runs)."""
    import xarray as xr
    from distributed import Client

    from h5mdx.analysis.rmsd import rmsd
    from h5mdx.mpi.launch import write_series
    from h5mdx.parallel import local_cluster
    from h5mdx.parallel.workers import warm_up_workers
    from h5mdx.timing import capture

    os.makedirs(out, exist_ok=True)
    with local_cluster(n) as cluster, Client(cluster) as client:
        client.wait_for_workers(n)
        warm = warm_up_workers(client)  # as h5mdx rmsd --scheduler processes does
        with capture(backend="distributed", client=client, n_workers=n,
                     meta={"file": traj, "selection": SELECT, "cluster": "LocalCluster",
                           "warm_up_s": warm},
                     spool_dir=out) as run:
            with xr.open_dataset(traj, engine="h5md", topology=top,
                                 convert_units=True) as ds:
                result = rmsd(ds["position"], reference=0, select=SELECT).compute()
    write_series(Path(out) / "rmsd.csv", result)
    run.save(Path(out) / "timing.csv")


# ----------------------------------------------------------------------------- analysis


def load_run(out: Path) -> tuple[Any, dict[str, Any]]:
    from h5mdx.timing import records

    return records.load(out / "timing.csv")


def warm_up(frame: Any, meta: dict[str, Any]) -> float:
    """Seconds of the longest kernel warm-up of a run's ranks or workers.

    MPI-IO ranks load the kernel inside their run (``t_warmup``, all at the same point);
    dask workers when the cluster starts (``warm_up_s`` in the run's metadata).
    """
    if frame["backend"].iloc[0] == "mpi-io":
        return float(frame["t_warmup"].max())
    return max((float(v) for v in meta.get("warm_up_s", {}).values()), default=0.0)


def run_wall(frame: Any, meta: dict[str, Any]) -> float:
    """Wall time of the analysis without the kernel's warm-up.

    The span of the rank records less their warm-up, or the client's measured wall (its
    workers loaded the kernel before).
    """
    if meta.get("wall") is not None and frame["backend"].iloc[0] != "mpi-io":
        return float(meta["wall"])
    return float(frame["t_stop"].max() - frame["t_start"].min()) - warm_up(frame, meta)


def stragglers(frame: Any) -> int:
    """Stragglers of one run by the default rule of :mod:`h5mdx.timing.stragglers`."""
    from h5mdx.timing.stragglers import flag_stragglers

    return int(flag_stragglers(frame)["is_straggler"].sum())


def summarise(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    rows = []
    groups: dict[tuple[str, int], list[dict[str, Any]]] = {}
    for r in runs:
        groups.setdefault((r["backend"], r["n"]), []).append(r)
    t1 = {b: statistics.median(x["wall"] for x in g)
          for (b, n), g in groups.items() if n == 1}
    for (backend, n), group in sorted(groups.items()):
        wall = statistics.median(x["wall"] for x in group)
        s = t1[backend] / wall if backend in t1 else float("nan")
        rows.append({
            "backend": backend,
            "n": n,
            "oversubscribed": n > (os.cpu_count() or 1),
            "wall_s": wall,
            "e2e_s": statistics.median(x["e2e"] for x in group),
            "warm_up_s": statistics.median(x["warm_up"] for x in group),
            "frames_per_s": group[0]["n_frames"] / wall,
            "S": s,
            "E": s / n,
            "stragglers": sum(x["stragglers"] for x in group) / len(group),
            "imbalance": statistics.median(x["imbalance"] for x in group),
            "tasks": group[0]["tasks"],
            "t_wait_mean": float(np.nanmean([x["t_wait_mean"] for x in group])),
            "t_wait_max": float(np.nanmax([x["t_wait_max"] for x in group])),
            "t_io_sum": statistics.median(x["t_io_sum"] for x in group),
            "t_compute_sum": statistics.median(x["t_compute_sum"] for x in group),
            "t_init_top_max": float(np.nanmax([x["t_init_top_max"] for x in group])),
        })
    return rows


def markdown(rows: list[dict[str, Any]], context: dict[str, Any]) -> str:
    out = [
        "# MPI-IO vs dask-mpi vs local dask processes (C-alpha RMSD)",
        "",
        f"File: {context['file']} ({context['n_frames']} frames x {context['n_atoms']} atoms, "
        f"{context['size_gib']:.2f} GiB, chunks {context['chunks']}), warm page cache, "
        f"{context['cpus']} CPU cores, median of {context['repeats']} runs after a warm-up. "
        f"MPI-IO options: `{' '.join(context['mpi_io_options']) or '(defaults)'}` "
        "(`mpi-io-block` adds `--read block`). "
        f"Load average (1 min) at start/end: {context['loadavg_start'][0]:.1f} / "
        f"{context['loadavg_end'][0]:.1f} (above the core count means other jobs shared "
        "the machine and the numbers are noisy).",
        "",
        "wall = analysis time (topology + open + read + compute + gather; for MPI-IO the span "
        "of the rank records, for dask the client's compute call), without process start-up "
        "and without loading the QCP kernel (warm-up: the longest of the run's ranks or "
        "workers; MPI-IO ranks load it inside the run, dask workers when the cluster "
        "starts); "
        "e2e = the whole command including mpirun/cluster start-up. S(N) = wall(1)/wall(N), "
        "E(N) = S(N)/N. Stragglers: task or rank wall > 1.5 x the median of its run "
        "(mean per run, rule of h5mdx.timing.stragglers). t_wait: for MPI-IO the time a rank "
        "waited at the barrier; for dask the time a worker sat idle before a task. "
        "Imbalance: max worker busy time / mean (1 = perfect).",
        "",
        "| backend | N | wall (s) | warm-up (s) | e2e (s) | frames/s | S(N) | E(N) | tasks "
        "| stragglers "
        "| imbalance | t_wait mean / max (s) | sum t_io (s) | sum t_compute (s) "
        "| max t_init_top (s) |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        n = f"{r['n']} (oversubscribed)" if r["oversubscribed"] else str(r["n"])
        wait = ("-" if np.isnan(r["t_wait_mean"])
                else f"{r['t_wait_mean']:.3f} / {r['t_wait_max']:.3f}")
        top = "-" if np.isnan(r["t_init_top_max"]) else f"{r['t_init_top_max']:.2f}"
        out.append(
            f"| {r['backend']} | {n} | {r['wall_s']:.3f} | {r['warm_up_s']:.3f} | "
            f"{r['e2e_s']:.2f} | "
            f"{r['frames_per_s']:,.0f} | {r['S']:.2f} | {r['E']:.2f} | {r['tasks']} | "
            f"{r['stragglers']:.1f} | {r['imbalance']:.2f} | {wait} | {r['t_io_sum']:.3f} | {r['t_compute_sum']:.3f} "
            f"| {top} |"
        )
    return "\n".join(out) + "\n"


def plots(records: Any, rows: list[dict[str, Any]]) -> list[str]:
    """Speed-up/efficiency per backend and, for N = 2, the per-rank/worker phase bars and
    the Gantt chart of one run per backend (:mod:`h5mdx.timing.plots`)."""
    import matplotlib

    matplotlib.use("Agg")
    import pandas as pd

    from h5mdx.timing.plots import plot_gantt, plot_per_worker, plot_scaling

    made = []
    table = pd.DataFrame([
        {"backend": r["backend"], "n_workers": r["n"], "n_runs": 1, "t_N": r["wall_s"],
         "t_N_min": r["wall_s"], "t_N_max": r["wall_s"], "S": r["S"], "E": r["E"]}
        for r in rows
    ])
    path = RESULTS / "mpi-scaling.png"
    plot_scaling(table, path)
    made.append(str(path))
    for label in sorted(records["bench_backend"].unique()):
        sub = records[(records["bench_backend"] == label) & (records["n_workers"] == 2)]
        if sub.empty:
            continue
        run_id = sub["run_id"].iloc[-1]
        for name, fn in (("workers", plot_per_worker), ("gantt", plot_gantt)):
            path = RESULTS / f"mpi-{name}-{label}-n2.png"
            fn(sub, run_id, path)
            made.append(str(path))
    return made


# ----------------------------------------------------------------------------- main


def main() -> None:
    global RESULTS
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--frames", type=int, default=29988)
    ap.add_argument("--chunk", type=int, default=100)
    ap.add_argument("--workers", default="1,2,4")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--backends", default="mpi-io,mpi-io-block,dask-mpi,processes")
    ap.add_argument("--mpi-io-options", default="",
                    help="more options passed to mpi-rmsd (default: none)")
    ap.add_argument("--results", type=Path, default=None,
                    help="output directory (default: benchmarks/results)")
    ap.add_argument("--child-processes", nargs=4, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child_processes:
        traj, top, n, out = args.child_processes
        child_processes(traj, top, int(n), out)
        return
    from MDAnalysisTests.datafiles import PSF

    RESULTS = args.results or RESULTS
    RESULTS.mkdir(parents=True, exist_ok=True)
    traj = build_file(args.frames, args.chunk)
    with h5py.File(traj) as f:
        shape = f["particles/trajectory/position/value"].shape
    workers = [int(x) for x in args.workers.split(",")]
    backends = args.backends.split(",")
    mpi_io_options = args.mpi_io_options.split()
    load_start = os.getloadavg()
    work = Path(tempfile.mkdtemp(prefix="bench-mpi-"))
    runners = {
        "mpi-io": lambda n, out: run_mpi_io(traj, PSF, n, out, mpi_io_options),
        "mpi-io-block": lambda n, out: run_mpi_io(traj, PSF, n, out,
                                                  [*mpi_io_options, "--read", "block"]),
        "dask-mpi": lambda n, out: run_dask_mpi(traj, PSF, n, out),
        "processes": lambda n, out: run_processes(traj, PSF, n, out),
    }
    from h5mdx.timing.stragglers import load_imbalance

    runs, frames = [], []
    for backend in backends:
        runners[backend](1, work / f"warmup-{backend}")  # warm caches and imports
        for n in workers:
            for rep in range(args.repeats):
                out = work / f"{backend}-{n}-{rep}"
                e2e = runners[backend](n, out)
                frame, meta = load_run(out)
                frame["repeat"] = rep
                frame["bench_backend"] = backend
                frames.append(frame)
                runs.append({
                    "backend": backend, "n": n, "rep": rep, "e2e": e2e,
                    "wall": run_wall(frame, meta), "warm_up": warm_up(frame, meta),
                    "n_frames": shape[0], "tasks": len(frame),
                    "stragglers": stragglers(frame),
                    "imbalance": float(load_imbalance(frame).iloc[0]),
                    "t_wait_mean": float(frame["t_wait"].mean()),
                    "t_wait_max": float(frame["t_wait"].max()),
                    "t_io_sum": float(frame["t_io"].sum()),
                    "t_compute_sum": float(frame["t_compute"].sum()),
                    "t_init_top_max": float(frame["t_init_top"].max()),
                })
                print(f"{backend:10s} N={n} rep={rep}: wall {runs[-1]['wall']:.3f} s, "
                      f"e2e {e2e:.2f} s", flush=True)
    import pandas as pd

    records = pd.concat(frames, ignore_index=True)
    records.to_csv(RESULTS / "mpi-records.csv", index=False)
    rows = summarise(runs)
    context = {
        "file": traj.name, "n_frames": shape[0], "n_atoms": shape[1],
        "size_gib": traj.stat().st_size / 2**30, "chunks": f"({args.chunk}, {shape[1]}, 3)",
        "cpus": os.cpu_count(), "repeats": args.repeats, "mpi_io_options": mpi_io_options,
        "python": platform.python_version(), "h5py": h5py.version.version,
        "hdf5": h5py.version.hdf5_version, "host": platform.node(),
        "loadavg_start": load_start, "loadavg_end": os.getloadavg(),
    }
    figures = plots(records, rows)
    (RESULTS / "mpi.json").write_text(json.dumps(
        {"context": context, "summary": rows, "runs": runs, "figures": figures}, indent=2,
        default=float))
    (RESULTS / "mpi.md").write_text(markdown(rows, context))
    print(markdown(rows, context))
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
