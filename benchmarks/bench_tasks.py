"""What one task costs each dask scheduler, beyond its own work, in one run.

Every RMSD task pays the scheduler a roughly fixed time (pickling, queues, the worker's
bookkeeping) on top of its read and compute; with blocks of ~128 MiB a task lasts only
~20 ms where the data is in the page cache, so this cost sets how small blocks can be.
This times graphs of ``--tasks`` and of 1 task that each spin for ``--ms`` ms (a task
that holds its worker's core without the GIL, as an RMSD task does, and returns one float64 per frame
of a 3,000-frame block) on ``bench_scale``'s schedulers (dask's process pool, its threads,
``distributed``) with ``--workers`` workers. The graph is built as :func:`h5mdx.rmsd` builds
its own: one task per block, none depending on another, its output's ``meta`` given (so dask
neither calls the function to infer it nor fuses the tasks behind aliases). It reports what a
compute pays once (graph, submission, the result): ``T(1) - ms``; and the cost of each task
beyond the first: ``(T(tasks) - T(1)) / (tasks - 1) - ms * rounds``. On ``distributed`` it
also splits a compute of one empty task into its parts (:func:`compute_phases`).

``--saturation`` sets ``distributed.scheduler.worker-saturation`` for the cluster (dask's
default 1.1 sends each single-threaded worker 2 tasks, then 2 more as those finish: a round
trip to the scheduler every 2 tasks; ``inf`` sends all tasks at once).

Every figure is the median of ``--repeats`` interleaved rounds. Results:
``benchmarks/results/tasks{--tag}.{json,md}``. Run: ``.venv/bin/python benchmarks/bench_tasks.py``.
"""

from __future__ import annotations

import argparse
import functools
import os
import statistics
import sys
import time
from typing import Any

import numpy as np
from numba import njit

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import bench_scale as bs  # noqa: E402 - the benchmark next to this one

BLOCK = 3000


@njit(nogil=True, cache=True)
def _chain(n: int) -> float:  # pragma: no cover - compiled
    x = 0.0
    for i in range(n):
        x = x * 0.999999 + i
    return x


def warm_worker() -> None:
    """Load h5mdx's kernel and this benchmark's own compiled chain in a worker.

    Without the chain loaded ahead, each worker's first task loaded it from numba's cache
    (0.3-1 s): on 8 or 16 workers, most graphs of one task ran on a worker that had not
    run one yet. That is part of the 650-750 ms a one-task compute took in the 16-core
    run of 2026-11-26; computes started back to back, which this benchmark's rounds
    are, still wait ~300 ms in some rounds on 8 workers (docs/performance.md, "What a task
    costs").
    """
    bs._warm_kernel()
    _chain(10)


def steps_for(seconds: float) -> int:
    """Chain steps that take ``seconds`` on this core."""
    _chain(10)
    n = 1_000_000
    t = time.perf_counter()
    _chain(n)
    return int(n * seconds / (time.perf_counter() - t))


def spin_frames(frames: int, steps: int) -> np.ndarray:
    """Hold the core for ``steps`` of a dependent chain without the GIL (as an RMSD task's
    read and kernel do), then return one float64 per frame."""
    _chain(steps)
    return np.zeros(frames)


def graph(n_tasks: int, steps: int) -> Any:
    """``n_tasks`` independent tasks as one dask array, built as :func:`h5mdx.rmsd` builds its own."""
    import dask.array as da
    from dask.base import tokenize
    from dask.highlevelgraph import HighLevelGraph

    name = f"spin-{tokenize(n_tasks, steps, time.perf_counter_ns())}"
    dsk = {(name, i): (spin_frames, BLOCK, steps) for i in range(n_tasks)}
    return da.Array(HighLevelGraph.from_collections(name, dsk, dependencies=[]), name,
                    chunks=((BLOCK,) * n_tasks,), dtype=np.float64,
                    meta=np.array((), dtype=np.float64))


#: The parts of one compute on ``distributed`` (:func:`compute_phases`), in order.
PHASES = ("client", "task", "finalize", "result")


def compute_phases(client: Any, repeats: int, pause: float = 0.1) -> dict[str, float]:
    """Where a compute of one empty task spends its time on a ``LocalCluster`` (ms, medians).

    From the scheduler's transition log (the scheduler runs in this process):
    ``client``, from the call until the scheduler has the graph (dask's optimisation,
    packing, the message); ``task``, until the task's result is in a worker's memory (to
    the worker, run, reported); ``finalize``, until dask's finalize task, which collects
    the blocks into one array on a worker, has run there; ``result``, until the call
    returns (the result fetched from that worker). Each compute starts ``pause`` s after
    the last, as a user's does, so that no message waits on distributed's batched streams
    for an earlier one.
    """
    scheduler = client.cluster.scheduler
    parts: dict[str, list[float]] = {name: [] for name in PHASES}
    for _ in range(repeats):
        array = graph(1, 0)
        time.sleep(pause)
        t0 = time.time()
        array.compute(scheduler=client)
        t1 = time.time()
        mark = bs.compute_marks(scheduler, t0)
        for name, (a, b) in zip(PHASES, ((t0, mark["received"]),
                                         (mark["received"], mark["tasks_done"]),
                                         (mark["tasks_done"], mark["finalized"]),
                                         (mark["finalized"], t1)), strict=True):
            parts[name].append((b - a) * 1e3)
    return {name: statistics.median(v) for name, v in parts.items()}


def compute(n_tasks: int, steps: int) -> float:
    t = time.perf_counter()
    graph(n_tasks, steps).compute()
    return time.perf_counter() - t


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--tasks", type=int, default=20)
    p.add_argument("--ms", type=float, default=20.0)
    p.add_argument("--workers", default="1,2")
    p.add_argument("--schedulers", default="processes,threads,distributed")
    p.add_argument("--saturation", default=None,
                   help="distributed.scheduler.worker-saturation (default: dask's)")
    bs.run_arguments(p, repeats=7)
    args = p.parse_args()
    steps = steps_for(args.ms / 1e3)
    rows = []
    import dask

    if "distributed" in args.schedulers:
        # distributed's defaults join dask's config on import: setting one of its keys before
        # would drop the whole section when the setting's context ends
        import distributed  # noqa: F401
    saturation = {} if args.saturation is None else {
        "distributed.scheduler.worker-saturation": float(args.saturation)}
    for n in (int(w) for w in args.workers.split(",")):
        for sched in args.schedulers.split(","):
            with dask.config.set(saturation), bs.scheduler(sched, n, warm_worker):
                timers = {k: functools.partial(compute, k, steps)
                          for k in (1, args.tasks)}
                times = bs.interleaved(timers, args.repeats)
                phases = None
                if sched == "distributed":
                    phases = compute_phases(dask.config.get("scheduler"), args.repeats)
            one, many = (statistics.median(times[k]) for k in (1, args.tasks))
            rounds = -(-args.tasks // n)
            per_task = (many - one - (rounds - 1) * args.ms / 1e3) * n / (args.tasks - 1)
            per_compute = one - args.ms / 1e3
            rows.append({"scheduler": sched, "workers": n, "one_task_s": one,
                         "many_tasks_s": many, "times": {str(k): v for k, v in times.items()},
                         "per_compute_ms": per_compute * 1e3, "per_task_ms": per_task * 1e3,
                         "phases_ms": phases})
            print(f"{sched:11s} N={n} one task {one * 1e3:7.1f} ms, {args.tasks} tasks "
                  f"{many * 1e3:7.1f} ms: {per_compute * 1e3:5.1f} ms per compute, "
                  f"{per_task * 1e3:5.1f} ms per task", flush=True)
    results = {**bs.machine(), "tasks": args.tasks, "ms": args.ms, "repeats": args.repeats,
               "saturation": args.saturation, "rows": rows}
    bs.save_results("tasks", args.tag, results, markdown)
    return 0


def markdown(results: dict[str, Any]) -> str:
    lines = ["# What one task costs each dask scheduler", "",
             f"Graphs of 1 and of {results['tasks']} tasks that each hold a core for "
             f"{results['ms']:g} ms; {bs.cores_text(results)}; medians of "
             f"{results['repeats']} interleaved rounds. Versions: {bs.versions_text(results)}.",
             "", "Per compute: the graph of 1 task less its work (what every compute pays "
             "once). Per task: the time each task beyond the first adds, less its own work, "
             "times the workers (the cost a worker pays per task). Graphs as `h5mdx.rmsd` "
             "builds them (independent tasks, `meta` given)."]
    if results.get("saturation") is not None:
        lines += ["", f"`distributed.scheduler.worker-saturation`: {results['saturation']}."]
    lines += ["", "| scheduler | workers | 1 task (ms) | "
              f"{results['tasks']} tasks (ms) | per compute (ms) | per task (ms) |",
              "|---|---|---|---|---|---|"]
    for r in results["rows"]:
        per_compute = r.get("per_compute_ms")
        lines.append(f"| {r['scheduler']} | {r['workers']} | {r['one_task_s'] * 1e3:.1f} | "
                     f"{r['many_tasks_s'] * 1e3:.1f} | "
                     f"{'' if per_compute is None else f'{per_compute:.1f}'} | "
                     f"{r['per_task_ms']:.1f} |")
    phased = [r for r in results["rows"] if r.get("phases_ms")]
    if phased:
        lines += ["", "Where a `distributed` compute of one empty task goes (ms, medians; "
                  "each compute 0.1 s after the last): `client`, until the scheduler has the "
                  "graph; `task`, to the worker, run and reported; `finalize`, dask's "
                  "finalize task (the blocks into one array, on a worker); `result`, back to "
                  "the caller.", "",
                  "| workers | " + " | ".join(PHASES) + " | total |",
                  "|---|" + "---|" * (len(PHASES) + 1)]
        for r in phased:
            ph = r["phases_ms"]
            lines.append(f"| {r['workers']} | " + " | ".join(f"{ph[k]:.1f}" for k in PHASES)
                         + f" | {sum(ph.values()):.1f} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
