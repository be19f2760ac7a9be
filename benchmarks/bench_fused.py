"""The fused read (or the mapped read) on and off, in the same rounds: what one compiled
read-and-compute call per task is worth, or the kernel run on a mapping of the file.

``bench_scale`` run twice (with and without ``H5MDX_FUSED_READ=0``) compares two spells of a
shared machine; this benchmark compares within one. A ``distributed`` LocalCluster of N
single-threaded worker processes (the layout h5mdx recommends) and dask's threaded
scheduler with N threads compute the RMSD with the fused read forced on and forced off,
alternately, each round also timing the N-process h5py read floor
(:func:`h5mdx.floor.floor_reader`). A round runs floor, on, off (or floor, off, on: the
order alternates), so each ratio compares timings of the same spell.

``--switch mapped`` turns ``H5MDX_MAPPED_READ`` on and off instead: on, every task runs the
kernel on a mapping of the file (:mod:`h5mdx.format.mapped`); off, h5mdx's default (read
ahead where a core is spare, the fused read where none is).

Run::

    python benchmarks/bench_fused.py [--switch fused|mapped] [--frames 100000]
        [--workers 2] [--layouts c100,c1,contig] [--selections ca,all] [--repeats 5]
        [--tag=-2core]

Writes ``benchmarks/results/fused<tag>.{json,md}`` (``mapped-read<tag>`` with ``--switch
mapped``) after every layout. Needs numpy, h5py, numba, dask, distributed, xarray and h5mdx;
no MDAnalysis.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from typing import Any
from unittest import mock

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_scale import (  # noqa: E402
    HERE,
    N_ATOMS,
    build,
    ca_indices,
    cores_text,
    machine,
    round_ratios,
    save_results,
    versions_text,
)

from h5mdx.analysis.rmsd import FUSED_READ_ENV, MAPPED_READ_ENV  # noqa: E402

SCHEDULERS = ("distributed", "threads")
#: ``--switch``: the environment variable turned on (1) and off (0), the results' name,
#: and what on and off mean, for the report
SWITCHES = {
    "fused": (FUSED_READ_ENV, "fused",
              "every task reads and computes in one compiled call, or reads from Python and "
              "then runs the kernel"),
    "mapped": (MAPPED_READ_ENV, "mapped-read",
               "every task runs the kernel on a mapping of the file, 64 MiB at a time, or "
               "h5mdx's default: read ahead where a core is spare, the fused read where none "
               "is"),
}


def _set_switch(variable: str, value: str) -> None:
    """On a worker (``Client.run``) or here: ``variable`` (the switch) set to 1 or 0."""
    os.environ[variable] = value


@contextlib.contextmanager
def runners(path: str, workers: int, select: np.ndarray | None,
            variable: str = FUSED_READ_ENV) -> Iterator[dict[str, Callable[[str], float]]]:
    """``{scheduler: run(value) -> seconds}`` with ``variable`` set to ``value`` for the run,
    the cluster started (not timed)."""
    import dask
    import xarray as xr
    from distributed import Client, LocalCluster

    import h5mdx

    def compute(scheduler: Any = None) -> float:
        with xr.open_dataset(path, engine="h5md") as ds:
            t0 = time.perf_counter()
            h5mdx.rmsd(ds.position, select=select).compute(scheduler=scheduler)
            return time.perf_counter() - t0

    with LocalCluster(n_workers=workers, threads_per_worker=1, processes=True,
                      dashboard_address=None) as cluster, Client(cluster) as client:
        def on_cluster(value: str) -> float:
            client.run(_set_switch, variable, value)
            return compute(client)

        def on_threads(value: str) -> float:
            with mock.patch.dict(os.environ, {variable: value}), \
                    dask.config.set(scheduler="threads", num_workers=workers):
                return compute()

        yield {"distributed": on_cluster, "threads": on_threads}


def paired(floor: Callable[[], float], run: Callable[[str], float], repeats: int
           ) -> dict[str, list[float]]:
    """Seconds of the floor, fused on and off in each of ``repeats`` rounds (after one
    untimed run of each); the order of on and off alternates from round to round."""
    run("1"), run("0"), floor()
    times: dict[str, list[float]] = {"floor": [], "on": [], "off": []}
    for r in range(repeats):
        times["floor"].append(floor())
        for key, value in ((("on", "1"), ("off", "0")) if r % 2 == 0
                           else (("off", "0"), ("on", "1"))):
            times[key].append(run(value))
    return times


def summary(times: dict[str, list[float]], frames: int) -> dict[str, Any]:
    """Frames/s and the medians of the round-by-round ratios."""
    fl, on, off = (times[k] for k in ("floor", "on", "off"))
    return {"times": times,
            "floor_fps": frames / statistics.median(fl),
            "on_fps": frames / statistics.median(on),
            "off_fps": frames / statistics.median(off),
            "on_vs_floor": statistics.median(round_ratios(fl, on)),
            "off_vs_floor": statistics.median(round_ratios(fl, off)),
            "on_vs_off": statistics.median(round_ratios(off, on))}


def render(results: dict[str, Any]) -> str:
    variable, _name, meaning = SWITCHES[results.get("switch", "fused")]
    out = [f"# `{variable}` on and off, paired", "",
           f"Machine: {results['platform']}, {cores_text(results)}; "
           f"{results['frames']:,} frames x {N_ATOMS} atoms, warm page cache; lazy open; "
           f"N={results['workers']} (`distributed`: N single-threaded worker processes; "
           f"threads: N threads of one process); medians of {results['repeats']} rounds, "
           "each timing the N-process h5py read floor, on and off (the order of "
           "on and off alternating). Versions: "
           f"{versions_text(results)}.", "",
           f"on / off: `{variable}=1` / `0` ({meaning}). Ratios are medians "
           "of the rounds' ratios.", "",
           "| layout | atoms | scheduler | floor frames/s | on frames/s | off frames/s "
           "| on / floor | off / floor | on / off |",
           "|---|---|---|---|---|---|---|---|---|"]
    for layout, by_sel in results["layouts"].items():
        for sel, by_sched in by_sel.items():
            for sched, r in by_sched.items():
                out.append(f"| {layout} | {sel} | {sched} | {r['floor_fps']:,.0f} | "
                           f"{r['on_fps']:,.0f} | {r['off_fps']:,.0f} | "
                           f"{r['on_vs_floor']:.2f} | {r['off_vs_floor']:.2f} | "
                           f"{r['on_vs_off']:.2f} |")
    if results.get("partial"):
        out += ["", "Partial: the run stopped before every layout was measured."]
    return "\n".join(out) + "\n"


def main() -> int:
    from h5mdx.floor import floor_reader

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--switch", choices=sorted(SWITCHES), default="fused")
    p.add_argument("--frames", type=int, default=100_000)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--layouts", default="c100,c1,contig")
    p.add_argument("--selections", default="ca,all")
    p.add_argument("--schedulers", default=",".join(SCHEDULERS))
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--data", default=os.path.join(HERE, "data"))
    p.add_argument("--tag", default="")
    args = p.parse_args()
    layouts = args.layouts.split(",")
    results: dict[str, Any] = {**machine(), "frames": args.frames, "workers": args.workers,
                               "repeats": args.repeats, "switch": args.switch, "layouts": {},
                               "partial": True}
    variable, name, _meaning = SWITCHES[args.switch]
    for layout in layouts:
        path = build(os.path.join(args.data, f"scale-{layout}-{args.frames}.h5md"),
                     args.frames, layout)
        results["layouts"][layout] = {}
        for sel in args.selections.split(","):
            select = ca_indices() if sel == "ca" else None
            entry = results["layouts"][layout][sel] = {}
            with floor_reader(path, args.workers) as floor, \
                    runners(path, args.workers, select, variable) as runs:
                for sched in args.schedulers.split(","):
                    entry[sched] = summary(paired(lambda: floor()[0], runs[sched],
                                                  args.repeats), args.frames)
                    r = entry[sched]
                    print(f"{layout:6s} {sel:3s} {sched:11s} on {r['on_fps']:10,.0f} "
                          f"off {r['off_fps']:10,.0f} frames/s; on/off {r['on_vs_off']:.2f}, "
                          f"on/floor {r['on_vs_floor']:.2f}", flush=True)
        results["partial"] = layout != layouts[-1]
        save_results(name, args.tag, results, render)
    return 0


if __name__ == "__main__":
    sys.exit(main())
