"""Parallel HDF5 reads of H5MD positions with ``driver="mpio"``.

Every rank opens the same file through MPI-IO and reads its own block of
frames. :class:`SlabReader` reads ``[start, stop)`` frames of all atoms or of a
selection (one hyperslab per run of consecutive atoms) straight into a numpy
buffer, with independent or collective transfers. In collective mode every
rank must take part in every read, so a rank without frames left issues an
empty selection (:meth:`SlabReader.read_none`); h5py's own ``dset[a:a]`` would
skip the call and the other ranks would hang.
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass
from typing import Any

import h5py
import numpy as np

from h5mdx.errors import H5MDFormatError, H5MDReadError
from h5mdx.format.chunk_index import chunk_tree, index_all_chunks
from h5mdx.format.h5md import ElementInfo, FileInfo, open_h5md, scan
from h5mdx.mpi import require_parallel_h5py
from h5mdx.mpi.decompose import Block, atom_runs, chunk_aligned_blocks

__all__ = [
    "LOCKING_HINT",
    "PositionSource",
    "SlabReader",
    "open_parallel",
    "position_source",
    "rank_blocks",
    "skips_a_filter",
]

#: Advice printed when HDF5's file locking fails (common on Lustre/GPFS/NFS).
LOCKING_HINT = (
    "HDF5 could not lock the file; on parallel or network file systems set "
    "HDF5_USE_FILE_LOCKING=FALSE in the environment of every rank "
    "(e.g. mpirun -x HDF5_USE_FILE_LOCKING=FALSE ...)"
)


def open_parallel(path: str | os.PathLike[str], comm: Any) -> h5py.File:
    """Open ``path`` read-only on every rank of ``comm`` with the MPI-IO driver.

    Parameters
    ----------
    path : path-like
        An H5MD file on a file system every rank can see.
    comm : mpi4py.MPI.Comm
        The communicator (collective call: every rank must call it).

    Returns
    -------
    h5py.File

    Raises
    ------
    MissingDependencyError
        If h5py is not built with MPI.
    OSError
        If the file cannot be opened; locking failures carry :data:`LOCKING_HINT`.
    """
    require_parallel_h5py()
    _same_file_on_every_rank(path, comm)
    _refuse_a_writer(path, comm)
    try:
        return open_h5md(path, driver="mpio", comm=comm)
    except (OSError, H5MDFormatError) as err:
        text = str(err).lower()
        if "lock" in text and "HDF5_USE_FILE_LOCKING" not in os.environ:
            raise OSError(f"{os.fspath(path)}: {LOCKING_HINT} ({err})") from err
        raise


def _same_file_on_every_rank(path: str | os.PathLike[str], comm: Any) -> None:
    """Refuse, on every rank, a path the ranks do not all see alike (as a file of one size).

    The MPI-IO open is collective: a rank that failed before it (no such file on its node,
    a node-local ``/tmp``) left the others waiting in it forever, with no message.
    """
    try:
        st = os.stat(path)
        seen = "a directory" if os.path.isdir(path) else f"{st.st_size} bytes"
    except OSError as err:
        seen = err.strerror or type(err).__name__
    views = comm.allgather(seen)
    if len(set(views)) == 1:
        return  # alike: the open fails alike, or not at all
    ranks: dict[str, list[int]] = {}
    for rank, view in enumerate(views):
        ranks.setdefault(view, []).append(rank)
    told = "; ".join(f"rank(s) {', '.join(map(str, r))}: {view}" for view, r in ranks.items())
    raise H5MDReadError(os.fspath(path), None,
                        f"the ranks do not see the same file ({told}); put it on a file "
                        "system every rank (every node) sees, such as the shared scratch")


def _refuse_a_writer(path: str | os.PathLike[str], comm: Any) -> None:
    """Refuse, on every rank, a file another process has open for writing.

    HDF5's MPI-IO driver takes no file lock, so a parallel open of a file being written
    (without SWMR) succeeds and reads whatever is on disk: a snapshot, or metadata torn
    mid-write. Rank 0 opens the file once the serial way, which HDF5 refuses where a
    writer holds its lock (unless ``HDF5_USE_FILE_LOCKING=FALSE``), and every rank raises
    that error (:func:`~h5mdx.format.h5md.open_h5md`'s message).
    """
    problem = None
    if comm.rank == 0:
        try:
            open_h5md(path).close()
        except (H5MDReadError, H5MDFormatError) as err:
            if "open for writing" in err.problem or "a writer has it open" in err.problem:
                problem = (type(err).__name__, err.problem)
        except OSError:
            pass  # the parallel open says it, on every rank
    problem = comm.bcast(problem, root=0)
    if problem is not None:
        kind = H5MDReadError if problem[0] == "H5MDReadError" else H5MDFormatError
        raise kind(os.fspath(path), None, problem[1])


@dataclass(frozen=True)
class PositionSource:
    """Where the positions of a particles group are and how they are stored."""

    info: FileInfo
    group: str
    element: ElementInfo

    @property
    def n_frames(self) -> int:
        """Number of frames."""
        return int(self.element.shape[0])

    @property
    def n_atoms(self) -> int:
        """Number of atoms."""
        return int(self.element.shape[1])

    @property
    def chunk_frames(self) -> int | None:
        """Frames per HDF5 chunk along time, or None for contiguous storage."""
        return int(self.element.chunks[0]) if self.element.chunks else None


def position_source(f: h5py.File, group: str | None = None) -> PositionSource:
    """Find the ``position`` element of a particles group.

    Parameters
    ----------
    f : h5py.File
        An open H5MD file.
    group : str, optional
        The particles group (``"trajectory"`` or ``"particles/trajectory"``); by
        default the only group that has positions.

    Returns
    -------
    PositionSource

    Raises
    ------
    H5MDFormatError
        If no group (or several, with ``group`` unset) has time-dependent positions.
    """
    info = scan(f, deep_connectivity=False)  # the particles need no connectivity groups
    candidates = {
        name: pg.elements["position"]
        for name, pg in info.particles.items()
        if "position" in pg.elements and pg.elements["position"].time_dependent
    }
    if group is not None:
        name = (info.particles_group(group)
                or group.strip("/").removeprefix("particles/"))
        if name not in candidates:
            where = (info.particles[name].path if name in info.particles
                     else f"/particles/{name}")
            raise H5MDFormatError(
                f.filename, f"{where}/position",
                f"no time-dependent positions here; groups with positions: "
                f"{sorted(candidates) or 'none'}",
            )
    elif len(candidates) == 1:
        name = next(iter(candidates))
    elif not candidates:
        static = [pg.elements["position"].path for pg in info.particles.values()
                  if "position" in pg.elements]
        raise H5MDFormatError(
            f.filename, "/particles",
            "no particles group has time-dependent positions"
            + (f" ({', '.join(static)}: one time-independent frame, no trajectory to "
               "compare)" if static else ""))
    else:
        raise H5MDFormatError(
            f.filename, "/particles",
            f"several particles groups have positions ({sorted(candidates)}); "
            "choose one with --group",
        )
    el = candidates[name]
    if len(el.shape) != 3:
        raise H5MDFormatError(
            f.filename, el.value_path,
            f"positions must have shape (time, atom, spatial), got {el.shape}",
        )
    return PositionSource(info=info, group=name, element=el)


#: The most chunks :func:`skips_a_filter` looks up one by one (HDF5 1.10 without a
#: readable B-tree: quadratic, 0.5 s for 8,000 chunks, 35 s for 16,000 of another index).
LOOKUP_CHUNKS = 4096


def skips_a_filter(dset: h5py.Dataset, lookup_chunks: int = LOOKUP_CHUNKS) -> bool | None:
    """Whether a chunk of ``dset`` is stored without one of its filters.

    HDF5 stores a chunk that an optional filter could not shrink (lzf or gzip of
    incompressible data) as it is and says so in the chunk's filter mask. Collective
    MPI-IO reads of HDF5 1.10 run the filters on such a chunk anyway, and fail
    (``Invalid data for LZF decompression``); independent reads honour the mask.

    Parameters
    ----------
    dset : h5py.Dataset
    lookup_chunks : int
        Where the masks cannot be read in one pass (HDF5 before 1.12.3, and an index
        other than a version-1 B-tree or no pyfive), the most chunks looked up one by one.

    Returns
    -------
    bool or None
        None where the dataset has more chunks than that: not known.
    """
    dsid = dset.id
    if dset.chunks is None or dsid.get_create_plist().get_nfilters() == 0:
        return False
    located = index_all_chunks(dset)  # HDF5 >= 1.12.3: one pass over the index
    if located is not None:
        return any(mask for _, _, mask in located.values())
    tree = chunk_tree(dset)  # the version-1 B-tree read from the file (pyfive)
    if tree is not None:
        with contextlib.suppress(OSError, ValueError):
            return bool(tree.arrays(0, dset.shape[0])[1][:, 2].any())
    # HDF5 1.10 looks each chunk up from the start of its index: quadratic in the chunks
    # (0.65 s for 8,000), where the two above take milliseconds
    n_chunks = dsid.get_num_chunks()
    if n_chunks > lookup_chunks:
        return None
    return any(dsid.get_chunk_info(i).filter_mask for i in range(n_chunks))


def rank_blocks(source: PositionSource, n_ranks: int) -> list[Block]:
    """The chunk-aligned block of frames of every rank (see :func:`chunk_aligned_blocks`)."""
    return chunk_aligned_blocks(source.n_frames, n_ranks, source.chunk_frames)


class SlabReader:
    """Read frames of a ``(time, atom, spatial)`` dataset into numpy buffers.

    Parameters
    ----------
    dset : h5py.Dataset
        The position dataset (of a file opened with ``driver="mpio"``, or any file
        for independent reads).
    atoms : array of int, optional
        Sorted atom indices to read; None reads every atom.
    collective : bool, optional
        Use collective MPI-IO transfers (every rank must then call
        :meth:`read` or :meth:`read_none` the same number of times).
    dtype : numpy dtype, optional
        The buffer type (default: the dataset's).
    """

    def __init__(
        self,
        dset: h5py.Dataset,
        atoms: np.ndarray | None = None,
        *,
        collective: bool = False,
        dtype: Any = None,
    ) -> None:
        self.dset = dset
        self.shape = tuple(int(s) for s in dset.shape)
        if len(self.shape) != 3:
            raise ValueError(f"expected a (time, atom, spatial) dataset, got shape {self.shape}")
        n_atoms = self.shape[1]
        if atoms is None:
            self.runs = [(0, n_atoms)]
            self.n_sel = n_atoms
        else:
            atoms = np.asarray(atoms, dtype=np.int64)
            if atoms.size and (atoms[0] < 0 or atoms[-1] >= n_atoms):
                raise IndexError(f"atom indices out of range for {n_atoms} atoms")
            self.runs = atom_runs(atoms)
            self.n_sel = int(atoms.size)
        self.dtype = np.dtype(dtype) if dtype is not None else dset.dtype
        self.collective = bool(collective)
        self.dxpl = self._make_dxpl(collective)
        self.bytes_read = 0

    @staticmethod
    def _make_dxpl(collective: bool) -> Any:
        if not collective:
            return None
        require_parallel_h5py()
        dxpl = h5py.h5p.create(h5py.h5p.DATASET_XFER)
        dxpl.set_dxpl_mpio(h5py.h5fd.MPIO_COLLECTIVE)
        return dxpl

    def buffer(self, n_frames: int) -> np.ndarray:
        """An uninitialised buffer for ``n_frames`` frames of the selection."""
        return np.empty((n_frames, self.n_sel, self.shape[2]), dtype=self.dtype)

    def read(self, start: int, stop: int, out: np.ndarray | None = None) -> np.ndarray:
        """Read frames ``[start, stop)`` of the selected atoms.

        Parameters
        ----------
        start, stop : int
            Frame range (``stop > start``).
        out : numpy.ndarray, optional
            C-contiguous buffer of shape ``(stop - start, n_selected, 3)``.

        Returns
        -------
        numpy.ndarray
            The frames, ``(stop - start, n_selected, n_spatial)``.
        """
        n = int(stop) - int(start)
        if n <= 0:
            raise ValueError(f"empty frame range [{start}, {stop}); use read_none()")
        if out is None:
            out = self.buffer(n)
        elif out.shape != (n, self.n_sel, self.shape[2]) or not out.flags.c_contiguous:
            raise ValueError(f"out has shape {out.shape}, expected {(n, self.n_sel, self.shape[2])}")
        fspace = self.dset.id.get_space()
        fspace.select_none()
        ndim = self.shape[2]
        for a, b in self.runs:
            fspace.select_hyperslab((int(start), a, 0), (n, b - a, ndim), op=h5py.h5s.SELECT_OR)
        mspace = h5py.h5s.create_simple(out.shape)
        mtype = h5py.h5t.py_create(out.dtype)
        try:
            self.dset.id.read(mspace, fspace, out, mtype, dxpl=self.dxpl)
        except OSError as err:  # h5py's text alone (``inflate() failed``) names nothing
            raise H5MDReadError(self.dset.file.filename, self.dset.name,
                                f"reading frames {start}-{stop - 1} failed: {err}") from err
        self.bytes_read += out.size * self.dset.dtype.itemsize
        return out

    def read_none(self) -> None:
        """Take part in a collective read with an empty selection (reads nothing)."""
        fspace = self.dset.id.get_space()
        fspace.select_none()
        dummy = np.empty((1,), dtype=self.dtype)
        mspace = h5py.h5s.create_simple((1,))
        mspace.select_none()
        mtype = h5py.h5t.py_create(dummy.dtype)
        self.dset.id.read(mspace, fspace, dummy, mtype, dxpl=self.dxpl)
