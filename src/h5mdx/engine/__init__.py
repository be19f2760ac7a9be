"""Layer 2, the xarray engine: ``xr.open_dataset(path, engine="h5md")``.

:mod:`~h5mdx.engine.backend` (the backend entry point and lazy arrays),
:mod:`~h5mdx.engine.chunking` (chunk-aligned time blocks),
:mod:`~h5mdx.engine.topology` (MDAnalysis topologies and selections) and
:mod:`~h5mdx.engine.live` (files still being written, SWMR). Imports
:mod:`h5mdx.format` and xarray; never dask.distributed, the analysis or MPI.
"""
