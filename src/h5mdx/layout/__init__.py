"""Layer 4, the layout tools: diagnose, convert, rechunk and export trajectories.

:mod:`~h5mdx.layout.diagnosis` (the layout diagnosis behind ``h5mdx info``;
its functions are re-exported here), :mod:`~h5mdx.layout.convert`,
:mod:`~h5mdx.layout.rechunk`, :mod:`~h5mdx.layout.export` (Zarr stores and
:func:`h5mdx.to_h5md`) and the atomic writes they share.
"""

from __future__ import annotations

from h5mdx.layout.diagnosis import (
    Finding,
    diagnose,
    finding_dict,
    read_cost,
    recommended_frames,
    render_findings,
)

__all__ = [
    "Finding",
    "diagnose",
    "finding_dict",
    "read_cost",
    "recommended_frames",
    "render_findings",
]
