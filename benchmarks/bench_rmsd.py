"""C-alpha RMSD: h5mdx against the I/O floor, MDAnalysis and MDTraj, in one run.

Builds (once, cached under ``benchmarks/data/``) an adk trajectory of
``--frames`` frames (default 30,000, ~1.2 GB) by repeating the 98 frames of
MDAnalysisTests' PSF/DCD, in three layouts: MDAnalysis' default chunks
(1, n_atoms, 3), time-blocked chunks (100, n_atoms, 3) and contiguous. Then,
with a warm page cache, median of ``--repeats`` runs after a warm-up:

1. the I/O floor: 2 processes reading the position dataset with plain h5py, each one
   half of the frames, whole chunks a few MiB at a time into a buffer it keeps
   (``h5mdx.floor.floor_reader``, the floor of ``bench_scale.py`` and ``h5mdx example``);
2. h5mdx: ``open_dataset`` with the PSF topology and ``h5mdx.rmsd`` of the C-alpha atoms
   on a LocalCluster of 2 worker processes (its documented configuration). The floor and
   h5mdx are timed in the same rounds, in turn (``bench_scale.interleaved``); "vs floor"
   is the median of the rounds' ratios of h5mdx's frames/s to the floor's, so that a slow
   spell of a shared machine falls on both;
3. MDAnalysis 2.x ``RMSD(...).run()`` serial and with
   ``backend="multiprocessing", n_workers=2`` (on the first ``--mda-frames``
   frames: it is ~100x slower; compared in frames/s), in the same rounds: "x MDA" is
   the median of the rounds' ratios of h5mdx's frames/s to MDAnalysis';
4. MDTraj: ``md.load_dcd`` of the same frames plus ``md.rmsd`` (where installed),
   and the kernels alone on in-memory C-alpha and all-atom coordinates: h5mdx numpy,
   h5mdx numba, mdtraj.rmsd, MDAnalysis' qcprot loop.

Peak memory: ``h5mdx rmsd`` on the time-blocked file and on a 4x longer one,
peak RSS of the whole process tree.

Results: ``benchmarks/results/rmsd{--tag}.json`` and ``rmsd{--tag}.md``.

Run: ``.venv/bin/python benchmarks/bench_rmsd.py`` (``--quick`` for a small smoke run).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import warnings

import h5py
import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
DATA = os.path.join(HERE, "data")
RESULTS = os.path.join(HERE, "results")
LAYOUTS = {"mda-default (1,n,3)": "c1", "time-blocked (100,n,3)": "c100", "contiguous": "contig"}


def adk():
    import MDAnalysis as mda
    from MDAnalysisTests.datafiles import DCD, PSF

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        u = mda.Universe(PSF, DCD)
    frames = np.stack([ts.positions.copy() for ts in u.trajectory])
    return PSF, u, frames


def build(path: str, frames: np.ndarray, n_frames: int, layout: str) -> str:
    """An H5MD file of ``n_frames`` repeated adk frames in ``layout`` (cached)."""
    if os.path.exists(path):
        return path
    os.makedirs(os.path.dirname(path), exist_ok=True)
    n_atoms = frames.shape[1]
    chunks = {"c1": (1, n_atoms, 3), "c100": (100, n_atoms, 3), "contig": None}[layout]
    tmp = path + ".part"
    with h5py.File(tmp, "w") as f:
        h = f.create_group("h5md")
        h.attrs["version"] = np.array([1, 1])
        h.create_group("author").attrs["name"] = "bench_rmsd"
        h.create_group("creator").attrs["name"] = "bench_rmsd"
        box = f.create_group("particles/trajectory/box")  # MDAnalysis needs a box group
        box.attrs["dimension"] = 3
        box.attrs["boundary"] = np.array([b"none"] * 3)
        g = f.create_group("particles/trajectory/position")
        v = g.create_dataset("value", shape=(n_frames, n_atoms, 3), dtype=np.float32,
                             chunks=chunks)
        v.attrs["unit"] = "Angstrom"
        for a in range(0, n_frames, len(frames)):
            b = min(n_frames, a + len(frames))
            v[a:b] = frames[: b - a]
        g.create_dataset("step", data=np.arange(n_frames))
        t = g.create_dataset("time", data=np.arange(n_frames, dtype=np.float64))
        t.attrs["unit"] = "ps"
    os.replace(tmp, path)
    return path


def median_time(fn, repeats: int, warmup: int = 1) -> tuple[float, list[float]]:
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), times


def h5mdx_rmsd(path: str, topology: str, client) -> np.ndarray:
    import xarray as xr

    import h5mdx

    with xr.open_dataset(path, engine="h5md", topology=topology) as ds:
        return client.compute(h5mdx.rmsd(ds.position, select="name CA")).result().values


def mda_rmsd(path: str, topology: str, n_frames: int, backend: str | None) -> np.ndarray:
    import MDAnalysis as mda
    from MDAnalysis.analysis import rms

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        u = mda.Universe(topology, path)
        r = rms.RMSD(u, select="name CA")
        if backend is None:
            r.run(stop=n_frames)
        else:
            r.run(stop=n_frames, backend=backend, n_workers=2)
    return r.results.rmsd[:, 2]


def peak_rss(cmd: list[str]) -> tuple[float, float]:
    """Peak summed RSS (MiB) of a command's process tree, and its wall time."""
    import psutil

    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    p = psutil.Process(proc.pid)
    peak = 0
    stop = threading.Event()

    def poll() -> None:
        nonlocal peak
        while not stop.is_set():
            try:
                procs = [p, *p.children(recursive=True)]
                total = sum(q.memory_info().rss for q in procs if q.is_running())
                peak = max(peak, total)
            except psutil.Error:
                pass
            time.sleep(0.02)

    t0 = time.perf_counter()
    th = threading.Thread(target=poll, daemon=True)
    th.start()
    rc = proc.wait()
    wall = time.perf_counter() - t0
    stop.set()
    th.join()
    if rc != 0:
        raise RuntimeError(f"{cmd} exited {rc}")
    return peak / 2**20, wall


def kernels(frames: np.ndarray, atoms: np.ndarray | None, n: int, repeats: int) -> dict:
    """Frames/s of each RMSD kernel alone on ``n`` in-memory frames of ``atoms`` (None: all)."""
    from h5mdx.analysis.qcp import has_numba, rmsd_qcp

    picked = frames if atoms is None else frames[:, atoms]
    xyz = np.tile(picked, (n // len(frames) + 1, 1, 1))[:n].astype(np.float32)
    ref = xyz[0]
    out = {}
    t, _ = median_time(lambda: rmsd_qcp(ref, xyz, kernel="numpy"), repeats)
    out["h5mdx numpy"] = n / t
    if has_numba():
        t, _ = median_time(lambda: rmsd_qcp(ref, xyz, kernel="numba"), repeats)
        out["h5mdx numba"] = n / t
    try:
        import mdtraj

        traj = mdtraj.Trajectory(xyz / 10.0, topology=None)
        t, _ = median_time(lambda: mdtraj.rmsd(traj, traj, 0, parallel=False), repeats)
        out["mdtraj.rmsd (1 thread, float32)"] = n / t
    except Exception as err:  # not installed, or its topology-less path failed
        out["mdtraj.rmsd (1 thread, float32)"] = f"skipped: {err}"
    from MDAnalysis.analysis.rms import rmsd as mda_single

    m = min(n, 5000 if atoms is not None else 1000)
    t, _ = median_time(lambda: [mda_single(x, ref, center=True, superposition=True)
                                for x in xyz[:m]], max(1, repeats // 3))
    out["MDAnalysis qcprot loop"] = m / t
    return out


def mdtraj_load_rmsd(u, n_frames: int, ca: np.ndarray, repeats: int) -> float | str:
    try:
        import MDAnalysis as mda
        import mdtraj
    except ImportError as err:
        return f"skipped: {err}"
    dcd = os.path.join(DATA, f"adk-{n_frames}.dcd")
    pdb = os.path.join(DATA, "adk-top.pdb")
    if not os.path.exists(dcd):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            u.atoms.write(pdb)
            frames = np.stack([ts.positions.copy() for ts in u.trajectory])
            with mda.Writer(dcd + ".part.dcd", n_atoms=u.atoms.n_atoms) as w:
                for i in range(n_frames):
                    u.atoms.positions = frames[i % len(frames)]
                    w.write(u.atoms)
            os.replace(dcd + ".part.dcd", dcd)

    def go() -> None:
        t = mdtraj.load_dcd(dcd, top=pdb, atom_indices=ca)
        mdtraj.rmsd(t, t, 0)

    t, _ = median_time(go, repeats)
    return n_frames / t


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--frames", type=int, default=30_000)
    ap.add_argument("--mda-frames", type=int, default=3_000)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--quick", action="store_true", help="small smoke run")
    ap.add_argument("--no-memory", action="store_true", help="skip the 4x peak-RSS run")
    ap.add_argument("--tag", default="", help="suffix of the result files (rmsd{tag}.md)")
    args = ap.parse_args()
    if args.quick:
        args.frames, args.mda_frames, args.repeats = 2_000, 300, 1
    os.makedirs(RESULTS, exist_ok=True)
    import distributed
    import xarray as xr
    from bench_scale import _timed, interleaved, round_ratios

    import h5mdx
    from h5mdx.floor import floor_reader
    from h5mdx.parallel import local_cluster

    topology, u, frames = adk()
    ca = u.select_atoms("name CA").indices
    n = args.frames
    rows = []
    with local_cluster(2) as cluster, \
            distributed.Client(cluster) as client:
        for label, layout in LAYOUTS.items():
            path = build(os.path.join(DATA, f"adk-{n}-{layout}.h5md"), frames, n, layout)
            gb = os.path.getsize(path) / 1e9
            ref = h5mdx_rmsd(path, topology, client)
            m = min(args.mda_frames, n)
            mda = mda_rmsd(path, topology, m, None)
            assert np.abs(mda - ref[:m]).max() < 1e-4, "h5mdx and MDAnalysis disagree"
            with floor_reader(path, workers=2) as read, \
                    xr.open_dataset(path, engine="h5md", topology=topology) as ds:
                rounds = interleaved({
                    "floor": lambda: read()[0],
                    "h5mdx": lambda p=path: _timed(lambda: h5mdx_rmsd(p, topology, client)),
                    "opened": lambda ds=ds: _timed(lambda: client.compute(
                        h5mdx.rmsd(ds.position, select="name CA")).result()),
                    "mda": lambda p=path, m=m: _timed(lambda: mda_rmsd(p, topology, m, None)),
                    "mda2": lambda p=path, m=m: _timed(
                        lambda: mda_rmsd(p, topology, m, "multiprocessing")),
                }, args.repeats, rotate=True)
            t_floor = statistics.median(rounds["floor"])
            t_h5mdx = statistics.median(rounds["h5mdx"])
            t_mda = statistics.median(rounds["mda"])
            t_mda2 = statistics.median(rounds["mda2"])
            vs_floor = round_ratios(rounds["floor"], rounds["h5mdx"])
            vs_opened = round_ratios(rounds["floor"], rounds["opened"])
            # frames/s of h5mdx over MDAnalysis' in the same round (MDAnalysis reads m frames)
            x_mda = [n / m * r for r in round_ratios(rounds["mda"], rounds["h5mdx"])]
            x_mda2 = [n / m * r for r in round_ratios(rounds["mda2"], rounds["h5mdx"])]
            row = {
                "layout": label, "file_gb": gb, "frames": n,
                "io_floor_fps": n / t_floor, "h5mdx_fps": n / t_h5mdx,
                "mda_serial_fps": m / t_mda, "mda_2workers_fps": m / t_mda2,
                "floor_seconds": rounds["floor"], "h5mdx_seconds": rounds["h5mdx"],
                "opened_seconds": rounds["opened"],
                "opened_fps": n / statistics.median(rounds["opened"]),
                "opened_vs_floor": statistics.median(vs_opened),
                "h5mdx_vs_floor": statistics.median(vs_floor),
                "h5mdx_vs_floor_range": [min(vs_floor), max(vs_floor)],
                "mda_seconds": rounds["mda"], "mda_2workers_seconds": rounds["mda2"],
                "speedup_vs_mda_serial": statistics.median(x_mda),
                "speedup_vs_mda_serial_range": [min(x_mda), max(x_mda)],
                "speedup_vs_mda_2workers": statistics.median(x_mda2),
            }
            rows.append(row)
            print(row, flush=True)
    mdtraj_fps = mdtraj_load_rmsd(u, min(n, 10_000), ca, args.repeats)
    kern = {"C-alpha": kernels(frames, ca, min(n, 30_000), max(3, args.repeats)),
            "all atoms": kernels(frames, None, min(n, 10_000), max(3, args.repeats))}
    print("kernels", kern, flush=True)

    memory = {}
    if not args.no_memory:
        base = os.path.join(DATA, f"adk-{n}-c100.h5md")
        long = build(os.path.join(DATA, f"adk-{4 * n}-c100.h5md"), frames, 4 * n, "c100")
        h5mdx_cli = [sys.executable, "-m", "h5mdx", "rmsd", "--topology", topology,
                     "--select", "name CA", "--workers", "2", "--no-progress"]
        with tempfile.TemporaryDirectory() as tmp:
            for label, p in (("1x", base), ("4x", long)):
                rss, wall = peak_rss([*h5mdx_cli, p, "--out", os.path.join(tmp, "r.csv")])
                memory[label] = {"file_gb": os.path.getsize(p) / 1e9, "peak_rss_mib": rss,
                                 "wall_s": wall}
        memory["ratio_4x_over_1x"] = memory["4x"]["peak_rss_mib"] / memory["1x"]["peak_rss_mib"]
        print("memory", memory, flush=True)

    result = {
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform(),
                    "python": sys.version.split()[0], "h5py": h5py.__version__,
                    "hdf5": h5py.version.hdf5_version},
        "frames": n, "mda_frames": args.mda_frames, "repeats": args.repeats,
        "layouts": rows, "mdtraj_load_plus_rmsd_fps": mdtraj_fps, "kernels_fps": kern,
        "memory": memory,
    }
    with open(os.path.join(RESULTS, f"rmsd{args.tag}.json"), "w") as fh:
        json.dump(result, fh, indent=2)
    lines = [
        f"C-alpha RMSD, adk 3341 atoms (214 C-alpha), {n} frames; medians of "
        f"{args.repeats} after a warm-up; warm page cache; {os.cpu_count()} cores; "
        f"h5py {h5py.__version__} on HDF5 {h5py.version.hdf5_version}.",
        "",
        "I/O floor: 2 processes reading with plain h5py. h5mdx: `open_dataset` (PSF "
        "topology) and `h5mdx.rmsd` on 2 worker processes. Floor, h5mdx and MDAnalysis "
        f"(first {min(args.mda_frames, n)} frames) timed in the same rounds; vs floor, x vs "
        "MDA: median (range) of the rounds' frames/s ratios. Opened: "
        "the RMSD alone, on a dataset opened once (no topology read, no open).",
        "",
        "| layout | GB | I/O floor (frames/s) | h5mdx 2 workers (frames/s) | h5mdx vs floor "
        "| opened: frames/s, vs floor | MDAnalysis serial | MDAnalysis 2 workers "
        "| x vs MDA serial | x vs MDA 2 workers |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['layout']} | {r['file_gb']:.2f} | {r['io_floor_fps']:,.0f} | "
            f"{r['h5mdx_fps']:,.0f} | {r['h5mdx_vs_floor']:.2f} "
            f"({r['h5mdx_vs_floor_range'][0]:.2f}-{r['h5mdx_vs_floor_range'][1]:.2f}) | "
            f"{r['opened_fps']:,.0f}, {r['opened_vs_floor']:.2f} | "
            f"{r['mda_serial_fps']:,.0f} | {r['mda_2workers_fps']:,.0f} | "
            f"{r['speedup_vs_mda_serial']:.0f} ({r['speedup_vs_mda_serial_range'][0]:.0f}-"
            f"{r['speedup_vs_mda_serial_range'][1]:.0f}) | "
            f"{r['speedup_vs_mda_2workers']:.0f} |")
    lines += ["", "Kernels alone, in-memory float32 coordinates, one core (frames/s):", "",
              "| kernel | C-alpha (214) | all atoms (3341) |", "|---|---|---|"]

    def cell(v: float | str) -> str:
        return f"{v:,.0f}" if isinstance(v, float) else str(v)

    for k in kern["C-alpha"]:
        lines.append(f"| {k} | {cell(kern['C-alpha'][k])} | {cell(kern['all atoms'][k])} |")
    lines.append(f"| mdtraj load_dcd + rmsd | {cell(mdtraj_fps)} | |")
    if memory:
        lines += ["", "Peak RSS of `h5mdx rmsd` (process tree):", "",
                  "| file | GB | peak RSS (MiB) | wall (s) |", "|---|---|---|---|"]
        for k in ("1x", "4x"):
            lines.append(f"| {k} | {memory[k]['file_gb']:.2f} | "
                         f"{memory[k]['peak_rss_mib']:.0f} | {memory[k]['wall_s']:.1f} |")
        lines.append(f"\n4x/1x peak RSS ratio: {memory['ratio_4x_over_1x']:.2f}")
    with open(os.path.join(RESULTS, f"rmsd{args.tag}.md"), "w") as fh:
        fh.write("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
