"""RMSD throughput of one worker against the size of each read, and what each read costs.

An RMSD task reads its block ``READ_STEP_BYTES`` (4 MiB) at a time into a reused buffer
and runs the kernel on it while it is in the CPU cache. Each read has a fixed cost on top
of moving the bytes; this measures it. For read sizes ``--kib`` it runs ``h5mdx.rmsd`` on
dask's synchronous scheduler (one worker, no scheduler cost) two ways:

- ``frames``: what tasks do, each read handed straight to the engine's array
  (``h5mdx.engine.frames.FrameReader``);
- ``xarray``: each read through ``variable[a:b].values`` (xarray's lazy indexing), as
  tasks read before ``FrameReader``, and as they still do for anything but plain slices.

The trajectory is ``bench_scale``'s synthetic one (``--frames`` x 3341 atoms) in
``--layout``. Every figure is the median of ``--repeats`` rounds; a round runs every
combination once in turn (after one warm-up each), so a slow spell of a shared machine falls
on all of them alike. Results: ``benchmarks/results/steps{--tag}.{json,md}``.
Run: ``.venv/bin/python benchmarks/bench_steps.py``.
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
def _reads(kib: int, path: str) -> Iterator[None]:
    """Tasks read ``kib`` KiB at a time, through ``path`` ("frames" or "xarray")."""
    import h5mdx.analysis.plan as plan  # where the read step and the reader are chosen

    saved = plan.READ_STEP_BYTES, plan.frame_reader
    plan.READ_STEP_BYTES = kib * 1024
    if path == "xarray":
        plan.frame_reader = lambda variable: None
    try:
        yield
    finally:
        plan.READ_STEP_BYTES, plan.frame_reader = saved


def _run(path: str, select: np.ndarray | None, kib: int, how: str) -> np.ndarray:
    import dask
    import xarray as xr

    import h5mdx

    with _reads(kib, how), dask.config.set(scheduler="synchronous"), \
            xr.open_dataset(path, engine="h5md") as ds:
        return h5mdx.rmsd(ds.position, select=select).values


def measure(args: argparse.Namespace, path: str) -> list[dict[str, Any]]:
    bs._warm_kernel()
    rows = []
    for sel_name, sel in (("ca", bs.ca_indices()), ("all", None)):
        timers = {(kib, how): functools.partial(bs._timed, functools.partial(
            _run, path, sel, kib, how)) for kib in args.kib for how in ("frames", "xarray")}
        expected = _run(path, sel, args.kib[-1], "frames")
        for kib, how in timers:  # the same numbers every way
            np.testing.assert_array_equal(_run(path, sel, kib, how), expected)
        for (kib, how), ts in bs.interleaved(timers, args.repeats).items():
            rate = args.frames / statistics.median(ts)
            rows.append({"select": sel_name, "kib": kib, "read": how, "times": ts,
                         "frames_per_s": rate})
            print(f"{sel_name:3s} {kib:6d} KiB {how:6s} {rate:12,.0f} frames/s", flush=True)
    return rows


def markdown(results: dict[str, Any]) -> str:
    kibs = results["kib"]
    lines = ["# One worker's RMSD against the size of each read", "",
             f"{results['frames']:,} frames x {bs.N_ATOMS} atoms, layout {results['layout']}, "
             f"warm page cache, dask's synchronous scheduler; {bs.cores_text(results)}; "
             f"medians of {results['repeats']} interleaved rounds. Versions: "
             f"{bs.versions_text(results)}.", "",
             "frames/s. `frames`: each read straight to the engine's array (what tasks do); "
             "`xarray`: each read through xarray's lazy indexing; in brackets: frames over "
             "xarray.", "",
             "| atoms | read | " + " | ".join(f"{k:,} KiB" for k in kibs) + " |",
             "|---|---|" + "---|" * len(kibs)]
    keyed = {(r["select"], r["read"], r["kib"]): r["frames_per_s"] for r in results["rows"]}
    for sel in dict.fromkeys(r["select"] for r in results["rows"]):
        for how in ("frames", "xarray"):
            cells = []
            for k in kibs:
                rate = keyed[(sel, how, k)]
                ratio = f" ({rate / keyed[(sel, 'xarray', k)]:.2f})" if how == "frames" else ""
                cells.append(f"{rate:,.0f}{ratio}")
            lines.append(f"| {sel} | {how} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--frames", type=int, default=30_000)
    p.add_argument("--layout", default="contig", choices=("c100", "c1", "contig"))
    p.add_argument("--kib", default="256,1024,4096,8192")
    bs.run_arguments(p, repeats=5)
    args = p.parse_args()
    args.kib = [int(k) for k in args.kib.split(",")]
    path = bs.build(os.path.join(args.data, f"scale-{args.layout}-{args.frames}.h5md"),
                    args.frames, args.layout)
    results = {**bs.machine(), "frames": args.frames, "layout": args.layout,
               "repeats": args.repeats, "kib": args.kib, "rows": measure(args, path)}
    bs.save_results("steps", args.tag, results, markdown)
    return 0


if __name__ == "__main__":
    sys.exit(main())
