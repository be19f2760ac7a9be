"""Several trajectory files given as one: their names (globs expanded), and their join
along ``time`` (``h5mdx rmsd run-1.h5md run-2.h5md``)."""

from __future__ import annotations

import glob
import os
from typing import Any

import numpy as np

__all__ = ["NotOneTrajectory", "expand", "open_parts"]


class NotOneTrajectory(ValueError):
    """Files given as one trajectory that are not: other atoms, or frames out of order."""


def expand(given: list[str]) -> list[str]:
    """The files named by ``given``, in its order: a name that is no file but a pattern
    (``'run-*.h5md'``, quoted from the shell) stands for the files it matches, sorted.

    >>> expand(["a.h5md", "b.h5md"])
    ['a.h5md', 'b.h5md']
    """
    out: list[str] = []
    for name in given:
        if os.path.exists(name) or not glob.has_magic(name):
            out.append(name)
            continue
        matches = sorted(glob.glob(os.path.expanduser(name)))
        if not matches:
            raise FileNotFoundError(f"No file matches {name!r}")
        out.extend(matches)
    return out


def open_parts(paths: list[str], **kwargs: Any) -> Any:
    """The H5MD files ``paths`` as one Dataset, joined along ``time`` in their order.

    Each is opened with ``xr.open_dataset(path, engine="h5md", chunks={}, **kwargs)``;
    what does not vary along time (``atom``, masses, the topology's coordinates) is the
    first file's, and the files must hold the same atoms. A frame that ends one file and
    begins the next (the same step: a run continued from its last frame) is kept once.

    Raises
    ------
    NotOneTrajectory
        Where the files hold other atoms, or one's frames do not follow the previous
        one's (an overlap beyond the repeated frame, or a wrong order).
    """
    import xarray as xr

    seen: list[tuple[str, int, Any]] = []

    def remember(ds: xr.Dataset) -> xr.Dataset:
        seen.append((str(ds.encoding.get("source", "?")), ds.sizes.get("atom", 0),
                     ds.sizes.get("time", 0)))
        return ds

    try:
        ds = xr.open_mfdataset(
            paths, engine="h5md", combine="nested", concat_dim="time", data_vars="minimal",
            coords="minimal", compat="override", join="exact", chunks={},
            preprocess=remember, **kwargs)
    except ValueError as err:
        atoms = {n for _, n, _ in seen}
        if len(atoms) > 1:
            sizes = ", ".join(f"{os.path.basename(p)} {n}" for p, n, _ in seen)
            raise NotOneTrajectory("the files hold other atoms, so they are not one trajectory: "
                             f"{sizes}") from err
        raise
    try:
        return _in_order(ds, paths, [n for _, _, n in seen])
    except Exception:
        ds.close()
        raise


def _in_order(ds: Any, paths: list[str], frames: list[int]) -> Any:
    """``ds`` without the frames that repeat a file's last as the next one's first;
    an error where the next begins before (a wrong order, or an overlap)."""
    key = ds["step"].values if "step" in ds.coords else ds["time"].values
    ends = np.cumsum(frames)
    drop = []
    for i, end in enumerate(ends[:-1]):
        if frames[i] == 0 or frames[i + 1] == 0:
            continue
        last, first = key[end - 1], key[end]
        if first == last:
            drop.append(int(end))
        elif first < last:
            what = "step" if "step" in ds.coords else "time"
            raise NotOneTrajectory(
                f"{paths[i + 1]} begins at {what} {first}, before the last of "
                f"{paths[i]} ({last}): give the files in the order of their frames (a run "
                "continued from a checkpoint overlaps its previous part: cut it with "
                "h5mdx convert --start)")
    if not drop:
        return ds
    return ds.isel(time=np.setdiff1d(np.arange(ds.sizes["time"]), drop))
