"""RMSD scaling against the N-process read floor, 1..N cores, in one run.

Builds (once, cached under ``--data``) an adk-sized trajectory of ``--frames``
frames (default 100,000 x 3341 atoms, float32, ~4 GB) in the layouts asked for:
``c100`` (chunks of 100 whole frames), ``c1`` (one frame per chunk, MDAnalysis'
default) and ``contig`` (contiguous); and, asked for by name, ``gz100`` (deflate level 1
after the byte shuffle) and ``lzf100`` (LZF), compressed chunks of 100 frames. The coordinates are synthetic (a seeded
random structure with small per-frame motion) so that the benchmark runs on a
bare machine with only numpy, h5py, dask, distributed, xarray, numba and h5mdx;
atoms are selected by indices (214 "C-alpha" atoms, every ~16th atom).

For every layout and N in ``--workers`` (default 1, 2, 4, 8, 16 up to the cores):

1. the read floor: N processes each read 1/N of the frames (a slab of whole chunks) with
   plain h5py, ~4 MiB of whole chunks at a time into one buffer each keeps
   (:func:`h5mdx.floor.floor_reader`, the floor ``h5mdx example`` reports; one call
   into a new array would time the kernel's page faults too: the breakdown's
   ``h5py one call, new array``);
2. h5mdx: ``h5mdx.rmsd(ds.position, select=indices)`` computed on each
   scheduler of ``--schedulers`` (``processes``: dask's process pool,
   ``threads``: dask's threaded scheduler, ``distributed``: a LocalCluster of N
   single-threaded worker processes), for each open mode of ``--opens``
   (``lazy``: ``xr.open_dataset(...)``, ``chunks``: ``chunks={}``) and each
   selection of ``--selections`` (``ca``, ``all``);
3. the first pass: one RMSD in a new process that has not read the file before (the
   chunk index not yet known there), with imports and the kernel loaded first.

Floor and h5mdx are measured in the same rounds (paired): at each N the floor's reader
processes and every scheduler are started together, and after one warm-up run of each,
every round times the floor once and every scheduler x open mode x selection once, the
order rotating from round to round. A shared machine's speed moves by 2x within an hour,
so a ratio between figures taken minutes apart says more of the machine than of h5mdx;
each h5mdx run is instead divided by the floor read of its own round, and ``vs floor`` is
the median of those ratios (the first pass likewise, each run after a floor read).
Reported: frames/s (medians of ``--repeats`` rounds; the floor's best too), the ratio to the
floor at the same N, S(N) and E(N) against the floor at N=1 and against h5mdx at N=1; and
the peak RSS of one worker on a trajectory and on one 4x longer (``--rss-frames``);
and, at the end, the runs judged against issue 14's targets (``TARGET``, 0.8x the floor at
the same N): one worker on every scheduler, ``distributed`` at every N, ``threads`` at the
largest N, with the runs below the bar listed lowest first.

Results: ``benchmarks/results/scale.json``, ``scale.md`` and ``scale.png``
(``--tag`` appends a suffix, e.g. the machine). Run:
``.venv/bin/python benchmarks/bench_scale.py`` (``--quick`` for a smoke run).
"""

from __future__ import annotations

import argparse
import concurrent.futures as cf
import contextlib
import json
import multiprocessing as mp
import os
import platform
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from typing import Any

import h5py
import numpy as np

from h5mdx._machine import cpu_description, cpu_facts

HERE = os.path.dirname(os.path.abspath(__file__))
#: Where results go: ``H5MDX_BENCH_RESULTS`` where set (``device.sh`` sets it to the device
#: tool's ``$OUT``, so that what a run wrote comes back even when its time runs out).
RESULTS = os.environ.get("H5MDX_BENCH_RESULTS") or os.path.join(HERE, "results")
N_ATOMS = 3341
#: Issue 14's bar: h5mdx at >= this fraction of the read floor at the same N.
TARGET = 0.8
N_TEMPLATES = 64
DSET = "particles/trajectory/position/value"
CHUNKS = {"c100": lambda n: (100, n, 3), "c1": lambda n: (1, n, 3), "contig": lambda n: None,
          "gz100": lambda n: (100, n, 3), "lzf100": lambda n: (100, n, 3)}
#: Filters of the compressed layouts (h5py's own: no plugin needed): deflate at level 1
#: after the byte shuffle, and LZF, both on chunks of 100 frames.
FILTERS: dict[str, dict[str, Any]] = {
    "gz100": {"compression": "gzip", "compression_opts": 1, "shuffle": True},
    "lzf100": {"compression": "lzf"},
}


# ------------------------------------------------------------------------------- data
def ca_indices(n_atoms: int = N_ATOMS) -> np.ndarray:
    """214 atom indices spread over the structure, like adk's C-alpha atoms."""
    return np.unique(np.linspace(1, n_atoms - 2, 214).astype(np.int64))


def templates(n_atoms: int = N_ATOMS, seed: int = 42) -> np.ndarray:
    """``N_TEMPLATES`` frames: a random compact structure with small deterministic motion."""
    rng = np.random.default_rng(seed)
    base = np.cumsum(rng.normal(scale=1.5, size=(n_atoms, 3)), axis=0)
    base -= base.mean(axis=0)
    motion = rng.normal(scale=0.6, size=(N_TEMPLATES, n_atoms, 3))
    return (base[None] + motion).astype(np.float32)


def build(path: str, n_frames: int, layout: str) -> str:
    """Write (once) an H5MD file of ``n_frames`` frames in ``layout``; atomic rename."""
    if os.path.exists(path):
        with h5py.File(path, "r") as f:
            complete = f[DSET].shape[0] == n_frames
            has_box = "particles/trajectory/box" in f
        if complete and not has_box:  # a file of an older build: give it the box H5MD asks
            with h5py.File(path, "r+") as f:
                f.create_group("particles/trajectory/box").attrs.update(
                    {"dimension": 3, "boundary": ["none"] * 3})
        if complete:
            return path
    os.makedirs(os.path.dirname(path), exist_ok=True)
    frames = templates()
    tmp = path + ".part"
    with h5py.File(tmp, "w") as f:
        h = f.create_group("h5md")
        h.attrs["version"] = np.array([1, 1])
        h.create_group("author").attrs["name"] = "bench_scale"
        h.create_group("creator").attrs.update({"name": "bench_scale", "version": "1"})
        f.create_group("particles/trajectory/box").attrs.update(
            {"dimension": 3, "boundary": ["none"] * 3})
        g = f.create_group("particles/trajectory/position")
        v = g.create_dataset("value", shape=(n_frames, N_ATOMS, 3), dtype=np.float32,
                             chunks=CHUNKS[layout](N_ATOMS), **FILTERS.get(layout, {}))
        v.attrs["unit"] = "Angstrom"
        step = 1000 if layout != "c1" else 100
        for a in range(0, n_frames, step):
            b = min(n_frames, a + step)
            idx = np.arange(a, b) % N_TEMPLATES
            v[a:b] = frames[idx]
        g.create_dataset("step", data=np.arange(n_frames))
        t = g.create_dataset("time", data=np.arange(n_frames, dtype=np.float64))
        t.attrs["unit"] = "ps"
    os.replace(tmp, path)
    return path


def block_frames(path: str) -> int:
    from h5mdx.engine.chunking import DEFAULT_TARGET_MIB, time_block

    with h5py.File(path, "r") as f:
        d = f[DSET]
        return time_block(d.shape, d.dtype.itemsize, d.chunks, DEFAULT_TARGET_MIB)


# ---------------------------------------------------------------------------- h5mdx
def _open(path: str, mode: str):
    import xarray as xr

    return xr.open_dataset(path, engine="h5md", chunks={} if mode == "chunks" else None)


def h5mdx_run(path: str, mode: str, select: np.ndarray | None) -> Callable[[], Any]:
    """A function computing the RMSD on the active dask scheduler."""
    import h5mdx

    def run() -> np.ndarray:
        with _open(path, mode) as ds:
            # .compute(), as a user would: the RMSD and its coordinates
            return h5mdx.rmsd(ds.position, select=select).compute().values

    return run


def interleaved(timers: dict[Any, Callable[[], float]], repeats: int,
                rotate: bool = False) -> dict[Any, list[float]]:
    """Seconds of each timer in each round: one warm-up each, then ``repeats`` rounds of all.

    A round runs every timer once, so a slow spell of a shared machine falls on all of
    them alike instead of on whichever ran then. ``rotate``: round ``r`` starts at the
    ``r``-th timer, so that no timer always runs right after the same other one.
    """
    for timer in timers.values():
        timer()  # warm-up
    keys = list(timers)
    times: dict[Any, list[float]] = {key: [] for key in keys}
    for r in range(repeats):
        shift = r % len(keys) if rotate and keys else 0
        for key in keys[shift:] + keys[:shift]:
            times[key].append(timers[key]())
    return times


def round_ratios(reference: list[float], run: list[float]) -> list[float]:
    """Each round's speed of ``run`` relative to ``reference``: their seconds' ratios.

    Both lists come from the same rounds (:func:`interleaved`, :func:`paired_runs`), so
    each ratio compares two timings of one spell of the machine.
    """
    return [r / x for r, x in zip(reference, run, strict=True)]


def _warm_kernel() -> None:
    from h5mdx.analysis.qcp import warm_up

    warm_up()


@contextlib.contextmanager
def schedulers(names: list[str], n: int, warm: Callable[[], Any] = _warm_kernel,
               ) -> Iterator[dict[str, dict[str, Any]]]:
    """Every scheduler of ``names`` with ``n`` workers, started at once, the kernel loaded.

    Yields the ``dask.config.set`` arguments that select each one, so that runs on
    different schedulers can alternate. ``processes``: dask's process pool (spawned);
    ``threads``: dask's threaded scheduler; ``distributed``: a LocalCluster of ``n``
    single-threaded worker processes (its client not the default one). ``warm`` runs
    once in every worker before any timing (default: load h5mdx's kernel); a benchmark
    that times compiled functions of its own loads them there too, or each worker's
    first task carries their load.
    """
    configs: dict[str, dict[str, Any]] = {}
    with contextlib.ExitStack() as stack:
        for name in names:
            if name == "distributed":
                import distributed

                from h5mdx.parallel import local_cluster

                cluster = stack.enter_context(local_cluster(n))
                client = stack.enter_context(distributed.Client(cluster,
                                                                set_as_default=False))
                client.run(warm)
                configs[name] = {"scheduler": client}
            elif name == "processes":
                pool = stack.enter_context(cf.ProcessPoolExecutor(
                    n, mp_context=mp.get_context("spawn"), initializer=warm))
                configs[name] = {"scheduler": "processes", "pool": pool, "chunksize": 1}
            elif name == "threads":
                warm()
                configs[name] = {"scheduler": "threads", "num_workers": n}
            else:
                raise ValueError(f"unknown scheduler {name!r}")
        yield configs


@contextlib.contextmanager
def scheduler(name: str, n: int, warm: Callable[[], Any] = _warm_kernel) -> Iterator[None]:
    """Inside the block, dask computes on ``name`` with ``n`` workers (see :func:`schedulers`)."""
    import dask

    with schedulers([name], n, warm) as configs, dask.config.set(**configs[name]):
        yield


def _on(config: dict[str, Any], fn: Callable[[], Any]) -> Callable[[], float]:
    """A timer of ``fn`` computing on the scheduler that ``config`` selects."""
    import dask

    def timer() -> float:
        with dask.config.set(**config):
            return _timed(fn)

    return timer


def paired_runs(args: argparse.Namespace, path: str, n: int,
                frames: int) -> tuple[dict, list[dict]]:
    """The N-process read floor and every scheduler x open mode x selection, in the same rounds.

    All of them are timed once per round (the order rotating from round to round), so
    that each h5mdx run has a floor read of its own spell of the machine: a row's
    ``ratios`` are its round-by-round ratios to the floor, and ``vs floor`` is their
    median. Returns the floor's row and the h5mdx rows.
    """
    from h5mdx.floor import floor_reader

    selections = {"ca": ca_indices(), "all": None}
    with floor_reader(path, n) as read, schedulers(args.schedulers, n) as configs:
        timers: dict[Any, Callable[[], float]] = {"floor": lambda: read()[0]}
        for sched, config in configs.items():
            for mode in args.opens:
                for sel in args.selections:
                    timers[(sched, mode, sel)] = _on(
                        config, h5mdx_run(path, mode, selections[sel]))
        times = interleaved(timers, args.repeats, rotate=True)
    floor_t = times.pop("floor")
    floor = {"n": n, "seconds": statistics.median(floor_t), "times": floor_t,
             "best_seconds": min(floor_t)}
    floor["frames_per_s"] = frames / floor["seconds"]
    floor["best_frames_per_s"] = frames / floor["best_seconds"]
    print(f"    read floor  N={n:2d} {floor['frames_per_s']:12,.0f} frames/s (median; best "
          f"{floor['best_frames_per_s']:,.0f})", flush=True)
    rows = []
    for (sched, mode, sel_name), ts in times.items():
        t = statistics.median(ts)
        ratios = round_ratios(floor_t, ts)
        rows.append({"scheduler": sched, "open": mode, "select": sel_name, "n": n,
                     "seconds": t, "times": ts, "frames_per_s": frames / t,
                     "ratios": ratios})
        print(f"    {sched:11s} {mode:6s} {sel_name:3s} N={n:2d} "
              f"{frames / t:12,.0f} frames/s  {statistics.median(ratios):.2f}x the floor",
              flush=True)
    return floor, rows


def common_arguments(p: argparse.ArgumentParser, frames: int, repeats: int,
                     schedulers: str) -> None:
    """The options ``bench_scale`` and ``bench_blocks`` share."""
    cores = os.cpu_count() or 1
    p.add_argument("--frames", type=int, default=frames)
    p.add_argument("--workers", default=",".join(str(n) for n in (1, 2, 4, 8, 16)
                                                 if n <= cores))
    p.add_argument("--schedulers", default=schedulers)
    run_arguments(p, repeats)


def run_arguments(p: argparse.ArgumentParser, repeats: int) -> None:
    """``--repeats``, ``--data`` and ``--tag``: the options every benchmark here has."""
    p.add_argument("--repeats", type=int, default=repeats)
    p.add_argument("--data", default=os.path.join(HERE, "data"))
    p.add_argument("--tag", default="", help="suffix of the result files")


# ------------------------------------------------------------------- one new process
CHILD_SCRIPT = r"""
import sys, time, dask, xarray as xr, h5mdx
here, path, select, warm = sys.argv[1:5]
sys.path.insert(0, here)
from bench_scale import ca_indices
from h5mdx.analysis.qcp import warm_up

sel = ca_indices() if select == "ca" else None


def rmsd(p):
    with xr.open_dataset(p, engine="h5md") as ds:
        h5mdx.rmsd(ds.position, select=sel).values


with dask.config.set(scheduler="synchronous"):
    if warm != "-":  # imports and the kernel, not this file
        warm_up()
        rmsd(warm)
    t0 = time.perf_counter()
    rmsd(path)
    seconds = time.perf_counter() - t0
# VmHWM (this process's peak), not getrusage's ru_maxrss: Linux carries ru_maxrss over
# fork and exec, so a child of this benchmark reported the benchmark's own peak (1.7 GB
# after the grid) instead of its own (~0.3 GB)
with open("/proc/self/status") as fh:
    print(seconds, next(line.split()[1] for line in fh if line.startswith("VmHWM:")))
"""


def _child(path: str, select: str, warm: str = "-") -> tuple[float, float]:
    """One synchronous RMSD over ``path`` in a new process: its seconds and peak RSS (MiB).

    ``warm``: a file to compute on first (imports and kernel loaded, untimed), or "-".
    """
    out = subprocess.run([sys.executable, "-c", CHILD_SCRIPT, HERE, path, select, warm],
                         capture_output=True, text=True, check=True)
    seconds, kib = out.stdout.split()[-2:]
    return float(seconds), int(kib) / 1024


def first_pass(path: str, warm: str, select: str, repeats: int,
               floor: Callable[[], float]) -> tuple[list[float], list[float]]:
    """Seconds of the first RMSD over ``path`` in a new process (imports excluded), repeated.

    What a user's one-off analysis costs: the file's chunk index is not known yet in
    that process (the warm-up of :func:`interleaved` hides that cost). ``floor`` is timed
    before each of them (the pairs of :func:`paired_runs`). Returns the seconds of the
    runs and of the floor reads.
    """
    times, floors = [], []
    for _ in range(max(1, repeats)):
        floors.append(floor())
        times.append(_child(path, select, warm)[0])
    return times, floors


def peak_rss(path: str) -> float:
    """Peak RSS (MiB) of one process computing the C-alpha RMSD of ``path``."""
    return _child(path, "ca")[1]


# ----------------------------------------------------------- where one worker's time goes
def _best_rate(fn: Callable[[], Any], frames: int, repeats: int) -> float:
    fn()
    best = min(_timed(fn) for _ in range(max(1, repeats)))
    return frames / best


def _timed(fn: Callable[[], Any]) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def breakdown(path: str, repeats: int) -> dict[str, float]:
    """One process, one core: the read and the kernel of an RMSD task, each alone (frames/s).

    ``h5py reused buffer``: h5py reading a task's step (~4 MiB of whole chunks) at a time
    into one buffer (what the floor's processes do); ``h5py one call, new array``: the
    whole dataset in one call into a new array (``dataset[:]``; the page faults of a
    fresh array of that size included); ``h5mdx read``: the engine's read of the same steps as a task does it
    (direct where it applies); ``kernel all``/``kernel ca``: the numba kernel on one step of
    frames already in the CPU cache; ``bound all``/``bound ca``: what a task that reads,
    then computes, can reach: ``1 / (1 / h5mdx read + 1 / kernel)``.
    """
    import xarray as xr

    from h5mdx.analysis.plan import READ_STEP_BYTES  # as --read-step-kib set it
    from h5mdx.analysis.qcp import prepare, warm_up
    from h5mdx.engine.frames import frame_reader
    from h5mdx.format.scratch import scratch_buffers

    warm_up()
    with h5py.File(path, "r") as f:
        d = f[DSET]
        n, per = d.shape[0], (d.chunks or (1,))[0]
        step = max(per, READ_STEP_BYTES // (N_ATOMS * 3 * 4) // per * per)
        buf = np.empty((step, N_ATOMS, 3), dtype=d.dtype)

        def h5py_reused() -> None:
            for a in range(0, n, step):
                b = min(n, a + step)
                d.read_direct(buf, source_sel=np.s_[a:b], dest_sel=np.s_[0:b - a])

        def h5py_new_array() -> None:
            d.read_direct(np.empty(d.shape, dtype=d.dtype))

        rates = {"h5py reused buffer": _best_rate(h5py_reused, n, repeats),
                 "h5py one call, new array": _best_rate(h5py_new_array, n, repeats)}
        frames = d[:step]
    with xr.open_dataset(path, engine="h5md") as ds:
        var = ds.position.variable
        read = frame_reader(var)  # what a task reads through (None: xarray's indexing)

        def h5mdx_read() -> None:
            for a in range(0, n, step):
                with scratch_buffers():
                    if read is not None:
                        read(a, min(n, a + step))
                    else:
                        np.asarray(var[a:a + step].values)

        rates["h5mdx read"] = _best_rate(h5mdx_read, n, repeats)
    ca = ca_indices()
    for name, atoms in (("all", None), ("ca", ca)):
        ref = (frames[0] if atoms is None else frames[0, atoms]).astype(np.float64)
        ref -= ref.mean(axis=0)
        qcp = prepare(ref, None, True, "numba", reference_centered=True, atoms=atoms)
        rates[f"kernel {name}"] = _best_rate(lambda q=qcp: q(frames), step, 5 * repeats)
        rates[f"bound {name}"] = 1 / (1 / rates["h5mdx read"] + 1 / rates[f"kernel {name}"])
    return rates


# --------------------------------------------------------------------------- report
def versions() -> dict[str, str]:
    import dask
    import distributed
    import numba
    import xarray

    import h5mdx

    return {"python": platform.python_version(), "numpy": np.__version__,
            "h5py": h5py.__version__, "hdf5": h5py.version.hdf5_version,
            "dask": dask.__version__, "distributed": distributed.__version__,
            "xarray": xarray.__version__, "numba": numba.__version__,
            "h5mdx": h5mdx.__version__}


def derive(results: dict) -> None:
    """Add ratios to the floor and S(N), E(N) to every row (in place)."""
    for layout in results["layouts"].values():
        floor = {r["n"]: r["frames_per_s"] for r in layout["floor"]}
        base = {}
        for r in layout["h5mdx"]:
            if r["n"] == min(floor):
                base[(r["scheduler"], r["open"], r["select"])] = r["frames_per_s"]
        for r in layout["h5mdx"]:
            f = floor.get(r["n"])
            b = base.get((r["scheduler"], r["open"], r["select"]))
            # paired: the median of the round-by-round ratios (results before them: the
            # ratio of the median to the floor)
            r["vs_floor"] = (statistics.median(r["ratios"]) if r.get("ratios")
                             else r["frames_per_s"] / f if f else None)
            r["speedup"] = r["frames_per_s"] / b if b else None
            r["efficiency"] = r["speedup"] / r["n"] if b else None
            r["speedup_vs_floor1"] = r["frames_per_s"] / floor[min(floor)]
        for r in layout["floor"]:
            r["speedup"] = r["frames_per_s"] / floor[min(floor)]
            r["efficiency"] = r["speedup"] / r["n"]


def _num(x: float | None) -> str:
    """A ratio of the report; ``-`` where it has no base (no run at N=1, no floor)."""
    return "-" if x is None else f"{x:.2f}"


def targets(results: dict) -> list[dict[str, Any]]:
    """Issue 14's speed targets, judged on a run's rows (after :func:`derive`).

    1. one worker (N=1), on every scheduler and open mode, both selections;
    2. ``distributed`` at every N;
    3. ``threads`` at the largest N run (the issue asks for 16 threads).

    Each target: ``what``, the ``runs`` it covers (layout, row), how many ``meet`` it
    (``vs_floor >= TARGET``), and the ``below`` ones, lowest first.
    """
    rows = [(name, r) for name, layout in results["layouts"].items()
            for r in layout["h5mdx"] if r.get("vs_floor") is not None
            and not r["scheduler"].startswith("first pass")]
    threads = [r["n"] for _, r in rows if r["scheduler"] == "threads"]
    most = max(threads, default=0)
    picks = [
        ("1. one worker (N=1), every scheduler", lambda r: r["n"] == 1),
        ("2. distributed, every N", lambda r: r["scheduler"] == "distributed"),
        (f"3. threads at N={most}, the most run (the issue: 16)",
         lambda r: r["scheduler"] == "threads" and r["n"] == most),
    ]
    out = []
    for what, pick in picks:
        runs = [(name, r) for name, r in rows if pick(r)]
        if not runs:
            continue
        below = sorted((x for x in runs if x[1]["vs_floor"] < TARGET),
                       key=lambda x: x[1]["vs_floor"])
        out.append({"what": what, "runs": runs, "meet": len(runs) - len(below),
                    "below": below})
    return out


def _run_name(layout: str, r: dict[str, Any]) -> str:
    return f"{layout} {r['scheduler']} {r['open']} {r['select']} N={r['n']}"


def targets_markdown(results: dict) -> list[str]:
    """The section of the report that judges :func:`targets`."""
    judged = targets(results)
    if not judged:
        return []
    lines = [f"## Against issue 14's targets (>= {TARGET}x the read floor at the same N)", "",
             "| target | runs | meet it | below it, lowest first |", "|---|---|---|---|"]
    for t in judged:
        below = "; ".join(f"{_run_name(layout, r)}: {r['vs_floor']:.2f}"
                          for layout, r in t["below"]) or "none"
        lines.append(f"| {t['what']} | {len(t['runs'])} | {t['meet']} | {below} |")
    return [*lines, ""]


def markdown(results: dict) -> str:
    m = results["machine"]
    paired = any("times" in r for layout in results["layouts"].values()
                 for r in layout["floor"])
    lines = [
        "# RMSD scaling against the read floor",
        "",
        *([] if results.get("complete", True) else [
            "**Partial**: the run had not finished when this was written (it is written "
            "after every N); what follows is what it had measured.", ""]),
        f"Machine: {m['platform']}, {cores_text(m)}, {m['memory_gib']:.0f} GiB; "
        f"{results['frames']:,} frames x {N_ATOMS} atoms ({results['gb']:.2f} GB per layout), "
        f"warm page cache, medians of {results['repeats']} rounds after a warm-up. "
        f"Versions: {', '.join(f'{k} {v}' for k, v in results['versions'].items())}.",
        "",
    ]
    if paired:
        lines += [
            "Paired: at each N, every round times the N-process h5py read floor once and "
            "every h5mdx run once (order rotating), so each run has a floor read of its own "
            "spell of the machine. vs floor: the median of the round-by-round ratios of h5mdx "
            "to the floor at the same N (each floor process reads its slab with h5py, "
            "~4 MiB of whole chunks at a time into one buffer it keeps). floor row: median "
            "frames/s (best in brackets). "
            "S(N), E(N): against h5mdx at N=1; S_floor(N): against the floor's median at "
            "N=1. first pass (new process): one synchronous RMSD in a process that has not "
            "read the file before (imports and kernel loaded first), each after a floor read.",
            "",
        ]
    else:
        lines += [
            "vs floor: h5mdx frames/s (median) over the N-process h5py read floor at the "
            "same N (best of the repeats, read back to back, measured first). "
            "S(N), E(N): against h5mdx at N=1; S_floor(N): against the floor at N=1.",
            "",
        ]
    lines += read_ahead_lines(results)
    for name, layout in results["layouts"].items():
        lines += [f"## {name}", "", "| what | N | frames/s | vs floor | S(N) | E(N) | "
                  "S_floor(N) |", "|---|---|---|---|---|---|---|"]
        for r in layout["floor"]:
            best = (f" ({r['best_frames_per_s']:,.0f})" if "best_frames_per_s" in r
                    else "")
            lines.append(f"| read floor (N h5py processes) | {r['n']} | "
                         f"{r['frames_per_s']:,.0f}{best} | 1.00 | {r['speedup']:.2f} | "
                         f"{r['efficiency']:.2f} | {r['speedup']:.2f} |")
        for r in sorted(layout["h5mdx"], key=lambda r: (r["scheduler"], r["open"],
                                                         r["select"], r["n"])):
            lines.append(
                f"| h5mdx {r['scheduler']}, {r['open']}, {r['select']} | {r['n']} | "
                f"{r['frames_per_s']:,.0f} | {_num(r['vs_floor'])} | {_num(r['speedup'])} | "
                f"{_num(r['efficiency'])} | {_num(r['speedup_vs_floor1'])} |")
        lines.append("")
        if layout.get("breakdown"):
            floor1 = layout["floor"][0]["frames_per_s"]
            lines += ["One process, one core, each step alone (`breakdown` in bench_scale.py): frames/s "
                      "and the ratio to the read floor at N=1.", "",
                      "| step | frames/s | vs floor |", "|---|---|---|"]
            lines += [f"| {what} | {rate:,.0f} | {rate / floor1:.2f} |"
                      for what, rate in layout["breakdown"].items()]
            lines.append("")
    lines += targets_markdown(results)
    if results.get("rss"):
        r = results["rss"]
        lines += ["## Peak RSS of one worker", "",
                  f"{r['frames_1x']:,} frames: {r['mib_1x']:.0f} MiB; "
                  f"{r['frames_4x']:,} frames: {r['mib_4x']:.0f} MiB "
                  f"(ratio {r['mib_4x'] / r['mib_1x']:.2f}).", ""]
    return "\n".join(lines)


def read_ahead_lines(results: dict) -> list[str]:
    """What the report says of the read-ahead (nothing for results from before it)."""
    ahead = results.get("read_ahead")
    if ahead is None:
        return []
    cores = results["machine"]["cores"]
    shared = results.get("read_ahead_max_process_threads")
    if ahead == "auto":
        how = (f"on where the machine has a spare core for every task (2 N <= {cores} "
               f"cores: N <= {cores // 2} here), off above")
        if shared is not None:
            how += (f"; on threads, also off past {shared} threads (one process, one GIL), "
                    f"where each read grows instead")
    elif ahead == "0":
        how = "off (H5MDX_READ_AHEAD=0)"
    else:
        how = f"{ahead} reads ahead at every N (H5MDX_READ_AHEAD={ahead})"
    step = f"{results.get('read_step_bytes', 2**22) / 2**20:g} MiB"
    lines = [f"Read-ahead: {how}. A task that reads ahead reads its next ~{step} in a "
             "reader thread while the kernel runs on the last, so a worker then uses up to "
             "two cores, against one per floor process.", ""]
    fused = results.get("fused_read")
    if fused is not None:
        size = f"{results.get('fused_read_bytes', 0) / 2**20:g} MiB"
        what = (f"reads its frames {size} at a time and runs the kernel on each in one "
                "compiled call, without the GIL (positions stored uncompressed, as served)")
        text = {"auto": f"where a task does not read ahead, it {what}.",
                "0": "off (H5MDX_FUSED_READ=0): every task reads from Python, then runs "
                     "the kernel.",
                "1": f"every task that can (H5MDX_FUSED_READ=1) {what}."}.get(fused, fused)
        lines += [f"Fused read: {text}", ""]
    return lines


def plot(results: dict, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib.figure import Figure

    layouts = results["layouts"]
    fig = Figure(figsize=(5.5 * len(layouts), 4.2), dpi=100)
    for i, (name, layout) in enumerate(layouts.items()):
        ax = fig.add_subplot(1, len(layouts), i + 1)
        fl = layout["floor"]
        ax.plot([r["n"] for r in fl], [r["frames_per_s"] for r in fl], "k--o",
                label="read floor (h5py)")
        keys = sorted({(r["scheduler"], r["open"], r["select"]) for r in layout["h5mdx"]})
        for key in keys:
            rows = sorted((r for r in layout["h5mdx"]
                           if (r["scheduler"], r["open"], r["select"]) == key),
                          key=lambda r: r["n"])
            ax.plot([r["n"] for r in rows], [r["frames_per_s"] for r in rows], "-o",
                    ms=3, lw=1, label=" ".join(key))
        ax.set_xscale("log", base=2)
        ax.set_xlabel("workers N")
        ax.set_ylabel("frames/s")
        ax.set_title(name)
        ax.legend(fontsize=6)
    fig.tight_layout()
    fig.savefig(path, format="png")  # written to a temporary name first


# ----------------------------------------------------------------------------- main
def layout_runs(args: argparse.Namespace, layout: str,
                saved: Callable[[dict[str, Any]], None] = lambda entry: None) -> dict[str, Any]:
    """Breakdown, floor and every scheduler at each N, and the first pass on one layout.

    ``saved(entry)`` is called with what is measured so far after each N.
    """
    from h5mdx.floor import floor_reader

    path = os.path.join(args.data, f"scale-{layout}-{args.frames}.h5md")
    t0 = time.perf_counter()
    build(path, args.frames, layout)
    print(f"{layout}: {path} ready in {time.perf_counter() - t0:.1f} s", flush=True)
    block = block_frames(path)
    entry: dict[str, Any] = {"path": path, "block_frames": block, "floor": [],
                             "h5mdx": []}
    if not args.grid_only:
        entry["breakdown"] = breakdown(path, args.repeats)
        for what, rate in entry["breakdown"].items():
            print(f"    {what:20s} {rate:12,.0f} frames/s", flush=True)
    for n in args.workers:
        floor, rows = paired_runs(args, path, n, args.frames)
        entry["floor"].append(floor)
        entry["h5mdx"] += rows
        saved(entry)
    if args.grid_only:
        return entry
    warm = build(os.path.join(args.data, f"scale-{layout}-200.h5md"), 200, layout)
    with floor_reader(path, 1) as read:
        read()  # warm, as in the rounds
        for sel_name in args.selections:
            ts, floor_t = first_pass(path, warm, sel_name, args.repeats,
                                     floor=lambda: read()[0])
            t = statistics.median(ts)
            ratios = round_ratios(floor_t, ts)
            entry["h5mdx"].append({"scheduler": "first pass (new process)", "open": "lazy",
                                   "select": sel_name, "n": 1, "seconds": t, "times": ts,
                                   "frames_per_s": args.frames / t, "ratios": ratios})
            print(f"    first pass  {sel_name:3s} N= 1 {args.frames / t:12,.0f} frames/s  "
                  f"{statistics.median(ratios):.2f}x the floor", flush=True)
    return entry


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    common_arguments(p, frames=100_000, repeats=3, schedulers="processes,threads,distributed")
    p.add_argument("--layouts", default="c100,c1,contig",
                   help=f"comma-separated, of {', '.join(CHUNKS)}")
    p.add_argument("--opens", default="lazy,chunks")
    p.add_argument("--selections", default="ca,all")
    p.add_argument("--grid-only", action="store_true",
                   help="only the floor and h5mdx at each N (no breakdown, no first pass)")
    p.add_argument("--rss-frames", type=int, default=10_000,
                   help="frames of the 1x file for the peak-RSS check (0: skip)")
    p.add_argument("--read-step-kib", type=int, default=None,
                   help="KiB a task reads at a time where it reads from Python (read-ahead "
                        "included; h5mdx's READ_STEP_BYTES: 4096); the graph carries it "
                        "to every scheduler's workers")
    p.add_argument("--fused-kib", type=int, default=None,
                   help="KiB a fused task reads before each compiled kernel call (h5mdx's "
                        "FUSED_READ_BYTES: 1024); threads only: the value is read in the "
                        "process that runs the task")
    p.add_argument("--quick", action="store_true", help="small smoke run")
    p.add_argument("--report", metavar="JSON",
                   help="only write the .md and .png again from a results .json")
    args = p.parse_args()
    if args.report:
        with open(args.report) as fh:
            write_report(json.load(fh), args.report.removesuffix(".json"), with_json=False)
        return 0
    if args.quick:
        args.frames, args.repeats, args.rss_frames = 3000, 1, 1000
    args.layouts = args.layouts.split(",")
    if unknown := [name for name in args.layouts if name not in CHUNKS]:
        p.error(f"unknown layout(s) {', '.join(unknown)}; valid options are: {', '.join(CHUNKS)}")
    args.workers = [int(n) for n in args.workers.split(",")]
    args.schedulers = args.schedulers.split(",")
    args.opens = args.opens.split(",")
    args.selections = args.selections.split(",")

    from h5mdx.analysis import blocks, plan
    from h5mdx.engine import frames

    if args.read_step_kib is not None:
        if args.read_step_kib < 1:
            p.error("--read-step-kib must be at least 1")
        # read where each graph is built (here), so every scheduler's tasks get it
        plan.READ_STEP_BYTES = args.read_step_kib * 1024
    if args.fused_kib is not None:
        if args.fused_kib < 1:
            p.error("--fused-kib must be at least 1")
        if set(args.schedulers) != {"threads"}:
            # a worker process reads h5mdx's own value, not this one's
            p.error("--fused-kib needs --schedulers threads")
        blocks.FUSED_READ_BYTES = args.fused_kib * 1024
    gb = args.frames * N_ATOMS * 3 * 4 / 1e9
    host = machine()  # platform, cores, cpu; the versions go beside it
    results: dict[str, Any] = {
        "machine": {**{k: v for k, v in host.items() if k != "versions"},
                    "memory_gib": os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
                    / 2**30, "processor": platform.processor()},
        "versions": host["versions"], "frames": args.frames, "gb": gb, "repeats": args.repeats,
        "direct_read": os.environ.get("H5MDX_DIRECT_READ", "1"),
        "read_ahead": os.environ.get("H5MDX_READ_AHEAD", "").strip() or "auto",
        # the rule's bound on the tasks sharing one process (absent in earlier results)
        "read_ahead_max_process_threads": frames.READ_AHEAD_MAX_PROCESS_THREADS,
        # where no read runs ahead, one compiled read-and-compute call per task (absent
        # in results from before it)
        "fused_read": os.environ.get(blocks.FUSED_READ_ENV, "").strip() or "auto",
        "fused_read_bytes": blocks.FUSED_READ_BYTES,
        # the bytes of each read from Python (absent in results from before the option)
        "read_step_bytes": plan.READ_STEP_BYTES,
        "layouts": {},
        "complete": False,
    }
    os.makedirs(RESULTS, exist_ok=True)
    stem = os.path.join(RESULTS, f"scale{args.tag}")

    def saved(layout: str, entry: dict[str, Any]) -> None:
        # written after every N: a run stopped by a time limit keeps what it measured
        # (no figure: ~1 s each; ``--report`` draws it from the .json)
        results["layouts"][layout] = entry
        write_report(results, stem, quiet=True, figure=False)

    for layout in args.layouts:
        results["layouts"][layout] = layout_runs(
            args, layout, lambda entry, layout=layout: saved(layout, entry))
    if args.rss_frames:
        small = build(os.path.join(args.data, f"scale-c100-{args.rss_frames}.h5md"),
                      args.rss_frames, "c100")
        big = build(os.path.join(args.data, f"scale-c100-{4 * args.rss_frames}.h5md"),
                    4 * args.rss_frames, "c100")
        results["rss"] = {"frames_1x": args.rss_frames, "mib_1x": peak_rss(small),
                          "frames_4x": 4 * args.rss_frames, "mib_4x": peak_rss(big)}
    results["complete"] = True
    write_report(results, stem)
    return 0


def _write_text(path: str, text: str) -> None:
    with open(path, "w") as fh:
        fh.write(text)


def _replace(path: str, write: Callable[[str], None]) -> None:
    """``write(tmp)`` a file beside ``path``, then put it in place (the writers'
    ``atomic_output``): a run killed mid-write (a time limit) leaves the last whole
    report, never a cut one."""
    from h5mdx.layout._atomic import atomic_output

    with atomic_output(path, overwrite=True) as tmp:
        write(tmp)


def write_report(results: dict, stem: str, with_json: bool = True,
                 quiet: bool = False, figure: bool = True) -> None:
    """Derive the ratios and write ``stem.json`` (unless ``with_json=False``), ``.md`` and
    ``.png`` (unless ``figure=False``); ``quiet``: print the file names, not the report."""
    derive(results)
    written = []
    if with_json:
        _replace(stem + ".json", lambda tmp: _write_text(tmp, json.dumps(results, indent=1)))
        written.append(".json")
    text = markdown(results)
    _replace(stem + ".md", lambda tmp: _write_text(tmp, text))
    written.append(".md")
    if figure:
        _replace(stem + ".png", lambda tmp: plot(results, tmp))
        written.append(".png")
    if not quiet:
        print(text)
    print(f"wrote {stem}: {', '.join(written)}", flush=True)


def save_results(name: str, tag: str, results: dict[str, Any],
                 render: Callable[[dict[str, Any]], str]) -> None:
    """Write ``results/<name><tag>.json`` and the ``.md`` that ``render`` makes of it (the
    smaller benchmarks next to this one)."""
    os.makedirs(RESULTS, exist_ok=True)
    stem = os.path.join(RESULTS, f"{name}{tag}")
    _replace(stem + ".json", lambda tmp: _write_text(tmp, json.dumps(results, indent=1)))
    text = render(results)
    _replace(stem + ".md", lambda tmp: _write_text(tmp, text))
    print(text)
    print(f"wrote {stem}.json, .md")


def versions_text(results: dict[str, Any]) -> str:
    """``results["versions"]`` as one line: ``python 3.11.7, numpy 2.4.6, ...``."""
    return ", ".join(f"{k} {v}" for k, v in results["versions"].items())


def machine() -> dict[str, Any]:
    """Platform, core count, the CPU (:func:`h5mdx._machine.cpu_facts`) and versions, for a
    results file."""
    return {"platform": platform.platform(), "cores": os.cpu_count() or 1,
            "cpu": cpu_facts(), "versions": versions()}


def compute_marks(scheduler: Any, since: float) -> dict[str, Any]:
    """When one compute's graph reached ``scheduler`` and its tasks finished.

    From the transition log of a ``LocalCluster``'s scheduler (it runs in this process),
    the events at or after ``since`` (``time.time()``): ``received``, the first task
    waiting (the scheduler has the graph); ``tasks_done``, the last task other than dask's
    finalize in memory; ``finalized``, the finalize task in memory (the blocks collected
    into one array on a worker); and ``n_tasks``, the tasks other than the finalize that ran.
    """
    events = [(ts, str(key), finish) for key, _, finish, *_, ts in scheduler.transition_log
              if ts >= since]
    tasks = [e for e in events if not e[1].startswith("finalize")]
    return {"received": min(ts for ts, _, finish in tasks if finish == "waiting"),
            "tasks_done": max(ts for ts, _, finish in tasks if finish == "memory"),
            "finalized": max(ts for ts, key, finish in events
                             if key.startswith("finalize") and finish == "memory"),
            "n_tasks": len({key for _, key, finish in tasks if finish == "processing"})}


def cores_text(m: dict[str, Any]) -> str:
    """``"16 cores"``, and what they are where recorded (results from before lack it):
    ``"16 cores (AMD EPYC, 16 CPUs = 8 cores x 2 threads, AVX2, FMA, ...)"``."""
    text = f"{m['cores']} cores"
    return f"{text} ({cpu_description(m['cpu'])})" if m.get("cpu") else text


if __name__ == "__main__":
    sys.exit(main())
