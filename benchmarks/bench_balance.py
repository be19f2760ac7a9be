"""RMSD throughput with blocks shared out evenly over the workers, against the engine's block.

Without ``frames_per_block``, ``h5mdx.rmsd`` shrinks the engine's ~128 MiB blocks (in whole
HDF5 chunks) until each worker of the default scheduler gets the same number of tasks
(``h5mdx.engine.chunking.balanced_block``): 3 blocks on 2 workers become 4, 10 blocks on 16
workers become 16. This measures both ways in one run, for trajectories of ``--frames``
(comma-separated) frames with chunks of 100 frames, on ``--schedulers`` with ``--workers``
workers, for the C-alpha and the all-atom RMSD. ``as before``: the engine's block as it is.

Every figure is the median of ``--repeats`` rounds; a round runs both ways once in turn
(after one warm-up each). Results: ``benchmarks/results/balance{--tag}.{json,md}``.
Run: ``.venv/bin/python benchmarks/bench_balance.py``.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import os
import statistics
import sys
from collections.abc import Iterator
from typing import Any

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import bench_scale as bs  # noqa: E402 - the benchmark next to this one


@contextlib.contextmanager
def _blocks(balanced: bool) -> Iterator[None]:
    """``balanced=False``: rmsd keeps the engine's block (no worker count to share out)."""
    import h5mdx.analysis.rmsd as rmsd_module

    saved = rmsd_module._worker_count
    if not balanced:
        rmsd_module._worker_count = lambda by_host: None
    try:
        yield
    finally:
        rmsd_module._worker_count = saved


def _rmsd(path: str, select: np.ndarray | None, balanced: bool) -> Any:
    import xarray as xr

    import h5mdx

    with _blocks(balanced), xr.open_dataset(path, engine="h5md") as ds:
        lazy = h5mdx.rmsd(ds.position, select=select)
        return len(lazy.chunks[0]), lazy.values


def measure(args: argparse.Namespace) -> list[dict[str, Any]]:
    rows = []
    for frames in args.frames:
        path = bs.build(os.path.join(args.data, f"scale-c100-{frames}.h5md"), frames, "c100")
        for sched in args.schedulers:
            with bs.scheduler(sched, args.workers):
                for sel_name, sel in (("ca", bs.ca_indices()), ("all", None)):
                    tasks = {b: _rmsd(path, sel, b)[0] for b in (True, False)}
                    timers = {b: functools.partial(bs._timed, functools.partial(
                        _rmsd, path, sel, b)) for b in (True, False)}
                    for balanced, ts in bs.interleaved(timers, args.repeats).items():
                        rate = frames / statistics.median(ts)
                        rows.append({"frames": frames, "scheduler": sched,
                                     "select": sel_name, "balanced": balanced,
                                     "tasks": tasks[balanced], "times": ts,
                                     "frames_per_s": rate})
                        print(f"{frames:7d} {sched:11s} {sel_name:3s} "
                              f"{'balanced' if balanced else 'as before':9s} "
                              f"({tasks[balanced]:3d} tasks) {rate:12,.0f} frames/s",
                              flush=True)
    return rows


def markdown(results: dict[str, Any]) -> str:
    lines = ["# RMSD with blocks shared out evenly over the workers", "",
             f"{bs.N_ATOMS} atoms, chunks of 100 frames, warm page cache; {results['workers']} "
             f"workers on {bs.cores_text(results)}; medians of {results['repeats']} "
             f"interleaved rounds. Versions: "
             f"{bs.versions_text(results)}.", "",
             "frames/s (tasks); `as before`: the engine's ~128 MiB block as it is.", "",
             "| frames | scheduler | atoms | balanced | as before | ratio |",
             "|---|---|---|---|---|---|"]
    keyed = {(r["frames"], r["scheduler"], r["select"], r["balanced"]): r
             for r in results["rows"]}
    for frames, sched, sel in dict.fromkeys((r["frames"], r["scheduler"], r["select"])
                                            for r in results["rows"]):
        new, old = keyed[(frames, sched, sel, True)], keyed[(frames, sched, sel, False)]
        lines.append(f"| {frames:,} | {sched} | {sel} | {new['frames_per_s']:,.0f} "
                     f"({new['tasks']}) | {old['frames_per_s']:,.0f} ({old['tasks']}) | "
                     f"{new['frames_per_s'] / old['frames_per_s']:.2f} |")
    return "\n".join(lines) + "\n"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--frames", default="9900,30000")
    p.add_argument("--workers", type=int, default=min(2, os.cpu_count() or 1))
    p.add_argument("--schedulers", default="distributed,processes")
    bs.run_arguments(p, repeats=7)
    args = p.parse_args()
    args.frames = [int(n) for n in args.frames.split(",")]
    args.schedulers = args.schedulers.split(",")
    results = {**bs.machine(), "workers": args.workers, "repeats": args.repeats,
               "rows": measure(args)}
    bs.save_results("balance", args.tag, results, markdown)
    return 0


if __name__ == "__main__":
    sys.exit(main())
