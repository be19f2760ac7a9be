"""RMSD throughput against the dask block size (``frames_per_block``), in one run.

Every task costs the scheduler a roughly fixed time (pickling, queues, the worker's
bookkeeping: 0-5 ms on a 2-core VM, ``bench_tasks.py``), while an RMSD task's memory
does not grow with its block (it reads ~4 MiB at a time). This measures what that fixed cost takes from
``h5mdx.rmsd`` for blocks of ``--mib`` MiB (default 32, 64, 128: 128 MiB is dask's
``array.chunk-size`` and h5mdx's default) on the dask process pool, ``distributed`` and
the threaded scheduler, with ``--workers`` workers, for the C-alpha and the all-atom RMSD.

The trajectory is ``bench_scale``'s synthetic one (``--frames`` x 3341 atoms, ``--layout``:
chunks of 100 frames by default, of one frame, or contiguous). Every figure is the median
of ``--repeats`` rounds; a round runs every block size and the N-process h5py read floor
once in turn (after one warm-up each; the order rotates), so that a slow spell of a
shared machine falls on all of them alike, and each block size is also given against
that floor. Results: ``benchmarks/results/blocks.{json,md}``.
Run: ``.venv/bin/python benchmarks/bench_blocks.py``.
"""

from __future__ import annotations

import argparse
import functools
import os
import statistics
import sys
from typing import Any

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from bench_scale import (  # noqa: E402 - the benchmark next to this one
    CHUNKS,
    N_ATOMS,
    _timed,
    build,
    ca_indices,
    common_arguments,
    cores_text,
    interleaved,
    machine,
    round_ratios,
    save_results,
    scheduler,
    versions_text,
)

LAYOUT_TEXT = {"c100": "chunks of 100 frames", "c1": "chunks of one frame",
               "contig": "contiguous"}


def _run(path: str, select: np.ndarray | None, frames_per_block: int) -> np.ndarray:
    import xarray as xr

    import h5mdx

    with xr.open_dataset(path, engine="h5md") as ds:
        return h5mdx.rmsd(ds.position, select=select,
                          frames_per_block=frames_per_block).values


def measure(args: argparse.Namespace, path: str) -> list[dict[str, Any]]:
    from h5mdx.engine.chunking import time_block
    from h5mdx.floor import floor_reader

    shape = (args.frames, N_ATOMS, 3)
    blocks = {mib: time_block(shape, 4, CHUNKS[args.layout](N_ATOMS), mib)
              for mib in args.mib}
    rows = []
    for sched in args.schedulers:
        for n in args.workers:
            with scheduler(sched, n), floor_reader(path, n) as floor:
                for sel_name, sel in (("ca", ca_indices()), ("all", None)):
                    timers: dict[Any, Any] = {mib: functools.partial(_timed, functools.partial(
                        _run, path, sel, fpb)) for mib, fpb in blocks.items()}
                    # the N-process read floor in the same rounds (it returns its seconds)
                    timers["floor"] = lambda: floor()[0]
                    times = interleaved(timers, args.repeats, rotate=True)
                    fl = times.pop("floor")
                    for mib, ts in times.items():
                        rate = args.frames / statistics.median(ts)
                        vs = statistics.median(round_ratios(fl, ts))
                        rows.append({"scheduler": sched, "n": n, "select": sel_name,
                                     "mib": mib, "frames_per_block": blocks[mib],
                                     "tasks": -(-args.frames // blocks[mib]),
                                     "times": ts, "frames_per_s": rate,
                                     "floor_times": fl, "vs_floor": vs})
                        print(f"{sched:11s} N={n} {sel_name:3s} {mib:5g} MiB "
                              f"({blocks[mib]} frames) {rate:12,.0f} frames/s, "
                              f"{vs:.2f}x the floor", flush=True)
    return rows


def markdown(results: dict[str, Any]) -> str:
    mibs = results["mib"]
    lines = ["# RMSD against the dask block size", "",
             f"{results['frames']:,} frames x {N_ATOMS} atoms, "
             f"{LAYOUT_TEXT[results.get('layout', 'c100')]}, warm page "
             f"cache; {cores_text(results)}; medians of {results['repeats']} interleaved "
             f"rounds. Versions: "
             f"{versions_text(results)}.", "",
             "frames/s; in brackets: over the smallest block size, then (where measured) "
             "against the N-process h5py read floor timed in the same rounds (median of "
             "the rounds' ratios).", "",
             "| scheduler | N | atoms | " + " | ".join(f"{m:g} MiB" for m in mibs) + " |",
             "|---|---|---|" + "---|" * len(mibs)]
    keyed = {(r["scheduler"], r["n"], r["select"], r["mib"]): r["frames_per_s"]
             for r in results["rows"]}
    floor = {(r["scheduler"], r["n"], r["select"], r["mib"]): r["vs_floor"]
             for r in results["rows"] if "vs_floor" in r}
    for sched, n, sel in dict.fromkeys((r["scheduler"], r["n"], r["select"])
                                       for r in results["rows"]):
        base = keyed[(sched, n, sel, mibs[0])]
        cells = [f"{keyed[(sched, n, sel, m)]:,.0f} ({keyed[(sched, n, sel, m)] / base:.2f})"
                 + (f", {floor[(sched, n, sel, m)]:.2f}x floor"
                    if (sched, n, sel, m) in floor else "")
                 for m in mibs]
        lines.append(f"| {sched} | {n} | {sel} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    common_arguments(p, frames=30_000, repeats=7, schedulers="processes,distributed,threads")
    p.add_argument("--mib", default="32,64,128")
    p.add_argument("--layout", default="c100", choices=sorted(CHUNKS))
    args = p.parse_args()
    args.mib = [float(m) for m in args.mib.split(",")]
    args.workers = [int(n) for n in args.workers.split(",")]
    args.schedulers = args.schedulers.split(",")
    path = build(os.path.join(args.data, f"scale-{args.layout}-{args.frames}.h5md"),
                 args.frames, args.layout)
    results = {**machine(), "layout": args.layout,
               "frames": args.frames, "repeats": args.repeats, "mib": args.mib,
               "rows": measure(args, path)}
    save_results("blocks", args.tag, results, markdown)
    return 0


if __name__ == "__main__":
    sys.exit(main())
