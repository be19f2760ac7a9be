"""What one task costs each dask scheduler, beyond its own work, in one run.

Every RMSD task pays the scheduler a roughly fixed time (pickling, queues, the worker's
bookkeeping) on top of its read and compute; with blocks of ~128 MiB a task lasts only
~20 ms where the data is in the page cache, so this cost sets how small blocks can be.
This times graphs of ``--tasks`` and of 1 task that each spin for ``--ms`` ms (a task
that holds its worker's core without the GIL, as an RMSD task does, and returns one float64 per frame
of a 3,000-frame block) on ``bench_scale``'s schedulers (dask's process pool, its threads,
``distributed``) with ``--workers`` workers, and reports the cost of each task beyond the
first: ``(T(tasks) - T(1)) / (tasks - 1) - ms * rounds``, which takes out what every
compute pays once (graph, submission, the result).

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


def spin(block: np.ndarray, steps: int) -> np.ndarray:
    """Hold the core for ``steps`` of a dependent chain without the GIL (as an RMSD task's
    read and kernel do), then return one float64 per frame of ``block``."""
    _chain(steps)
    return np.zeros(block.shape[0])


def steps_for(seconds: float) -> int:
    """Chain steps that take ``seconds`` on this core."""
    _chain(10)
    n = 1_000_000
    t = time.perf_counter()
    _chain(n)
    return int(n * seconds / (time.perf_counter() - t))


def compute(n_tasks: int, steps: int) -> float:
    import dask.array as da

    blocks = da.zeros((n_tasks * BLOCK, 3), chunks=(BLOCK, 3))
    t = time.perf_counter()
    blocks.map_blocks(spin, steps, drop_axis=1, dtype=np.float64).compute()
    return time.perf_counter() - t


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--tasks", type=int, default=20)
    p.add_argument("--ms", type=float, default=20.0)
    p.add_argument("--workers", default="1,2")
    p.add_argument("--schedulers", default="processes,threads,distributed")
    bs.run_arguments(p, repeats=7)
    args = p.parse_args()
    steps = steps_for(args.ms / 1e3)
    rows = []
    for n in (int(w) for w in args.workers.split(",")):
        for sched in args.schedulers.split(","):
            with bs.scheduler(sched, n):
                timers = {k: functools.partial(compute, k, steps)
                          for k in (1, args.tasks)}
                times = bs.interleaved(timers, args.repeats)
            one, many = (statistics.median(times[k]) for k in (1, args.tasks))
            rounds = -(-args.tasks // n)
            per_task = (many - one - (rounds - 1) * args.ms / 1e3) * n / (args.tasks - 1)
            rows.append({"scheduler": sched, "workers": n, "one_task_s": one,
                         "many_tasks_s": many, "times": {str(k): v for k, v in times.items()},
                         "per_task_ms": per_task * 1e3})
            print(f"{sched:11s} N={n} one task {one * 1e3:7.1f} ms, {args.tasks} tasks "
                  f"{many * 1e3:7.1f} ms: {per_task * 1e3:5.1f} ms per task", flush=True)
    results = {**bs.machine(), "tasks": args.tasks, "ms": args.ms, "repeats": args.repeats,
               "rows": rows}
    bs.save_results("tasks", args.tag, results, markdown)
    return 0


def markdown(results: dict[str, Any]) -> str:
    lines = ["# What one task costs each dask scheduler", "",
             f"Graphs of 1 and of {results['tasks']} tasks that each hold a core for "
             f"{results['ms']:g} ms; {bs.cores_text(results)}; medians of "
             f"{results['repeats']} interleaved rounds. Versions: {bs.versions_text(results)}.",
             "", "Per task: the time each task beyond the first adds, less its own work, "
             "times the workers (the cost a worker pays per task).", "",
             "| scheduler | workers | 1 task (ms) | "
             f"{results['tasks']} tasks (ms) | per task (ms) |", "|---|---|---|---|---|"]
    for r in results["rows"]:
        lines.append(f"| {r['scheduler']} | {r['workers']} | {r['one_task_s'] * 1e3:.1f} | "
                     f"{r['many_tasks_s'] * 1e3:.1f} | {r['per_task_ms']:.1f} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
