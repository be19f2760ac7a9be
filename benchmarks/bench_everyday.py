"""Everyday reads against the h5py floor: one atom's time series, every 10th frame, one frame.

What a user does between analyses, through ``xr.open_dataset(path, engine="h5md")``
(lazy), against the same selection read with plain h5py by hand (the floor): the time
(median of ``--repeats`` rounds, h5mdx and the floor measured in the same round, the
order alternating) and the peak memory a fresh process adds for it (``VmHWM`` after the
read minus before, the file already open). Layouts: ``c100`` (chunks of 100 whole
frames), ``c1`` (one frame per chunk), ``contig`` and ``gz100`` (gzip level 1 after the
byte shuffle, 100 frames per chunk), ``--frames`` frames of adk's 3341 atoms, built by
``bench_scale.build`` (synthetic coordinates: only numpy, h5py, xarray and h5mdx are
needed; a file it built for ``bench_scale.py --data DIR`` is used as it is).

The floors: ``dset[:, 100]`` (HDF5 reads the chunks, or the 12 bytes of each frame of a
contiguous dataset); every 10th frame read 1,000 frames at a time and strided in numpy
(``dset[::10]`` through HDF5's own selection takes seconds on chunked data); 100 frames
read one by one from a quarter of the way in, ``dset[i]`` (as a viewer or a frame loop does; HDF5 keeps the chunk last
decoded in its chunk cache).

Run ``python benchmarks/bench_everyday.py --data DIR`` (files are kept in DIR for the
next run). Results: ``benchmarks/results/everyday-<name>.{json,md}``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from typing import Any

import h5py
import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import bench_scale  # noqa: E402 - beside this script: the files it builds are the same

RESULTS = os.path.join(HERE, "results")
N_ATOMS = bench_scale.N_ATOMS
POS = bench_scale.DSET
#: The layouts, as ``bench_scale`` builds them
LAYOUTS = ("c100", "c1", "contig", "gz100")
#: name -> (the read of the h5md engine's position variable, the floor's of its h5py dataset)
READS: dict[str, tuple[Any, Any]] = {
    "one atom, all frames": (lambda v: v.isel(atom=100).values, lambda d: d[:, 100]),
    "every 10th frame": (lambda v: v.isel(time=slice(None, None, 10)).values,
                         lambda d: np.concatenate([d[a:a + 1000][::10].copy()
                                                   for a in range(0, d.shape[0], 1000)])),
    "100 frames one by one": (lambda v: [v[i].values for i in _loop(v.shape[0])],
                              lambda d: [d[i] for i in _loop(d.shape[0])]),
}


def _loop(n_frames: int) -> range:
    """The frames a loop reads one by one: 100 from a quarter of the way in."""
    return range(n_frames // 4, min(n_frames, n_frames // 4 + 100))


def _hwm_kib() -> int:
    """This process's peak resident memory (KiB): ``VmHWM``, which, unlike ``ru_maxrss``,
    starts afresh at exec (a child's ru_maxrss starts at its parent's peak)."""
    with open("/proc/self/status") as fh:
        return next(int(line.split()[1]) for line in fh if line.startswith("VmHWM:"))


def _child(path: str, read: str, how: str) -> None:
    """In a fresh process: the peak memory one read adds (KiB), printed as JSON."""
    if how == "h5mdx":
        import xarray as xr

        ds = xr.open_dataset(path, engine="h5md")
        var = ds.position
        before = _hwm_kib()
        out = READS[read][0](var)
    else:
        f = h5py.File(path, "r")
        d = f[POS]
        before = _hwm_kib()
        out = READS[read][1](d)
    after = _hwm_kib()
    nbytes = sum(a.nbytes for a in out) if isinstance(out, list) else out.nbytes
    print(json.dumps({"kib": after - before, "result_kib": nbytes // 1024}))


def peak(path: str, read: str, how: str) -> dict[str, int]:
    res = subprocess.run([sys.executable, __file__, "--child", path, read, how],
                         capture_output=True, text=True, check=True)
    return json.loads(res.stdout.strip().splitlines()[-1])


def timed(path: str, read: str, repeats: int) -> dict[str, Any]:
    import xarray as xr

    ours, floor = READS[read]
    h5, x = [], []
    with h5py.File(path, "r") as f, xr.open_dataset(path, engine="h5md") as ds:
        d = f[POS]
        np.testing.assert_array_equal(ours(ds.position), floor(d))  # and warm
        for r in range(repeats):
            for which in (("floor", "h5mdx") if r % 2 == 0 else ("h5mdx", "floor")):
                t = time.perf_counter()
                if which == "floor":
                    floor(d)
                    h5.append(time.perf_counter() - t)
                else:
                    ours(ds.position)
                    x.append(time.perf_counter() - t)
    ratios = [a / b for a, b in zip(x, h5, strict=True)]
    return {"floor_ms": 1e3 * statistics.median(h5), "h5mdx_ms": 1e3 * statistics.median(x),
            "ratio": statistics.median(ratios)}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data", required=True, help="directory of the trajectories (kept)")
    p.add_argument("--frames", type=int, default=20000)
    p.add_argument("--layouts", default=",".join(LAYOUTS))
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--name", default="2core", help="results: everyday-NAME.{json,md}")
    args = p.parse_args(argv)
    os.makedirs(args.data, exist_ok=True)
    rows = []
    for layout in args.layouts.split(","):
        path = bench_scale.build(os.path.join(args.data, f"scale-{layout}-{args.frames}.h5md"),
                                 args.frames, layout)
        for read in READS:
            row = {"layout": layout, "read": read, **timed(path, read, args.repeats)}
            mem = {how: peak(path, read, how) for how in ("floor", "h5mdx")}
            row.update(floor_peak_mib=mem["floor"]["kib"] / 1024,
                       h5mdx_peak_mib=mem["h5mdx"]["kib"] / 1024,
                       result_mib=mem["h5mdx"]["result_kib"] / 1024)
            rows.append(row)
            print(json.dumps(row), flush=True)
    import h5mdx
    from h5mdx._replace import replacing

    meta = {"machine": platform.node(), "cpus": os.cpu_count(), "frames": args.frames,
            "h5py": h5py.__version__, "hdf5": h5py.version.hdf5_version,
            "h5mdx": h5mdx.__version__, "repeats": args.repeats}
    os.makedirs(RESULTS, exist_ok=True)
    stem = os.path.join(RESULTS, f"everyday-{args.name}")
    # each beside its file, then renamed over it: a run stopped while writing (a full
    # disk, Ctrl-C) left the earlier results cut short, which the docs then included
    with replacing(stem + ".json") as tmp, open(tmp, "w") as fh:
        json.dump({"meta": meta, "rows": rows}, fh, indent=2)
    lines = [f"# Everyday reads against the h5py floor ({args.frames} frames x {N_ATOMS} "
             "atoms)", "",
             f"{meta['cpus']} CPUs, h5py {meta['h5py']}, HDF5 {meta['hdf5']}, h5mdx "
             f"{meta['h5mdx']}; medians of {args.repeats} paired rounds; peak memory: what "
             "a fresh process adds for the read (VmHWM).", "",
             "| layout | read | h5py ms | h5mdx ms | h5mdx / h5py | h5py MiB | h5mdx MiB "
             "| result MiB |", "|---|---|---:|---:|---:|---:|---:|---:|"]
    lines += [f"| {r['layout']} | {r['read']} | {r['floor_ms']:.1f} | {r['h5mdx_ms']:.1f} | "
              f"{r['ratio']:.2f} | {r['floor_peak_mib']:.1f} | {r['h5mdx_peak_mib']:.1f} | "
              f"{r['result_mib']:.2f} |" for r in rows]
    with replacing(stem + ".md") as tmp:
        tmp.write_text("\n".join(lines) + "\n")
    print(f"results: {stem}.json/.md")
    return 0


if __name__ == "__main__":
    if len(sys.argv) == 5 and sys.argv[1] == "--child":
        _child(*sys.argv[2:])
    else:
        sys.exit(main())
