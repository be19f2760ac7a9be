"""Layer 5, dask clusters: SLURM through dask-jobqueue (:mod:`~h5mdx.parallel.cluster`),
SLURM batch scripts (:mod:`~h5mdx.parallel.batch`) and the worker plugins
(:mod:`~h5mdx.parallel.workers`). Opt-in: ``import h5mdx`` imports none of it.
"""
