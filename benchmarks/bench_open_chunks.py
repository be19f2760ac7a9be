"""RMSD on positions opened with ``chunks=`` against the read floor: how many tasks the
open's blocks make, and what they cost.

A user who opens a trajectory with ``xr.open_dataset(..., chunks={"time": 100})`` (one
block per HDF5 chunk, as the studies this project comes from did) or ``chunks={}`` (the
engine's blocks, ~128 MiB) and computes ``h5mdx.rmsd`` gets one task per run of whole
blocks, as large as a lazy open's tasks (``h5mdx.analysis.rmsd._open_block_ends``); each
task costs ``distributed`` a few ms. Each round times the N-process h5py read floor
(``h5mdx.examples.floor_reader``) and then each open (the file opened, the RMSD of all
atoms computed on a ``LocalCluster`` of ``--workers`` single-threaded processes, the
default client); ratios are the floor's time over the run's, medians over ``--repeats``
rounds after one warm-up. The file is ``bench_scale``'s synthetic trajectory (``--frames``
x 3341 atoms, ``--layout``: c100 by default). Results:
``benchmarks/results/open-chunks{--tag}.{json,md}``. Run:
``.venv/bin/python benchmarks/bench_open_chunks.py --workers 2``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import bench_scale as bs  # noqa: E402 - the benchmark next to this one

#: The opens compared: a name and ``open_dataset``'s ``chunks=`` (None: the lazy open).
OPENS = {"chunks={'time': 100}": {"time": 100}, "chunks={}": {}, "lazy": None}


def run(path: str, n: int, repeats: int) -> list[dict[str, Any]]:
    """A row per open in :data:`OPENS`: tasks, and the median of the floor over the run."""
    import dask
    import distributed
    import xarray as xr

    import h5mdx
    from h5mdx.examples import floor_reader
    from h5mdx.parallel import local_cluster

    ratios: dict[str, list[float]] = {name: [] for name in OPENS}
    tasks: dict[str, int] = {}
    with floor_reader(path, n) as floor, local_cluster(n) as cluster, \
            distributed.Client(cluster) as client, dask.config.set(scheduler=client):
        for r in range(repeats + 1):  # round 0 warms up
            for name, chunks in OPENS.items():
                seconds = floor()[0]
                t0 = time.perf_counter()
                with xr.open_dataset(path, engine="h5md", chunks=chunks) as ds:
                    lazy = h5mdx.rmsd(ds.position)
                    tasks[name] = int(lazy.data.npartitions)
                    lazy.values  # noqa: B018 - the compute timed
                if r:
                    ratios[name].append(seconds / (time.perf_counter() - t0))
    rows = []
    for name in OPENS:
        row = {"workers": n, "open": name, "tasks": tasks[name],
               "vs_floor": statistics.median(ratios[name]), "rounds": ratios[name]}
        print(f"N={n} {name:22s} {row['tasks']:5d} tasks  x{row['vs_floor']:.2f} the floor",
              flush=True)
        rows.append(row)
    return rows


def markdown(results: dict[str, Any]) -> str:
    lines = ["# RMSD on positions opened with `chunks=`, against the read floor", "",
             f"{results['frames']:,} frames x 3341 atoms, layout {results['layout']}, all "
             f"atoms, warm page cache; N single-threaded `distributed` workers; "
             f"{bs.cores_text(results)}; medians of {results['repeats']} rounds, each timing "
             f"the N-process h5py read floor and then each open. Versions: "
             f"{bs.versions_text(results)}.", "",
             "`tasks`: the RMSD's tasks (runs of whole blocks of the open, as large as a "
             "lazy open's tasks). `x floor`: the floor's time over the run's (open, RMSD, "
             "result).", "",
             "| N | open | tasks | x floor | by round |", "|---|---|---|---|---|"]
    for r in results["rows"]:
        lines.append(f"| {r['workers']} | `{r['open']}` | {r['tasks']} | {r['vs_floor']:.2f} | "
                     + ", ".join(f"{x:.2f}" for x in r["rounds"]) + " |")
    return "\n".join(lines) + "\n"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--frames", type=int, default=100_000)
    p.add_argument("--layout", default="c100", choices=sorted(bs.CHUNKS))
    p.add_argument("--workers", default="2")
    bs.run_arguments(p, repeats=3)
    args = p.parse_args()
    path = bs.build(os.path.join(args.data, f"scale-{args.layout}-{args.frames}.h5md"),
                    args.frames, args.layout)
    rows = []
    for n in (int(w) for w in args.workers.split(",")):
        rows += run(path, n, args.repeats)
    results = {**bs.machine(), "frames": args.frames, "layout": args.layout,
               "repeats": args.repeats, "rows": rows}
    bs.save_results("open-chunks", args.tag, results, markdown)
    return 0


if __name__ == "__main__":
    sys.exit(main())
