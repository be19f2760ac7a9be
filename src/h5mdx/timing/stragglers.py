"""Analysis of timing records: worker totals, stragglers, imbalance, ratios, speed-up, advice.

Pure functions of the records of :mod:`h5mdx.timing.records` (pandas and
numpy only), so they work the same on records just captured and on records
loaded from a file years later.

Definitions
-----------
duration
    The time a task (or rank) worked, less its warm-up:
    :func:`h5mdx.timing.records.busy` (``wall``, minus the barrier wait of an
    MPI rank) minus ``t_warmup`` (loading or compiling the kernel, which a
    worker's first task pays once; see :func:`warmup_summary`).
straggler
    ``rule="median"`` (default): a task whose duration exceeds ``factor`` (1.5)
    times the median duration of the *other* tasks of the same run and kind (tasks
    given no frames, MPI ranks left without a chunk, are judged with no one), *and*
    exceeds that median by at least ``min_excess`` (default 0.05 s), so that the
    scheduling jitter of millisecond tasks is not reported. Leaving the task out of
    its own median changes nothing for many tasks; of two, a median that held the
    task itself would flag it only beyond 3x the other.
    ``rule="fastest-group"``: a task whose duration exceeds ``factor`` (2.0) times
    the mean duration of the *fastest group*, the tasks at or below the 25th
    percentile of duration (Khoshlessan et al. 2020 called a rank a straggler
    at about twice the time of the fastest ranks); ``min_excess`` applies too.
slow phase
    Of a straggler, the phase (``init_top``, ``init_traj``, ``io``, ``compute``,
    ``comm_gather`` or ``other``, the time no phase accounts for) whose time exceeds
    its median over the run's tasks by the most.
load imbalance
    Per run, the largest busy time of a worker divided by the mean busy time per
    worker (total busy time / ``n_workers``; a worker that ran nothing counts as 0).
    1 is perfect balance.
R_comp/IO, R_comp/comm
    Sum of ``t_compute`` over sum of ``t_io``, and over sum of ``t_comm_gather``
    (or, where that is unknown, of the ``t_transfer`` that ``distributed`` reports).
S(N), E(N)
    ``S(N) = t_1 / t_N`` and ``E(N) = S(N) / N``, where ``t_N`` is the median wall
    time of the runs with N workers (same backend and blocks per worker, and the same
    number of frames where the runs differ in it).
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd

from h5mdx.timing.records import PHASES, SPMD_BACKENDS, busy, spmd_wall

__all__ = [
    "DEFAULT_MIN_EXCESS",
    "SLOW_PHASES",
    "advice",
    "flag_stragglers",
    "load_imbalance",
    "per_worker",
    "ratios",
    "run_table",
    "speedup",
    "straggler_rule",
    "warmup_summary",
]

#: Phases a straggler can be slow in (``other`` is the time no phase accounts for).
SLOW_PHASES = ("init_top", "init_traj", "io", "compute", "comm_gather", "other")

_DEFAULT_FACTOR = {"median": 1.5, "fastest-group": 2.0}

#: Default minimum absolute excess over the median (s) for a straggler.
DEFAULT_MIN_EXCESS = 0.05
#: Work (the tasks' seconds summed) below which :func:`advice` judges nothing: a run of a
#: few ms had drawn advice to rechunk and use MPI-IO from microsecond timings.
MIN_JUDGED = 2 * DEFAULT_MIN_EXCESS


def straggler_rule(rule: str = "median", factor: float | None = None,
                   min_excess: float = DEFAULT_MIN_EXCESS) -> str:
    """The straggler rule in words, for reports.

    Parameters
    ----------
    rule, factor, min_excess : optional
        As for :func:`flag_stragglers`.

    Returns
    -------
    str
        E.g. ``"a task is a straggler when > 1.5x the median of the other tasks and
        > 50 ms longer, warm-up excluded"``.
    """
    if rule not in _DEFAULT_FACTOR:
        raise ValueError(
            f"unknown straggler rule {rule!r}; valid options are: {', '.join(_DEFAULT_FACTOR)}"
        )
    f = _DEFAULT_FACTOR[rule] if factor is None else float(factor)
    # the milliseconds as they are: 0.4 ms was said "0 ms", 2.5 s "2500 ms"
    excess = f"{min_excess * 1e3:g} ms" if min_excess < 1 else f"{min_excess:g} s"
    if rule == "median":
        return (f"a task is a straggler when > {f:g}x the median of the other tasks and > "
                f"{excess} longer, warm-up excluded")
    return (f"a task is a straggler when > {f:g}x the fastest quarter's mean and > {excess} "
            "longer than the median of the other tasks, warm-up excluded")


def _warmup(df: pd.DataFrame) -> pd.Series:
    if "t_warmup" not in df:
        return pd.Series(0.0, index=df.index)
    return pd.to_numeric(df["t_warmup"]).fillna(0.0)


def _phase_table(df: pd.DataFrame) -> pd.DataFrame:
    """Per task: busy time, warm-up, duration (busy - warm-up), phases and ``other``.

    The phases are NaN where unknown; ``other`` is the part of ``duration`` that
    no phase accounts for.
    """
    out = pd.DataFrame(index=df.index)
    out["busy"] = busy(df)
    out["warmup"] = _warmup(df)
    out["duration"] = (out["busy"] - out["warmup"]).clip(lower=0.0)
    known = 0.0
    for p in SLOW_PHASES[:-1]:
        out[p] = df[f"t_{p}"]
        known = known + df[f"t_{p}"].fillna(0.0)
    out["other"] = (out["duration"] - known).clip(lower=0.0)
    return out


def per_worker(df: pd.DataFrame) -> pd.DataFrame:
    """Totals per worker and run.

    Parameters
    ----------
    df : pandas.DataFrame
        Records.

    Returns
    -------
    pandas.DataFrame
        Indexed by ``(run_id, worker)`` with ``backend, n_workers, n_tasks, busy``
        (sum of busy times, warm-up included), the sums of ``t_init_top ...
        t_comm_gather`` (NaN if
        unknown for every task), ``t_other``, ``first_start``, ``last_stop``,
        ``n_frames`` and ``bytes_read``.
    """
    ph = _phase_table(df)
    work = df[["run_id", "worker", "backend", "n_workers", "t_start", "t_stop"]].copy()
    work["busy"] = ph["busy"]
    for p in PHASES:
        work[p] = df[p]
    work["t_other"] = ph["other"]
    work["n_frames"] = (df["frame_stop"] - df["frame_start"]).astype("Float64")
    work["bytes_read"] = df["bytes_read"].astype("Float64")
    g = work.groupby(["run_id", "worker"], sort=True)
    out = pd.DataFrame({
        "backend": g["backend"].first(),
        "n_workers": g["n_workers"].first(),
        "n_tasks": g.size(),
        "busy": g["busy"].sum(),
    })
    for p in (*PHASES, "t_other"):
        out[p] = g[p].sum(min_count=1)
    out["first_start"] = g["t_start"].min()
    out["last_stop"] = g["t_stop"].max()
    out["n_frames"] = g["n_frames"].sum(min_count=1)
    out["bytes_read"] = g["bytes_read"].sum(min_count=1)
    return out


def flag_stragglers(
    df: pd.DataFrame,
    rule: str = "median",
    factor: float | None = None,
    by: Sequence[str] = ("run_id", "kind"),
    min_excess: float = DEFAULT_MIN_EXCESS,
) -> pd.DataFrame:
    """Mark the tasks that are much slower than their peers.

    Tasks are compared on their duration *without warm-up* (``busy - t_warmup``):
    the kernel load that a worker's first task pays is reported apart (see
    :func:`warmup_summary`), not as straggling. :func:`straggler_rule` states the
    rule in words.

    Parameters
    ----------
    df : pandas.DataFrame
        Records.
    rule : {"median", "fastest-group"}, optional
        See the module docstring.
    factor : float, optional
        Threshold factor (default 1.5 for ``"median"``, 2.0 for ``"fastest-group"``).
    by : sequence of str, optional
        Columns whose groups are compared separately (default: run and task kind).
    min_excess : float, default 0.05
        A task must also be at least this many seconds slower than the median of
        its group: millisecond tasks vary by several times from scheduling jitter
        alone, and such noise is not a straggler worth a user's attention.

    Returns
    -------
    pandas.DataFrame
        A copy of ``df`` with the columns ``duration`` (busy time less warm-up),
        ``warmup``, ``threshold``, ``is_straggler`` (bool) and ``slow_phase`` (str,
        empty for non-stragglers).

    Raises
    ------
    ValueError
        For an unknown rule, a factor <= 0 or a negative ``min_excess``.
    """
    if rule not in _DEFAULT_FACTOR:
        raise ValueError(
            f"unknown straggler rule {rule!r}; valid options are: {', '.join(_DEFAULT_FACTOR)}"
        )
    factor = _DEFAULT_FACTOR[rule] if factor is None else float(factor)
    if factor <= 0:
        raise ValueError(f"the straggler factor must be positive, not {factor}")
    if min_excess < 0:
        raise ValueError(f"min_excess must be >= 0 seconds, not {min_excess}")
    index = df.index  # records of several runs joined repeat their labels: work by position
    df = df.reset_index(drop=True)
    out = df.copy()
    ph = _phase_table(df)
    out["duration"] = ph["duration"]
    out["warmup"] = ph["warmup"]
    out["threshold"] = np.nan
    out["is_straggler"] = False
    out["slow_phase"] = ""
    if df.empty:
        out.index = index
        return out
    # dropna=False: a task whose group key is unknown (rank of a dask task) is still judged
    # a task given no frames (an MPI rank left without a chunk) only opened the files: no
    # one's peer, its short time made every rank that worked a straggler
    empty = (df["frame_stop"] <= df["frame_start"]).fillna(False).to_numpy(dtype=bool)
    for idx in df.groupby(list(by), sort=False, dropna=False).indices.values():
        d = ph.loc[idx, "duration"].mask(empty[idx])
        others = _others_median(d.to_numpy(dtype=float))
        if rule == "median":
            threshold = factor * others
        else:
            q = float(d.quantile(0.25))
            threshold = np.full(len(d), factor * float(d[d <= q].mean()))
        threshold = pd.Series(np.fmax(threshold, others + min_excess), index=d.index)
        out.loc[idx, "threshold"] = threshold
        slow = d > threshold
        out.loc[idx, "is_straggler"] = slow.to_numpy()
        if not slow.any():
            continue
        medians = ph.loc[idx[~empty[idx]], list(SLOW_PHASES)].median()
        excess = ph.loc[idx[slow.to_numpy()], list(SLOW_PHASES)] - medians
        out.loc[excess.index, "slow_phase"] = [
            str(row.idxmax()) if row.notna().any() else "other"
            for _, row in excess.iterrows()
        ]
    out["is_straggler"] = out["is_straggler"].astype(bool)
    out.index = index
    return out


def _others_median(d: np.ndarray) -> np.ndarray:
    """For each entry of ``d``, the median of the others (NaN for a lone one).

    Unknown (NaN) entries, tasks without a stop time, are no one's others: sorted last,
    they had made the median of the known ones NaN, and no task a straggler.
    Their own value is the median of the known ones.

    Examples
    --------
    >>> _others_median(np.array([1.0, 2.0, 10.0]))
    array([6. , 5.5, 1.5])
    >>> _others_median(np.array([1.0, 2.0, 10.0, np.nan]))
    array([6. , 5.5, 1.5, 2. ])
    """
    known = ~np.isnan(d)
    if not known.all():
        out = np.full(d.size, np.median(d[known]) if known.any() else np.nan)
        out[known] = _others_median(d[known])
        return out
    n = d.size
    if n < 2:
        return np.full(n, np.nan)
    order = np.argsort(d, kind="stable")
    ranked = d[order]
    m = n - 1  # the others, in order: ranked without the entry's own rank r

    def kth(k: int, r: np.ndarray) -> np.ndarray:
        return ranked[np.where(k < r, k, k + 1)]

    r = np.arange(n)
    med = (kth((m - 1) // 2, r) + kth(m // 2, r)) / 2.0
    out = np.empty(n)
    out[order] = med
    return out


#: A task counts as paying the warm-up (:func:`warmup_summary`'s ``n_tasks``) where its
#: warm-up is above this share of the longest one: the first task of a worker loads the
#: kernel (~0.5 s); the others only find it loaded (microseconds).
_WARMUP_TASK = 0.1


def warmup_summary(df: pd.DataFrame) -> dict[str, float]:
    """Total warm-up of the records, and how many tasks paid it.

    Parameters
    ----------
    df : pandas.DataFrame
        Records.

    Returns
    -------
    dict
        ``seconds`` (sum of ``t_warmup``), ``n_tasks`` (tasks with a warm-up above a
        tenth of the longest), ``max`` (the longest one) and ``fraction`` (of the total
        busy time; 0 for no records).
    """
    w = _warmup(df)
    total_busy = float(busy(df).sum()) if len(df) else 0.0
    seconds = float(w.sum())
    return {
        "seconds": seconds,
        "n_tasks": float((w > _WARMUP_TASK * max(float(w.max()), 0.0)).sum()) if len(w)
        else 0.0,
        "max": float(w.max()) if len(w) else 0.0,
        "fraction": seconds / total_busy if total_busy > 0 else 0.0,
    }


def load_imbalance(df: pd.DataFrame) -> pd.Series:
    """Largest worker busy time over the mean busy time per worker, per run, busy times
    less warm-up and opening (``t_warmup``, ``t_init_top``, ``t_init_traj``).

    Parameters
    ----------
    df : pandas.DataFrame
        Records.

    Returns
    -------
    pandas.Series
        Indexed by ``run_id``; 1.0 is perfect balance, ``n_workers`` is the worst.
    """
    pw = per_worker(df)
    # the work shared out: less loading the kernel and opening the files, which every
    # worker does whatever its share (an MPI rank given no frames still opens them)
    setup = pw[["t_warmup", "t_init_top", "t_init_traj"]].fillna(0.0).sum(axis=1)
    pw = pw.assign(work=(pw["busy"] - setup).clip(lower=0.0))
    g = pw.groupby(level="run_id")
    n = g["n_workers"].first().clip(lower=1)
    total = g["work"].sum()
    mean = total / np.maximum(n, g.size())
    return (g["work"].max() / mean.where(mean > 0)).rename("load_imbalance")


def ratios(df: pd.DataFrame) -> pd.DataFrame:
    """R_comp/IO and R_comp/comm per run.

    Parameters
    ----------
    df : pandas.DataFrame
        Records.

    Returns
    -------
    pandas.DataFrame
        Indexed by ``run_id`` with ``t_compute, t_io, t_comm`` (sums; NaN if
        unknown), ``R_comp_io`` and ``R_comp_comm`` (NaN if a sum is unknown or 0).
    """
    work = df[["run_id", "t_compute", "t_io", "t_comm_gather"]].copy()
    if "t_transfer" in df:
        work["t_comm"] = df["t_comm_gather"].fillna(df["t_transfer"])
    else:
        work["t_comm"] = df["t_comm_gather"]
    g = work.groupby("run_id", sort=True)
    out = pd.DataFrame({
        "t_compute": g["t_compute"].sum(min_count=1),
        "t_io": g["t_io"].sum(min_count=1),
        "t_comm": g["t_comm"].sum(min_count=1),
    })
    with np.errstate(divide="ignore", invalid="ignore"):
        out["R_comp_io"] = out["t_compute"] / out["t_io"].where(out["t_io"] > 0)
        out["R_comp_comm"] = out["t_compute"] / out["t_comm"].where(out["t_comm"] > 0)
    return out


def _run_metas(metas: Sequence[dict[str, Any]] | Mapping[str, Any] | None
               ) -> list[dict[str, Any]]:
    """The runs' metadata: a list of them, or what :func:`h5mdx.timing.records.load` gives (a
    bench's ``{"runs": [...]}``, or one run's own)."""
    if metas is None:
        return []
    if isinstance(metas, Mapping):
        return list(metas.get("runs") or ([dict(metas)] if "run_id" in metas else []))
    return list(metas)


def _worker_warmup(df: pd.DataFrame) -> pd.Series:
    """Per run and worker, the seconds the worker spent warming up: the union of its tasks'
    warm-ups, each at the start of its task. A worker of several threads warms them up side
    by side (each loads the kernel at once): their sum, 1.0 s for two threads' 0.5 s, was
    taken off the run's time as if one after the other."""
    warm = _warmup(df)
    ivs = pd.DataFrame({"run_id": df["run_id"], "worker": df["worker"],
                        "a": df["t_start"], "b": df["t_start"] + warm, "w": warm})
    ivs = ivs.sort_values(["run_id", "worker", "a"], kind="stable")
    # an interval's own length, less what the intervals before it in its worker covered
    reach = ivs.groupby(["run_id", "worker"], sort=False)["b"].cummax()
    before = reach.groupby([ivs["run_id"], ivs["worker"]], sort=False).shift()
    own = (ivs["b"] - np.fmax(ivs["a"], before.fillna(-np.inf))).clip(lower=0.0)
    own = own.where(ivs["a"].notna(), ivs["w"])  # no start: counted whole, as before
    return own.groupby([ivs["run_id"], ivs["worker"]], sort=False).sum()


def _run_wall(df: pd.DataFrame) -> pd.Series:
    """Per run, the span from its first start to its last stop; of MPI ranks,
    :func:`~h5mdx.timing.records.spmd_wall` (their longest ``wall``: their start times
    come from several hosts' clocks)."""
    by_run = df.groupby("run_id", sort=False)
    span = by_run["t_stop"].max() - by_run["t_start"].min()
    ranks = df["backend"].isin(SPMD_BACKENDS).groupby(df["run_id"], sort=False).all()
    return span.where(~ranks, by_run["wall"].agg(spmd_wall).astype(float))


def run_table(df: pd.DataFrame,
              metas: Sequence[dict[str, Any]] | Mapping[str, Any] | None = None
              ) -> pd.DataFrame:
    """One row per run: backend, workers, wall time and the per-run summaries.

    Parameters
    ----------
    df : pandas.DataFrame
        Records of one or more runs.
    metas : sequence of dict or mapping, optional
        The runs' metadata (a list, or the metadata :func:`h5mdx.timing.records.load` returns
        with the records); their ``wall`` (the measured run time) and
        ``blocks_per_worker``/``repeat`` are used when present. Otherwise the
        wall time is the span from the first task start to the last task stop; of MPI
        ranks (:data:`~h5mdx.timing.records.SPMD_BACKENDS`), which all start at a
        barrier, the longest rank's ``wall``, which the clocks of several hosts do not
        shift.

    Returns
    -------
    pandas.DataFrame
        Indexed by ``run_id`` with ``backend, n_workers, n_tasks, wall, warmup, busy,
        blocks_per_worker, repeat, n_frames, load_imbalance, n_stragglers, R_comp_io,
        R_comp_comm``; times in seconds. ``warmup``: the most warm-up one worker paid in
        the run (workers warm up side by side, so the run's wall time holds at most that
        much of it). ``n_frames``: the metadata's, else the span of the tasks' frames.
    """
    g = df.groupby("run_id", sort=False)
    worker_warmup = _worker_warmup(df)
    out = pd.DataFrame({
        "backend": g["backend"].first(),
        "n_workers": g["n_workers"].first(),
        "n_tasks": g.size(),
        "wall": _run_wall(df),
        "warmup": worker_warmup.groupby(level=0, sort=False).max(),
        "busy": busy(df).groupby(df["run_id"]).sum(),
    })
    out["warmup"] = out["warmup"].fillna(0.0)
    out["blocks_per_worker"] = np.nan
    out["repeat"] = np.nan
    # the frames the run analysed: the span of its tasks' frames (NaN where none says)
    span = g["frame_stop"].max().astype("Float64") - g["frame_start"].min().astype("Float64")
    out["n_frames"] = span.astype(float)
    for meta in _run_metas(metas):
        rid = meta.get("run_id")
        if rid not in out.index:
            continue
        for key in ("wall", "blocks_per_worker", "repeat", "n_frames"):
            if meta.get(key) is not None:
                out.loc[rid, key] = float(meta[key])
    out["load_imbalance"] = load_imbalance(df)
    flagged = flag_stragglers(df)
    out["n_stragglers"] = flagged.groupby("run_id")["is_straggler"].sum().astype(int)
    r = ratios(df)
    out["R_comp_io"] = r["R_comp_io"]
    out["R_comp_comm"] = r["R_comp_comm"]
    out.index.name = "run_id"
    return out


def speedup(runs: pd.DataFrame, by: Sequence[str] | None = None,
            metas: Sequence[dict[str, Any]] | Mapping[str, Any] | None = None) -> pd.DataFrame:
    """S(N) = t_1 / t_N and E(N) = S(N) / N over runs at several worker counts.

    Parameters
    ----------
    runs : pandas.DataFrame
        One row per run with ``n_workers`` and ``wall`` (see :func:`run_table`),
        or records (then :func:`run_table` is applied first, with ``metas``).
    by : sequence of str, optional
        Columns that define one scaling series (default: ``backend`` and, if
        present, ``blocks_per_worker``; and ``n_frames`` where the runs analysed
        different numbers of frames: a run of 10,000 frames is no baseline for runs of
        1,000).
    metas : sequence of dict or mapping, optional
        With records: the runs' metadata, as :func:`h5mdx.timing.records.load` returns it with
        them (``df, meta = load("bench/records.parquet"); speedup(df, metas=meta)``).
        Without it, each run's time is the span of its tasks and its blocks per worker
        are unknown (a warning says so): not the figures ``h5mdx bench`` reports.

    Returns
    -------
    pandas.DataFrame
        Columns ``*by, n_workers, n_runs, t_N`` (median wall time less warm-up, s),
        ``t_N_min``, ``t_N_max``, ``warmup`` (median, s, reported beside: loading the
        kernel is not work, and a run that pays it would scale better or worse for it),
        ``S`` and ``E``. Series without a 1-worker run get NaN S and E, and so do runs
        whose time less warm-up is 0, or whose 1-worker run's is.
    """
    if "task_key" in runs.columns:
        if not _run_metas(metas):
            warnings.warn(
                "speedup() of records without their runs' metadata: each run's time is the "
                "span of its tasks and its blocks per worker are unknown; pass the metadata "
                "saved with them (df, meta = h5mdx.timing.load(path); speedup(df, "
                "metas=meta))", UserWarning, stacklevel=2)
        runs = run_table(runs, metas)
    runs = runs.copy()
    warm = runs["warmup"].fillna(0.0) if "warmup" in runs else pd.Series(0.0, runs.index)
    runs["wall"] = (runs["wall"] - warm).clip(lower=0.0)
    runs["warmup"] = warm
    if by is None:
        by = ["backend"]
        if "blocks_per_worker" in runs and runs["blocks_per_worker"].notna().any():
            by.append("blocks_per_worker")
        if "n_frames" in runs and runs["n_frames"].nunique(dropna=True) > 1:
            # runs of other frames in one series: a t_1 of 1,000 frames over a t_N of
            # 10,000 said S(2) = 0.2, and their medians mixed both
            by.append("n_frames")
    by = list(by)
    keys = [*by, "n_workers"]
    g = runs.groupby(keys, dropna=False, sort=True)["wall"]
    table = pd.DataFrame({
        "n_runs": g.size(), "t_N": g.median(), "t_N_min": g.min(), "t_N_max": g.max(),
        "warmup": runs.groupby(keys, dropna=False, sort=True)["warmup"].median(),
    }).reset_index()
    s = []
    for _, row in table.iterrows():
        mask = table["n_workers"] == 1
        for col in by:
            mask &= (table[col] == row[col]) | (table[col].isna() & pd.isna(row[col]))
        t1 = table.loc[mask, "t_N"]
        # a t_N or a baseline t_1 of 0 (a run that only warmed up): no speed-up, neither a
        # ZeroDivisionError nor S = 0 (a 1-worker run of no work made every N "0x")
        ok = len(t1) and row["t_N"] > 0 and float(t1.iloc[0]) > 0
        s.append(float(t1.iloc[0]) / row["t_N"] if ok else np.nan)
    table["S"] = s
    table["E"] = table["S"] / table["n_workers"]
    table.attrs["by"] = by  # what makes one series (plot_scaling draws one line each)
    return table


def _pct(x: float) -> str:
    return f"{100 * x:.0f}%"


def advice(df: pd.DataFrame, speedup_table: pd.DataFrame | None = None) -> list[str]:
    """Plain-language diagnosis of the records (and optionally of a scaling series).

    The heuristics follow the parallel-analysis studies: a small R_comp/IO
    means the analysis is I/O bound and more workers on one file system do not
    help; stragglers slow in I/O point at the file system or the layout;
    imbalance calls for more, smaller blocks.

    Parameters
    ----------
    df : pandas.DataFrame
        Records (one or more runs; sums are over all of them).
    speedup_table : pandas.DataFrame, optional
        Output of :func:`speedup`, for remarks on the parallel efficiency.

    Returns
    -------
    list of str
        Sentences, most important first; empty when nothing stands out.
    """
    if df.empty:
        return ["No timing records: did the tasks use BlockTimer and was H5MDX_TIMING_SPOOL set?"]
    busy = float(df["wall"].sum()) if "wall" in df else float("nan")
    if busy < MIN_JUDGED:  # microseconds say nothing of layouts, balance or warm-up
        return [f"The run's tasks worked {busy * 1e3:.1f} ms in all: too short to judge its "
                f"I/O, balance or warm-up (the rules need {MIN_JUDGED * 1e3:.0f} ms or more "
                "of work; time more frames)"]
    idle = _idle_advice(df)
    sentences = (_io_advice(df), _comm_advice(df), _straggler_advice(df), _warmup_advice(df),
                 _imbalance_advice(df, idle=idle is not None), idle, _init_advice(df))
    out = [sentence for sentence in sentences if sentence is not None]
    scaling = _scaling_advice(speedup_table, remarks=bool(out))
    if scaling is not None:
        out.append(scaling)
    return out


def _mpi_io(df: pd.DataFrame) -> bool:
    """Whether every record is an MPI rank (the SPMD path on parallel HDF5)."""
    return bool(len(df)) and bool(df["backend"].isin(SPMD_BACKENDS).all())


def _r_comp_io(df: pd.DataFrame) -> float | None:
    """R_comp/IO of ``df``'s records (their compute over their I/O); None without I/O."""
    t_comp = df["t_compute"].sum(min_count=1)
    t_io = df["t_io"].sum(min_count=1)
    if not (pd.notna(t_comp) and pd.notna(t_io) and t_io > 0):
        return None
    return float(t_comp / t_io)


def _io_class(r: float) -> str:
    return "I/O bound" if r < 1 else "balanced" if r < 3 else "compute bound"


def _io_advice(df: pd.DataFrame) -> str | None:
    """I/O bound, balanced or compute bound, by R_comp/IO; of each scheduler where the
    records' schedulers differ in that (one ratio of threads at 2.7 and mpi-io at 0.11
    said 'Balanced: 1.2', true of neither)."""
    by = [(str(b), _r_comp_io(part)) for b, part in df.groupby("backend", sort=True)]
    known = [(b, r) for b, r in by if r is not None]
    if len({_io_class(r) for _, r in known}) > 1:
        said = ", ".join(f"{b} {r:.2g} ({_io_class(r)})" for b, r in known)
        return (f"R_comp/IO differs by scheduler: {said}; each scheduler's runs are judged "
                "on their own (time them apart for their advice).")
    r = _r_comp_io(df)
    if r is None:
        return None
    if r < 1:
        return (
            f"I/O bound: R_comp/IO = {r:.2g}; reading takes longer than computing, so more "
            "workers on the same file system help little. Where h5mdx info FILE flags the "
            "layout, h5mdx rechunk fixes it (time-blocked chunks, no or fast compression)"
            + ("." if _mpi_io(df) else "; on a parallel file system, parallel HDF5 "
               "(h5mdx mpi-rmsd) spreads the reads.")
        )
    if r < 3:
        return (
            f"Balanced between I/O and compute: R_comp/IO = {r:.2g}; both the layout "
            "(h5mdx rechunk) and the kernel matter."
        )
    return (
        f"Compute bound: R_comp/IO = {r:.2g}; the analysis should scale with workers "
        "until the cores run out."
    )


def _comm_advice(df: pd.DataFrame) -> str | None:
    """Communication bound, by R_comp/comm."""
    t_comp = df["t_compute"].sum(min_count=1)
    comm = df["t_comm_gather"]
    if "t_transfer" in df:
        comm = comm.fillna(df["t_transfer"])
    t_comm = comm.sum(min_count=1)
    if pd.notna(t_comp) and pd.notna(t_comm) and t_comm > 0 and t_comp / t_comm < 1:
        if _mpi_io(df):  # the ranks gather with MPI already: a few bytes a frame
            return (
                f"Communication bound: R_comp/comm = {t_comp / t_comm:.2g}; gathering the "
                "series (MPI Gatherv) took longer than computing it: the latency of a "
                "collective, which a run this short cannot amortise; longer runs (more "
                "frames per rank) can."
            )
        return (
            f"Communication bound: R_comp/comm = {t_comp / t_comm:.2g}; moving results costs "
            "more than computing them. Return less data per task or gather with MPI."
        )
    return None


def _straggler_advice(df: pd.DataFrame) -> str | None:
    """How many stragglers, and what their slow phase points at."""
    flagged = flag_stragglers(df)
    n_slow = int(flagged["is_straggler"].sum())
    if not n_slow:
        return None
    phases = flagged.loc[flagged["is_straggler"], "slow_phase"].value_counts()
    main = str(phases.index[0])
    why = {
        "io": "the file system or the storage layout (contention, cold cache, chunks "
              "that do not match the blocks)",
        "compute": "the CPU (other jobs or more workers than cores)",
        "other": "time outside the measured phases (scheduler, serialisation, GC)",
    }.get(main, f"the {main} phase")
    remedy = (" Each rank has one block, so the others wait for a slow one at the end "
              "(t_wait)." if _mpi_io(df) else " More blocks per worker (e.g. 3) let faster "
              "workers take over the work of slow ones.")
    if not _mpi_io(df) and "n_workers" in flagged:
        runs = flagged.groupby("run_id", sort=False)
        per_worker = runs.size() / runs["n_workers"].first().clip(lower=1)
        slow = flagged.loc[flagged["is_straggler"], "run_id"].unique()
        least = float(per_worker.loc[slow].min())
        if least >= 3:  # the advice was taken already
            remedy = (f" Those runs had {least:.0f} or more blocks per worker already, "
                      "which lets faster workers take over: the slow blocks themselves are "
                      "the trouble.")
    return (
        f"{n_slow} straggler task(s) of {len(flagged)} ({straggler_rule()}), "
        f"mostly slow in {main}: look at {why}.{remedy}"
    )


def _warmup_advice(df: pd.DataFrame) -> str | None:
    """A warm-up that takes more than a tenth of the work."""
    warm = warmup_summary(df)
    if warm["fraction"] > 0.1:
        return (
            f"Warm-up (loading the kernel) takes {_pct(warm['fraction'])} of the work "
            f"({warm['seconds']:.2f} s, mostly in {warm['n_tasks']:.0f} task(s)): a longer "
            "run amortises it; it is not counted as straggling."
        )
    return None


def _imbalance_advice(df: pd.DataFrame, idle: bool = False) -> str | None:
    """The busiest worker above 1.25 x the mean (the median over the runs, as the bench's
    table shows it; the worst run named); MPI ranks given no frames. ``idle``: the workers
    stood idle much of the time, which :func:`_idle_advice` answers with larger blocks, so
    smaller ones are not asked for here."""
    spmd = df["backend"].isin(SPMD_BACKENDS)
    idle_ranks = df[spmd & (df["frame_stop"] <= df["frame_start"])]
    if len(idle_ranks):
        runs = df[spmd & df["run_id"].isin(idle_ranks["run_id"])]
        return (
            f"{len(idle_ranks)} MPI rank(s) of {len(runs)} had no frames: ranks take whole "
            "HDF5 chunks, and there were fewer chunks than ranks; use fewer ranks, or "
            "smaller chunks along time (h5mdx info FILE; h5mdx rechunk --frames-per-chunk)."
        )
    imbalance = load_imbalance(df).dropna()
    if imbalance.empty:
        return None
    # the repeats of one configuration (h5mdx bench's run ids end in -r<repeat>)
    config = pd.Series(imbalance.index.astype(str).str.replace(r"-r\d+$", "", regex=True),
                       index=imbalance.index)
    medians = imbalance.groupby(config).median()
    if medians.max() <= 1.25:
        return None
    worst_config = medians.idxmax()
    repeats = imbalance[config == worst_config]
    worst_run = repeats.idxmax()
    measured = (f"the busiest worker worked {repeats.max():.2f} x the mean" if len(repeats) == 1
                else f"the busiest worker worked {medians.max():.2f} x the mean in "
                f"{worst_config} (median of {len(repeats)} repeats; the most, "
                f"{repeats.max():.2f}, in {worst_run})")
    run = df[df["run_id"] == worst_run]
    if run["backend"].isin(SPMD_BACKENDS).all():  # a block per rank, fixed ahead
        return (
            f"Load imbalance: {measured.replace('worker', 'MPI rank', 1)}; each rank reads "
            "one equal block, so the others wait for it at the gather (t_wait): look at "
            "that rank's node and storage, or run on dask workers (--scheduler dask-mpi or "
            "distributed), which share the blocks out as they finish."
        )
    runs = df.groupby("run_id", sort=False)
    tasks = (runs.size() / runs["worker"].nunique().clip(lower=1)).groupby(config).min()
    if tasks[worst_config] >= 3:  # blocks to share out were there: the workers differ
        return (
            f"Load imbalance: {measured}, with {tasks[worst_config]:.0f} tasks per worker "
            "to share out: some workers ran slower (other jobs on their cores?) or stood "
            "idle; check the per-worker times (plot_per_worker) and the machine's load."
        )
    # the same scheduler and workers with 3 or more blocks per worker (bench's -m<M>)
    family = medians.index.str.replace(r"-m\d+$", "", regex=True)
    same = (family == family[medians.index.get_loc(worst_config)]) & (
        tasks.reindex(medians.index) >= 3).to_numpy()
    if same.any():  # the runs with more blocks per worker say whether they help
        best = medians[same].idxmin()
        helped = medians[best] <= 1.25
        return (
            f"Load imbalance: {measured}; {best}, with more blocks per worker, had "
            f"{medians[best]:.2f} x: "
            + ("more blocks share the work out." if helped else "more blocks did not "
               "even it out; check the per-worker times (plot_per_worker).")
        )
    if idle:
        return (f"Load imbalance: {measured}, in runs where the workers mostly stood idle "
                "(below): too little work to share out evenly.")
    return (
        f"Load imbalance: {measured}; use more, smaller blocks (--blocks-per-worker 3) or "
        "check for idle workers."
    )


def _idle_advice(df: pd.DataFrame) -> str | None:
    """Task workers idle more than a fifth of their time (SPMD ranks do not count)."""
    task_backend = ~df["backend"].isin(SPMD_BACKENDS)
    wait = df.loc[task_backend, "t_wait"].sum(min_count=1)
    worked = busy(df[task_backend]).sum()
    if pd.notna(wait) and wait + worked > 0 and wait / (wait + worked) > 0.2:
        return (
            f"Workers were idle {_pct(wait / (wait + worked))} of their time before and "
            "between tasks: start-up (e.g. the processes scheduler's new pool), too few "
            "tasks for the workers, or scheduler overhead larger than the tasks; use "
            "larger blocks or fewer workers."
        )
    return None


def _init_advice(df: pd.DataFrame) -> str | None:
    """Opening topology and trajectory above a tenth of the work (of the MPI ranks and of
    the dask tasks apart: their remedies differ)."""
    out = []
    spmd = df["backend"].isin(SPMD_BACKENDS)
    for ranks, part in ((True, df[spmd]), (False, df[~spmd])):
        init = part[["t_init_top", "t_init_traj"]].sum(axis=1, min_count=1).sum(min_count=1)
        total = busy(part).sum()
        if not (pd.notna(init) and total > 0 and init / total > 0.1):
            continue
        share = f"{_pct(init / total)} of the work"
        if not ranks:
            out.append(f"Opening the topology and trajectory takes {share} of the dask "
                       "tasks; open once per worker, not per task.")
            continue
        top = part["t_init_top"].fillna(0.0)
        # --topology-on-root: one rank reads it, the others wait (t_wait), near 0 here
        on_root = len(top) > 1 and float(top.nlargest(2).iloc[1]) < 0.1 * float(top.max())
        if float(top.sum()) < float(part["t_init_traj"].fillna(0.0).sum()):
            remedy = ("most of it opening the trajectory with MPI-IO, a collective call "
                      "whose cost grows with the ranks; a longer run amortises it")
        elif on_root:
            remedy = ("rank 0 alone reads the topology already; a smaller topology file "
                      "(only the atoms analysed) or a longer run amortises it")
        else:
            remedy = ("let rank 0 read the topology and broadcast the selection (h5mdx "
                      "mpi-rmsd --topology-on-root)")
        out.append(f"Opening the topology and trajectory takes {share} of the MPI ranks; "
                   f"{remedy}.")
    return " ".join(out) or None


def _scaling_advice(speedup_table: pd.DataFrame | None, remarks: bool = False) -> str | None:
    """A parallel efficiency below 0.5 at the largest N (``remarks``: other advice was
    given, which it refers to)."""
    if speedup_table is None or speedup_table.empty:
        return None
    top = speedup_table.dropna(subset=["E"])
    if top.empty:
        return None
    row = top.sort_values(["n_workers", "E"]).iloc[-1]
    n = int(row["n_workers"])
    if n > 1 and row["E"] < 0.5:
        return (
            f"Poor scaling: E({n}) = {row['E']:.2f} (S = {row['S']:.2f}) with "
            f"{row.get('backend', '')}; "
            + ("see the remarks above." if remarks else
               "a run of a few tenths of a second, or the workers' start, weighs on it.")
        )
    return None
