"""One worker's reads of whole frames: runs found in the chunks' offset table, or chunk by chunk.

A direct read of whole frames (``h5mdx.format.direct``) reads each run of chunks that lie
end to end on disk with one ``pread``. It finds the runs in a table of the chunks'
offsets (``DirectReader._starts``); before, it looked each chunk up in the index and
merged the runs in a Python loop, ~1 µs per chunk, all of it holding the GIL. A 4 MiB
read of one-frame chunks spans ~100 chunks.

For each layout (chunks of 100 frames and of 1 frame, ``--frames`` frames of the
``bench_scale.py`` layouts) this measures, in one process:

- a task's loop (4 MiB reads, each reduced by the numba QCP kernel, all atoms and
  C-alpha) with the table and without, in interleaved rounds (medians of ``--repeats``);
- per 4 MiB read (without the kernel): the time inside ``os.preadv`` (the GIL released)
  and the rest, which holds the GIL (Python; after a 4 MiB copy its code and data are
  out of the CPU caches, so this is ~3x what the same calls cost with a no-op read).
  Threads whose tasks hold the GIL for a fraction ``f`` of their time keep it busy from
  ``1 / f`` threads on.

Results: ``benchmarks/results/runs{--tag}.{json,md}``.
Run: ``.venv/bin/python benchmarks/bench_runs.py``.
"""

from __future__ import annotations

import argparse
import functools
import os
import statistics
import sys
import time
from typing import Any

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import bench_scale as bs  # noqa: E402 - the benchmark next to this one

STEP = (4 << 20) // (bs.N_ATOMS * 12)  # whole frames in a task's 4 MiB read


def _reader(path: str) -> tuple[Any, Any]:
    """A task's bound reader of the positions, and their DirectReader, every chunk located."""
    import xarray as xr

    from h5mdx.engine.frames import frame_reader
    from h5mdx.format import direct, reader_cache

    ds = xr.open_dataset(path, engine="h5md")
    frames = frame_reader(ds.position.variable)
    frames.warm()  # planned
    read = frames.bind()  # as a task reads: the reader found once
    reader = reader_cache.cached(path, ds.position.encoding["h5md_path"] + "/value")
    assert isinstance(reader, direct.DirectReader) and reader._starts is not None
    reader.missing(tuple(slice(0, n) for n in reader.shape))  # every chunk located
    return read, reader


def _loop(read: Any, n: int, qcp: Any = None) -> float:
    from h5mdx.format.scratch import scratch_buffers

    t0 = time.perf_counter()
    for a in range(0, n, STEP):
        with scratch_buffers():
            frames = read(a, min(a + STEP, n))
            if qcp is not None:
                qcp(frames)
    return time.perf_counter() - t0


def _with_table(reader: Any, table: np.ndarray | None, read: Any, n: int, qcp: Any) -> float:
    """:func:`_loop` with the reader's offset table set to ``table`` (None: chunk by chunk)."""
    reader._starts = table
    return _loop(read, n, qcp)


def _gil_held(read: Any, n: int, repeats: int) -> dict[str, float]:
    """µs per read: in total, inside ``os.preadv``, and the rest (best of ``repeats``)."""
    real, inside = os.preadv, [0.0]

    def timed(fd: int, buffers: Any, offset: int) -> int:
        t0 = time.perf_counter()
        try:
            return real(fd, buffers, offset)
        finally:
            inside[0] += time.perf_counter() - t0

    reads = len(range(0, n, STEP))
    best = None
    for _ in range(repeats):
        inside[0] = 0.0
        os.preadv = timed
        try:
            total = _loop(read, n)
        finally:
            os.preadv = real
        if best is None or total < best[0]:
            best = (total, inside[0])
    total, preadv = best
    return {"total_us": total / reads * 1e6, "preadv_us": preadv / reads * 1e6,
            "gil_us": (total - preadv) / reads * 1e6}


def measure(args: argparse.Namespace) -> list[dict[str, Any]]:
    from h5mdx.analysis.qcp import prepare

    rows = []
    for layout in args.layouts:
        path = bs.build(os.path.join(args.data, f"scale-{layout}-{args.frames}.h5md"),
                        args.frames, layout)
        read, reader = _reader(path)
        table = reader._starts
        ref = read(0, 1)[0].astype(np.float64)
        for sel_name, atoms in (("all", None), ("ca", bs.ca_indices())):
            qcp = prepare(ref if atoms is None else ref[atoms], atoms=atoms)
            times = bs.interleaved({on: functools.partial(
                _with_table, reader, table if on else None, read, args.frames, qcp)
                for on in (True, False)}, args.repeats)
            reader._starts = table
            row = {"layout": layout, "select": sel_name}
            for on in (True, False):
                row["table" if on else "chunk by chunk"] = args.frames / statistics.median(
                    times[on])
            rows.append(row)
            print(f"{layout:6s} {sel_name:3s} table {row['table']:10,.0f}  chunk by chunk "
                  f"{row['chunk by chunk']:10,.0f} frames/s", flush=True)
        for on in (True, False):
            reader._starts = table if on else None
            gil = _gil_held(read, args.frames, args.repeats)
            rows.append({"layout": layout, "read": "table" if on else "chunk by chunk", **gil})
            print(f"{layout:6s} read ({'table' if on else 'chunk by chunk'}): "
                  f"{gil['gil_us']:.1f} of {gil['total_us']:.1f} µs holding the GIL", flush=True)
        reader._starts = table
    return rows


def markdown(results: dict[str, Any]) -> str:
    rows = results["rows"]
    lines = ["# Reads of whole frames: runs from the offset table, or chunk by chunk", "",
             f"{results['frames']:,} frames x {bs.N_ATOMS} atoms, {STEP} frames (4 MiB) per "
             f"read, warm page cache, one process; medians of {results['repeats']} interleaved "
             f"rounds. Versions: {bs.versions_text(results)}.", "",
             "## A task's loop (read, then the numba kernel): frames/s", "",
             "| layout | atoms | table | chunk by chunk | ratio |", "|---|---|---|---|---|"]
    for r in rows:
        if "select" in r:
            lines.append(f"| {r['layout']} | {r['select']} | {r['table']:,.0f} | "
                         f"{r['chunk by chunk']:,.0f} | {r['table'] / r['chunk by chunk']:.2f} |")
    kernel = {r["layout"]: r for r in rows if r.get("select") == "ca"}
    lines += ["", "## Per 4 MiB read: µs holding the GIL", "",
              "`GIL share`: of a C-alpha task's time per read (read and kernel) at this "
              "single thread's speed; `threads`: how many such threads keep the GIL busy "
              "(1 / share). With more threads each read is slower (they share the memory "
              "bandwidth), so the share of each falls: at the 16-core read floor of the issue "
              "(~30,000 frames/s per process) a 4 MiB read takes ~3.4 ms.", "",
              "| layout | read | total µs | in preadv | holding the GIL | GIL share | threads |",
              "|---|---|---|---|---|---|---|"]
    for r in rows:
        if "read" in r:
            per_read = STEP / kernel[r["layout"]][r["read"]] * 1e6
            share = r["gil_us"] / per_read
            lines.append(f"| {r['layout']} | {r['read']} | {r['total_us']:.0f} | "
                         f"{r['preadv_us']:.0f} | {r['gil_us']:.1f} | {share:.1%} | "
                         f"{1 / share:.0f} |")
    return "\n".join(lines) + "\n"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--frames", type=int, default=30000)
    p.add_argument("--layouts", default="c100,c1")
    bs.run_arguments(p, repeats=7)
    args = p.parse_args()
    args.layouts = args.layouts.split(",")
    results = {**bs.machine(), "frames": args.frames, "repeats": args.repeats,
               "rows": measure(args)}
    bs.save_results("runs", args.tag, results, markdown)
    return 0


if __name__ == "__main__":
    sys.exit(main())
