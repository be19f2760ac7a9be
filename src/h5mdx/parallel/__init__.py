"""Layer 6, dask clusters: the local cluster (:func:`local_cluster`), the schedulers
(:mod:`~h5mdx.parallel.schedulers`), SLURM through dask-jobqueue (:mod:`~h5mdx.parallel.cluster`),
SLURM batch scripts (:mod:`~h5mdx.parallel.batch`) and the worker plugins
(:mod:`~h5mdx.parallel.workers`). Opt-in: ``import h5mdx`` imports none of it.
"""

from h5mdx.parallel.local import local_cluster

__all__ = ["local_cluster"]
