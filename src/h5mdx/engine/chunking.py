"""Choose dask block sizes that line up with HDF5 chunks and share out over workers."""

from __future__ import annotations

import math

__all__ = ["DEFAULT_TARGET_MIB", "READ_STEP_BYTES", "STREAM_ROUNDS", "STREAM_TARGET_MIB",
           "balanced_block", "read_step", "stream_target_mib", "time_block"]

#: Default target size of one dask block along ``time``, in MiB: dask's own default
#: (``array.chunk-size``, 128 MiB). A task that reads a block a few MiB at a time
#: (:func:`h5mdx.rmsd`) needs no more memory for a larger block, and each task costs
#: the scheduler 1-10 ms (``benchmarks/bench_tasks.py``): 128 MiB blocks gave
#: 1.14-1.27x the RMSD throughput of 32 MiB ones on dask's process pool and
#: ``distributed`` (1 and 2 workers, 2-core AMD EPYC; ``benchmarks/bench_blocks.py``).
DEFAULT_TARGET_MIB = 128.0

#: Largest target size of one task's block where the task streams it from the file a few
#: MiB at a time (:func:`h5mdx.rmsd` of positions opened without ``chunks=`` from an
#: HDF5 file): its memory is that of one read however large the block, so only the
#: scheduler's cost per task and the load balance are left to weigh
#: (:func:`stream_target_mib`). 512 MiB blocks gave 1.05-1.14x the RMSD throughput of
#: 128 MiB ones on dask's process pool and ``distributed`` (1 and 2 workers, 100,000
#: frames, 2-core AMD EPYC), the threaded scheduler 0.95-1.03x
#: (``benchmarks/bench_blocks.py --mib 128,256,512,1024``: results/blocks-large.md).
STREAM_TARGET_MIB = 512.0

#: Rounds of tasks per worker that streamed blocks keep at least, down to
#: ``DEFAULT_TARGET_MIB``: a slow task (a straggler) then holds up a quarter of its
#: worker's share, and ``distributed`` has tasks left to move to idle workers.
STREAM_ROUNDS = 4

#: Bytes a task (or an MPI rank) reads at a time: small enough to stay in the CPU cache
#: (L3) for the kernel; 4 MiB measured best of 2, 4 and 8 MiB on the 2-core AMD EPYC
#: (32 MiB L3; ``benchmarks/bench_steps.py``).
READ_STEP_BYTES = 2**22


def time_block(
    shape: tuple[int, ...],
    itemsize: int,
    hdf5_chunks: tuple[int, ...] | None,
    target_mib: float = DEFAULT_TARGET_MIB,
) -> int:
    """Frames per dask block along the first (time) axis.

    The block is a whole number of HDF5 chunks along time, holds every other
    axis whole, and is sized near ``target_mib``. Contiguous datasets get
    blocks of the target size.

    Parameters
    ----------
    shape : tuple of int
        Shape of the dataset; axis 0 is time.
    itemsize : int
        Bytes per element.
    hdf5_chunks : tuple of int or None
        The HDF5 chunk shape, or None for a contiguous dataset.
    target_mib : float, optional
        Target block size in MiB.

    Returns
    -------
    int
        Frames per block (at least one HDF5 chunk, at most the whole axis).

    Examples
    --------
    >>> time_block((30000, 3341, 3), 4, (1, 3341, 3), target_mib=32)
    836
    """
    n_frames = int(shape[0]) if shape else 0
    if n_frames <= 1:
        return max(n_frames, 1)
    frame_bytes = max(1, math.prod(int(s) for s in shape[1:]) * int(itemsize))
    target_frames = max(1, int(target_mib * 2**20 // frame_bytes))
    step = int(hdf5_chunks[0]) if hdf5_chunks else 1
    step = max(1, step)
    frames = max(step, (target_frames // step) * step)
    return min(frames, n_frames)


def stream_target_mib(total_bytes: int, workers: int | None) -> float:
    """Target block size (MiB) for tasks that stream their blocks from the file.

    As large as :data:`STREAM_TARGET_MIB`, for fewer tasks, but no larger than gives each
    of ``workers`` :data:`STREAM_ROUNDS` rounds of tasks, and never below
    :data:`DEFAULT_TARGET_MIB`.

    Parameters
    ----------
    total_bytes : int
        Bytes the tasks read in all.
    workers : int or None
        Tasks the scheduler runs at once; None (unknown): :data:`DEFAULT_TARGET_MIB`.

    Returns
    -------
    float
        MiB.

    Examples
    --------
    >>> stream_target_mib(4 * 2**30, 2)  # 4 GiB on 2 workers: 4 rounds of 512 MiB
    512.0
    >>> stream_target_mib(4 * 2**30, 16)  # on 16: 128 MiB, 2 rounds
    128.0
    >>> stream_target_mib(2**40, 16)  # 1 TiB
    512.0
    """
    if workers is None or workers < 1:
        return DEFAULT_TARGET_MIB
    per_round = total_bytes / 2**20 / (workers * STREAM_ROUNDS)
    return float(min(STREAM_TARGET_MIB, max(DEFAULT_TARGET_MIB, per_round)))


def read_step(frame_bytes: int, chunk_frames: int | None,
              target_bytes: int = READ_STEP_BYTES) -> int:
    """Frames to read at a time: whole HDF5 chunks of about ``target_bytes``.

    Reading a block piece by piece into one reused buffer keeps each piece in the CPU
    cache between the read and the kernel, and allocates nothing per piece; a piece
    of whole chunks never reads a chunk twice.

    Parameters
    ----------
    frame_bytes : int
        Bytes of one frame.
    chunk_frames : int or None
        Frames per HDF5 chunk along time (None or 1: contiguous or one-frame chunks).
    target_bytes : int, optional
        The piece size aimed at (default :data:`READ_STEP_BYTES`).

    Returns
    -------
    int
        Frames per piece: a positive multiple of ``chunk_frames``.

    Examples
    --------
    >>> read_step(3341 * 3 * 4, 100)  # one 4 MB chunk
    100
    >>> read_step(3341 * 3 * 4, 1)
    104
    """
    per_chunk = max(1, int(chunk_frames or 1))
    n_chunks = max(1, int(target_bytes) // max(1, int(frame_bytes) * per_chunk))
    return n_chunks * per_chunk


def balanced_block(n_frames: int, block: int, chunk: int, workers: int) -> int:
    """Frames per block, at most ``block``, for blocks that share out evenly over ``workers``.

    ``block``-frame blocks rarely come out as a multiple of the worker count: 10 blocks on
    16 workers leave 6 idle, 9 blocks on 2 workers make one of them wait for the other's
    fifth. This shrinks the blocks, in whole HDF5 chunks, until their number fills the same
    number of rounds of ``workers`` tasks (never more rounds, never larger blocks).

    Parameters
    ----------
    n_frames : int
        Frames to share out.
    block : int
        The largest block wanted (e.g. :func:`time_block`'s).
    chunk : int
        Frames per HDF5 chunk (1 for contiguous data): blocks stay whole chunks.
    workers : int
        Tasks that run at once.

    Returns
    -------
    int
        Frames per block, between ``chunk`` (or ``block``, if smaller) and ``block``.

    Examples
    --------
    >>> balanced_block(30000, 3300, 100, 16)  # 10 blocks -> 16
    1900
    >>> balanced_block(30000, 3300, 100, 2)  # 10 blocks: already even
    3000
    """
    block, chunk = max(1, int(block)), max(1, int(chunk))
    if workers <= 1 or n_frames <= chunk:
        return block
    rounds = _ceil_div(_ceil_div(n_frames, block), workers)  # of ``block``-frame blocks
    frames = _ceil_div(n_frames, rounds * workers)  # per block, for full rounds
    frames = _ceil_div(frames, chunk) * chunk  # whole chunks (may give fewer blocks)
    return max(min(chunk, block), min(block, frames))


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)
