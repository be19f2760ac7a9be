"""Where an RMSD compute's time goes on ``distributed``, part by part, beside the read floor.

``bench_scale`` gives the ratio of a compute to the N-process read floor; this splits the
same compute (``h5mdx.rmsd`` on a lazily opened file, ``--workers`` single-threaded
worker processes of a ``LocalCluster``) into its parts, from the scheduler's transition
log and the workers' task stream:

- ``open``: opening the file and building the graph (``xr.open_dataset``, ``h5mdx.rmsd``);
- ``client``: from ``compute()`` until the scheduler has the graph;
- ``tasks``: from then until the last RMSD task's result is in a worker's memory;
- ``finalize``: dask's finalize task, which collects the blocks into one array on a worker;
- ``result``: until the array is back in the caller;
- ``idle``: the share of the workers' time within ``tasks`` that no task ran on them
  (waiting for a task, for the scheduler, or for the other workers to finish);
- ``empty``: right after, on the same cluster, a graph of as many tasks as the RMSD's,
  each returning its block's float64 zeros without reading anything
  (:func:`empty_compute`): what ``distributed`` costs a compute of that shape (sending
  the graph, running and finalizing its tasks, the result back), though in the RMSD's
  compute part of it overlaps with the tasks' work; ``empty1``: the same with one task
  for all frames, the least any compute of this result costs on ``distributed``;
  ``gathered``: the ``empty`` graph with its blocks gathered by the client
  (``Client.get``) instead of by dask's finalize task on a worker, what a compute could
  save by collecting the blocks itself.
  ``bound``, the floor's time over the floor's plus ``empty1``, is the most of the floor
  that any tool reaching it through ``distributed`` could give, even one whose tasks
  read at the floor.

Each round times the floor (``h5mdx.floor.floor_reader``: N processes, each reading
one slab with h5py) and then the compute, 0.2 s apart, for each selection
(``--selections``: 214 C-alpha-like indices, all atoms). Every figure is the median over
``--repeats`` rounds, after one warm-up. The file is ``bench_scale``'s synthetic
trajectory (``--frames`` x 3341 atoms, ``--layout``: contig by default, or c1, c100).
Results: ``benchmarks/results/compute{--tag}.{json,md}``. Run:
``.venv/bin/python benchmarks/bench_compute.py --workers 1,2``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from typing import Any

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import bench_scale as bs  # noqa: E402 - the benchmark next to this one

#: The parts of one compute (:func:`compute_parts`), in order; they add up to ``total``.
PARTS = ("open", "client", "tasks", "finalize", "result")


def compute_parts(client: Any, path: str, select: np.ndarray | None) -> dict[str, float]:
    """One RMSD compute of ``path`` on ``client``'s ``LocalCluster``, split into :data:`PARTS`.

    Returns milliseconds for each part and their ``total``, the ``idle`` share of the
    workers' time within ``tasks`` and the number of RMSD tasks (``n_tasks``).
    """
    import dask
    import distributed

    import h5mdx

    scheduler = client.cluster.scheduler
    # the client is the default scheduler, as a user's Client() is: h5mdx.rmsd plans its
    # tasks for that scheduler's workers (how many, whether a core is spare to read ahead)
    with dask.config.set(scheduler=client):
        t0 = time.time()
        with bs._open(path, "lazy") as ds:
            lazy = h5mdx.rmsd(ds.position, select=select)
            built = time.time()
            with distributed.get_task_stream(client) as stream:
                lazy.compute()
            t1 = time.time()
    mark = bs.compute_marks(scheduler, built)
    got, done, final_done = mark["received"], mark["tasks_done"], mark["finalized"]
    busy = sum(s["stop"] - s["start"] for r in stream.data
               if not str(r["key"]).startswith("finalize")
               for s in r["startstops"] if s["action"] == "compute")
    workers = len(scheduler.workers)
    ms = {name: (b - a) * 1e3 for name, (a, b) in zip(
        PARTS, ((t0, built), (built, got), (got, done), (done, final_done), (final_done, t1)),
        strict=True)}
    span = workers * (done - got)
    return {**ms, "total": (t1 - t0) * 1e3, "idle": max(0.0, 1 - busy / span) if span else 0.0,
            "n_tasks": mark["n_tasks"], "empty": empty_compute(client, lazy.data.chunks[0]),
            "empty1": empty_compute(client, (lazy.size,)),
            "gathered": empty_compute(client, lazy.data.chunks[0], gather=True)}


def empty_compute(client: Any, blocks: tuple[int, ...], gather: bool = False) -> float:
    """Milliseconds of one compute on ``client`` of a graph shaped as an RMSD's: a task per
    length in ``blocks``, each returning that many float64 zeros (no read, no work).

    ``gather``: the blocks are gathered by the client itself (``Client.get`` of the
    blocks' keys, then ``numpy.concatenate`` here) instead of by dask's finalize task on a
    worker, as ``compute()`` does. A new name each call, so that nothing is reused from a
    compute before.
    """
    import uuid

    import dask
    import dask.array as da

    name = f"empty-{uuid.uuid4().hex}"
    dsk = {(name, i): (np.zeros, int(b)) for i, b in enumerate(blocks)}
    empty = da.Array(dsk, name, chunks=(tuple(int(b) for b in blocks),), dtype=np.float64)
    with dask.config.set(scheduler=client):
        t0 = time.perf_counter()
        if gather:
            got = np.concatenate(client.get(dsk, list(dsk)))
        else:
            got = empty.compute()
        ms = (time.perf_counter() - t0) * 1e3
    if got.shape != (sum(blocks),):
        raise AssertionError(f"an empty compute gave {got.shape}, not ({sum(blocks)},)")
    return ms


def run(path: str, n: int, selections: list[str], repeats: int) -> list[dict[str, Any]]:
    """Rows of medians for each selection with ``n`` workers, the floor in the same rounds."""
    from h5mdx.floor import floor_reader

    picks = {"ca": bs.ca_indices(), "all": None}
    rows = []
    with floor_reader(path, n) as floor, bs.schedulers(["distributed"], n) as configs:
        client = configs["distributed"]["scheduler"]
        for sel in selections:
            compute_parts(client, path, picks[sel])  # warm-up: workers open the file
            floors, parts = [], []
            for _ in range(repeats):
                floors.append(floor()[0] * 1e3)
                time.sleep(0.2)
                parts.append(compute_parts(client, path, picks[sel]))
                time.sleep(0.2)
            med = {k: statistics.median(p[k] for p in parts) for k in parts[0]}
            row = {"workers": n, "selection": sel, "floor_ms": statistics.median(floors),
                   "vs_floor": statistics.median(f / p["total"]
                                                 for f, p in zip(floors, parts, strict=True)),
                   "bound": statistics.median(f / (f + p["empty1"])
                                              for f, p in zip(floors, parts, strict=True)),
                   **med, "rounds": parts, "floors": floors}
            rows.append(row)
            print(f"N={n} {sel:3s} floor {row['floor_ms']:7.1f} ms, compute "
                  f"{row['total']:7.1f} ms (x{row['vs_floor']:.2f}): "
                  + ", ".join(f"{k} {row[k]:.1f}" for k in PARTS)
                  + f"; idle {row['idle']:.0%}, {row['n_tasks']:.0f} tasks; empty graphs "
                  f"{row['empty']:.1f} ms, one task {row['empty1']:.1f} ms, gathered by the "
                  f"client {row['gathered']:.1f} ms "
                  f"(bound x{row['bound']:.2f})", flush=True)
    return rows


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--frames", type=int, default=100_000)
    p.add_argument("--layout", default="contig", choices=sorted(bs.CHUNKS))
    p.add_argument("--workers", default="1,2")
    p.add_argument("--selections", default="ca,all")
    bs.run_arguments(p, repeats=5)
    args = p.parse_args()
    path = bs.build(os.path.join(args.data, f"scale-{args.layout}-{args.frames}.h5md"),
                    args.frames, args.layout)
    rows = []
    for n in (int(w) for w in args.workers.split(",")):
        rows += run(path, n, args.selections.split(","), args.repeats)
    results = {**bs.machine(), "frames": args.frames, "layout": args.layout,
               "repeats": args.repeats, "rows": rows}
    bs.save_results("compute", args.tag, results, markdown)
    return 0


def markdown(results: dict[str, Any]) -> str:
    lines = ["# Where an RMSD compute's time goes on `distributed`", "",
             f"{results['frames']:,} frames x 3341 atoms, layout {results['layout']}, warm "
             f"page cache; lazy open; N single-threaded worker processes; "
             f"{bs.cores_text(results)}; medians of {results['repeats']} rounds, each timing "
             f"the N-process h5py read floor and then the compute. Versions: "
             f"{bs.versions_text(results)}.", "",
             "Parts (ms): `open`, the file opened and the graph built; `client`, until the "
             "scheduler has the graph; `tasks`, until the last RMSD task's result is in "
             "memory; `finalize`, dask's finalize task (the blocks into one array, on a "
             "worker); `result`, back to the caller. `idle`: the workers' time within "
             "`tasks` that no task ran. `x floor`: the floor's time over the compute's.", "",
             "`empty` (ms): right after, a graph of as many tasks, each returning its block's "
             "zeros, computed on the same cluster: what `distributed` costs a compute of "
             "that shape (in the RMSD's compute part of it overlaps with the tasks' work). "
             "`empty1`: the same with one task, the least any compute of this result costs "
             "on `distributed`. `gathered`: the `empty` graph with its blocks gathered by "
             "the client (`Client.get`) instead of dask's finalize task on a worker. "
             "`bound`: the floor's time over the floor's plus `empty1`, "
             "the most of the floor a tool could give through `distributed`, even with "
             "tasks that read at the floor.", "",
             "| N | atoms | floor (ms) | compute (ms) | x floor | "
             + " | ".join(PARTS) + " | idle | n tasks | empty | empty1 | gathered | bound |",
             "|---" * (11 + len(PARTS)) + "|"]
    for r in results["rows"]:
        lines.append(f"| {r['workers']} | {r['selection']} | {r['floor_ms']:.1f} | "
                     f"{r['total']:.1f} | {r['vs_floor']:.2f} | "
                     + " | ".join(f"{r[k]:.1f}" for k in PARTS)
                     + f" | {r['idle']:.0%} | {r['n_tasks']:.0f} | "
                     + " | ".join(f"{r[k]:.1f}" if k in r else "-"
                                for k in ("empty", "empty1", "gathered"))
                     + (f" | {r['bound']:.2f} |" if "bound" in r else " | - |"))
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
