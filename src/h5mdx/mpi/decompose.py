"""Split a trajectory's frames into balanced, chunk-aligned blocks (numpy only).

The MPI-IO path gives every rank one contiguous block of frames. A block that
starts or stops in the middle of an HDF5 chunk makes two ranks read (and, when
compressed, decompress) the same chunk, so block boundaries are put on chunk
boundaries; the chunks themselves are spread as evenly as possible. This module
has no MPI dependency so the decomposition can be tested and reused anywhere.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["Block", "atom_runs", "chunk_aligned_blocks"]


@dataclass(frozen=True)
class Block:
    """A contiguous range of frames ``[start, stop)`` given to one worker (rank)."""

    rank: int
    start: int
    stop: int

    @property
    def n_frames(self) -> int:
        """Number of frames in the block."""
        return self.stop - self.start


def chunk_aligned_blocks(
    n_frames: int,
    n_ranks: int,
    chunk_frames: int | None = None,
    *,
    start: int = 0,
    stop: int | None = None,
) -> list[Block]:
    """Balanced contiguous blocks of frames, one per rank, on HDF5 chunk boundaries.

    The frames ``[start, stop)`` are cut at multiples of ``chunk_frames`` (counted
    from frame 0 of the file, where the HDF5 chunks start) into whole chunks, and
    the chunks are dealt out in contiguous runs whose lengths differ by at most
    one chunk; the first ranks get the extra chunks. Ranks beyond the number of
    chunks get empty blocks (``start == stop``), placed at the end of the range.

    Parameters
    ----------
    n_frames : int
        Number of frames in the dataset.
    n_ranks : int
        Number of blocks to make (the MPI communicator size).
    chunk_frames : int or None, optional
        Frames per HDF5 chunk along time; None or 1 for contiguous datasets,
        which are split frame by frame.
    start, stop : int, optional
        The frame range to split (default: all frames).

    Returns
    -------
    list of Block
        ``n_ranks`` blocks in rank order; together they cover ``[start, stop)``
        exactly once.

    Raises
    ------
    ValueError
        If ``n_ranks`` < 1, ``chunk_frames`` < 1 or the range is invalid.

    Examples
    --------
    >>> [(b.start, b.stop) for b in chunk_aligned_blocks(98, 4, 10)]
    [(0, 30), (30, 60), (60, 80), (80, 98)]
    >>> [(b.start, b.stop) for b in chunk_aligned_blocks(98, 4)]
    [(0, 25), (25, 50), (50, 74), (74, 98)]
    """
    n_frames = int(n_frames)
    n_ranks = int(n_ranks)
    if n_ranks < 1:
        raise ValueError(f"n_ranks must be at least 1, got {n_ranks}")
    if n_frames < 0:
        raise ValueError(f"n_frames must be >= 0, got {n_frames}")
    c = 1 if chunk_frames is None else int(chunk_frames)
    if c < 1:
        raise ValueError(f"chunk_frames must be at least 1 (or None), got {chunk_frames}")
    stop = n_frames if stop is None else int(stop)
    start = int(start)
    if not 0 <= start <= stop <= n_frames:
        raise ValueError(
            f"invalid frame range [{start}, {stop}) for a dataset of {n_frames} frames"
        )
    # Cut points: start, the chunk boundaries strictly inside (start, stop), stop.
    first_boundary = (start // c + 1) * c
    inner = np.arange(first_boundary, stop, c, dtype=np.int64)
    edges = np.concatenate([[start], inner, [stop]]) if stop > start else np.array([start])
    n_pieces = len(edges) - 1
    base, extra = divmod(n_pieces, n_ranks)
    counts = np.full(n_ranks, base, dtype=np.int64)
    counts[:extra] += 1
    bounds = np.concatenate([[0], np.cumsum(counts)])
    return [
        Block(rank=r, start=int(edges[bounds[r]]), stop=int(edges[bounds[r + 1]]))
        for r in range(n_ranks)
    ]


def atom_runs(indices: np.ndarray) -> list[tuple[int, int]]:
    """Group sorted atom indices into runs ``[a, b)`` of consecutive indices.

    A selection read from HDF5 as one hyperslab per run costs far less than
    one per atom (e.g. a protein's backbone is a few long runs).

    Parameters
    ----------
    indices : array of int
        Strictly increasing 0-based atom indices.

    Returns
    -------
    list of (int, int)
        Half-open runs covering exactly ``indices``.

    Raises
    ------
    ValueError
        If ``indices`` is not strictly increasing.

    Examples
    --------
    >>> atom_runs(np.array([0, 1, 2, 5, 7, 8]))
    [(0, 3), (5, 6), (7, 9)]
    """
    idx = np.asarray(indices, dtype=np.int64).ravel()
    if idx.size == 0:
        return []
    if np.any(np.diff(idx) <= 0):
        raise ValueError("atom indices must be strictly increasing (sorted, no duplicates)")
    breaks = np.flatnonzero(np.diff(idx) != 1) + 1
    starts = np.concatenate([[0], breaks])
    stops = np.concatenate([breaks, [idx.size]])
    return [(int(idx[s]), int(idx[e - 1]) + 1) for s, e in zip(starts, stops, strict=True)]
