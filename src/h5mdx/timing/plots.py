"""Figures of timing records: per-worker phases, task Gantt chart, speed-up and efficiency.

Each function returns a :class:`matplotlib.figure.Figure` built without
``pyplot`` (so no GUI backend and no global state: it renders with Agg, and a
notebook shows it when it is the cell's value) and, with ``path``, saves it as
PNG of exactly ``figsize * dpi`` pixels.

For dask's own view of a distributed run (task stream, worker profiles) pass
``report="report.html"`` to :func:`h5mdx.timing.capture`, which wraps the run
in ``distributed.performance_report``.
"""

from __future__ import annotations

import os
import sys
from typing import Any

import numpy as np
import pandas as pd

from h5mdx._replace import replacing
from h5mdx.timing.records import SPMD_BACKENDS
from h5mdx.timing.stragglers import SLOW_PHASES, _phase_table, flag_stragglers, per_worker

__all__ = ["plot_gantt", "plot_per_worker", "plot_scaling"]

#: Colour of each phase (``wait`` is idle time before a dask task).
PHASE_COLORS = {
    "init_top": "#8c564b",
    "init_traj": "#e377c2",
    "warmup": "#bcbd22",
    "io": "#1f77b4",
    "compute": "#ff7f0e",
    "comm_gather": "#2ca02c",
    "wait": "#c7c7c7",
    "other": "#9467bd",
}


def _figure(figsize: tuple[float, float], dpi: int) -> Any:
    from h5mdx._optional import import_optional

    import_optional("matplotlib", "timing plots")
    from matplotlib.figure import Figure

    _shown_in_notebooks(Figure)
    return Figure(figsize=figsize, dpi=dpi, layout="constrained")


def _shown_in_notebooks(figure_type: type) -> None:
    """In IPython (a Jupyter kernel), show a figure that is a cell's value as an image.

    The plots are made without pyplot, whose global state the workers and scripts do not
    want; a fresh kernel then showed only ``<Figure size 1000x450 with 1 Axes>`` until
    ``%matplotlib inline`` or a pyplot figure had registered IPython's PNG formatter. It is
    registered here as that does, where IPython runs and none is registered yet.
    """
    ipython = sys.modules.get("IPython")
    shell = ipython.get_ipython() if ipython is not None else None
    formatters = getattr(getattr(shell, "display_formatter", None), "formatters", {})
    png = formatters.get("image/png")
    if png is None:
        return
    try:
        png.lookup_by_type(figure_type)
        return  # %matplotlib inline, or pyplot, did already
    except KeyError:
        pass
    from IPython.core.pylabtools import print_figure

    png.for_type(figure_type, lambda fig: print_figure(fig, "png", bbox_inches="tight"))


def _legend_outside(fig: Any, ax: Any) -> None:
    """The legend to the right of the plot, where it hides no bar (the last task's, or a
    worker's wait, sat under it)."""
    fig.legend(*ax.get_legend_handles_labels(), fontsize="small", loc="outside right upper")


def _finish(fig: Any, path: str | os.PathLike[str] | None) -> Any:
    if path is not None:
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        # beside it, then renamed over it: a savefig stopped half-way (a full disk,
        # Ctrl-C) left a torn PNG in place of the earlier plot
        with replacing(path) as tmp:
            fig.savefig(tmp, dpi=fig.dpi, format="png")
    return fig


def _one_run(df: pd.DataFrame, run_id: str | None) -> pd.DataFrame:
    if df.empty:
        raise ValueError("no timing records to plot")
    if run_id is None:
        run_id = str(df["run_id"].iloc[-1])
    sel = df[df["run_id"] == run_id]
    if sel.empty:
        raise ValueError(
            f"run {run_id!r} is not in the records; runs: {', '.join(df['run_id'].unique())}"
        )
    return sel


def _worker_labels(workers: list[str], sel: pd.DataFrame | None = None) -> list[str]:
    """Axis labels of ``workers``: ``rank N`` where the records give each one MPI rank
    (MPI-IO, dask-mpi: an address says less), else the name, cut to 22 characters."""
    if sel is not None and "rank" in sel and sel["rank"].notna().all():
        ranks = sel.groupby(sel["worker"].astype(str))["rank"].unique()
        if all(len(r) == 1 for r in ranks):
            return [f"rank {int(ranks[w][0])}" for w in workers]
    return [w if len(w) <= 22 else "…" + w[-21:] for w in workers]


def plot_per_worker(
    df: pd.DataFrame,
    run_id: str | None = None,
    path: str | os.PathLike[str] | None = None,
    *,
    figsize: tuple[float, float] = (8.0, 4.5),
    dpi: int = 100,
) -> Any:
    """Stacked bars of the time each worker spent in each phase (one run).

    Parameters
    ----------
    df : pandas.DataFrame
        Records.
    run_id : str, optional
        The run to plot (default: the last run in ``df``).
    path : path-like, optional
        Save the figure there as PNG.
    figsize, dpi : optional
        Size of the figure in inches and its resolution.

    Returns
    -------
    matplotlib.figure.Figure
    """
    sel = _one_run(df, run_id)
    pw = per_worker(sel).droplevel("run_id")
    if sel["rank"].notna().all():  # ranks in their order: by name, rank-10 came before 2
        first_rank = sel.groupby(sel["worker"].astype(str))["rank"].min()
        pw = pw.loc[sorted(pw.index, key=lambda w: (int(first_rank[str(w)]), str(w)))]
    fig = _figure(figsize, dpi)
    ax = fig.add_subplot()
    x = np.arange(len(pw))
    bottom = np.zeros(len(pw))
    spmd_wait = sel["backend"].iloc[0] == "mpi-io"
    order = ["init_top", "init_traj", "warmup", "io", "compute", "comm_gather", "other", "wait"]
    for phase in order:
        col = "t_other" if phase == "other" else f"t_{phase}"
        vals = pw[col].to_numpy(dtype=float)
        if np.all(np.isnan(vals)) or np.nansum(vals) == 0:
            continue
        vals = np.nan_to_num(vals)
        label = phase if phase != "wait" or spmd_wait else "wait (idle before tasks)"
        ax.bar(x, vals, bottom=bottom, color=PHASE_COLORS[phase], label=label,
               hatch="//" if phase == "wait" and not spmd_wait else None)
        bottom += vals
    ax.set_xticks(x, _worker_labels([str(w) for w in pw.index], sel), rotation=30,
                  ha="right")
    ax.set_ylabel("time (s)")
    backend, n = sel["backend"].iloc[0], int(sel["n_workers"].iloc[0])
    # the run on a line of its own: on one line the title ran under the legend beside it
    ax.set_title(f"Time per worker and phase — {backend}, N={n}\nrun {sel['run_id'].iloc[0]}")
    _legend_outside(fig, ax)
    return _finish(fig, path)


#: The order of the phases within a task's bar: an MPI rank's (h5mdx.mpi.rmsd).
_GANTT_ORDER = ("init_top", "warmup", *(p for p in SLOW_PHASES if p != "init_top"))
_GANTT_SPMD_ORDER = tuple(q for p in _GANTT_ORDER
                          for q in (("wait", p) if p == "comm_gather" else (p,)))


def plot_gantt(
    df: pd.DataFrame,
    run_id: str | None = None,
    path: str | os.PathLike[str] | None = None,
    *,
    rule: str = "median",
    factor: float | None = None,
    figsize: tuple[float, float] = (10.0, 4.5),
    dpi: int = 100,
) -> Any:
    """Task Gantt chart of one run: a row per worker, each task split into its phases.

    Within a task the phases are drawn in the order an MPI rank runs them: opening
    the topology, warm-up (loading the kernel), opening the trajectory, io, compute,
    the wait for the other ranks (MPI ranks only), gather, other (a dask task has only
    warm-up, io and compute), with their measured lengths (their true interleaving is
    not recorded). A dask task starts at its ``t_start``; every MPI rank at 0, where the
    ranks leave a barrier together (their ``t_start`` are several nodes' clocks). Stragglers (see
    :func:`~h5mdx.timing.stragglers.flag_stragglers`, which does not count warm-up) get
    a red outline and their slow phase written next to them.

    Parameters
    ----------
    df : pandas.DataFrame
        Records.
    run_id : str, optional
        The run to plot (default: the last run in ``df``).
    path : path-like, optional
        Save the figure there as PNG.
    rule, factor : optional
        Straggler rule, as for :func:`~h5mdx.timing.stragglers.flag_stragglers`.
    figsize, dpi : optional
        Size of the figure in inches and its resolution.

    Returns
    -------
    matplotlib.figure.Figure
    """
    # by position: a run's records joined from parts repeat their labels, and .at failed
    sel = _one_run(df, run_id).reset_index(drop=True)
    flagged = flag_stragglers(sel, rule=rule, factor=factor)
    ph = _phase_table(sel)
    t0 = float(sel["t_start"].min())
    # MPI ranks in rank order (they start together, and on several nodes' clocks);
    # dask workers by their first task
    by = "rank" if sel["rank"].notna().all() else "t_start"
    workers = sorted(sel["worker"].unique(), key=lambda w: sel.loc[sel["worker"] == w,
                                                                     by].min())
    row_of = {w: i for i, w in enumerate(workers)}
    fig = _figure(figsize, dpi)
    ax = fig.add_subplot()
    seen: set[str] = set()
    spmd = sel["backend"].isin(SPMD_BACKENDS)
    # an MPI rank starts where every rank does, as they leave a barrier together: its
    # t_start is its node's clock, and a node 0.3 s ahead drew its rank 0.3 s late
    left = [0.0 if spmd.at[i] else float(sel.at[i, "t_start"]) - t0 for i in sel.index]
    for i, x0 in zip(sel.index, left, strict=True):
        y = row_of[sel.at[i, "worker"]]
        start = x0
        # an MPI rank waits for the others at the gather: part of its span, drawn there
        order = _GANTT_SPMD_ORDER if spmd.at[i] else _GANTT_ORDER
        for phase in order:
            length = sel.at[i, "t_wait"] if phase == "wait" else ph.at[i, phase]
            if pd.isna(length) or length <= 0:
                continue
            ax.barh(y, length, left=start, height=0.7, color=PHASE_COLORS[phase],
                    label=phase if phase not in seen else None)
            seen.add(phase)
            start += float(length)
        if flagged.at[i, "is_straggler"]:
            # the whole bar: a rank's holds its wait too (a dask task's wall is its busy time)
            s0, span = x0, float(sel.at[i, "wall"])
            ax.barh(y, span, left=s0, height=0.8, fill=False,
                    edgecolor="red", linewidth=2,
                    label="straggler" if "straggler" not in seen else None)
            seen.add("straggler")
            ax.annotate(str(flagged.at[i, "slow_phase"]), (s0 + span, y),
                        xytext=(3, 0), textcoords="offset points", va="center",
                        color="red", fontsize="small")
    ax.set_yticks(range(len(workers)), _worker_labels([str(w) for w in workers], sel))
    ax.invert_yaxis()
    ax.set_xlabel("time since the ranks left the first barrier (s)" if spmd.all()
                  else "time since the first task started (s)")
    backend, n = sel["backend"].iloc[0], int(sel["n_workers"].iloc[0])
    ax.set_title(f"Tasks by worker — {backend}, N={n}, {len(sel)} tasks, "
                 f"{int(flagged['is_straggler'].sum())} straggler(s)")
    _legend_outside(fig, ax)
    return _finish(fig, path)


def plot_scaling(
    table: pd.DataFrame,
    path: str | os.PathLike[str] | None = None,
    *,
    figsize: tuple[float, float] = (10.0, 4.0),
    dpi: int = 100,
) -> Any:
    """Speed-up S(N) and efficiency E(N) against the number of workers, with the ideal.

    Parameters
    ----------
    table : pandas.DataFrame
        Output of :func:`h5mdx.timing.stragglers.speedup`.
    path : path-like, optional
        Save the figure there as PNG.
    figsize, dpi : optional
        Size of the figure in inches and its resolution.

    Returns
    -------
    matplotlib.figure.Figure
    """
    if table.empty:
        raise ValueError("no runs to plot: the speed-up table is empty")
    fig = _figure(figsize, dpi)
    ax_s, ax_e = fig.subplots(1, 2)
    by = list(table.attrs.get("by") or [c for c in table.columns if c not in (
        "n_workers", "n_runs", "t_N", "t_N_min", "t_N_max", "warmup", "S", "E")])
    groups = table.groupby(by, dropna=False, sort=True) if by else [((), table)]
    for key, grp in groups:
        key = key if isinstance(key, tuple) else (key,)
        label = ", ".join(
            f"M={int(v)}" if c == "blocks_per_worker" and pd.notna(v)
            else f"{int(v)} frames" if c == "n_frames" and pd.notna(v) else str(v)
            for c, v in zip(by, key, strict=True)
        ) or "runs"
        grp = grp.sort_values("n_workers")
        ax_s.plot(grp["n_workers"], grp["S"], marker="o", label=label)
        ax_e.plot(grp["n_workers"], grp["E"], marker="o", label=label)
    n = np.unique(np.r_[1, table["n_workers"].to_numpy(dtype=float)])
    ax_s.plot(n, n, "k--", label="ideal")
    ax_e.axhline(1.0, color="k", linestyle="--", label="ideal")
    ax_s.set_xlabel("workers N")
    ax_s.set_ylabel("speed-up S(N) = t_1 / t_N")
    ax_e.set_xlabel("workers N")
    ax_e.set_ylabel("efficiency E(N) = S(N) / N")
    ax_e.set_ylim(0, max(1.1, float(np.nanmax(table["E"].to_numpy(dtype=float), initial=1)) + 0.1))
    for ax in (ax_s, ax_e):
        ax.set_xticks(n)
        ax.grid(alpha=0.3)
        ax.legend(fontsize="small")
    return _finish(fig, path)
