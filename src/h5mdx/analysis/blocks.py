"""What one task of :func:`h5mdx.analysis.rmsd.rmsd` computes: a block of frames read
and its RMSD.

The ways a block is read are switched here: through xarray's lazy indexing, fused with
the kernel in runs of whole chunks read by h5mdx (``H5MDX_FUSED_READ``,
:func:`fused_read`), as views of a file mapping (``H5MDX_MAPPED_READ``,
:func:`mapped_read`), or from a dask block already in memory. Each task times its read
and its kernel with :class:`h5mdx.timing.phases.BlockTimer`.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable
from typing import Any

import numpy as np
import xarray as xr

from h5mdx.analysis.qcp import prepare, rmsd_qcp, warm_up
from h5mdx.engine.frames import FrameReader, read_ahead, read_ahead_depth
from h5mdx.errors import H5MDError, H5MDReadError
from h5mdx.format import mapped as _mapped
from h5mdx.timing.phases import BlockTimer

__all__ = ["FUSED_READ_BYTES", "FUSED_READ_ENV", "MAPPED_READ_ENV", "fused_read", "mapped_read"]


def _lazy_block(block: xr.Variable | FrameReader, ref_c: np.ndarray, w: np.ndarray | None,
                superposition: bool, kernel: str, start: int, stop: int,
                atoms: np.ndarray | None = None, step: int | None = None,
                host_threads: int | None = None,
                process_threads: int | None = None, lead: int = 0,
                where: tuple[str | None, str | None] = (None, None)) -> np.ndarray:
    """RMSD of one task's frames, read ``step`` frames at a time (the first read ``lead``
    frames, up to the first stored chunk boundary, where the task's frames start inside
    a chunk: every other read then holds whole chunks).

    Reading a few MiB at a time into the same buffer keeps the frames in the CPU cache
    between the read and the kernel; the task's block stays large for the scheduler.
    ``block`` is the task's frames as a lazily indexed Variable, or, for the ``h5md``
    engine's plain slices, a :class:`~h5mdx.engine.frames.FrameReader` of them that
    spares each read xarray's indexing (~0.1 ms a read). ``host_threads``: tasks the
    scheduler runs at once on this machine, ``process_threads`` in this process; with a
    spare core for each and few sharing the GIL, the reads run ahead of the kernel in a
    reader thread (:func:`~h5mdx.engine.frames.read_ahead`). Without (every core busy,
    or many threads to a process), a task whose frames are stored as served reads and
    computes them in one compiled call without the GIL (:func:`_fused_block`). Where
    mapped reads are chosen (:func:`mapped_read`), such a task runs the kernel on a
    mapping of the file instead (:func:`_mapped_block`), whatever the cores. ``where``:
    the store and the variable, named in a read error (a damaged Zarr chunk failed deep
    inside its codec, or as a reshape, naming nothing).
    """
    n = stop - start
    step = n if not step else step
    out = np.empty(n, dtype=np.float64)

    def read_variable(a: int, b: int) -> np.ndarray:
        try:
            return np.asarray((block[a:b] if b - a < n else block).values)  # type: ignore[union-attr,index]
        except (H5MDError, MemoryError):
            raise
        except Exception as err:  # noqa: BLE001 - a codec's, zarr's or the store's own
            raise H5MDReadError(where[0], where[1], f"cannot read frames {start + a}-"
                                f"{start + b - 1}: {type(err).__name__}: {err}") from err

    read: Callable[[int, int], np.ndarray] = read_variable
    with BlockTimer(start, stop, kind="rmsd") as timer:
        with timer.phase("warmup"):  # once per process: the kernel, where the chunks lie
            warm_up(kernel)
            if isinstance(block, FrameReader):
                block.warm()
                read = block.bind()  # the direct reader found once per task
        # ``atoms``: the selected atoms of whole frames, read in place
        qcp = prepare(ref_c, w, superposition, kernel, reference_centered=True, atoms=atoms)
        # the next reads run in a reader thread while the kernel runs on these frames;
        # each buffer is read into again only after its frames are done with
        depth = read_ahead_depth(host_threads, process_threads)
        done = 0
        if qcp.reads_files and isinstance(block, FrameReader):
            if mapped_read() and block.step == 1:  # strided: a mapping a frame, 3.6x slower
                done = _mapped_block(block, qcp, out, timer)
            if not done and fused_read(depth, strided=block.step != 1):  # or not mappable
                done = _fused_block(block, qcp, out, timer)
        first = min(n, lead) if lead and not done else done
        spans = [(done, first)] if first > done else []
        spans += [(a, min(n, a + step)) for a in range(first, n, step)]
        with contextlib.closing(read_ahead(read, spans, depth)) as frames:
            for a, b in spans:
                with timer.phase("io"):  # the wait for the frames
                    data = next(frames)
                    timer.bytes_read += data.nbytes
                with timer.phase("compute"):
                    out[a:b] = qcp(data)
        if done:  # the frames the fused kernel could not trust, again by the exact path
            for f in np.flatnonzero(out[:done] < 0.0).tolist():
                out[f] = qcp(read(f, f + 1))[0]
    return out


#: Environment variable: ``0`` never reads with the fused kernel, ``1`` always (where
#: it can), unset: where no reads run ahead (:func:`fused_read`).
FUSED_READ_ENV = "H5MDX_FUSED_READ"


#: Bytes of whole frames the fused kernel reads at a time (at least one frame): a few
#: hundred KiB, so that the kernel finds the frames still in the core's cache (L2: 512
#: KiB-2 MiB a core on current x86 servers) instead of memory, which 16 cores copying
#: from the page cache keep busy. On 2 cores, 256 KiB, 1 MiB and 4 MiB differed by no
#: more than the VM's spread between runs (benchmarks/bench_threads.py,
#: results/threads-2core-fused.md); 16 cores have not measured them yet.
FUSED_READ_BYTES = 1 << 20


def fused_read(depth: int, strided: bool = False) -> bool:
    """Whether a task reads and computes in one compiled call (``_fused_block``).

    ``$H5MDX_FUSED_READ`` where set; otherwise where reads do not run ahead
    (``depth`` 0: no spare core per task, or too many tasks sharing a process), since a
    reader thread with a spare core overlaps the reads with the kernel, which one
    compiled loop cannot; and always for ``strided`` frames, which each other read
    would take as a strided box through h5py or the backend.
    """
    on = _switch(FUSED_READ_ENV)
    return (depth == 0 or strided) if on is None else on


def _switch(variable: str) -> bool | None:
    """An on/off environment variable: True for ``1``, False for ``0``, None where unset
    or empty; anything else is refused."""
    value = os.environ.get(variable, "").strip()
    if value not in ("", "0", "1"):
        raise ValueError(f"{variable} must be 0 or 1, not {value!r}")
    return None if not value else value == "1"


def _stored_runs(block: FrameReader, n: int) -> tuple[int, np.ndarray, np.ndarray] | None:
    """Where the task's ``n`` frames lie in the file, as runs of whole frames stored as
    served (file descriptor, offsets, byte counts); None where they are not so stored."""
    runs = block.bind_runs()
    return runs(0, n) if runs is not None else None


def _fused_block(block: FrameReader, qcp: Any, out: np.ndarray, timer: BlockTimer) -> int:
    """RMSD of the task's frames read by the compiled kernel itself; the frames done.

    One call, without the GIL: ``pread`` of :data:`FUSED_READ_BYTES` at a time into one
    buffer, then the kernel on it (:meth:`h5mdx.analysis.qcp.PreparedQCP.from_file`).
    Per read, no Python runs: with 16 threads of one process, each 4 MiB read cost
    ~50 µs of Python under the GIL, which they queued for. The kernel applies a unit
    conversion of the backend to each read as the backend would (``scale``). 0 where the
    frames are not stored as bytes of the served values
    (:meth:`h5mdx.engine.arrays.H5MDArray.rows_runs`); fewer than all where a read
    failed: the caller reads the rest by the ordinary path, which says why.
    """
    located = _stored_runs(block, len(out))
    if located is None:
        return 0
    fd, offsets, nbytes = located
    shape = block.array.shape[1:]
    frame_bytes = block.array.dtype.itemsize * int(np.prod(shape))
    frames = np.empty((max(1, FUSED_READ_BYTES // max(1, frame_bytes)), *shape),
                      dtype=block.array.dtype)
    done, t_io, t_compute = qcp.from_file(fd, offsets, nbytes, frames, out,
                                          scale=block.array.scale)
    timer.add("io", t_io)
    timer.add("compute", t_compute)
    timer.bytes_read += done * frame_bytes
    return done


#: Environment variable: ``1`` runs the kernel on a mapping of the file where the frames
#: are stored as served (``_mapped_block``); ``0`` or unset, never.
MAPPED_READ_ENV = "H5MDX_MAPPED_READ"


def mapped_read() -> bool:
    """Whether a task runs the kernel on a mapping of the file (``_mapped_block``).

    ``$H5MDX_MAPPED_READ`` set to ``1``, on a system that can map files. Off by default:
    a file truncated by another program while it is mapped kills the process
    (``h5mdx.format.mapped``); on 2 cores the RMSD tasks ran slower with it
    (``benchmarks/results/mapped-read-2core.md``), and on 16 cores only the kernel on
    the mapping alone is measured (1.08-1.89x the fused read's ``pread``,
    ``benchmarks/results/mapped-16core.md``), not the tasks.
    """
    return bool(_switch(MAPPED_READ_ENV)) and _mapped.available()


def _mapped_block(block: FrameReader, qcp: Any, out: np.ndarray, timer: BlockTimer) -> int:
    """RMSD of the task's frames computed on a mapping of the file; the frames done.

    No copy: the kernel runs on the page cache's own pages, a window of
    :data:`h5mdx.format.mapped.WINDOW_BYTES` at a time, one call per window (the GIL
    released in the kernel). Timed as ``io`` (making each mapping, which fills its page
    tables and reads from disk what the page cache lacks) and ``compute``. 0 where the
    frames are not stored as served (a unit conversion would have to write to the
    mapping); fewer than all where a mapping failed (the file shorter than when it was
    opened): the caller reads the rest by the ordinary path, which says why.
    """
    if block.array.scale != 1.0:
        return 0
    located = _stored_runs(block, len(out))
    if located is None:
        return 0
    fd, offsets, nbytes = located
    shape = block.array.shape[1:]
    done = 0

    def each(frames: np.ndarray) -> None:
        nonlocal done
        with timer.phase("compute"):
            out[done:done + len(frames)] = qcp(frames)
        done += len(frames)

    with contextlib.suppress(OSError):
        timer.add("io", _mapped.map_rows(fd, offsets, nbytes, shape, block.array.dtype, each,
                                         filename=block.array.filename))
    timer.bytes_read += done * block.array.dtype.itemsize * int(np.prod(shape))
    return done


def _dask_block(data: np.ndarray, ref_c: np.ndarray, w: np.ndarray | None,
                superposition: bool, kernel: str, start: int, stop: int,
                atoms: np.ndarray | None = None) -> np.ndarray:
    with BlockTimer(start, stop, kind="rmsd") as timer:
        # the block arrives already read by dask (the read is fused into this task)
        timer.bytes_read = data.nbytes
        with timer.phase("warmup"):
            warm_up(kernel)
        with timer.phase("compute"):
            out = rmsd_qcp(ref_c, data, w, superposition, kernel, reference_centered=True,
                           atoms=atoms)
    return out
