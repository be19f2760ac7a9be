# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # HPC: MPI-IO, dask-mpi and SLURM
#
# Three ways to run the same RMSD on many cores, timed in the same schema:
#
# 1. **MPI-IO**: `mpirun -n N h5mdx mpi-rmsd` — every rank reads its chunk-aligned block of one
#    shared file through parallel HDF5 (`driver="mpio"`); rank 0 gathers.
# 2. **dask-mpi**: the ordinary dask path on a cluster started inside the MPI job.
# 3. **SLURM**: the MPI-IO program as an `sbatch` job (and dask workers as SLURM jobs with
#    dask-jobqueue).
#
# Each cell runs where the components are installed; otherwise it reads the records that
# `benchmarks/bench_mpi.py` saved and says so.

# %%
import os
import shlex
import shutil
import subprocess
from pathlib import Path

import h5py
import matplotlib.pyplot as plt
import pandas as pd
from IPython.display import display

from h5mdx._optional import has_module
from h5mdx.testing import adk_example, adk_topology
from h5mdx.timing import load, plot_per_worker

path, psf = adk_example("adk.h5md"), adk_topology()
have_mpi = bool(shutil.which("mpirun")) and has_module("mpi4py") and h5py.get_config().mpi
have_dask_mpi = have_mpi and has_module("dask_mpi")
have_slurm = bool(shutil.which("sbatch")) and subprocess.run(
    ["sinfo", "-h"], capture_output=True, timeout=20).returncode == 0
print(f"MPI + parallel h5py: {have_mpi}; dask-mpi: {have_dask_mpi}; SLURM: {have_slurm}")
print("(h5mdx doctor checks all of this and says what to install)")


# %% [markdown]
# If something is missing, the saved benchmark records are used instead:

# %%
def find_results() -> Path | None:
    for base in (Path.cwd(), *Path.cwd().parents, Path(os.environ.get("H5MDX_REPO", "."))):
        candidate = base / "benchmarks" / "results" / "mpi-records.csv"
        if candidate.is_file():
            return candidate
    return None

saved = find_results()
print("saved benchmark records:", saved or "none (run python benchmarks/bench_mpi.py)")

# %% [markdown]
# ## MPI-IO
#
# `h5mdx.mpi.commands` builds the command line and the environment (as root, Open MPI needs
# `OMPI_ALLOW_RUN_AS_ROOT`; more ranks than cores need oversubscription). In a terminal:
#
# ```bash
# mpirun -n 2 h5mdx mpi-rmsd adk.h5md --topology adk.psf --select "name CA" --out run-mpi-io
# ```

# %%
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

# %% [markdown]
# ## dask-mpi
#
# Rank 0 runs the scheduler, rank 1 the client, every further rank one worker: 3 ranks give one
# worker.

# %%
if have_dask_mpi:
    cmd = dask_mpi_command(1, path, "run-dask-mpi", topology=psf, select="name CA")
    subprocess.run(cmd, env=mpi_env(), check=True, timeout=100)
    dask_mpi, _ = load("run-dask-mpi/timing.csv")
    frames.append(dask_mpi)
    print(dask_mpi[["backend", "worker", "rank", "wall", "t_io", "t_compute"]])
else:
    print("dask-mpi not available here")

# %% [markdown]
# ## SLURM
#
# The MPI-IO program as a batch job (`mpirun` inside an sbatch script needs no PMIx). The cell
# shows the script; it submits it with `sbatch --wait` only when asked
# (`H5MDX_NOTEBOOK_SUBMIT=1`, or set `submit = True`) and a SLURM answers, and cancels the job
# if it stays queued. (The docs build does not ask: its page shows the script.)

# %%
script = f'''#!/bin/bash
#SBATCH --ntasks=2
#SBATCH --time=00:05:00
#SBATCH --output=slurm-%j.out
export HDF5_USE_FILE_LOCKING=FALSE
{shlex.join(mpi_io_command(2, path, "run-slurm", topology=psf, select="name CA"))}
'''
Path("mpi-rmsd.sbatch").write_text(script)
print(script)
submit = os.environ.get("H5MDX_NOTEBOOK_SUBMIT") == "1"
if submit and have_slurm and have_mpi:
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
    print(f"not submitted (SLURM available: {have_slurm}): the script above is what you "
          "would submit")

# %% [markdown]
# ## Comparing backends
#
# Local dask processes on the same file, captured in the same schema, next to the MPI runs.
# Without MPI here, the records saved by the benchmark are compared instead.

# %%
import xarray as xr

from h5mdx.analysis.rmsd import rmsd
from h5mdx.timing import capture

# two blocks of whole 10-frame chunks: chunk_mib= sizes them (chunks={"time": n} would make
# xarray warn that they separate the engine's own, larger block)
with xr.open_dataset(path, engine="h5md", topology=psf, chunks={}, chunk_mib=2) as ds:
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
# like with like: each run's tasks (or ranks) summed, then the median run of each backend;
# saved benchmark records name their variant (MPI-IO's two read modes apart)
label = (records["bench_backend"].fillna(records["backend"]) if "bench_backend" in records
         else records["backend"])
per_run = records.assign(label=label).groupby(["label", "run_id"]).agg(
    tasks=("t_io", "size"), workers=("n_workers", "max"), t_io=("t_io", "sum"),
    t_compute=("t_compute", "sum"))
summary = per_run.groupby("label").agg(
    runs=("tasks", "size"), tasks=("tasks", "median"), workers=("workers", "max"),
    t_io=("t_io", "median"), t_compute=("t_compute", "median"))
summary

# %%
summary[["t_io", "t_compute"]].plot.barh(stacked=True, figsize=(8, 3))
plt.xlabel("seconds summed over one run's tasks / ranks (median run)")
plt.show()
if "mpi-io" in set(records.backend):
    display(plot_per_worker(records[records.backend == "mpi-io"]))
