"""The layout experiment: one adk trajectory stored eight ways, read back three ways.

Writes the adenylate-kinase trajectory (MDAnalysisTests PSF/DCD, 3341 atoms, 98
frames repeated to the requested length) as:

* ``pyh5md-default``  chunks (32, 128, 3) -- the "H5MD-default" of the published study
* ``h5py-auto``       h5py's automatic chunks (``chunks=True``)
* ``frame``           chunks (1, n, 3) -- MDAnalysis' default
* ``contiguous``      no chunks
* ``block100``        chunks (100, n, 3)
* ``gzip1``/``gzip9`` chunks (100, n, 3) with gzip level 1 / 9 (no shuffle: other writers')
* ``gzip1-shuffle``   chunks (100, n, 3), gzip level 1 after the byte shuffle (``h5mdx
  convert/rechunk --compression gzip:1``)
* ``zarr``            Zarr store, chunks (100, n, 3), no compression

and measures for each: size on disk, write time, one-call read of all positions,
frame-by-frame read, and the C-alpha RMSD with ``h5mdx.rmsd`` (or, where that
module is not available, a C-alpha read through the h5md engine; the column
says which). With ``--cold`` (and write access to ``/proc/sys/vm/drop_caches``)
every read is also repeated after dropping the page cache.

Run ``python benchmarks/bench_layouts.py --quick`` for a smoke run (40 MB,
seconds) or without it for the ~1.2 GB experiment (minutes; run it with
``nice``). Results: ``benchmarks/results/layouts{,_quick}.json``, ``.md`` and ``.png``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import shutil
import sys
import tempfile
import time
import warnings
from typing import Any

import h5py
import numpy as np

from h5mdx._replace import replacing

HERE = os.path.dirname(os.path.abspath(__file__))
RESULTS = os.path.join(HERE, "results")

LAYOUTS: dict[str, dict[str, Any]] = {
    "pyh5md-default": {"chunks": (32, 128, 3)},
    "h5py-auto": {"chunks": True},
    "frame": {"chunks": "frame"},
    "contiguous": {"chunks": None},
    "block100": {"chunks": (100, None, 3)},
    "gzip1": {"chunks": (100, None, 3), "compression": "gzip", "compression_opts": 1},
    "gzip9": {"chunks": (100, None, 3), "compression": "gzip", "compression_opts": 9},
    "gzip1-shuffle": {"chunks": (100, None, 3), "compression": "gzip", "compression_opts": 1,
                      "shuffle": True},
    "zarr": {"zarr": True},
}


def adk() -> tuple[np.ndarray, np.ndarray, str]:
    """adk positions (98, 3341, 3), C-alpha indices and the PSF path."""
    import MDAnalysis as mda
    from MDAnalysisTests.datafiles import DCD, PSF

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        u = mda.Universe(PSF, DCD)
        pos = np.stack([ts.positions.copy() for ts in u.trajectory])
    return pos, u.select_atoms("name CA").indices, PSF


def drop_caches() -> bool:
    """Drop the page cache (root only); True if it worked."""
    try:
        os.sync()
        with open("/proc/sys/vm/drop_caches", "w") as fh:
            fh.write("3\n")
        return True
    except OSError:
        return False


def write_h5md(path: str, base: np.ndarray, n_frames: int, spec: dict[str, Any]) -> None:
    """Write the repeated adk frames with plain h5py in the given layout."""
    n_atoms = base.shape[1]
    chunks = spec["chunks"]
    if chunks == "frame":
        chunks = (1, n_atoms, 3)
    elif isinstance(chunks, tuple):
        chunks = tuple(n_atoms if c is None else c for c in chunks)
    kwargs = {k: spec[k] for k in ("compression", "compression_opts", "shuffle") if k in spec}
    with h5py.File(path, "w") as f:
        h = f.create_group("h5md")
        h.attrs["version"] = np.array([1, 1], dtype=np.int32)
        h.create_group("author").attrs["name"] = "bench_layouts"
        h.create_group("creator").attrs.update({"name": "bench_layouts", "version": "1"})
        g = f.create_group("particles/trajectory")
        g.create_group("box").attrs.update({"dimension": 3, "boundary": ["none"] * 3})
        v = g.create_dataset("position/value", shape=(n_frames, n_atoms, 3), dtype=np.float32,
                             chunks=chunks, **kwargs)
        v.attrs["unit"] = "Angstrom"
        block = base.shape[0] * max(1, 800 // base.shape[0])
        tiled = np.concatenate([base] * (block // base.shape[0]))
        for a in range(0, n_frames, block):
            b = min(n_frames, a + block)
            v[a:b] = tiled[: b - a]
        g["position/step"] = np.arange(n_frames, dtype=np.int64)
        g["position/time"] = np.arange(n_frames, dtype=np.float64)
        g["position/time"].attrs["unit"] = "ps"


def dir_size(path: str) -> int:
    if os.path.isdir(path):
        return sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(path) for f in fs)
    return os.path.getsize(path)


def timed(fn: Any) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def _rmsd_function() -> Any:
    """h5mdx.analysis.rmsd.rmsd if that module is available (decided once per run)."""
    if "rmsd" not in _RMSD:
        try:
            from h5mdx.analysis.rmsd import rmsd
        except ImportError:
            rmsd = None
        _RMSD["rmsd"] = rmsd
    return _RMSD["rmsd"]


_RMSD: dict[str, Any] = {}


def reads(path: str, is_zarr: bool, n_fbf: int, ca: np.ndarray) -> dict[str, float]:
    """One-call read, frame-by-frame read (first n_fbf frames) and the RMSD/C-alpha column."""
    import xarray as xr

    out: dict[str, float] = {}
    if is_zarr:
        import zarr

        arr = zarr.open_group(path, mode="r")["position"]
        out["read_s"] = timed(lambda: arr[:])

        def fbf() -> None:
            for i in range(n_fbf):
                arr[i]
        out["frame_by_frame_s"] = timed(fbf)
        ds = xr.open_zarr(path)
    else:
        with h5py.File(path, "r") as f:
            dset = f["particles/trajectory/position/value"]
            out["read_s"] = timed(lambda: dset[()])

            def fbf() -> None:
                for i in range(n_fbf):
                    dset[i]
            out["frame_by_frame_s"] = timed(fbf)
        ds = xr.open_dataset(path, engine="h5md", chunks={})
    rmsd = _rmsd_function()
    pos = ds.position.isel(atom=ca)
    if rmsd is not None:
        out["rmsd_s"] = timed(lambda: rmsd(pos, 0).values)
    else:
        out["ca_read_s"] = timed(lambda: pos.values)
    ds.close()
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="small smoke run (980 frames, 40 MB)")
    p.add_argument("--frames", type=int, help="number of frames (default 29988, quick 980)")
    p.add_argument("--frame-by-frame", type=int, default=2000,
                   help="frames read one by one (default 2000)")
    p.add_argument("--cold", action="store_true", help="also read after dropping the page cache")
    p.add_argument("--dir", help="where to write the files (default: a temporary directory)")
    p.add_argument("--only", nargs="*", choices=sorted(LAYOUTS), help="subset of layouts")
    p.add_argument("--name", help="results file name under benchmarks/results (default "
                                  "layouts, or layouts_quick with --quick)")
    args = p.parse_args(argv)
    n_frames = args.frames or (980 if args.quick else 29988)
    n_fbf = min(args.frame_by_frame, n_frames)
    base, ca, _psf = adk()
    work = args.dir or tempfile.mkdtemp(prefix="h5mdx-layouts-")
    os.makedirs(work, exist_ok=True)
    cold_ok = args.cold and drop_caches()
    rows = []
    contiguous = os.path.join(work, "contiguous.h5md")
    try:
        for name in args.only or LAYOUTS:
            spec = LAYOUTS[name]
            if spec.get("zarr"):
                path = os.path.join(work, "layout.zarr")
                if not os.path.exists(contiguous):
                    write_h5md(contiguous, base, n_frames, LAYOUTS["contiguous"])
                import xarray as xr

                from h5mdx.format.writer import Layout
                from h5mdx.layout.export import dataset_to_zarr

                shutil.rmtree(path, ignore_errors=True)

                def write(path: str = path) -> None:
                    with xr.open_dataset(contiguous, engine="h5md", chunks={}) as ds:
                        dataset_to_zarr(ds, path, layout=Layout(frames_per_chunk=100))
            else:
                path = os.path.join(work, f"{name}.h5md")

                def write(path: str = path, spec: dict[str, Any] = spec) -> None:
                    write_h5md(path, base, n_frames, spec)
            t_write = timed(write)
            row: dict[str, Any] = {"layout": name, "n_frames": n_frames,
                                   "size_bytes": dir_size(path), "write_s": t_write}
            if not spec.get("zarr"):
                with h5py.File(path) as f:
                    c = f["particles/trajectory/position/value"].chunks
                row["chunks"] = list(c) if c else None
            else:
                row["chunks"] = [100, base.shape[1], 3]
            reads(path, bool(spec.get("zarr")), min(n_fbf, 50), ca)  # warm the cache
            warm = reads(path, bool(spec.get("zarr")), n_fbf, ca)
            row.update({f"warm_{k}": v for k, v in warm.items()})
            if cold_ok:
                drop_caches()
                cold = reads(path, bool(spec.get("zarr")), n_fbf, ca)
                row.update({f"cold_{k}": v for k, v in cold.items()})
            nbytes = n_frames * base.shape[1] * 12
            row["warm_read_GBps"] = nbytes / row["warm_read_s"] / 1e9
            row["warm_frames_per_s_fbf"] = n_fbf / row["warm_frame_by_frame_s"]
            rows.append(row)
            print(json.dumps(row), flush=True)
            if name != "contiguous" or "zarr" not in (args.only or LAYOUTS):
                with contextlib.suppress(OSError):
                    (shutil.rmtree if os.path.isdir(path) else os.remove)(path)
    finally:
        if not args.dir:
            shutil.rmtree(work, ignore_errors=True)
    meta = {"machine": platform.node(), "python": sys.version.split()[0], "cpus": os.cpu_count(),
            "h5py": h5py.__version__, "hdf5": h5py.version.hdf5_version,
            "cold_cache": cold_ok, "frame_by_frame_frames": n_fbf,
            "rmsd_column": "rmsd_s" if any("warm_rmsd_s" in r for r in rows) else
            "ca_read_s (h5mdx.rmsd not available: C-alpha read through the h5md engine)"}
    stem = os.path.join(RESULTS, args.name or ("layouts_quick" if args.quick else "layouts"))
    os.makedirs(RESULTS, exist_ok=True)
    with replacing(stem + ".json") as tmp, open(tmp, "w") as fh:
        json.dump({"meta": meta, "rows": rows}, fh, indent=2)
    write_markdown(stem + ".md", meta, rows)
    plot(stem + ".png", rows)
    print(f"results: {stem}.json/.md/.png")
    return 0


def write_markdown(path: str, meta: dict[str, Any], rows: list[dict[str, Any]]) -> None:
    col = "rmsd_s" if meta["rmsd_column"] == "rmsd_s" else "ca_read_s"
    lines = [
        f"# Layout experiment ({rows[0]['n_frames'] if rows else 0} frames of adk, 3341 atoms)",
        "",
        f"Machine {meta['machine']}, {meta['cpus']} CPUs, h5py {meta['h5py']}, HDF5 "
        f"{meta['hdf5']}; cold cache: {meta['cold_cache']}; frame-by-frame over the first "
        f"{meta['frame_by_frame_frames']} frames; last column: {meta['rmsd_column']}.",
        "",
        f"| layout | chunks | size MiB | write s | read s (warm) | GB/s | frame-by-frame frames/s "
        f"| {col} warm |" + (" read s (cold) |" if meta["cold_cache"] else ""),
        "|---|---|---:|---:|---:|---:|---:|---:|" + ("---:|" if meta["cold_cache"] else ""),
    ]
    for r in rows:
        line = (f"| {r['layout']} | {r['chunks']} | {r['size_bytes'] / 2**20:.1f} | "
                f"{r['write_s']:.2f} | {r['warm_read_s']:.3f} | {r['warm_read_GBps']:.2f} | "
                f"{r['warm_frames_per_s_fbf']:.0f} | {r.get('warm_' + col, float('nan')):.3f} |")
        if meta["cold_cache"]:
            line += f" {r.get('cold_read_s', float('nan')):.3f} |"
        lines.append(line)
    # beside the file, then renamed over it: written in place, a run stopped while
    # writing (a full disk, Ctrl-C) left the earlier results cut short
    with replacing(path) as tmp:
        tmp.write_text("\n".join(lines) + "\n")


def plot(path: str, rows: list[dict[str, Any]]) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return
    names = [r["layout"] for r in rows]
    fig, axes = plt.subplots(1, 3, figsize=(13, 4))
    for ax, key, title in zip(axes, ("warm_read_GBps", "warm_frames_per_s_fbf", "size_bytes"),
                              ("one-call read, GB/s", "frame-by-frame, frames/s",
                               "size on disk, MiB"), strict=True):
        vals = [r[key] / (2**20 if key == "size_bytes" else 1) for r in rows]
        ax.barh(names, vals, color="tab:blue")
        ax.set_title(title)
        ax.invert_yaxis()
    fig.tight_layout()
    with replacing(path) as tmp:
        fig.savefig(tmp, dpi=110, format="png")
    plt.close(fig)


if __name__ == "__main__":
    sys.exit(main())
