"""The one local dask cluster of h5mdx: worker processes of one thread each.

HDF5 serialises the calls of one process, so processes, not threads, read in parallel;
every local cluster h5mdx starts (``h5mdx rmsd``, ``h5mdx bench``, the example, the
benchmarks and the tests) comes from :func:`local_cluster`.

distributed's nanny sets the variables of ``distributed.nanny.pre-spawn-environ``
(``MALLOC_TRIM_THRESHOLD_=65536``, the BLAS thread counts) and ``PYTHONHASHSEED`` in the
environment of its own process before it starts a worker, so that the worker starts with
them (dask/distributed#6749), and leaves them there. The nannies of a ``LocalCluster`` run
in the process that made it, so every process started from it afterwards used to inherit
them. ``MALLOC_TRIM_THRESHOLD_`` also fixes glibc's threshold for ``mmap`` at 128 KiB: in
such a process every larger ``malloc`` is a fresh mapping, its pages faulted in, zeroed,
on first touch. HDF5 allocates one for each chunk it reads, so h5py read chunks of 100
frames (~4 MiB) 3x slower in a process started after a cluster than in one started before
(~58,000 against ~170,000 frames/s with two processes on the 2-core VM; the read floor of
``benchmarks/bench_scale.py`` and ``h5mdx example``). The nannies of :func:`local_cluster`
give the process its environment back each time they have started a worker: at the start,
and when a worker is restarted (``Client.restart``, a worker that died or ran out of
memory).

The workers themselves start without ``MALLOC_TRIM_THRESHOLD_`` (unless this process's
own environment sets it, or ``local_cluster(trim_memory=True)``): glibc then sizes its
thresholds as it goes, and a buffer of a few MiB freed and asked for again comes back
from the heap instead of as new pages. h5mdx's own HDF5 reads reuse their buffers, but
reads through h5py (compressed chunks) and Zarr allocate one per chunk: the RMSD of
31,200 frames of a Zarr store (4 MiB chunks) on one worker took 1.5-1.6 s without the
variable and 3.0 s with it (``benchmarks/results/open-chunks-2core-zarr.md``). The cost:
memory a task freed stays with its worker for reuse rather than going back to the
system at once.
"""

from __future__ import annotations

import contextlib
import functools
import os
import threading
from collections.abc import Iterator
from typing import Any

from h5mdx._optional import import_optional
from h5mdx._signals import interrupts_deferred

__all__ = ["local_cluster"]


def _nanny_environ_names() -> list[str]:
    """The variables a nanny sets in its own process before it starts a worker."""
    import dask

    names = set(dask.config.get("distributed.nanny.pre-spawn-environ", None) or {})
    names.add("PYTHONHASHSEED")  # the nanny sets it too, so that workers hash alike
    return sorted(names)


_kept = threading.Lock()
_starts = 0  # worker starts under way in this process, of any cluster
_before: dict[str, str | None] = {}


@contextlib.contextmanager
def _environ_restored(names: list[str]) -> Iterator[None]:
    """Inside the block the variables ``names`` may change; after it they are as before.

    Blocks may overlap (the nannies of a cluster start their workers concurrently on one
    event loop, several clusters on several): the first to enter saves the variables, the
    last to leave restores them, so that no block saves another's changes as the original.
    """
    global _starts, _before
    with _kept:
        if _starts == 0:
            _before = {name: os.environ.get(name) for name in names}
        _starts += 1
    try:
        yield
    finally:
        with _kept:
            _starts -= 1
            if _starts == 0:
                for name, value in _before.items():
                    if value is None:
                        os.environ.pop(name, None)
                    else:
                        os.environ[name] = value


#: glibc's variable that distributed's nanny sets for its workers (65536): see the module.
MALLOC_TRIM = "MALLOC_TRIM_THRESHOLD_"


def _own_environ(name: str) -> str | None:
    """This process's own value of ``name``: while a nanny is starting a worker (and may
    have set it), the value saved before the first such start, else the current one."""
    with _kept:
        if _starts and name in _before:
            return _before[name]
        return os.environ.get(name)


@functools.cache
def _nanny_class(trim_memory: bool = False) -> type:
    """``distributed.Nanny`` whose every worker start leaves this process's environment;
    its workers start without :data:`MALLOC_TRIM` unless ``trim_memory`` or this
    process's environment sets it."""
    from distributed import Nanny

    class EnvironKeepingNanny(Nanny):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            if not trim_memory and _own_environ(MALLOC_TRIM) is None:
                # the nanny applies both, before the worker starts and in it
                self.pre_spawn_env.pop(MALLOC_TRIM, None)
                self.env.pop(MALLOC_TRIM, None)

        async def instantiate(self) -> Any:  # the start, restarts and respawns
            names = sorted(set(_nanny_environ_names()) | set(self.pre_spawn_env))
            with _environ_restored(names):
                return await super().instantiate()

    name = "EnvironKeepingNanny" if trim_memory else "EnvironKeepingUntrimmedNanny"
    EnvironKeepingNanny.__module__ = __name__
    EnvironKeepingNanny.__name__ = EnvironKeepingNanny.__qualname__ = name
    return EnvironKeepingNanny


def local_cluster(n_workers: int = 2, *, dashboard: bool = False, trim_memory: bool = False,
                  **kwargs: Any) -> Any:
    """A ``distributed.LocalCluster`` of ``n_workers`` single-threaded worker processes.

    Parameters
    ----------
    n_workers : int, optional
        Number of worker processes.
    dashboard : bool, optional
        Serve the dashboard; off by default. The scheduler's HTTP server (health and
        metrics, and the dashboard when asked) listens on a free port in both cases,
        never on dask's default 8787, which another cluster may hold. Without it, the
        workers' statistical profiler (a sample of the running task's stack every 10 ms,
        which only the dashboard's Profile page and ``Client.profile`` show) is off as
        well: it cost the RMSD 0.5-7 % (median 2.8 %, 5 pairs of runs on the 2-core VM;
        h5mdx's own per-task timing, :mod:`h5mdx.timing`, stays on).
    trim_memory : bool, optional
        Start the workers with distributed's ``MALLOC_TRIM_THRESHOLD_=65536``, which hands
        freed memory back to the system at once; off by default, since it makes every
        allocation above 128 KiB map new pages: reads through h5py and Zarr ran up to 2x
        slower with it (see the module's docstring). This process's own setting of the
        variable, where it has one, is kept either way.
    **kwargs
        More arguments of ``distributed.LocalCluster`` (they win over the defaults).

    Returns
    -------
    distributed.LocalCluster
        Use it as a context manager, or close it. The workers start with distributed's
        ``pre-spawn-environ`` variables; this process keeps its own environment (see the
        module's docstring), also when a worker is restarted later.
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
    profile = {} if dashboard else {"distributed.worker.profile.enabled": False}
    if options["processes"]:
        options.setdefault("worker_class", _nanny_class(trim_memory))
    if isinstance(options.get("worker_class"), type) \
            and issubclass(options["worker_class"], distributed.Nanny):
        # a nanny's own config for its worker, kept for every restart (a dask.config.set
        # around the start would be undone in the config the nanny keeps, by reference)
        options["config"] = {**profile, **(options.get("config") or {})}
        profile = {}
    import dask

    cluster = None
    try:
        # in-process workers read the config as they start; worker processes are born
        # deaf to Ctrl-C, which this process handles by closing them (h5mdx._signals)
        with _environ_restored(_nanny_environ_names()), dask.config.set(profile), \
                interrupts_deferred():
            cluster = distributed.LocalCluster(**options)
    except KeyboardInterrupt:
        if cluster is not None:
            cluster.close()
        raise
    return cluster
