"""The adk trajectory stored every way the RMSD read paths take (or leave to another):
what ``tests/analysis/conftest.py``'s ``layouts`` fixture writes, and the names of those
stored as whole frames."""

from __future__ import annotations

from h5mdx.testing import write_h5md


def write_positions(path, positions, **element):
    """An H5MD file of ``positions`` as ``particles/all/position`` (``element``: its
    storage, e.g. ``chunks=``, ``compression=``); the path as a string."""
    write_h5md(path, {"all": {"position": dict(value=positions, step=1, time=1.0,
                                               unit="Angstrom", **element)}})
    return str(path)


#: The layouts of :func:`layouts` stored as whole frames, unfiltered: what the compiled
#: read paths take (the rest they leave to the ordinary path)
WHOLE_FRAMES = ("one-frame chunks (MDAnalysis)", "10-frame chunks", "contiguous",
                "contiguous float64", "7-frame chunks")


def rmsd_of(path, select, switch, value, monkeypatch, scheduler="threads", **kw):
    """``h5mdx.rmsd`` of the file's positions in tasks of 40 frames, computed on
    ``scheduler`` with the read path's environment ``switch`` set to ``value`` (None:
    unset, h5mdx's default)."""
    import dask
    import xarray as xr
    from MDAnalysisTests.datafiles import PSF

    import h5mdx

    if value is None:
        monkeypatch.delenv(switch, raising=False)
    else:
        monkeypatch.setenv(switch, value)
    with xr.open_dataset(path, engine="h5md", topology=PSF) as ds, \
            dask.config.set(scheduler=scheduler, num_workers=2):
        return h5mdx.rmsd(ds.position, select=select, frames_per_block=40, **kw).values


def cut_the_second_task_short(path, monkeypatch, frames=10, frame_bytes=3341 * 12):
    """Make the second task of 40 frames find its last ``frames`` frames past the end of
    ``path`` (as after a truncation): a read path that reads the bytes itself must stop
    there and leave them to the ordinary read."""
    import os

    import numpy as np

    from h5mdx.format import direct

    real = direct.DirectReader.row_runs

    def cut(self, first, stop):
        offsets, nbytes = real(self, first, stop)
        if first == 40:
            keep = nbytes[-1] - frames * frame_bytes
            offsets = np.append(offsets, os.path.getsize(path) + 1)
            nbytes = np.append(nbytes[:-1], [keep, frames * frame_bytes])
        return offsets, nbytes

    monkeypatch.setattr(direct.DirectReader, "row_runs", cut)
