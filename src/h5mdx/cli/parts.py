"""Several trajectory files given as one: their names (patterns expanded), opened each
on its own, checked to follow one another (``h5mdx rmsd run-1.h5md run-2.h5md``)."""

from __future__ import annotations

import glob
import os
import re
from typing import Any

__all__ = ["NotOneTrajectory", "Parts", "expand", "open_parts"]


class NotOneTrajectory(ValueError):
    """Files given as one trajectory that are not: other atoms, or frames out of order."""


class Parts(list):
    """The Datasets of a trajectory's files, in the order of their frames; closes them
    all (a context manager, as a Dataset is)."""

    def close(self) -> None:
        for ds in self:
            ds.close()

    def __enter__(self) -> Parts:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def expand(given: list[str]) -> list[str]:
    """The files named by ``given``, in its order: a name that is no file but a pattern
    (``'run-*.h5md'``, quoted from the shell) stands for the files it matches, sorted by
    name with the numbers in them compared as numbers (``run-2`` before ``run-10``: in
    the order of their letters, run-10 came first, and the parts were refused as out of
    order).

    >>> expand(["a.h5md", "b.h5md"])
    ['a.h5md', 'b.h5md']
    """
    out: list[str] = []
    for name in given:
        if os.path.exists(name) or not glob.has_magic(name):
            out.append(name)
            continue
        matches = sorted(glob.glob(os.path.expanduser(name)), key=_numbered)
        if not matches:
            raise FileNotFoundError(f"No file matches {name!r}")
        out.extend(matches)
    return out


def _numbered(name: str) -> list[Any]:
    """A sort key of ``name`` that orders the numbers in it by value."""
    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", name)]


def open_parts(paths: list[str], **kwargs: Any) -> Parts:
    """The H5MD files ``paths``, the parts of one trajectory in the order of their
    frames, each opened lazily as ``xr.open_dataset(path, engine="h5md", **kwargs)``.

    Each part is read on its own, as a file alone is (an ``open_mfdataset`` of them is
    dask-backed, and its reads go through dask's getter tasks: 1.3-1.7x slower for the
    RMSD). A frame that ends one file and begins the next (the same step: a run continued
    from its last frame) is kept once, in the first. Where a part's steps start anew (a
    step count reset, or a file without steps), the parts' times order them.

    Raises
    ------
    NotOneTrajectory
        Where the files hold other atoms, or one's frames do not follow the previous
        one's (an overlap beyond the repeated frame, or a wrong order).
    """
    import xarray as xr

    from h5mdx.analysis.rmsd import seams

    parts = Parts()
    try:
        for path in paths:
            parts.append(xr.open_dataset(path, engine="h5md", **kwargs))
        _same_atoms(parts, paths)
        for j, i in seams(parts):  # after the last part with frames
            parts[i] = _after(parts[j], parts[i], paths[j], paths[i])
    except BaseException:
        parts.close()
        raise
    return parts


def _same_atoms(parts: Parts, paths: list[str]) -> None:
    import numpy as np

    atoms = [ds["atom"].values if "atom" in ds.coords else np.empty(0) for ds in parts]
    if any(a.shape != atoms[0].shape or not np.array_equal(a, atoms[0]) for a in atoms):
        sizes = ", ".join(f"{os.path.basename(p)} {ds.sizes.get('atom', 0)}"
                          for p, ds in zip(paths, parts, strict=True))
        raise NotOneTrajectory(f"the files hold other atoms, so they are not one "
                               f"trajectory: {sizes}")


def _after(before: Any, part: Any, before_path: str, path: str) -> Any:
    """``part`` without its first frame where it repeats the last of ``before``; an error
    where it begins before that frame (a wrong order, or an overlap): the seam of
    :func:`h5mdx.analysis.rmsd.seam`."""
    from h5mdx.analysis.rmsd import seam

    found = seam(before, part)
    if found is None:
        return part
    what, last, first = found
    if first == last:
        return part.isel(time=slice(1, None))
    if first < last:
        raise NotOneTrajectory(
            f"{path} begins at {what} {first}, before the last of {before_path} ({last}): "
            "give the files in the order of their frames (a run continued from a "
            "checkpoint overlaps its previous part: cut it with h5mdx convert --start)")
    return part
