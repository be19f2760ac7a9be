"""Open time of ``xr.open_dataset(..., engine="h5md")`` against trajectory length.

Writes adk-sized trajectories (3341 atoms, MDAnalysis' default (1, n, 3) chunks)
of N and 10 N frames by repeating the adk frames, then times (median of
repeats, warm cache) opening them with the h5md engine with ``chunks={}``,
and for comparison h5netcdf's ``phony_dims`` open and the number of dask tasks
each gives. Results: ``benchmarks/results/open.json`` and ``open.md``.

Run: ``.venv/bin/python benchmarks/bench_open.py [--frames 1000] [--repeats 7]``
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
import warnings

import h5py
import numpy as np
import xarray as xr

HERE = os.path.dirname(os.path.abspath(__file__))
DATA = os.path.join(HERE, "data")
RESULTS = os.path.join(HERE, "results")


def adk_frames() -> np.ndarray:
    import MDAnalysis as mda
    from MDAnalysisTests.datafiles import DCD, PSF

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        u = mda.Universe(PSF, DCD)
    return np.stack([ts.positions.copy() for ts in u.trajectory])


def write(path: str, frames: np.ndarray, n_frames: int) -> None:
    if os.path.exists(path):
        return
    from h5mdx.testing import write_element

    tmp = path + ".tmp"
    n_atoms = frames.shape[1]
    with h5py.File(tmp, "w") as f:
        h = f.create_group("h5md")
        h.attrs["version"] = np.array([1, 1])
        h.create_group("author").attrs["name"] = "bench_open"
        h.create_group("creator").attrs.update({"name": "bench_open", "version": "1"})
        g = f.create_group("particles/trajectory")
        g.create_group("box").attrs.update({"dimension": 3, "boundary": ["none"] * 3})
        el = write_element(g, "position", np.zeros((0, n_atoms, 3), np.float32),
                           step=np.zeros(0), time=np.zeros(0), unit="Angstrom")
        del el["value"], el["step"], el["time"]
        v = el.create_dataset("value", shape=(n_frames, n_atoms, 3), dtype=np.float32,
                              chunks=(1, n_atoms, 3))
        v.attrs["unit"] = "Angstrom"
        for start in range(0, n_frames, len(frames)):
            stop = min(n_frames, start + len(frames))
            v[start:stop] = frames[: stop - start]
        el.create_dataset("step", data=np.arange(n_frames))
        t = el.create_dataset("time", data=np.arange(n_frames) * 1.0)
        t.attrs["unit"] = "ps"
    os.replace(tmp, path)


def time_open(fn, repeats: int) -> tuple[float, int]:
    times, ntasks = [], 0
    for _ in range(repeats):
        t0 = time.perf_counter()
        ds = fn()
        times.append(time.perf_counter() - t0)
        ntasks = len(ds["position"].data.__dask_graph__()) if "position" in ds else ntasks
        ds.close()
    return statistics.median(times), ntasks


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--frames", type=int, default=1000)
    ap.add_argument("--repeats", type=int, default=7)
    args = ap.parse_args()
    os.makedirs(DATA, exist_ok=True)
    os.makedirs(RESULTS, exist_ok=True)
    frames = adk_frames()
    rows = []
    for n in (args.frames, 10 * args.frames):
        path = os.path.join(DATA, f"open-{n}.h5md")
        write(path, frames, n)
        t_h5md, tasks_h5md = time_open(
            lambda p=path: xr.open_dataset(p, engine="h5md", chunks={}), args.repeats
        )
        try:
            t_nc, tasks_nc = time_open(
                lambda p=path: xr.open_dataset(
                    p, engine="h5netcdf", group="particles/trajectory/position",
                    phony_dims="sort", chunks={}
                ).rename({"value": "position"}),
                args.repeats,
            )
        except Exception as err:  # h5netcdf not installed
            print("h5netcdf comparison skipped:", err)
            t_nc, tasks_nc = float("nan"), 0
        rows.append({"frames": n, "file_mib": os.path.getsize(path) / 2**20,
                     "h5md_open_s": t_h5md, "h5md_tasks": tasks_h5md,
                     "h5netcdf_open_s": t_nc, "h5netcdf_tasks": tasks_nc})
        print(rows[-1])
    print(write_results(rows, args.repeats))


def write_results(rows: list[dict], repeats: int, results: str | None = None) -> str:
    """Write ``open.json`` and ``open.md`` into ``results`` (default :data:`RESULTS`), each
    beside its file and renamed over it: written in place, a run stopped while writing
    (a full disk, Ctrl-C) left the earlier results cut short. Returns the table."""
    from h5mdx._replace import replacing

    results = results or RESULTS
    ratio = rows[1]["h5md_open_s"] / rows[0]["h5md_open_s"]
    result = {"rows": rows, "open_time_ratio_10x_frames": ratio, "repeats": repeats}
    with replacing(os.path.join(results, "open.json")) as tmp, open(tmp, "w") as fh:
        json.dump(result, fh, indent=2)
    lines = ["| frames | file (MiB) | h5md open (ms) | h5md dask tasks | h5netcdf open (ms) "
             "| h5netcdf dask tasks |", "|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['frames']} | {r['file_mib']:.0f} | {r['h5md_open_s'] * 1e3:.1f} | "
                     f"{r['h5md_tasks']} | {r['h5netcdf_open_s'] * 1e3:.1f} | "
                     f"{r['h5netcdf_tasks']} |")
    lines.append(f"\nOpen time ratio for 10x the frames: {ratio:.2f}")
    with replacing(os.path.join(results, "open.md")) as tmp:
        tmp.write_text("\n".join(lines) + "\n")
    return "\n".join(lines)

if __name__ == "__main__":
    main()
