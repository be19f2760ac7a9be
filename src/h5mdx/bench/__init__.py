"""Layer 7, the ``h5mdx bench`` application: a grid of timed runs over schedulers,
worker counts and chunk sizes (:mod:`~h5mdx.bench.grid`), recorded with
:mod:`h5mdx.timing`.
"""

from __future__ import annotations

from h5mdx.bench.grid import (
    BenchResult,
    Workload,
    frames_per_block,
    read_workload,
    render_report,
    rmsd_workload,
    run_grid,
    write_outputs,
)

__all__ = [
    "BenchResult",
    "Workload",
    "frames_per_block",
    "read_workload",
    "render_report",
    "rmsd_workload",
    "run_grid",
    "write_outputs",
]
