"""A run in several files: the RMSD of its parts against the same frames in one file.

A simulation continued from checkpoints writes one file per part. h5mdx computes their
C-alpha RMSD (214 atoms, by indices) three ways, in the same rounds (the order rotating):

- ``whole``: the frames in one file, opened lazily, ``h5mdx.rmsd(ds.position)``;
- ``parts``: ``h5mdx.rmsd([part, ...])``, each part opened lazily and read as a file alone
  (what ``h5mdx rmsd run-1.h5md run-2.h5md ...`` does);
- ``mfdataset``: ``xr.open_mfdataset(parts, chunks={})`` (xarray's way to join them: a
  dask-backed Dataset, whose reads go through dask's getter tasks);

and the floor: the same frames read with plain h5py, file after file, a few MiB at a time,
the selected atoms taken from each block. ``--frames`` frames of adk's 3341 atoms in
chunks of 100 frames (``bench_scale.build``: synthetic coordinates; only numpy, h5py,
xarray, dask and h5mdx are needed), cut into ``--parts`` files. All compute on dask's
threaded scheduler. Medians of ``--repeats`` rounds; ratios are each round's.

Run ``python benchmarks/bench_parts.py --data DIR`` (files are kept in DIR for the next
run). Results: ``benchmarks/results/parts-<name>.{json,md}``.
"""

from __future__ import annotations

import argparse
import functools
import os
import statistics
import sys
from collections.abc import Callable
from typing import Any

import h5py
import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import bench_scale  # noqa: E402 - beside this script: the files it builds are the same

WAYS = ("whole", "parts", "mfdataset", "floor")


def split(path: str, n_parts: int, where: str) -> list[str]:
    """``path``'s frames cut into ``n_parts`` H5MD files in ``where`` (once; cached)."""
    import xarray as xr

    with h5py.File(path, "r") as f:
        n_frames = f[bench_scale.DSET].shape[0]
    bounds = np.linspace(0, n_frames, n_parts + 1).astype(int)
    paths = [os.path.join(where, f"part-{n_frames}-{i + 1}-of-{n_parts}.h5md")
             for i in range(n_parts)]
    if not all(map(os.path.exists, paths)):
        with xr.open_dataset(path, engine="h5md") as ds:
            for out, a, b in zip(paths, bounds[:-1], bounds[1:], strict=True):
                ds.isel(time=slice(int(a), int(b))).md.to_h5md(out, overwrite=True,
                                                               frames_per_chunk=100)
    return paths


def ways(path: str, parts: list[str], select: np.ndarray) -> dict[str, Callable[[], Any]]:
    """Each way's function, returning the series (the floor: the frames read)."""
    import xarray as xr

    import h5mdx

    def whole() -> np.ndarray:
        with xr.open_dataset(path, engine="h5md") as ds:
            return h5mdx.rmsd(ds.position, select=select).values

    def in_parts() -> np.ndarray:
        opened = [xr.open_dataset(p, engine="h5md") for p in parts]
        try:
            return h5mdx.rmsd(opened, select=select).values
        finally:
            for ds in opened:
                ds.close()

    def mfdataset() -> np.ndarray:
        with xr.open_mfdataset(parts, engine="h5md", combine="nested", concat_dim="time",
                               data_vars="minimal", coords="minimal", compat="override",
                               chunks={}) as ds:
            return h5mdx.rmsd(ds.position, select=select).values

    def floor() -> int:
        n = 0
        for p in parts:
            with h5py.File(p, "r") as f:
                d = f[bench_scale.DSET]
                for a in range(0, d.shape[0], 300):  # 300 frames: 11.5 MiB
                    n += d[a:a + 300][:, select].shape[0]
        return n

    return {"whole": whole, "parts": in_parts, "mfdataset": mfdataset, "floor": floor}


def measure(path: str, parts: list[str], repeats: int) -> dict[str, Any]:
    """Seconds of each way in each round (rotating), checked to give one series."""
    import dask

    select = bench_scale.ca_indices()
    run = ways(path, parts, select)
    with dask.config.set(scheduler="threads"):
        series = {k: run[k]() for k in ("whole", "parts", "mfdataset")}
        for k in ("parts", "mfdataset"):
            np.testing.assert_allclose(series[k], series["whole"], atol=1e-5, err_msg=k)
        timers = {k: functools.partial(bench_scale._timed, fn) for k, fn in run.items()}
        seconds = bench_scale.interleaved(timers, repeats, rotate=True)
    return seconds


def summary(seconds: dict[str, list[float]], n_frames: int) -> list[dict[str, Any]]:
    """Per way: median seconds, frames/s, and the median of each round's speed relative to
    the whole file and to the floor."""
    rows = []
    for way in WAYS:
        rows.append({
            "way": way, "seconds": statistics.median(seconds[way]),
            "frames_per_s": n_frames / statistics.median(seconds[way]),
            "vs_whole": statistics.median(bench_scale.round_ratios(seconds["whole"],
                                                                   seconds[way])),
            "vs_floor": statistics.median(bench_scale.round_ratios(seconds["floor"],
                                                                   seconds[way]))})
    return rows


def markdown(meta: dict[str, Any], rows: list[dict[str, Any]]) -> str:
    lines = [f"# A run in {meta['parts']} files: C-alpha RMSD ({meta['frames']} frames x "
             f"{bench_scale.N_ATOMS} atoms, chunks of 100 frames)", "",
             f"{bench_scale.cores_text(meta['machine'])}; "
             f"{bench_scale.versions_text(meta['machine'])}; dask's threaded scheduler; "
             f"medians of {meta['repeats']} rounds (ratios: each round's speed, as a "
             "fraction of the whole file's and of the h5py floor's).", "",
             "| way | s | frames/s | x the whole file | x the h5py floor |",
             "|---|---:|---:|---:|---:|"]
    lines += [f"| {r['way']} | {r['seconds']:.3f} | {r['frames_per_s']:,.0f} | "
              f"{r['vs_whole']:.2f} | {r['vs_floor']:.2f} |" for r in rows]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data", required=True, help="directory of the trajectories (kept)")
    p.add_argument("--frames", type=int, default=20000)
    p.add_argument("--parts", type=int, default=4)
    p.add_argument("--repeats", type=int, default=7)
    p.add_argument("--name", default="2core", help="results: parts-NAME.{json,md}")
    args = p.parse_args(argv)
    os.makedirs(args.data, exist_ok=True)
    path = bench_scale.build(os.path.join(args.data, f"scale-c100-{args.frames}.h5md"),
                             args.frames, "c100")
    parts = split(path, args.parts, args.data)
    seconds = measure(path, parts, args.repeats)
    rows = summary(seconds, args.frames)
    meta = {"frames": args.frames, "parts": args.parts, "repeats": args.repeats,
            "machine": bench_scale.machine()}
    record = {"meta": meta, "rows": rows, "seconds": seconds}
    bench_scale.save_results("parts-", args.name, record,
                             lambda r: markdown(r["meta"], r["rows"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
