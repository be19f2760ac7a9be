"""Prepare dask workers before they compute: warm-up is not work.

:class:`KernelWarmUp` is a ``distributed`` worker plugin that imports the modules an
RMSD task needs and loads the QCP kernel (:func:`h5mdx.analysis.qcp.warm_up`) when a
worker starts, and on every worker that joins later, so the first task of a worker is
not slowed by it and not taken for a straggler. :func:`warm_up_workers` installs it on a
client's cluster and reports the seconds each worker spent.
"""

from __future__ import annotations

import importlib
import time
from typing import Any

from distributed import WorkerPlugin

from h5mdx.analysis.qcp import warm_up

__all__ = ["KernelWarmUp", "warm_up_seconds", "warm_up_workers"]

#: Name of the plugin on a cluster (registering it again replaces it).
PLUGIN_NAME = "h5mdx-kernel-warm-up"


#: What a worker imports to unpickle its first RMSD task (dask.array, the engine):
#: ~0.4 s of a 0.85 s first compute of 30,000 frames on a fresh 2-worker cluster, against
#: 0.17 s for the next (2-core VM); imported in the warm-up, the first took 0.19 s.
TASK_MODULES = ("h5mdx.analysis.rmsd",)


class KernelWarmUp(WorkerPlugin):
    """Import the modules of an RMSD task and load the QCP kernel on every worker as it starts.

    Parameters
    ----------
    kernel : {"auto", "numpy", "numba"}
        The kernel the computation will use.
    """

    name = PLUGIN_NAME

    def __init__(self, kernel: str = "auto") -> None:
        self.kernel = kernel

    def setup(self, worker: Any) -> None:
        """Import ``TASK_MODULES``, load the kernel; add the seconds spent to the
        worker's ``h5mdx_warm_up_s``."""
        t0 = time.perf_counter()
        for name in TASK_MODULES:
            importlib.import_module(name)
        imported = time.perf_counter() - t0
        worker.h5mdx_warm_up_s = _seconds(worker) + imported + warm_up(self.kernel)


def _seconds(dask_worker: Any) -> float:
    return float(getattr(dask_worker, "h5mdx_warm_up_s", 0.0))


def warm_up_workers(client: Any, kernel: str = "auto") -> dict[str, float]:
    """Warm up every worker of ``client`` (and workers added later): :class:`KernelWarmUp`.

    Parameters
    ----------
    client : distributed.Client
    kernel : {"auto", "numpy", "numba"}

    Returns
    -------
    dict
        Worker address -> seconds that worker spent warming up.
    """
    client.register_plugin(KernelWarmUp(kernel), name=PLUGIN_NAME)
    return warm_up_seconds(client)


def warm_up_seconds(client: Any) -> dict[str, float]:
    """Seconds each worker of ``client`` spent warming up (0.0 where it did not).

    Parameters
    ----------
    client : distributed.Client

    Returns
    -------
    dict
        Worker address -> seconds.
    """
    return {str(k): float(v) for k, v in client.run(_seconds).items()}
