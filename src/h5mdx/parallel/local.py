"""The one local dask cluster of h5mdx: worker processes of one thread each.

HDF5 serialises the calls of one process, so processes, not threads, read in parallel;
every local cluster h5mdx starts (``h5mdx rmsd``, ``h5mdx bench``, the example, the
benchmarks and the tests) comes from :func:`local_cluster`.
"""

from __future__ import annotations

from typing import Any

from h5mdx._optional import import_optional

__all__ = ["local_cluster"]


def local_cluster(n_workers: int = 2, *, dashboard: bool = False, **kwargs: Any) -> Any:
    """A ``distributed.LocalCluster`` of ``n_workers`` single-threaded worker processes.

    Parameters
    ----------
    n_workers : int, optional
        Number of worker processes.
    dashboard : bool, optional
        Serve the dashboard; off by default. The scheduler's HTTP server (health and
        metrics, and the dashboard when asked) listens on a free port in both cases,
        never on dask's default 8787, which another cluster may hold.
    **kwargs
        More arguments of ``distributed.LocalCluster`` (they win over the defaults).

    Returns
    -------
    distributed.LocalCluster
        Use it as a context manager, or close it.
    """
    distributed = import_optional("distributed", "a local cluster of worker processes")
    options: dict[str, Any] = {
        "n_workers": n_workers,
        "threads_per_worker": 1,
        "processes": True,
        "dashboard_address": ":0",
    }
    if not dashboard:
        options["scheduler_kwargs"] = {"dashboard": False}
    options.update(kwargs)
    return distributed.LocalCluster(**options)
