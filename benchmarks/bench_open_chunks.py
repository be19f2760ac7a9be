"""RMSD on positions opened with ``chunks=`` against the read floor: how many tasks the
open's blocks make, and what they cost.

A user who opens a trajectory with ``xr.open_dataset(..., chunks={"time": 100})`` (one
block per HDF5 chunk, as the studies this project comes from did) or ``chunks={}`` (the
engine's blocks, ~128 MiB) and computes ``h5mdx.rmsd`` gets one task per run of whole
blocks, as large as a lazy open's tasks (``h5mdx.analysis.plan._open_block_ends``); each
task costs ``distributed`` a few ms. Each round times the N-process h5py read floor
(``h5mdx.floor.floor_reader``) and then each open (the file opened, the RMSD of all
atoms computed on a ``LocalCluster`` of ``--workers`` single-threaded processes, the
default client); ratios are the floor's time over the run's, medians over ``--repeats``
rounds after one warm-up. The file is ``bench_scale``'s synthetic trajectory (``--frames``
x 3341 atoms, ``--layout``: c100 by default). ``--zarr`` adds the same frames converted to
Zarr by ``h5mdx.layout.export.dataset_to_zarr`` (chunks of whole frames of ~4 MiB, as
``h5mdx convert OUT.zarr`` writes them), opened with ``xr.open_zarr`` (dask blocks, one per
Zarr chunk) and lazily, against the HDF5 file's floor and against a Zarr floor of their own
(:func:`zarr_floor`: N processes, each reading its slab with zarr one chunk at a time).
``--skip K`` computes the RMSD of ``position.isel(time=slice(K, None))`` instead (a user
leaving out the equilibration), ``--stride S`` of every S-th frame, against the floor
scaled to the frames read. ``--nm`` adds each open of a copy of the file whose positions
say they are in nm, opened with ``convert_units=True`` (served in Angstrom, every value
times 10: a GROMACS-style file read as MDAnalysis users expect), against the same floor.
Results:
``benchmarks/results/open-chunks{--tag}.{json,md}``. Run:
``.venv/bin/python benchmarks/bench_open_chunks.py --workers 2``.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import contextlib
import multiprocessing
import os
import statistics
import sys
import time
import warnings
from collections.abc import Callable, Iterator
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import bench_scale as bs  # noqa: E402 - the benchmark next to this one

#: The opens compared: a name and ``open_dataset``'s ``chunks=`` (None: the lazy open).
OPENS = {"chunks={'time': 100}": {"time": 100}, "chunks={}": {}, "lazy": None}
#: With ``--zarr``: the same frames in Zarr, opened as ``xr.open_zarr`` does (dask blocks
#: of the Zarr chunks) and lazily.
ZARR_OPENS = {"zarr, chunks={} (as open_zarr)": {}, "zarr, lazy": None}


def zarr_copy(path: str) -> str:
    """``path``'s frames as a Zarr store beside it (``dataset_to_zarr``), written once."""
    import xarray as xr

    from h5mdx.layout.export import dataset_to_zarr

    store = os.path.splitext(path)[0] + ".zarr"
    if not os.path.exists(os.path.join(store, "zarr.json")):
        with xr.open_dataset(path, engine="h5md", chunks={}) as ds:
            dataset_to_zarr(ds[["position"]], store, mode="w")
    return store


def nm_copy(path: str) -> str:
    """A copy of ``path`` beside it whose positions say they are in nm, made once."""
    import shutil

    import h5py

    out = os.path.splitext(path)[0] + "-nm.h5md"
    if not os.path.exists(out):
        part = out + ".part"
        shutil.copyfile(path, part)
        with h5py.File(part, "r+") as f:
            f["particles/trajectory/position/value"].attrs["unit"] = "nm"
        os.replace(part, out)
    return out


def _zarr_slab(store: str, start: int, stop: int) -> float:
    """Seconds to read frames ``start:stop`` of ``store``'s positions with zarr, one chunk
    at a time (the fastest step: larger reads ran 2.6x slower with zarr 3.1)."""
    import zarr

    array = zarr.open_array(os.path.join(store, "position"), mode="r")
    step = int(array.chunks[0])
    t0 = time.perf_counter()
    for a in range(start, stop, step):
        array[a:min(stop, a + step)]
    return time.perf_counter() - t0


@contextlib.contextmanager
def zarr_floor(store: str, n: int) -> Iterator[Callable[[], float]]:
    """A function timing ``n`` processes that each read 1/n of ``store``'s frames with zarr
    (seconds, the slowest process's), like ``floor_reader`` does with h5py."""
    import zarr

    frames = int(zarr.open_array(os.path.join(store, "position"), mode="r").shape[0])
    bounds = [frames * i // n for i in range(n + 1)]
    ctx = multiprocessing.get_context("spawn")  # the caller runs threads: no fork
    with concurrent.futures.ProcessPoolExecutor(n, mp_context=ctx) as pool:
        def read() -> float:
            return max(pool.map(_zarr_slab, [store] * n, bounds[:-1], bounds[1:]))

        read()  # the processes start and import zarr
        yield read


def run(path: str, n: int, repeats: int, zarr: str | None = None,
        skip: int = 0, stride: int = 1, nm: str | None = None) -> list[dict[str, Any]]:
    """A row per open in :data:`OPENS` (and :data:`ZARR_OPENS` of the store ``zarr``, and
    each of :data:`OPENS` of the nm copy ``nm`` with its units converted): tasks, and the
    median of the floor over the run (the floor's time scaled to the frames after the
    first ``skip``, every ``stride``-th, which the RMSD reads)."""
    import dask
    import distributed
    import xarray as xr

    import h5mdx
    from h5mdx.floor import floor_reader
    from h5mdx.parallel import local_cluster

    opens = {name: (path, "h5md", chunks, {}) for name, chunks in OPENS.items()}
    if nm:
        opens |= {f"{name}, nm -> Angstrom": (nm, "h5md", chunks, {"convert_units": True})
                  for name, chunks in OPENS.items()}
    if zarr:
        opens |= {name: (zarr, "zarr", chunks, {}) for name, chunks in ZARR_OPENS.items()}
    ratios: dict[str, list[float]] = {name: [] for name in opens}
    to_zarr: dict[str, list[float]] = {name: [] for name in opens}
    tasks: dict[str, int] = {}
    with floor_reader(path, n) as floor, local_cluster(n) as cluster, \
            distributed.Client(cluster) as client, dask.config.set(scheduler=client), \
            (zarr_floor(zarr, n) if zarr else contextlib.nullcontext()) as zfloor:
        for r in range(repeats + 1):  # round 0 warms up
            for name, (source, engine, chunks, keywords) in opens.items():
                seconds = floor()[0]
                zarr_seconds = zfloor() if engine == "zarr" else None
                t0 = time.perf_counter()
                with warnings.catch_warnings():
                    # 100-frame blocks on 100-frame chunks split no stored chunk, but they
                    # split the engine's preferred ~128 MiB blocks, and xarray says so
                    warnings.filterwarnings("ignore", "The specified chunks separate",
                                            UserWarning)
                    ds = xr.open_dataset(source, engine=engine, chunks=chunks, **keywords)
                with ds:
                    position = ds.position.isel(time=slice(skip, None, stride))
                    # of the frames the floor reads, those the RMSD reads
                    share = position.sizes["time"] / ds.sizes["time"]
                    lazy = h5mdx.rmsd(position)
                    tasks[name] = int(lazy.data.npartitions)
                    lazy.compute()  # as a user would: the RMSD and its coordinates
                took = time.perf_counter() - t0
                if r:
                    ratios[name].append(seconds * share / took)
                    if zarr_seconds is not None:
                        to_zarr[name].append(zarr_seconds * share / took)
    rows = []
    for name in opens:
        row = {"workers": n, "open": name, "tasks": tasks[name],
               "vs_floor": statistics.median(ratios[name]), "rounds": ratios[name]}
        stored = name.removesuffix(", nm -> Angstrom")
        if stored != name:  # converted against as stored, round by round
            row["vs_stored"] = statistics.median(
                a / b for a, b in zip(ratios[name], ratios[stored], strict=True))
        if to_zarr[name]:
            row["vs_zarr_floor"] = statistics.median(to_zarr[name])
        print(f"N={n} {name:22s} {row['tasks']:5d} tasks  x{row['vs_floor']:.2f} the floor"
              + (f", x{row['vs_zarr_floor']:.2f} the zarr floor" if to_zarr[name] else "")
              + (f", x{row['vs_stored']:.2f} as stored" if "vs_stored" in row else ""),
              flush=True)
        rows.append(row)
    return rows


def _stride(results: dict[str, Any]) -> str:
    stride = results.get("stride", 1)
    return f", {stride}" if stride != 1 else ""


def markdown(results: dict[str, Any]) -> str:
    lines = ["# RMSD on positions opened with `chunks=`, against the read floor", "",
             f"{results['frames']:,} frames x 3341 atoms, layout {results['layout']}, all "
             f"atoms" + (f", the RMSD of `position.isel(time=slice({results.get('skip', 0)}, "
                         f"None{_stride(results)}))` against the floor's time scaled to the "
                         "frames it reads" if results.get("skip") or _stride(results) else "")
             + ", warm page cache; N single-threaded `distributed` workers; "
             f"{bs.cores_text(results)}; medians of {results['repeats']} rounds, each timing "
             f"the N-process h5py read floor and then each open. Versions: "
             f"{bs.versions_text(results)}.", "",
             "`tasks`: the RMSD's tasks (runs of whole blocks of the open, as large as a "
             "lazy open's tasks). `x floor`: the floor's time over the run's (open, RMSD, "
             "result); for the Zarr rows, the floor of the HDF5 file with the same frames"
             + ("; `nm -> Angstrom`: a copy of the file whose positions say nm, opened with "
                "`convert_units=True` (every value times 10); `x as stored`: the median of its "
                "round-by-round ratio to the same open of the file as stored" if results.get("nm")
                else "")
             + ". "
             "`x zarr floor`: the Zarr rows against N processes reading the store with zarr, "
             "one chunk at a time.", "",
             "| N | open | tasks | x floor | by round | x zarr floor | x as stored |",
             "|---|---|---|---|---|---|---|"]
    for r in results["rows"]:
        lines.append(f"| {r['workers']} | `{r['open']}` | {r['tasks']} | {r['vs_floor']:.2f} | "
                     + ", ".join(f"{x:.2f}" for x in r["rounds"]) + " | "
                     + (f"{r['vs_zarr_floor']:.2f}" if "vs_zarr_floor" in r else "-") + " | "
                     + (f"{r['vs_stored']:.2f}" if "vs_stored" in r else "-") + " |")
    return "\n".join(lines) + "\n"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--frames", type=int, default=100_000)
    p.add_argument("--layout", default="c100", choices=sorted(bs.CHUNKS))
    p.add_argument("--workers", default="2")
    p.add_argument("--zarr", action="store_true", help="the same frames in Zarr too")
    p.add_argument("--skip", type=int, default=0,
                   help="the RMSD of the frames after the first SKIP (isel(time=slice))")
    p.add_argument("--stride", type=int, default=1, help="the RMSD of every STRIDE-th frame")
    p.add_argument("--nm", action="store_true",
                   help="each open of a copy in nm too, its units converted to Angstrom")
    bs.run_arguments(p, repeats=3)
    args = p.parse_args()
    path = bs.build(os.path.join(args.data, f"scale-{args.layout}-{args.frames}.h5md"),
                    args.frames, args.layout)
    store = zarr_copy(path) if args.zarr else None
    nm = nm_copy(path) if args.nm else None
    rows = []
    for n in (int(w) for w in args.workers.split(",")):
        rows += run(path, n, args.repeats, store, args.skip, args.stride, nm)
    results = {**bs.machine(), "frames": args.frames, "layout": args.layout,
               "repeats": args.repeats, "skip": args.skip, "stride": args.stride,
               "nm": bool(nm), "rows": rows}
    bs.save_results("open-chunks", args.tag, results, markdown)
    return 0


if __name__ == "__main__":
    sys.exit(main())
