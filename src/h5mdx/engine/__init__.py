"""Layer 2, the xarray engine: ``xr.open_dataset(path, engine="h5md")``.

:mod:`~h5mdx.engine.backend` (the backend entry point), :mod:`~h5mdx.engine.groups`
(every group of a file, for ``open_datatree``), :mod:`~h5mdx.engine.assembly` (a scanned
group as a Dataset), :mod:`~h5mdx.engine.arrays` (the lazy arrays),
:mod:`~h5mdx.engine.files` (the file managers),
:mod:`~h5mdx.engine.chunking` (chunk-aligned time blocks),
:mod:`~h5mdx.engine.topology` (MDAnalysis topologies and selections) and
:mod:`~h5mdx.engine.live` (files still being written, SWMR). Imports
:mod:`h5mdx.format` and xarray; never dask.distributed, the analysis or MPI.
"""
