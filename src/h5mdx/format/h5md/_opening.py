"""Opening a file read-only with errors that say what is wrong (:func:`open_h5md`),
and telling an H5MD file from others without raising (:func:`is_h5md`)."""

from __future__ import annotations

import os
from typing import Any

import h5py

from h5mdx.errors import H5MDFormatError, H5MDReadError
from h5mdx.format.schema import H5MD_SIGNATURE, ZARR_MARKERS, Path

#: Trajectory formats people try to open as H5MD (the error then says how to convert).
_TRAJECTORY_SUFFIXES = frozenset({
    ".dcd", ".xtc", ".trr", ".tng", ".nc", ".ncdf", ".netcdf", ".mdcrd", ".crd", ".trj",
    ".lammpstrj", ".lammpsdump", ".dump", ".xyz", ".pdb", ".gro", ".arc", ".dtr", ".binpos",
    ".xdatcar", ".history", ".gsd", ".txyz"})


def _signature_ok(path: str | os.PathLike[str]) -> bool:
    with open(path, "rb") as fh:
        head = fh.read(8)
    return head == H5MD_SIGNATURE


def open_h5md(
    path: str | os.PathLike[str], *, swmr: bool = False, **kwargs: Any
) -> h5py.File:
    """Open ``path`` read-only with h5py, turning low-level failures into clear errors.

    Parameters
    ----------
    path : str or path-like
        The file to open.
    swmr : bool, optional
        Open in single-writer/multiple-reader mode (for files being written).
    **kwargs
        Passed to :class:`h5py.File` (e.g. ``driver``, ``comm``).

    Returns
    -------
    h5py.File

    Raises
    ------
    FileNotFoundError
        If ``path`` does not exist.
    H5MDFormatError
        If the file is empty, not HDF5, or truncated/corrupt.
    """
    path = os.fspath(path)
    if not os.path.exists(path):
        raise FileNotFoundError(f"No such file: {path!r}")
    if os.path.isdir(path):
        raise H5MDFormatError(path, None, _directory(path))
    if os.path.getsize(path) == 0:
        raise H5MDFormatError(path, None, "the file is empty (0 bytes), not an H5MD file")
    # A userblock can move the signature to 512, 1024, ... ; h5py handles those, so only
    # reject outright when the file is too small to hold an HDF5 superblock.
    if os.path.getsize(path) < 8:
        raise H5MDFormatError(path, None, "the file is too small to be HDF5")
    try:
        return h5py.File(path, "r", swmr=swmr, **kwargs)
    except OSError as err:
        text = str(err)
        if "unable to lock" in text.lower() or "file locking" in text.lower():
            raise H5MDReadError(
                path,
                None,
                f"HDF5 cannot lock the file ({text}): another process has it open for "
                "writing, or the file system does not support locking. For a file being "
                "written in SWMR mode open it with swmr=True; on file systems without "
                "locking (some NFS/Lustre mounts) set HDF5_USE_FILE_LOCKING=FALSE in the "
                "environment before starting Python",
            ) from None
        if not _signature_ok(path):
            problem = "not an HDF5 file (no HDF5 signature): H5MD files are HDF5 files"
            suffix = os.path.splitext(path)[1].lower()
            if suffix in _TRAJECTORY_SUFFIXES:
                stem = os.path.splitext(os.path.basename(path))[0]
                problem += (f"; a {suffix} trajectory converts to H5MD once with: "
                            f"h5mdx convert TOPOLOGY {os.path.basename(path)} {stem}.h5md")
        elif swmr and "swmr read access flag not the same" in text.lower():
            problem = (
                f"HDF5 cannot open the file with swmr=True ({text}): this process has it "
                "open without swmr=True already (another Dataset of the file, or an h5py "
                "File); close that one first (ds.close()), or open this one without swmr"
            )
        elif swmr:
            problem = (
                f"HDF5 cannot open the file with swmr=True ({text}); SWMR reading needs a "
                "file written with libver='latest' (HDF5 >= 1.10 format): open it without "
                "swmr=True, or it is truncated or corrupt"
            )
        elif "already open for write" in text.lower():  # a writer holds it (SWMR)
            problem = (f"HDF5 cannot open the file ({text}): a writer has it open; for a "
                       "file being written in SWMR mode open it with swmr=True")
        else:
            problem = f"HDF5 cannot open the file; it is truncated or corrupt ({text})"
        raise H5MDFormatError(path, None, problem) from None


def is_h5md(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` is an HDF5 file with an ``/h5md`` group (never raises)."""
    try:
        if not _signature_ok(path):
            return False
        with h5py.File(path, "r") as f:
            return isinstance(f.get(Path.H5MD.value, getlink=False), h5py.Group)
    except Exception:  # noqa: BLE001 - sniffing must never raise
        return False


def _directory(path: str) -> str:
    """What a directory given as an H5MD file is: a Zarr store (``h5mdx convert``'s or
    ``rechunk``'s), said with what reads it and how to write it as H5MD, or another."""
    if any(os.path.exists(os.path.join(path, m)) for m in ZARR_MARKERS):
        return ("is a Zarr store, not an H5MD file: h5mdx info and h5mdx rmsd read it, "
                f"xr.open_zarr({path!r}) opens it, and .md.to_h5md(OUT) writes it as H5MD "
                "(after import h5mdx, which gives Datasets .md)")
    return "is a directory, not an H5MD file"
