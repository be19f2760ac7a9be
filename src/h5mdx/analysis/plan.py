"""How :func:`h5mdx.analysis.rmsd.rmsd` cuts the frames into tasks.

Blocks of whole HDF5 chunks sized for the workers and threads there are (asked of the
dask client where there is one), the read step of each task, the kernel for small jobs,
and the dask graph of tasks over a lazy open or over dask blocks.
"""

from __future__ import annotations

import sys
import warnings
from typing import Any

import dask
import dask.array as da
import dask.system
import numpy as np
import xarray as xr
from dask.highlevelgraph import HighLevelGraph

from h5mdx.analysis._dask_source import dask_source
from h5mdx.analysis.blocks import _dask_block, _lazy_block
from h5mdx.analysis.reference import _user_stacklevel
from h5mdx.engine.arrays import backend_array
from h5mdx.engine.chunking import (
    DEFAULT_TARGET_MIB,
    READ_STEP_BYTES,
    balanced_block,
    read_step,
    stream_target_mib,
    time_block,
)
from h5mdx.engine.frames import frame_reader, stored_start
from h5mdx.format.schema import ATOM_DIM, SPATIAL_DIM, TIME_DIM

__all__: list[str] = []

#: Atom-frames below which ``kernel="auto"`` runs the numpy kernel where the compiled one
#: is not loaded in this process yet: loading it costs 0.5-0.8 s, and numpy computes
#: 10-20 million atom-frames a second (2-core VM), so 2 million take ~0.1-0.2 s. A first
#: C-alpha RMSD of the 98 adk frames took 0.5-0.7 s, against 0.02 s.
_SMALL_WORK = 2_000_000


def _small_work_kernel(kernel: str, work: int) -> str:
    """The kernel for ``work`` atom-frames: numpy for a small first job under "auto"."""
    from h5mdx.analysis.qcp import _WARM

    if kernel == "auto" and work < _SMALL_WORK and "numba" not in _WARM \
            and _default_client(dask.config.get("scheduler", None)) is None:
        return "numpy"  # (a cluster's workers have loaded the compiled kernel as they started)
    return kernel


def _read_plan(position: xr.DataArray,
               idx: np.ndarray | None) -> tuple[xr.DataArray, np.ndarray | None]:
    """What each lazy task reads, and which atoms of it the kernel compares.

    Where the HDF5 chunks hold whole frames (or the dataset is contiguous), every
    chunk that holds a selected atom holds every atom of its frames too, so reading
    whole frames costs no extra disk I/O; the kernel then reads the selected atoms in
    place (no gathered copy). Elsewhere (atoms split across chunks, e.g. pyh5md's
    (32, 128, 3)) the selection goes to the backend, which reads only the chunks
    that hold selected atoms.
    """
    ordered = (TIME_DIM, ATOM_DIM, SPATIAL_DIM)
    if idx is None:
        return position.transpose(*ordered), None
    selected = position.isel({ATOM_DIM: idx}).transpose(*ordered)
    if "source" not in position.encoding or _in_memory(position):
        return selected, None
    chunks = position.encoding.get("chunksizes")
    if chunks is not None and chunks[position.dims.index(ATOM_DIM)] < position.sizes[ATOM_DIM]:
        return selected, None
    return position.transpose(*ordered), idx


def _dask_plan(position: xr.DataArray, sub: xr.DataArray,
               idx: np.ndarray | None) -> tuple[da.Array, np.ndarray | None]:
    """The dask array each task takes, and which atoms of it the kernel compares.

    Blocks that hold whole frames are handed to the kernel as they are read, with
    the selected atoms read in place; a dask-level selection would copy them first.
    """
    full = position.transpose(TIME_DIM, ATOM_DIM, SPATIAL_DIM).data
    if idx is not None and len(full.chunks[1]) == 1 and len(full.chunks[2]) == 1:
        return full, idx
    return sub.data, None


def _opened_lazily(position: xr.DataArray) -> tuple[xr.DataArray, tuple[int, ...] | None]:
    """The lazily read positions behind ``open_dataset(..., chunks=...)``, and its time blocks.

    A getter task of the dask array reads its whole block through the backend, which a
    task then computes on; reading the same frames through the lazy path instead reads a
    few MiB at a time into a reused buffer, with only the selected atoms, and no block
    travels between processes. Positions as opened or sliced since
    (:func:`~h5mdx.analysis._dask_source.dask_source`: ``isel``/``sel`` with slices)
    qualify, where each block holds whole frames. Returns ``(position, None)``
    otherwise: any other dask operation keeps the dask path, never a wrong result.
    """
    if position.chunks is None:  # lazily indexed or in memory (``.data`` would read it all)
        return position, None
    data = position.data
    source = dask_source(data)
    if source is None:
        return position, None
    time_axis = position.dims.index(TIME_DIM)
    whole = all(len(c) == 1 for i, c in enumerate(data.chunks) if i != time_axis)
    if backend_array(source[0]) is None or not whole:
        return position, None
    opened = xr.DataArray(_source_variable(position.variable, source),
                          coords=position.coords, name=position.name)
    opened.encoding = dict(position.encoding)  # "source", "chunksizes": the read plan uses them
    return opened, tuple(int(c) for c in data.chunks[time_axis])


def _time_coords(sub: xr.DataArray) -> dict[str, xr.Variable]:
    """The result's coordinates: ``sub``'s on ``time`` alone, each read where it is computed.

    A coordinate opened with ``chunks=`` is a dask array of getter tasks: computing the
    result would run them on the workers and ship the values back (one task per stored
    chunk of ``step`` in a Zarr store: 962 for one written in 104-frame chunks). Such a
    coordinate, as opened or sliced since, goes back to the lazily indexed array it was
    made from, which the result's ``compute`` reads in the calling process; any other
    stays as it is.
    """
    coords = {}
    for name, coord in sub.coords.items():
        if coord.dims != (TIME_DIM,):
            continue
        var = coord.variable
        source = dask_source(var.data) if var.chunks is not None else None
        coords[str(name)] = var if source is None else _source_variable(var, source)
    return coords


def _source_variable(var: xr.Variable, source: tuple[Any, tuple[slice, ...]]) -> xr.Variable:
    """``var`` (dask-backed) as the lazily indexed array and slices it was made from
    (:func:`~h5mdx.analysis._dask_source.dask_source`'s ``source``)."""
    lazy, key = source
    lazily = xr.Variable(var.dims, lazy, var.attrs, encoding=var.encoding)
    return lazily[key] if any(k != slice(None) for k in key) else lazily


def _in_memory(position: xr.DataArray) -> bool:
    # xarray has no public test for "already loaded"; ``_in_memory`` is what its own
    # ``load``/``compute`` paths consult
    return bool(position.variable._in_memory)


#: Threads of one process (one GIL) up to which a task reads :data:`READ_STEP_BYTES` at a
#: time. Each read and kernel call costs a task ~50 µs of Python under the GIL; with more
#: threads, they queue for it, and the reads grow in proportion (up to 4x) so that the
#: GIL's share per frame stays that of 4 threads. Measured on 16 cores (threaded
#: scheduler, (100, n, 3), C-alpha; benchmarks/results/threads-16core.md): 16 threads ran
#: 420,000 frames/s (0.66x the 16-process read floor) with 4 MiB reads, 709,000 (1.13x)
#: with 16 MiB; at 1-4 threads 16 MiB was 4-13 % slower than 4 MiB.
GIL_THREADS = 4


def _stored_chunks(source: xr.DataArray) -> tuple[int, ...] | None:
    """The chunk shape ``source`` is stored in: HDF5's ``chunksizes`` (``h5md`` engine,
    None where contiguous) or Zarr's ``chunks``."""
    chunks = source.encoding.get("chunksizes") or source.encoding.get("chunks")
    return tuple(int(c) for c in chunks) if chunks else None


def _zarr_frames(source: xr.DataArray) -> bool:
    """Whether ``source`` is a Zarr array (opened by xarray's ``zarr`` engine) stored in
    chunks of whole frames: any run of whole chunks is then read and decoded once."""
    enc = source.encoding
    chunks = _stored_chunks(source)
    # HDF5's (the h5md engine's) by their keys, not by a "source": open_zarr_store names
    # the store there, and h5mdx rmsd STORE ran a reader thread beside zarr's own
    if "h5md_path" in enc or "chunksizes" in enc or "preferred_chunks" not in enc \
            or chunks is None or len(chunks) != source.ndim:
        return False
    return all(c >= n for d, c, n in zip(source.dims, chunks, source.shape, strict=True)
               if d != TIME_DIM)


def _read_step(source: xr.DataArray, process_threads: int | None = None) -> int | None:
    """Frames a task reads at a time: whole stored chunks of about :data:`READ_STEP_BYTES`,
    times ``process_threads / GIL_THREADS`` (1 to 4) where that many tasks share a process.

    None (the whole block at once) where the data are not read straight from an HDF5
    file or from Zarr chunks of whole frames (decoded whole, each read a run of them).
    A read of compressed HDF5 chunks spans whole chunks, each decoded once, into a
    buffer the task reuses: a task's block decoded at once into a new array took
    twice as long (page faults, and frames out of the CPU cache by the kernel's turn).
    """
    enc = source.encoding
    if _in_memory(source):
        return None
    if "source" not in enc and not _zarr_frames(source):
        return None
    frame_bytes = source.dtype.itemsize * int(np.prod(source.shape[1:]))
    chunks = _stored_chunks(source)
    scale = min(4, max(1, (process_threads or 1) // GIL_THREADS))
    # the module's name, read now: benchmarks/bench_steps.py sets it to try other sizes
    return read_step(frame_bytes, int(chunks[0]) if chunks else 1, READ_STEP_BYTES * scale)


def _block_frames(position: xr.DataArray, frames_per_block: int | None,
                  chunk_mib: float | None, workers: int | None) -> int:
    # both checked by rmsd._check_options, which every path here passes first
    if frames_per_block is not None:
        return int(frames_per_block)
    pref = position.encoding.get("preferred_chunks", {}).get(TIME_DIM)
    chunks = _stored_chunks(position)
    # a task that streams its block from the file holds one read at a time: a large block
    # costs no memory, and fewer tasks cost the scheduler less (STREAM_TARGET_MIB)
    # where the workers are unknown, the open's preferred block (its ``chunk_mib``) stands
    if chunk_mib is None and workers is not None and _read_step(position) is not None:
        chunk_mib = stream_target_mib(position.size * position.dtype.itemsize, workers)
    if chunk_mib is None and isinstance(pref, (int, np.integer)) and pref > 0:
        block = int(pref)
    else:  # blocks of whole frames, as the engine's preferred block is
        block = time_block(
            (position.sizes[TIME_DIM], position.sizes[ATOM_DIM], position.sizes[SPATIAL_DIM]),
            position.dtype.itemsize, chunks,
            DEFAULT_TARGET_MIB if chunk_mib is None else chunk_mib,
        )
    if workers is None:
        return block
    chunk = int(chunks[position.dims.index(TIME_DIM)]) if chunks else 1
    return balanced_block(position.sizes[TIME_DIM], block, chunk, workers)


def _open_block_ends(position: xr.DataArray, blocks: tuple[int, ...],
                     frames_per_block: int | None, chunk_mib: float | None,
                     workers: int | None) -> list[int]:
    """Where the tasks end on positions opened with ``chunks=`` (``blocks``: the open's
    blocks along time): runs of whole blocks, each up to the frames a lazily opened file
    would give a task (:func:`_block_frames`; a larger block stays alone, none is split).

    Only where the tasks stream their frames a few MiB at a time (an HDF5 file, or Zarr
    chunks of whole frames: a task then holds one read, whatever its size;
    :func:`_read_step`) and the tasks are sized
    for known workers or by ``frames_per_block``/``chunk_mib``; elsewhere one task per
    block, as opened. Each task costs the scheduler a few ms: the engine's 128 MiB blocks
    made 30 tasks of a 4 GB file for 2 workers, 0.61x the read floor against 0.73x for
    the same frames opened lazily (8 tasks; ``results/scale-2core-zen4-opens.md``).
    """
    ends = np.cumsum(blocks).tolist() or [0]
    sized = workers is not None or frames_per_block is not None or chunk_mib is not None
    if not sized or _read_step(position) is None:
        return ends
    frames = _block_frames(position, frames_per_block, chunk_mib, workers)
    merged: list[int] = []
    start = 0
    for a, b in zip([0, *ends[:-1]], ends, strict=True):
        if b - start > frames and a > start:  # the run so far is full: it ends here
            merged.append(a)
            start = a
    merged.append(ends[-1])
    return merged


def _threads_by_host() -> dict[str, list[int]] | None:
    """Tasks the default scheduler runs at once: per machine, the threads of each of its
    worker processes; None if unknown.

    A ``distributed`` client that is the default: each worker's threads, by host (None
    while its cluster has no worker yet); the synchronous scheduler: one thread; dask's
    threads: its ``num_workers`` setting (else the CPU count, its default) in this one
    process; dask's processes: as many processes of one thread each; all on this machine
    (``""``). Asked once per graph: a client answers over the network.
    """
    scheduler = dask.config.get("scheduler", None)
    if scheduler in ("sync", "synchronous", "single-threaded"):
        return {"": [1]}
    client = _default_client(scheduler)
    if client is not None:
        if getattr(client, "status", None) != "running":
            return None  # a closed (or closing) client: its workers are not known
        try:
            from distributed.comm import get_address_host

            per_host: dict[str, list[int]] = {}
            for address, n in client.nthreads().items():
                if int(n) > 0:
                    per_host.setdefault(get_address_host(address), []).append(int(n))
        except Exception:  # noqa: BLE001 - any failure to ask: workers unknown
            return None
        return per_host or None
    if scheduler not in (None, "threads", "threading", "processes", "multiprocessing"):
        return None
    workers = dask.config.get("num_workers", None)
    # dask's pools run CPU_COUNT (the process's affinity and cgroup limits), not
    # os.cpu_count(): under taskset, blocks were cut for CPUs no task ran on
    n = int(workers) if workers else int(dask.system.CPU_COUNT or 0)
    if not n:
        return None
    return {"": [1] * n if scheduler in ("processes", "multiprocessing") else [n]}


def _worker_count(by_host: dict[str, list[int]] | None) -> int | None:
    """Tasks the default scheduler runs at once in all (``by_host``: see
    :func:`_threads_by_host`), or None if unknown."""
    return sum(sum(p) for p in by_host.values()) if by_host else None


def _threads_per_host(by_host: dict[str, list[int]] | None) -> int | None:
    """Tasks the default scheduler runs at once on its busiest machine, or None if unknown.

    What a task needs to know to read ahead (:func:`~h5mdx.engine.frames.read_ahead_depth`):
    only where its machine has a spare core for every task running on it.
    """
    return max(sum(p) for p in by_host.values()) if by_host else None


def _threads_per_process(by_host: dict[str, list[int]] | None) -> int | None:
    """Tasks the default scheduler runs at once in its busiest process (one GIL), or None.

    Each read and kernel call of a task costs it some Python under its process's GIL
    (~50 µs); where many of its threads read at once they queue for it (see
    :data:`GIL_THREADS`).
    """
    return max(max(p) for p in by_host.values()) if by_host else None


def _default_client(scheduler: Any) -> Any:
    """The ``distributed`` client that computes by default, if any (only if imported)."""
    dist = sys.modules.get("distributed")
    if dist is None:
        return None
    if isinstance(scheduler, dist.Client):
        return scheduler
    if scheduler not in (None, "dask.distributed", "distributed"):
        return None
    try:
        return dist.default_client()
    except ValueError:  # no client
        return None


def _whole_frames_hint(position: xr.DataArray) -> str:
    """How to get blocks of whole frames, for where ``position`` comes from."""
    enc = position.encoding
    if "h5md_path" in enc:
        return ("Open the file with chunks={} (the h5md engine keeps whole frames in a "
                "block) or chunks={'atom': -1, 'spatial': -1}.")
    if "chunks" in enc or "preferred_chunks" in enc:  # a Zarr store's
        return (f"The store's chunks {tuple(enc.get('chunks') or ())} split the frames: "
                "write it with ds.md.to_zarr (whole frames per chunk), or open it with "
                "chunks={'atom': -1, 'spatial': -1}.")
    return "Chunk the positions with .chunk({'atom': -1, 'spatial': -1}) once."


def _dask_tasks(name: str, plan: tuple[da.Array, np.ndarray | None],
                kernel_args: tuple, hint: str = "") -> da.Array:
    """One task per dask block of ``plan``'s array, taking the block as it is read."""
    data, atoms = plan
    if len(data.chunks[1]) > 1 or len(data.chunks[2]) > 1:
        warnings.warn(
            "the positions are split into several dask chunks along atom/spatial; "
            f"rechunking once. {hint}".rstrip(),
            UserWarning,
            stacklevel=_user_stacklevel(),
        )
        data = data.rechunk({1: -1, 2: -1})
    # one task per block, each taking its (time, atom, spatial) block as it is:
    # map_blocks with drop_axis would pass every block through np.concatenate, a full
    # copy of the positions read
    bounds = np.cumsum((0, *data.chunks[0]))
    dsk = {
        (name, i): (_dask_block, (data.name, i, 0, 0), *kernel_args,
                    int(bounds[i]), int(bounds[i + 1]), atoms)
        for i in range(len(data.chunks[0]))
    }
    graph = HighLevelGraph.from_collections(name, dsk, dependencies=[data])  # type: ignore[arg-type,list-item]
    return da.Array(graph, name, chunks=(data.chunks[0],), dtype=np.float64,
                    meta=np.array((), dtype=np.float64))


def task_frames(graph: Any, key: Any) -> tuple[str | None, str | None, int, int] | None:
    """The file, element and frames ``[start, stop)`` of the RMSD task ``key`` of
    ``graph`` (a task of :func:`_lazy_tasks` or :func:`_dask_tasks`; the file and
    element None for a dask block's), or None for any other key.

    What an error about the task (its worker died under it) names.
    """
    try:
        task = graph[key]
    except (KeyError, TypeError):
        return None
    if not isinstance(task, tuple) or len(task) < 8 or task[0] not in (_lazy_block,
                                                                       _dask_block):
        return None
    filename, h5path = task[-1] if task[0] is _lazy_block else (None, None)
    return filename, h5path, int(task[6]), int(task[7])


def _chunk_grid(source: xr.DataArray) -> tuple[int, int] | None:
    """``(stored frame of source's frame 0, frames per stored chunk)`` where ``source``
    is stored in chunks of several frames and starts at a known frame; None elsewhere
    (reads need no aligning)."""
    chunks = _stored_chunks(source)
    if not chunks or int(chunks[0]) <= 1:
        return None
    start = stored_start(source.variable)
    return None if start is None else (start, int(chunks[0]))


def _lead(grid: tuple[int, int] | None, frame: int) -> int:
    """Frames from ``source``'s ``frame`` to the next stored chunk boundary (``grid``:
    :func:`_chunk_grid`; 0 where unknown or on a boundary)."""
    return (-(grid[0] + frame)) % grid[1] if grid else 0


def _lazy_tasks(name: str, plan: tuple[xr.DataArray, np.ndarray | None], ends: list[int],
                kernel_args: tuple, host_threads: int | None = None,
                process_threads: int | None = None) -> da.Array:
    """One task per block of frames ending at ``ends``, each reading its frames itself,
    whole stored chunks at a read where it can (a task starting inside a chunk first
    reads up to the chunk's end: a read straddling two Zarr chunks decodes both)."""
    source, atoms = plan
    where = (source.encoding.get("source"), source.encoding.get("h5md_path") or source.name)
    step = _read_step(source, process_threads)
    grid = _chunk_grid(source) if step is not None else None
    dsk: dict[tuple[str, int], tuple[Any, ...]] = {}
    sizes = []
    for i, b in enumerate(ends):
        a = ends[i - 1] if i else 0
        lead = _lead(grid, a)
        # a Variable on (time, atom, spatial): no coordinates travel with the task
        block: Any = source.variable[a:b]
        block = frame_reader(block) or block
        dsk[(name, i)] = (_lazy_block, block, *kernel_args, a, b, atoms, step, host_threads,
                          process_threads, lead, where)
        sizes.append(b - a)
    graph = HighLevelGraph.from_collections(name, dsk, dependencies=[])  # type: ignore[arg-type]
    return da.Array(graph, name, chunks=(tuple(sizes),), dtype=np.float64,
                    meta=np.array((), dtype=np.float64))
