"""``h5mdx rmsd`` as a user runs it: one command, per scheduler, against the read floor.

Each run is a fresh ``python -m h5mdx rmsd FILE --scheduler S --no-progress`` (the
interpreter started, h5mdx imported, the file opened, a local cluster started where the
scheduler has one, the RMSD computed and written): ``wall`` is what the user waits for,
``compute`` the seconds the command itself reports for the RMSD (its ``rmsd: ... in X s``
line: warm-up of the kernel included, the start of the interpreter and of a cluster not).
The N-process h5py read floor (:func:`h5mdx.floor.floor_reader`, N = the cores) is
timed in the same rounds; ``auto`` is the default (``--scheduler auto``), and the table
says what it chose.

Schedulers: ``threads`` (N threads of one process), ``distributed`` (a local cluster of N
single-threaded worker processes) and ``auto``. C-alpha runs select ``name CA`` with the
adk PSF of MDAnalysisTests where it is installed (the files have its 3341 atoms); else
only all-atom runs.

    python benchmarks/bench_cli.py --frames 30000 --repeats 5 --tag=-2core
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

import bench_scale as bs

#: Schedulers timed, in the order of the table.
SCHEDULERS = ("threads", "distributed", "auto")
#: The command's own report of the RMSD's seconds, and of the scheduler it ran on.
_DONE = re.compile(r"rmsd: (\d+) frames in ([0-9.]+) s .* on (\S+) with (\d+) workers")


def adk_psf() -> str | None:
    """The adk PSF of MDAnalysisTests (3341 atoms, as the benchmark's files), or None."""
    try:
        from MDAnalysisTests.datafiles import PSF
    except ImportError:
        return None
    return str(PSF)


def command(path: str, scheduler: str, psf: str | None) -> list[str]:
    """The ``h5mdx rmsd`` command line of one run (C-alpha where ``psf`` is given)."""
    cmd = [sys.executable, "-m", "h5mdx", "rmsd", path, "--no-progress",
           "--scheduler", scheduler]
    return cmd + (["--topology", psf, "--select", "name CA"] if psf else [])


def run_once(cmd: list[str]) -> dict[str, Any]:
    """Run one command: its wall time, the RMSD's seconds it reports and where it ran."""
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    wall = time.perf_counter() - t0
    done = _DONE.search(proc.stdout)
    if proc.returncode or done is None:
        raise RuntimeError(f"{' '.join(cmd)} failed (rc {proc.returncode}):\n"
                           f"{proc.stdout}\n{proc.stderr}")
    return {"wall": wall, "compute": float(done.group(2)), "frames": int(done.group(1)),
            "ran_on": done.group(3), "workers": int(done.group(4))}


def _timer(into: list[dict[str, Any]], cmd: list[str]) -> Callable[[], float]:
    """A timer of ``cmd`` for :func:`bench_scale.interleaved` that keeps each run in ``into``."""
    def one() -> float:
        into.append(run_once(cmd))
        return into[-1]["wall"]
    return one


def _floor_timer(into: list[float], floor: Callable[[], tuple[float, int]]
                 ) -> Callable[[], float]:
    """A timer of the read floor that keeps each time in ``into``."""
    def one() -> float:
        into.append(floor()[0])
        return into[-1]
    return one


def layout_rows(path: str, layout: str, cores: int, selections: dict[str, str | None],
                repeats: int) -> list[dict[str, Any]]:
    """Medians of ``repeats`` interleaved rounds of every scheduler and the floor."""
    from h5mdx.floor import floor_reader

    rows = []
    with floor_reader(path, cores) as floor:
        for sel, psf in selections.items():
            runs: dict[str, list[dict[str, Any]]] = {s: [] for s in SCHEDULERS}
            floors: list[float] = []

            timers = {"floor": _floor_timer(floors, floor),
                      **{s: _timer(runs[s], command(path, s, psf)) for s in SCHEDULERS}}
            bs.interleaved(timers, repeats, rotate=True)
            del floors[0]  # interleaved's warm-up round
            for s in SCHEDULERS:
                del runs[s][0]
            floor_s = statistics.median(floors)
            for s in SCHEDULERS:
                rs = runs[s]
                row = {"layout": layout, "selection": sel, "scheduler": s,
                       "ran_on": sorted({r["ran_on"] for r in rs}),
                       "workers": rs[0]["workers"], "frames": rs[0]["frames"],
                       "floor_s": floor_s,
                       "wall_s": statistics.median(r["wall"] for r in rs),
                       "compute_s": statistics.median(r["compute"] for r in rs),
                       "compute_vs_floor": statistics.median(
                           f / r["compute"] for f, r in zip(floors, rs, strict=True)),
                       "walls": [r["wall"] for r in rs], "computes": [r["compute"] for r in rs],
                       "floors": list(floors)}
                rows.append(row)
                print(f"{layout:6s} {sel:3s} {s:11s} on {'/'.join(row['ran_on']):11s} "
                      f"wall {row['wall_s']:6.2f} s, compute {row['compute_s']:6.3f} s "
                      f"(x{row['compute_vs_floor']:.2f} the floor, {floor_s:.3f} s)", flush=True)
    return rows


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--frames", type=int, default=30_000)
    p.add_argument("--layouts", default="contig,c100,c1")
    p.add_argument("--selections", default="all,ca")
    bs.run_arguments(p, repeats=5)
    args = p.parse_args()
    psf = adk_psf()
    selections = {s: psf if s == "ca" else None for s in args.selections.split(",")
                  if s != "ca" or psf}
    from h5mdx._machine import usable_cpus

    rows = []
    for layout in args.layouts.split(","):
        path = bs.build(os.path.join(args.data, f"scale-{layout}-{args.frames}.h5md"),
                        args.frames, layout)
        rows += layout_rows(path, layout, usable_cpus(), selections, args.repeats)
    results = {**bs.machine(), "frames": args.frames, "repeats": args.repeats, "rows": rows}
    bs.save_results("cli", args.tag, results, markdown)
    return 0


def markdown(results: dict[str, Any]) -> str:
    rows = results["rows"]
    lines = ["# `h5mdx rmsd` as a user runs it, per scheduler", "",
             f"{results['frames']:,} frames x 3341 atoms, warm page cache; "
             f"{bs.cores_text(results)}; each run a fresh `python -m h5mdx rmsd FILE "
             "--no-progress --scheduler S` (C-alpha: `--topology adk.psf --select "
             "\"name CA\"`), workers = the cores; medians of "
             f"{results['repeats']} interleaved rounds, each also timing the N-process "
             f"h5py read floor. Versions: {bs.versions_text(results)}.", "",
             "`wall`: the command, start to end (interpreter, imports, cluster start). "
             "`compute`: the RMSD's seconds as the command reports them. `x floor`: the "
             "floor's seconds over `compute` (median of the rounds' ratios). `auto` is "
             "the default; `ran on` is what it chose.", "",
             "| layout | atoms | scheduler | ran on | wall (s) | compute (s) | x floor | "
             "floor (s) |", "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['layout']} | {r['selection']} | {r['scheduler']} | "
                     f"{'/'.join(r['ran_on'])} | {r['wall_s']:.2f} | {r['compute_s']:.3f} | "
                     f"{r['compute_vs_floor']:.2f} | {r['floor_s']:.3f} |")
    pairs = {(r["layout"], r["selection"]): {} for r in rows}
    for r in rows:
        pairs[(r["layout"], r["selection"])][r["scheduler"]] = r
    lines += ["", "threads against distributed (ratios of medians):", "",
              "| layout | atoms | wall | compute |", "|---|---|---|---|"]
    for (layout, sel), by in pairs.items():
        if "threads" in by and "distributed" in by:
            t, d = by["threads"], by["distributed"]
            lines.append(f"| {layout} | {sel} | {t['wall_s'] / d['wall_s']:.2f} | "
                         f"{t['compute_s'] / d['compute_s']:.2f} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
