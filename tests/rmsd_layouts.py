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
