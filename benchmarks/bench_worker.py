"""One worker's RMSD in the client's process against in a ``distributed`` worker, in one run.

A ``distributed`` worker is not a plain Python process: its nanny sets
``MALLOC_TRIM_THRESHOLD_=65536``, so every allocation over 64 KiB goes back to the OS
when freed and is faulted in (zeroed) again when made again, and glibc stops reusing
large blocks. Code that allocates per read runs slower there than anywhere else. This
runs the same RMSD (all atoms, dask's synchronous scheduler: the tasks one after another)
in this process and inside one worker of a ``LocalCluster`` (``client.run``), timing it
where it runs, on ``bench_scale``'s synthetic trajectory (``--frames`` x 3341 atoms,
``--layout``) stored in Å, and on a copy stored in nm opened with ``convert_units=True``
(every read scaled to Å).

Every figure is the median of ``--repeats`` interleaved rounds (each case once per
round, after a warm-up). Results: ``benchmarks/results/worker{--tag}.{json,md}``.
Run: ``.venv/bin/python benchmarks/bench_worker.py``.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import time
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import bench_scale as bs  # noqa: E402 - the benchmark next to this one

CASES = {"Å, as stored": False, "nm, convert_units=True": True}


def timed_rmsd(path: str, convert: bool) -> float:
    """Seconds of one all-atom RMSD of ``path``, tasks one after another, here."""
    import dask
    import xarray as xr

    import h5mdx

    with dask.config.set(scheduler="synchronous"), \
            xr.open_dataset(path, engine="h5md", convert_units=convert) as ds:
        t = time.perf_counter()
        h5mdx.rmsd(ds.position).load()
        return time.perf_counter() - t


def nm_copy(path: str) -> str:
    """A copy of ``path`` whose positions say they are in nm (made once)."""
    import h5py

    nm = path.replace(".h5md", "-nm.h5md")
    if not os.path.exists(nm):
        shutil.copyfile(path, nm + ".part")
        with h5py.File(nm + ".part", "r+") as f:
            f[bs.DSET].attrs["unit"] = "nm"
        os.replace(nm + ".part", nm)
    return nm


def main() -> int:
    import distributed

    from h5mdx.parallel import local_cluster

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--frames", type=int, default=30_000)
    p.add_argument("--layout", default="contig", choices=("c100", "c1", "contig"))
    bs.run_arguments(p, repeats=7)
    args = p.parse_args()
    path = bs.build(os.path.join(args.data, f"scale-{args.layout}-{args.frames}.h5md"),
                    args.frames, args.layout)
    paths = {"Å, as stored": path, "nm, convert_units=True": nm_copy(path)}
    bs._warm_kernel()
    with local_cluster(1) as cluster, distributed.Client(cluster) as client:
        client.run(bs._warm_kernel)

        def in_worker(p: str, convert: bool) -> float:
            return next(iter(client.run(timed_rmsd, p, convert).values()))

        timers = {(where, case): (lambda w=where, c=case: (
            timed_rmsd if w == "client process" else in_worker)(paths[c], CASES[c]))
            for where in ("client process", "distributed worker") for case in CASES}
        times = bs.interleaved(timers, args.repeats)
    rows = [{"where": w, "case": c, "times": ts, "seconds": statistics.median(ts),
             "frames_per_s": args.frames / statistics.median(ts)} for (w, c), ts in times.items()]
    for r in rows:
        print(f"{r['where']:18s} {r['case']:24s} {r['frames_per_s']:12,.0f} frames/s")
    results = {**bs.machine(), "frames": args.frames, "layout": args.layout,
               "repeats": args.repeats, "rows": rows}
    bs.save_results("worker", args.tag, results, markdown)
    return 0


def markdown(results: dict[str, Any]) -> str:
    keyed = {(r["where"], r["case"]): r["frames_per_s"] for r in results["rows"]}
    lines = ["# One worker's RMSD: the client's process against a distributed worker", "",
             f"{results['frames']:,} frames x {bs.N_ATOMS} atoms, layout {results['layout']}, "
             "all atoms, warm page cache, the tasks one after another (dask's synchronous "
             f"scheduler) where they run; {bs.cores_text(results)}; medians of "
             f"{results['repeats']} interleaved rounds. Versions: {bs.versions_text(results)}.",
             "", "| positions | client process (frames/s) | distributed worker (frames/s) | "
             "worker / client |", "|---|---|---|---|"]
    for case in CASES:
        here, there = keyed[("client process", case)], keyed[("distributed worker", case)]
        lines.append(f"| {case} | {here:,.0f} | {there:,.0f} | {there / here:.2f} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
