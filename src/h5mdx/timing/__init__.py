"""Per-task timing: records, capture, straggler analysis and plots.

``with h5mdx.timing.capture() as run: result.compute()`` gives ``run.records``,
one row per task in the schema of :mod:`h5mdx.timing.records`; the functions of
:mod:`h5mdx.timing.stragglers` analyse them, :mod:`h5mdx.timing.plots` draws
them and :mod:`h5mdx.timing.report` writes them as tables (text, Markdown or
rich). Importing this package imports only the standard library: pandas, dask,
distributed, matplotlib and rich are imported when a function needs them.
"""

from __future__ import annotations

import importlib
from typing import Any

# ``capture`` is imported eagerly (it needs only the standard library at import time):
# the function must shadow the submodule of the same name.
from h5mdx.timing.capture import TimingRun, capture
from h5mdx.timing.phases import DELAY_ENV, SPOOL_ENV, BlockTimer, read_spool

__all__ = [
    "DELAY_ENV",
    "SPOOL_ENV",
    "BlockTimer",
    "TimingRun",
    "advice",
    "capture",
    "flag_stragglers",
    "load",
    "load_imbalance",
    "per_worker",
    "plot_gantt",
    "plot_per_worker",
    "plot_scaling",
    "ratios",
    "read_spool",
    "render_table",
    "save",
    "speedup",
    "straggler_summary",
    "task_table",
    "to_frame",
    "validate",
]

_LAZY = {
    "to_frame": "h5mdx.timing.records",
    "validate": "h5mdx.timing.records",
    "save": "h5mdx.timing.records",
    "load": "h5mdx.timing.records",
    "advice": "h5mdx.timing.stragglers",
    "flag_stragglers": "h5mdx.timing.stragglers",
    "load_imbalance": "h5mdx.timing.stragglers",
    "per_worker": "h5mdx.timing.stragglers",
    "ratios": "h5mdx.timing.stragglers",
    "speedup": "h5mdx.timing.stragglers",
    "plot_gantt": "h5mdx.timing.plots",
    "plot_per_worker": "h5mdx.timing.plots",
    "plot_scaling": "h5mdx.timing.plots",
    "render_table": "h5mdx.timing.report",
    "straggler_summary": "h5mdx.timing.report",
    "task_table": "h5mdx.timing.report",
}


def __getattr__(name: str) -> Any:
    if name == "run_grid":
        # the grid runner moved up a layer to h5mdx.bench (timing imports no analysis)
        import warnings

        warnings.warn("h5mdx.timing.run_grid has moved to h5mdx.bench.run_grid",
                      FutureWarning, stacklevel=2)
        return getattr(importlib.import_module("h5mdx.bench.grid"), name)
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'h5mdx.timing' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
