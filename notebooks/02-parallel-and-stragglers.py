# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Parallel runs and stragglers
#
# A `LocalCluster` of worker processes, dask's task stream, h5mdx's per-task timing capture,
# per-worker bars and a Gantt chart, a deliberately slowed task found as a straggler, and
# speed-up and efficiency over the number of workers. The trajectory is the AdK example
# repeated 10 times (980 frames, 38 MiB), so that every step runs in seconds.

# %%
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import xarray as xr
from distributed import Client, get_task_stream

from h5mdx.analysis.rmsd import rmsd
from h5mdx.parallel import local_cluster
from h5mdx.parallel.workers import warm_up_workers
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

# %% [markdown]
# ## A local cluster
#
# h5py serialises its calls within one process. h5mdx reads plain and deflate chunks and
# contiguous data without it, so threads read in parallel too, but they share one GIL.
# Where every core runs a task, an RMSD task on uncompressed positions reads and computes in
# one compiled call that releases the GIL for the whole task: on 16 cores, 16 threads of
# dask's threaded scheduler then reached 1.14-1.88x the 16-process read floor on one- and
# 100-frame chunks, more than 16 single-threaded workers (see docs/performance.md, "On 16 cores,
# with the fused read"). This notebook runs processes with one thread each, for the
# dashboard and the task stream below. The dataset pickles to the workers (each reopens
# the file by name). `local_cluster` is a `LocalCluster` of such workers that leaves out
# distributed's `MALLOC_TRIM_THRESHOLD_`, which slows h5py's reads (docs/guide/parallel.md).
# `warm_up_workers` loads the compiled RMSD kernel in every worker as it starts (one to three
# seconds here), so that the first task of each does not carry it.

# %%
cluster = local_cluster(2, dashboard=True)
client = Client(cluster)
print({w.split(":")[-1]: f"{s:.2f} s" for w, s in warm_up_workers(client).items()})
ds = xr.open_dataset(path, engine="h5md", topology=psf)
# one task per block of 70 frames (two HDF5 chunks): each reads its block, then runs QCP
series = rmsd(ds.position, select="name CA", frames_per_block=70)
print(series.data.numblocks[0], "blocks of", series.chunks[0][0], "frames")

# %% [markdown]
# ## dask's task stream
#
# What the scheduler saw: each task's worker, start and stop.

# %%
with get_task_stream(client) as ts:
    series.compute()
stream = pd.DataFrame(ts.data)
stream["start"] = stream.startstops.map(lambda s: min(x["start"] for x in s))
stream["stop"] = stream.startstops.map(lambda s: max(x["stop"] for x in s))
t0 = stream.start.min()
fig, ax = plt.subplots(figsize=(9, 2.5))
for i, (_worker, rows) in enumerate(stream.groupby("worker")):
    ax.barh([i] * len(rows), rows.stop - rows.start, left=rows.start - t0, height=0.6)
ax.set_yticks(range(stream.worker.nunique()), sorted(stream.worker.unique()))
ax.set_xlabel("time since first task (s)")
plt.show()

# %% [markdown]
# ## h5mdx's timing capture
#
# `capture` records one row per task in h5mdx's timing schema: the scheduler's view joined with
# the task's own split into reading (`t_io`) and computing (`t_compute`), plus the time the
# worker waited before the task (`t_wait`).

# %%
with capture(client=client) as run:
    series.compute()
records = run.records
records[["worker", "frame_start", "frame_stop", "wall", "t_io", "t_compute", "t_wait"]].head()

# %%
per_worker(records)

# %% [markdown]
# h5mdx's plots return a matplotlib figure (made without pyplot's global state); a notebook
# shows it when it is the cell's value. Time per worker, split into phases:

# %%
plot_per_worker(records)

# %% [markdown]
# and every task on its worker's line (the Gantt chart):

# %%
plot_gantt(records)

# %% [markdown]
# ## A straggler, on purpose
#
# `H5MDX_TIMING_DELAY="<frame_start>:<seconds>[:<phase>]"` makes one block sleep in one phase;
# `capture(env=...)` sets it on every worker for this run only. The default rule flags tasks
# longer than 1.5x the median of the other tasks of their run and names the phase that made
# them slow.

# %%
slow_block = 350
with capture(client=client, env={"H5MDX_TIMING_DELAY": f"{slow_block}:1.0:io"}) as slow_run:
    series.compute()
flags = flag_stragglers(slow_run.records)
flags[flags.is_straggler][["worker", "frame_start", "frame_stop", "wall", "t_io", "slow_phase"]]

# %%
assert flags.loc[flags.is_straggler, "frame_start"].tolist() == [slow_block]
assert flags.loc[flags.is_straggler, "slow_phase"].tolist() == ["io"]
plot_gantt(slow_run.records)

# %% [markdown]
# ## Speed-up and efficiency over N
#
# `run_grid` runs the same analysis with N = 1 and 2 worker processes (and M = 1 or 3 blocks per
# worker), each run captured; S(N) = t₁ / t_N and E(N) = S(N) / N. On this small file a task
# takes about a millisecond, so the scheduler's own cost per task dominates: expect S(2) near
# or below 1 on a 2-core machine (0.3-1.0 measured). A trajectory of GBs, with tasks of
# seconds, is where a second worker pays (see the benchmarks page).

# %%
client.close()
cluster.close()
ds.close()

from h5mdx.bench import run_grid
from h5mdx.bench.grid import rmsd_workload
from h5mdx.timing import plot_scaling

grid = run_grid(rmsd_workload(path, psf, "name CA"), schedulers=["distributed"],
                workers=[1, 2], blocks_per_worker=[1, 3], repeats=1, progress=False)
grid.speedup

# %%
for line in grid.advice:
    print("-", line)
plot_scaling(grid.speedup)
