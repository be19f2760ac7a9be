# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # h5mdx quick start
#
# Open an H5MD trajectory lazily with xarray, explore it, plot it, compute the C-alpha RMSD and
# check the file layout — on the file that `h5mdx example` builds: adenylate kinase (AdK, 3341
# atoms), 30,000 frames (1.2 GB) made from the 98 frames of the MDAnalysisTests PSF/DCD (frames
# 0-97 are the DCD's own; the others run back and forth through them with 0.05 Å of seeded
# noise). The first run builds it in `h5mdx-example/` of the repository (about 15 s; cached:
# the same file `h5mdx example` makes when run from the repository's root, as the README
# does); `H5MDX_EXAMPLE_FRAMES` picks a smaller one (the docs build uses 2,000 frames).

# %%
import os
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import xarray as xr

import h5mdx
from h5mdx.examples import build_adk_trajectory
from h5mdx.testing import adk_topology


def example_dir() -> Path:
    """`h5mdx-example/` at the root of the clone this runs in (Jupyter runs a notebook in
    its own directory, `notebooks/`), else here."""
    for base in (Path.cwd(), *Path.cwd().parents):
        if (base / "pyproject.toml").is_file() and (base / "src" / "h5mdx").is_dir():
            return base / "h5mdx-example"
    return Path("h5mdx-example")


print("h5mdx", h5mdx.__version__)
frames = int(os.environ.get("H5MDX_EXAMPLE_FRAMES", 30_000))
path = build_adk_trajectory(example_dir() / f"adk-{frames}.h5md", frames)  # once, then cached
psf = adk_topology()

# %% [markdown]
# ## Open the file
#
# `engine="h5md"` comes with h5mdx. `chunks={}` makes the variables dask arrays whose blocks are
# whole HDF5 chunks (about 128 MiB each, dask's default block size: here 3,300 frames, 33 chunks
# of 100). `topology=` adds per-atom coordinates from any topology MDAnalysis reads.

# %%
ds = xr.open_dataset(path, engine="h5md", topology=psf, chunks={})
ds

# %% [markdown]
# Units, sampling and storage travel with the variables: `attrs["units"]` holds the H5MD unit
# string and `encoding` the true HDF5 chunk shape and where the data lives.

# %%
print("position units:", ds.position.attrs.get("units"))
print("time units:    ", ds.time.attrs.get("units"))
print("HDF5 chunks:   ", ds.position.encoding["chunksizes"])
print("dask blocks:   ", ds.position.chunks)
print("H5MD path:     ", ds.position.encoding["h5md_path"])

# %% [markdown]
# `convert_units=True` converts to MDAnalysis' base units (Å, ps, Å/ps, kJ/(mol·Å), ...).

# %%
converted = xr.open_dataset(path, engine="h5md", convert_units=True)
converted.time.attrs["units"], round(float(converted.time[1] - converted.time[0]), 6)

# %% [markdown]
# ## Topology selections
#
# `select=` keeps only the atoms of an MDAnalysis selection; `atom` still holds their 0-based
# indices in the file.

# %%
ca = xr.open_dataset(path, engine="h5md", topology=psf, select="name CA", chunks={})
print(ca.sizes)
print(ca.atom.values[:5], ca.resname.values[:5])

# %% [markdown]
# ## An atom's trajectory
#
# Indexing and plotting read only what they need.

# %%
first_ca = ca.position.isel(atom=0)
first_ca.plot.line(x="time", hue="spatial")
plt.title(f"atom {int(ca.atom[0])} ({str(ca.resname[0].values)} {int(ca.resid[0])} CA)")
plt.show()

# %% [markdown]
# ## Box and observables
#
# The AdK example comes from a DCD without a periodic box and without observables, so we write a
# small H5MD file that has both with `h5mdx.testing.write_h5md`: 50 frames of 100 atoms in a box
# that shrinks under pressure, and a potential energy sampled every 50 steps.

# %%
from h5mdx.testing import write_h5md

rng = np.random.default_rng(0)
n_frames, n_atoms = 50, 100
steps = np.arange(n_frames) * 10
edges = (30.0 - 0.05 * np.arange(n_frames))[:, None] * np.array([1.0, 1.1, 1.2])
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

# %%
fig, (a, b) = plt.subplots(1, 2, figsize=(10, 3.5))
box.box_edges.plot.line(x="time", hue="spatial", ax=a)
a.set_title("box edges")
obs = xr.open_dataset("box.h5md", engine="h5md", group="observables")
obs.potential_energy.plot(ax=b, marker="o")
b.set_title("observable sampled every 50 steps")
plt.tight_layout()
plt.show()

# %% [markdown]
# The whole file as a tree, one node per H5MD group:

# %%
tree = xr.open_datatree("box.h5md", engine="h5md")
print(tree)

# %% [markdown]
# ## C-alpha RMSD
#
# `rmsd` superposes every frame on the reference (frame 0 here) with the QCP algorithm and
# returns a lazy DataArray on `time`; `.compute()` runs it on the active dask scheduler (one
# task per block). We check it against MDAnalysis.

# %%
from h5mdx.analysis.rmsd import rmsd

r = rmsd(ds.position, reference=0, select="name CA")
r = r.compute()
r.plot()
plt.ylabel(f"RMSD ({r.attrs.get('units', '')})")
plt.title("AdK C-alpha RMSD to frame 0")
plt.show()

# %%
import warnings

import MDAnalysis as mda
from MDAnalysis.analysis.rms import RMSD
from MDAnalysisTests.datafiles import DCD, PSF

with warnings.catch_warnings():  # MDAnalysis' note on its DCD reader's timesteps
    warnings.filterwarnings("ignore", category=DeprecationWarning, module="MDAnalysis")
    ref = RMSD(mda.Universe(PSF, DCD), select="name CA").run().results.rmsd[:, 2]
# frames 0-97 are the DCD's own frames
print("max |h5mdx - MDAnalysis| =", float(np.abs(r.values[:98] - ref).max()), "Å")

# %% [markdown]
# ## The layout diagnosis and rechunking
#
# `h5mdx info` shows what is in a file and whether its layout is slow (it judges elements of
# 16 MiB and more). A file written with h5py's automatic chunks splits every frame over many
# small chunks: reading a frame reads many chunks, and a naive dask layout would make one task
# per frame. `h5mdx rechunk` fixes it. We write the AdK frames five times over (20 MiB) that way.
# (`h5mdx.cli.main` runs the command line in this kernel; in a terminal type `h5mdx info
# slow.h5md`.)

# %%
from h5mdx.cli import main as h5mdx_cli

pos = np.tile(ds.position[:98].values, (5, 1, 1))
write_h5md("slow.h5md", {"trajectory": {"position": {
    "value": pos, "step": np.arange(pos.shape[0]), "time": np.arange(pos.shape[0]) * 1.0,
    "unit": "Angstrom", "chunks": True}}})
_ = h5mdx_cli(["info", "slow.h5md"])

# %%
# the default layout: chunks of whole frames, about 4 MiB each (what the doctor recommends)
_ = h5mdx_cli(["rechunk", "slow.h5md", "fast.h5md", "--overwrite"])
_ = h5mdx_cli(["info", "fast.h5md"])

# %%
fast = xr.open_dataset("fast.h5md", engine="h5md")
slow = xr.open_dataset("slow.h5md", engine="h5md")
print("chunks before:", slow.position.encoding["chunksizes"],
      " after:", fast.position.encoding["chunksizes"])
assert (fast.position.values == slow.position.values).all()

# %% [markdown]
# What the layout changes: reading frame after frame, as a per-frame analysis does. Each
# frame of `slow.h5md` is spread over many small chunks; in `fast.h5md` a few frames share
# one chunk.

# %%
import time

import h5py


def seconds_per_frame(name: str, n: int = 100) -> float:
    with h5py.File(name, "r") as f:
        value = f["particles/trajectory/position/value"]
        t0 = time.perf_counter()
        for i in range(n):
            value[i]
        return (time.perf_counter() - t0) / n


layouts = {"h5py automatic chunks": "slow.h5md", "rechunked (h5mdx rechunk)": "fast.h5md"}
ms = {label: 1e3 * seconds_per_frame(name) for label, name in layouts.items()}
plt.figure(figsize=(7, 2.2))
plt.barh(list(ms), list(ms.values()), color=["tab:red", "tab:green"])
plt.xlabel("milliseconds to read one frame")
plt.title("the same frames, two layouts")
plt.show()

# %%
for d in (ds, converted, ca, box, obs, fast, slow):
    d.close()
tree.close()
