"""What finding the chunks costs a process: the chunk B-tree, HDF5's whole index, or none.

A direct read needs each chunk's place in the file (``h5mdx.format.chunk_index``). For a
trajectory of one-frame chunks (MDAnalysis' default; ``--frames`` frames of the ``c1``
layout of ``bench_scale.py``), in new processes, this times:

- ``locate``: the chunks of all frames and of one ``--parts``-th of them, through the
  chunk B-tree (``ChunkTree.arrays``, as reads use it; its root found with pyfive), through HDF5's pass over
  the whole index (``chunk_iter``, HDF5 1.12.3 and later), and HDF5's look-up of one
  chunk (``get_chunk_info_by_coord``, per chunk, over 200 chunks of the part); and
  importing pyfive, once per process;
- ``first task``: what a worker that computes the RMSD of one ``--parts``-th of the frames
  (the middle one) spends on it, in a process that has imported everything and read
  another file first: with the tree (the default), with HDF5's index (pyfive hidden; where
  HDF5 has no ``chunk_iter``, that is h5py's reads), and reading through h5py
  (``H5MDX_DIRECT_READ=0``).

Medians of ``--repeats`` new processes. Results: ``benchmarks/results/index{--tag}.{json,md}``.
Run: ``.venv/bin/python benchmarks/bench_index.py``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import bench_scale as bs  # noqa: E402 - the benchmark next to this one

DATASET = "particles/trajectory/position/value"

LOCATE = r"""
import json, sys, time
import h5py, numpy, numcodecs
from h5mdx.format import chunk_index
path, name, parts = sys.argv[1], sys.argv[2], int(sys.argv[3])
out = {}
t = time.perf_counter(); import pyfive; out["import pyfive"] = time.perf_counter() - t
with h5py.File(path, "r") as f:
    d = f[name]
    n = d.shape[0]
    lo, hi = (parts // 2) * n // parts, (parts // 2 + 1) * n // parts
    t = time.perf_counter(); tree = chunk_index.chunk_tree(d)
    out["tree: root and check"] = time.perf_counter() - t
    t = time.perf_counter(); every = tree.arrays(0, n); out["tree: all"] = time.perf_counter() - t
    t = time.perf_counter(); part = tree.arrays(lo, hi); out["tree: part"] = time.perf_counter() - t
    assert len(every[0]) == n and len(part[0]) == hi - lo
    every = tree.rows(0, n)
    if hasattr(d.id, "chunk_iter"):
        t = time.perf_counter(); listed = chunk_index.index_all_chunks(d)
        out["chunk_iter: all"] = time.perf_counter() - t
        assert listed == every
    coords = [(i, 0, 0) for i in range(lo, hi, max(1, (hi - lo) // 200))]
    t = time.perf_counter(); one = chunk_index.locate_chunks(d, coords)
    out["HDF5 one by one: per chunk"] = (time.perf_counter() - t) / len(coords)
    assert all(one[c] == every[c] for c in coords)
print(json.dumps(out))
"""

FIRST_TASK = r"""
import json, sys, time
way, path, warm, parts = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
if way == "HDF5 index":
    sys.modules["pyfive"] = None
import dask, dask.array, distributed, h5py, numcodecs, xarray as xr
import h5mdx
from h5mdx.analysis.qcp import warm_up

def rmsd(p, part=None):
    with xr.open_dataset(p, engine="h5md") as ds:
        n = ds.sizes["time"]
        lo, hi = (0, n) if part is None else (part * n // parts, (part + 1) * n // parts)
        with dask.config.set(scheduler="synchronous"):
            return h5mdx.rmsd(ds.position[lo:hi]).values

warm_up()
rmsd(warm)  # another file: imports, the kernel, the engine's first open
t = time.perf_counter()
frames = len(rmsd(path, parts // 2))
print(json.dumps({"seconds": time.perf_counter() - t, "frames": frames}))
"""

WAYS = {"tree": "1", "HDF5 index": "1", "h5py": "0"}


def _child(script: str, *argv: str, env: dict[str, str] | None = None) -> dict[str, Any]:
    out = subprocess.run([sys.executable, "-c", script, *argv], capture_output=True, text=True,
                         check=True, env={**os.environ, **(env or {})})
    return json.loads(out.stdout.strip().splitlines()[-1])


def measure(args: argparse.Namespace) -> dict[str, Any]:
    path = bs.build(os.path.join(args.data, f"scale-c1-{args.frames}.h5md"), args.frames, "c1")
    warm = bs.build(os.path.join(args.data, "scale-c1-200.h5md"), 200, "c1")
    runs = [_child(LOCATE, path, DATASET, str(args.parts)) for _ in range(args.repeats)]
    locate = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
    first: dict[str, dict[str, Any]] = {}
    for _ in range(args.repeats):  # the ways in turn, a new process each
        for parts in (args.parts, 1):
            for way, direct in WAYS.items():
                r = _child(FIRST_TASK, way, path, warm, str(parts),
                           env={"H5MDX_DIRECT_READ": direct})
                first.setdefault(f"{way}, 1/{parts}", {
                    "way": way, "parts": parts, "frames": r["frames"], "times": []
                })["times"].append(r["seconds"])
    for name, r in first.items():
        r["seconds"] = statistics.median(r["times"])
        print(f"first task, {name:16s} {r['seconds'] * 1e3:7.1f} ms for {r['frames']} frames",
              flush=True)
    return {"locate": locate, "first_task": first}


def markdown(results: dict[str, Any]) -> str:
    n, parts = results["frames"], results["parts"]
    lines = ["# What finding the chunks costs a process", "",
             f"{n:,} frames x {bs.N_ATOMS} atoms in one-frame chunks ({n:,} chunks), warm page "
             f"cache, {bs.cores_text(results)}; medians of {results['repeats']} new processes. "
             f"Versions: {bs.versions_text(results)}.", "",
             f"## Locating the chunks (all {n:,}, or a part: 1/{parts})", "",
             "| what | ms |", "|---|---|"]
    for what, seconds in results["locate"].items():
        if what.endswith("per chunk"):
            lines.append(f"| {what} | {seconds * 1e3:.3f} |")
        else:
            lines.append(f"| {what} | {seconds * 1e3:.1f} |")
    lines += ["", f"## A first task: the RMSD of 1/{parts} of the frames (a worker's share), "
              "and of all of them", "",
              "In a new process that has imported everything and read another file first. "
              "`HDF5 index`: pyfive hidden, so HDF5's pass over the whole index, where this "
              "HDF5 has one (1.12.3 and later); otherwise h5py's reads.", "",
              "| chunks found by | frames | ms | frames/s |", "|---|---|---|---|"]
    for r in results["first_task"].values():
        lines.append(f"| {r['way']} | {r['frames']:,} (1/{r['parts']}) | "
                     f"{r['seconds'] * 1e3:.1f} | {r['frames'] / r['seconds']:,.0f} |")
    return "\n".join(lines) + "\n"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--frames", type=int, default=30000)
    p.add_argument("--parts", type=int, default=16)
    bs.run_arguments(p, repeats=5)
    args = p.parse_args()
    results = {**bs.machine(), "frames": args.frames, "parts": args.parts,
               "repeats": args.repeats, **measure(args)}
    bs.save_results("index", args.tag, results, markdown)
    return 0


if __name__ == "__main__":
    sys.exit(main())
