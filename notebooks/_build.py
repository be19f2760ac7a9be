"""Generate the h5mdx notebooks from Python source: ``python notebooks/_build.py``.

The notebooks are stored without outputs (stripped). Edit the cells here, not in
the ``.ipynb`` files; ``tests/test_notebooks.py`` checks that the stored notebooks
equal what this script generates and executes them on small generated data.
``python notebooks/_build.py --check`` exits 1 when a stored notebook is out of date.
"""

from __future__ import annotations

import sys
from pathlib import Path

import nbformat
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

HERE = Path(__file__).resolve().parent

KERNEL = {
    "kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"},
    "language_info": {"name": "python"},
}


def md(text: str) -> nbformat.NotebookNode:
    return new_markdown_cell(text.strip("\n"))


def code(text: str) -> nbformat.NotebookNode:
    return new_code_cell(text.strip("\n"))


# ----------------------------------------------------------------------------------------
QUICKSTART = [
    md("""
# h5mdx quick start

Open an H5MD trajectory lazily with xarray, explore it, plot it, compute the C-alpha RMSD and
check the file layout — on the file that `h5mdx example` builds: adenylate kinase (AdK, 3341
atoms), 30,000 frames (1.2 GB) made from the 98 frames of the MDAnalysisTests PSF/DCD (frames
0-97 are the DCD's own; the others run back and forth through them with 0.05 Å of seeded
noise). The first run builds it in `h5mdx-example/` (about 20 s; cached, the same file
`h5mdx example` uses from this directory); `H5MDX_EXAMPLE_FRAMES` picks a smaller one.
"""),
    code("""
import matplotlib.pyplot as plt
import numpy as np
import xarray as xr

import h5mdx
import os

from h5mdx.examples import build_adk_trajectory
from h5mdx.testing import adk_topology

print("h5mdx", h5mdx.__version__)
frames = int(os.environ.get("H5MDX_EXAMPLE_FRAMES", 30_000))
path = build_adk_trajectory(f"h5mdx-example/adk-{frames}.h5md", frames)  # once, then cached
psf = adk_topology()
"""),
    md("""
## Open the file

`engine="h5md"` comes with h5mdx. `chunks={}` makes the variables dask arrays whose blocks are
whole HDF5 chunks (about 32 MiB each: here 800 frames, 8 chunks of 100). `topology=` adds
per-atom coordinates from any topology MDAnalysis reads.
"""),
    code("""
ds = xr.open_dataset(path, engine="h5md", topology=psf, chunks={})
ds
"""),
    md("""
Units, sampling and storage travel with the variables: `attrs["units"]` holds the H5MD unit
string and `encoding` the true HDF5 chunk shape and where the data lives.
"""),
    code("""
print("position units:", ds.position.attrs.get("units"))
print("time units:    ", ds.time.attrs.get("units"))
print("HDF5 chunks:   ", ds.position.encoding["chunksizes"])
print("dask blocks:   ", ds.position.chunks)
print("H5MD path:     ", ds.position.encoding["h5md_path"])
"""),
    md("""
`convert_units=True` converts to MDAnalysis' base units (Å, ps, Å/ps, kJ/(mol·Å), ...).
"""),
    code("""
converted = xr.open_dataset(path, engine="h5md", convert_units=True)
converted.time.attrs["units"], float(converted.time[1] - converted.time[0])
"""),
    md("""
## Topology selections

`select=` keeps only the atoms of an MDAnalysis selection; `atom` still holds their 0-based
indices in the file.
"""),
    code("""
ca = xr.open_dataset(path, engine="h5md", topology=psf, select="name CA", chunks={})
print(ca.sizes)
print(ca.atom.values[:5], ca.resname.values[:5])
"""),
    md("""
## An atom's trajectory

Indexing and plotting read only what they need.
"""),
    code("""
first_ca = ca.position.isel(atom=0)
first_ca.plot.line(x="time", hue="spatial")
plt.title(f"atom {int(ca.atom[0])} ({str(ca.resname[0].values)} {int(ca.resid[0])} CA)")
plt.show()
"""),
    md("""
## Box and observables

The AdK example comes from a DCD without a periodic box and without observables, so we write a
small H5MD file that has both with `h5mdx.testing.write_h5md`: 50 frames of 100 atoms in a box
that shrinks under pressure, and a potential energy sampled every 5 steps.
"""),
    code("""
from h5mdx.testing import write_h5md

rng = np.random.default_rng(0)
n_frames, n_atoms = 50, 100
steps = np.arange(n_frames) * 10
edges = (30.0 - 0.05 * np.arange(n_frames))[:, None] * np.ones(3)
pos = np.cumsum(rng.normal(0, 0.3, (n_frames, n_atoms, 3)), axis=0) % edges[:, None, :]
obs_steps = np.arange(0, steps[-1] + 1, 50)
write_h5md(
    "box.h5md",
    {"all": {"position": {"value": pos.astype("f4"), "step": steps, "time": steps * 0.002,
                          "unit": "nm", "chunks": (10, n_atoms, 3)}}},
    box={"all": {"dimension": 3, "boundary": ["periodic"] * 3,
                 "edges": {"value": edges, "unit": "nm", "link_sampling_from": "position"}}},
    observables={"potential_energy": {"value": -1000 - rng.normal(0, 5, obs_steps.size),
                                      "step": obs_steps, "time": obs_steps * 0.002,
                                      "unit": "kJ mol-1"}},
)
box = xr.open_dataset("box.h5md", engine="h5md")
box.box_edges
"""),
    code("""
fig, (a, b) = plt.subplots(1, 2, figsize=(10, 3.5))
box.box_edges.plot.line(x="time", hue="spatial", ax=a)
a.set_title("box edges")
obs = xr.open_dataset("box.h5md", engine="h5md", group="observables")
obs.potential_energy.plot(ax=b, marker="o")
b.set_title("observable sampled every 50 steps")
plt.tight_layout()
plt.show()
"""),
    md("""
The whole file as a tree, one node per H5MD group:
"""),
    code("""
tree = xr.open_datatree("box.h5md", engine="h5md")
print(tree)
"""),
    md("""
## C-alpha RMSD

`rmsd` superposes every frame on the reference (frame 0 here) with the QCP algorithm and
returns a lazy DataArray on `time`; `.compute()` runs it on the active dask scheduler (one
task per block). We check it against MDAnalysis.
"""),
    code("""
from h5mdx.analysis.rmsd import rmsd

r = rmsd(ds.position, reference=0, select="name CA")
r = r.compute()
r.plot()
plt.ylabel(f"RMSD ({r.attrs.get('units', '')})")
plt.title("AdK C-alpha RMSD to frame 0")
plt.show()
"""),
    code("""
import MDAnalysis as mda
from MDAnalysis.analysis.rms import RMSD
from MDAnalysisTests.datafiles import DCD, PSF

ref = RMSD(mda.Universe(PSF, DCD), select="name CA").run().results.rmsd[:, 2]
# frames 0-97 are the DCD's own frames
print("max |h5mdx - MDAnalysis| =", float(np.abs(r.values[:98] - ref).max()), "Å")
"""),
    md("""
## The layout doctor and rechunking

`h5mdx info` shows what is in a file and whether its layout is slow (it judges elements of
16 MiB and more). A file written with h5py's automatic chunks splits every frame over many
small chunks: reading a frame reads many chunks, and a naive dask layout would make one task
per frame. `h5mdx rechunk` fixes it. We write the AdK frames five times over (20 MiB) that way.
(`h5mdx.cli.main` runs the command line in this kernel; in a terminal type `h5mdx info
slow.h5md`.)
"""),
    code("""
from h5mdx.cli import main as h5mdx_cli

pos = np.tile(ds.position[:98].values, (5, 1, 1))
write_h5md("slow.h5md", {"trajectory": {"position": {
    "value": pos, "step": np.arange(pos.shape[0]), "time": np.arange(pos.shape[0]) * 1.0,
    "unit": "Angstrom", "chunks": True}}})
h5mdx_cli(["info", "slow.h5md"])
"""),
    code("""
# the default layout: chunks of whole frames, about 4 MiB each (what the doctor recommends)
h5mdx_cli(["rechunk", "slow.h5md", "fast.h5md", "--overwrite"])
h5mdx_cli(["info", "fast.h5md"])
"""),
    code("""
fast = xr.open_dataset("fast.h5md", engine="h5md")
slow = xr.open_dataset("slow.h5md", engine="h5md")
print("chunks before:", slow.position.encoding["chunksizes"],
      " after:", fast.position.encoding["chunksizes"])
assert (fast.position.values == slow.position.values).all()
"""),
    code("""
for d in (ds, converted, ca, box, obs, fast, slow):
    d.close()
tree.close()
"""),
]

# ----------------------------------------------------------------------------------------
PARALLEL = [
    md("""
# Parallel runs and stragglers

A `LocalCluster` of worker processes, dask's task stream, h5mdx's per-task timing capture,
per-worker bars and a Gantt chart, a deliberately slowed task found as a straggler, and
speed-up and efficiency over the number of workers. The trajectory is the AdK example
repeated 10 times (980 frames, 38 MiB), so that every step runs in seconds.
"""),
    code("""
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import xarray as xr
from distributed import Client, LocalCluster, get_task_stream

from h5mdx.analysis.rmsd import rmsd
from h5mdx.testing import adk_example, adk_topology, write_h5md
from h5mdx.timing import capture, flag_stragglers, per_worker, plot_gantt, plot_per_worker

psf = adk_topology()
with xr.open_dataset(adk_example("adk.h5md"), engine="h5md") as small:
    pos = np.tile(small.position.values, (10, 1, 1))
n_frames = pos.shape[0]
path = write_h5md("adk-x10.h5md", {"trajectory": {"position": {
    "value": pos, "step": np.arange(n_frames), "time": np.arange(n_frames) * 1.0,
    "unit": "Angstrom", "chunks": (35, pos.shape[1], 3)}}})
print(n_frames, "frames")
"""),
    md("""
## A local cluster

HDF5 serialises reads within one process, so h5mdx recommends processes with one thread
each. The dataset pickles to the workers (each reopens the file by name).
"""),
    code("""
cluster = LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                       dashboard_address=":0")
client = Client(cluster)
ds = xr.open_dataset(path, engine="h5md", topology=psf)
# one task per block of 70 frames (two HDF5 chunks): each reads its block, then runs QCP
series = rmsd(ds.position, select="name CA", frames_per_block=70)
print(series.data.numblocks[0], "blocks of", series.chunks[0][0], "frames")
"""),
    md("""
## dask's task stream

What the scheduler saw: each task's worker, start and stop.
"""),
    code("""
with get_task_stream(client) as ts:
    series.compute()
stream = pd.DataFrame(ts.data)
stream["start"] = stream.startstops.map(lambda s: min(x["start"] for x in s))
stream["stop"] = stream.startstops.map(lambda s: max(x["stop"] for x in s))
t0 = stream.start.min()
fig, ax = plt.subplots(figsize=(9, 2.5))
for i, (worker, rows) in enumerate(stream.groupby("worker")):
    ax.barh([i] * len(rows), rows.stop - rows.start, left=rows.start - t0, height=0.6)
ax.set_yticks(range(stream.worker.nunique()), sorted(stream.worker.unique()))
ax.set_xlabel("time since first task (s)")
plt.show()
"""),
    md("""
## h5mdx's timing capture

`capture` records one row per task in h5mdx's timing schema: the scheduler's view joined with
the task's own split into reading (`t_io`) and computing (`t_compute`), plus the time the
worker waited before the task (`t_wait`).
"""),
    code("""
with capture(client=client) as run:
    series.compute()
records = run.records
records[["worker", "frame_start", "frame_stop", "wall", "t_io", "t_compute", "t_wait"]].head()
"""),
    code("""
per_worker(records)
"""),
    code("""
plot_per_worker(records)
plt.show()
plot_gantt(records)
plt.show()
"""),
    md("""
## A straggler, on purpose

`H5MDX_TIMING_DELAY="<frame_start>:<seconds>[:<phase>]"` makes one block sleep in one phase;
`capture(env=...)` sets it on every worker for this run only. The default rule flags tasks
longer than 1.5x the median of their run and names the phase that made them slow.
"""),
    code("""
slow_block = 350
with capture(client=client, env={"H5MDX_TIMING_DELAY": f"{slow_block}:1.0:io"}) as slow_run:
    series.compute()
flags = flag_stragglers(slow_run.records)
flags[flags.is_straggler][["worker", "frame_start", "frame_stop", "wall", "t_io", "slow_phase"]]
"""),
    code("""
assert flags.loc[flags.is_straggler, "frame_start"].tolist() == [slow_block]
assert flags.loc[flags.is_straggler, "slow_phase"].tolist() == ["io"]
plot_gantt(slow_run.records)
plt.show()
"""),
    md("""
## Speed-up and efficiency over N

`run_grid` runs the same analysis with N = 1 and 2 worker processes (and M = 1 or 3 blocks per
worker), each run captured; S(N) = t₁ / t_N and E(N) = S(N) / N. On a 2-core machine shared
with other work, expect S(2) between 1 and 2; tiny files favour fewer workers.
"""),
    code("""
client.close()
cluster.close()
ds.close()

from h5mdx.bench import rmsd_workload, run_grid
from h5mdx.timing import plot_scaling

grid = run_grid(rmsd_workload(path, psf, "name CA"), schedulers=["distributed"],
                workers=[1, 2], blocks_per_worker=[1, 3], repeats=1, progress=False)
grid.speedup
"""),
    code("""
plot_scaling(grid.speedup)
plt.show()
for line in grid.advice:
    print("-", line)
"""),
]

# ----------------------------------------------------------------------------------------
HPC = [
    md("""
# HPC: MPI-IO, dask-mpi and SLURM

Three ways to run the same RMSD on many cores, timed in the same schema:

1. **MPI-IO**: `mpirun -n N h5mdx mpi-rmsd` — every rank reads its chunk-aligned block of one
   shared file through parallel HDF5 (`driver="mpio"`); rank 0 gathers.
2. **dask-mpi**: the ordinary dask path on a cluster started inside the MPI job.
3. **SLURM**: the MPI-IO program as an `sbatch` job (and dask workers as SLURM jobs with
   dask-jobqueue).

Each cell runs where the components are installed; otherwise it reads the records that
`benchmarks/bench_mpi.py` saved and says so.
"""),
    code("""
import os
import shutil
import shlex
import subprocess
import sys
from pathlib import Path

import h5py
import matplotlib.pyplot as plt
import pandas as pd

from h5mdx._optional import has_module
from h5mdx.testing import adk_example, adk_topology
from h5mdx.timing import load, per_worker, plot_per_worker

path, psf = adk_example("adk.h5md"), adk_topology()
have_mpi = bool(shutil.which("mpirun")) and has_module("mpi4py") and h5py.get_config().mpi
have_dask_mpi = have_mpi and has_module("dask_mpi")
have_slurm = bool(shutil.which("sbatch")) and subprocess.run(
    ["sinfo", "-h"], capture_output=True, timeout=20).returncode == 0
print(f"MPI + parallel h5py: {have_mpi}; dask-mpi: {have_dask_mpi}; SLURM: {have_slurm}")
print("(h5mdx doctor checks all of this and says what to install)")
"""),
    md("""
If something is missing, the saved benchmark records are used instead:
"""),
    code("""
def find_results() -> Path | None:
    for base in (Path.cwd(), *Path.cwd().parents, Path(os.environ.get("H5MDX_REPO", "."))):
        candidate = base / "benchmarks" / "results" / "mpi-records.csv"
        if candidate.is_file():
            return candidate
    return None

saved = find_results()
print("saved benchmark records:", saved or "none (run python benchmarks/bench_mpi.py)")
"""),
    md("""
## MPI-IO

`h5mdx.mpi.commands` builds the command line and the environment (as root, Open MPI needs
`OMPI_ALLOW_RUN_AS_ROOT`; more ranks than cores need oversubscription). In a terminal:

```bash
mpirun -n 2 h5mdx mpi-rmsd adk.h5md --topology adk.psf --select "name CA" --out run-mpi-io
```
"""),
    code("""
from h5mdx.mpi.commands import dask_mpi_command, mpi_env, mpi_io_command

frames = []
if have_mpi:
    cmd = mpi_io_command(2, path, "run-mpi-io", topology=psf, select="name CA")
    print(" ".join(cmd[:6]), "...")
    subprocess.run(cmd, env=mpi_env(), check=True, timeout=100)
    mpi_io, meta = load("run-mpi-io/timing.csv")
    frames.append(mpi_io)
    print(pd.read_csv("run-mpi-io/rmsd.csv").head())
else:
    print("MPI-IO not available here")
"""),
    md("""
## dask-mpi

Rank 0 runs the scheduler, rank 1 the client, every further rank one worker: 3 ranks give one
worker.
"""),
    code("""
if have_dask_mpi:
    cmd = dask_mpi_command(1, path, "run-dask-mpi", topology=psf, select="name CA")
    subprocess.run(cmd, env=mpi_env(), check=True, timeout=100)
    dask_mpi, _ = load("run-dask-mpi/timing.csv")
    frames.append(dask_mpi)
    print(dask_mpi[["backend", "worker", "rank", "wall", "t_io", "t_compute"]])
else:
    print("dask-mpi not available here")
"""),
    md("""
## SLURM

The MPI-IO program as a batch job (`mpirun` inside an sbatch script needs no PMIx). The cell
submits it with `sbatch --wait` when a SLURM answers, and cancels it if it stays queued.
"""),
    code("""
script = f'''#!/bin/bash
#SBATCH --ntasks=2
#SBATCH --time=00:05:00
#SBATCH --output=slurm-%j.out
export HDF5_USE_FILE_LOCKING=FALSE
{shlex.join(mpi_io_command(2, path, "run-slurm", topology=psf, select="name CA"))}
'''
Path("mpi-rmsd.sbatch").write_text(script)
print(script)
if have_slurm and have_mpi:
    sub = subprocess.Popen(["sbatch", "--parsable", "--wait", "mpi-rmsd.sbatch"],
                           env=mpi_env(), stdout=subprocess.PIPE, text=True)
    try:
        job_id = sub.stdout.readline().strip()
        sub.wait(timeout=90)
        slurm, _ = load("run-slurm/timing.csv")
        frames.append(slurm.assign(backend="mpi-io (sbatch)"))
        print(f"job {job_id} finished")
    except subprocess.TimeoutExpired:
        subprocess.run(["scancel", job_id])
        print(f"job {job_id} still queued after 90 s: cancelled")
else:
    print("SLURM not available here: the script above is what you would submit")
"""),
    md("""
## Comparing backends

Local dask processes on the same file, captured in the same schema, next to the MPI runs.
Without MPI here, the records saved by the benchmark are compared instead.
"""),
    code("""
import xarray as xr

from h5mdx.analysis.rmsd import rmsd
from h5mdx.timing import capture

with xr.open_dataset(path, engine="h5md", topology=psf, chunks={"time": 49}) as ds:
    with capture("processes", n_workers=2) as run:
        rmsd(ds.position, select="name CA").compute(scheduler="processes", num_workers=2)
frames.append(run.records)

if len(frames) > 1:
    records, source = pd.concat(frames, ignore_index=True), "this notebook"
elif saved is not None:
    records, source = pd.read_csv(saved), f"saved benchmark records ({saved})"
else:
    records, source = frames[0], "this notebook (local processes only)"
print("comparing:", source)
summary = records.groupby("backend").agg(
    tasks=("wall", "size"), workers=("n_workers", "max"), wall=("wall", "sum"),
    t_io=("t_io", "sum"), t_compute=("t_compute", "sum"))
summary
"""),
    code("""
summary[["t_io", "t_compute"]].plot.barh(stacked=True, figsize=(8, 3))
plt.xlabel("seconds summed over tasks / ranks")
plt.show()
if "mpi-io" in set(records.backend):
    plot_per_worker(records[records.backend == "mpi-io"])
    plt.show()
"""),
]

NOTEBOOKS = {
    "01-quickstart.ipynb": QUICKSTART,
    "02-parallel-and-stragglers.ipynb": PARALLEL,
    "03-hpc.ipynb": HPC,
}


def build(name: str) -> nbformat.NotebookNode:
    """The notebook ``name`` without outputs."""
    nb = new_notebook(cells=[nbformat.from_dict(dict(c)) for c in NOTEBOOKS[name]],
                      metadata=dict(KERNEL))
    for i, cell in enumerate(nb.cells):
        cell["id"] = f"{Path(name).stem[:2]}-{i:02d}"
    nbformat.validate(nb)
    return nb


def render(name: str) -> str:
    """The stored text of notebook ``name``."""
    return nbformat.writes(build(name)) + "\n"


def main(argv: list[str]) -> int:
    check = "--check" in argv
    stale = []
    for name in NOTEBOOKS:
        target = HERE / name
        text = render(name)
        if check:
            if not target.is_file() or target.read_text(encoding="utf-8") != text:
                stale.append(name)
        else:
            target.write_text(text, encoding="utf-8")
    if stale:
        print("out of date (run python notebooks/_build.py):", ", ".join(stale))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
