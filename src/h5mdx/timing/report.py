"""The one table renderer of h5mdx: plain text, Markdown or a rich table.

:func:`render_table` writes every table h5mdx shows: the summary of ``h5mdx
bench`` (a rich table on the terminal, Markdown in ``report.md``), the per-rank
phases that ``h5mdx mpi-rmsd`` prints and the straggler report of ``h5mdx
slurm-script --submit`` (plain text). :func:`task_table` turns timing records (one
row per task or MPI rank, schema of :mod:`h5mdx.timing.records`) into such a
table, and :func:`straggler_summary` adds the stragglers, the load imbalance and
the advice of :mod:`h5mdx.timing.stragglers`.

Only the standard library is imported here; rich is imported when a rich table
is asked for (plain text when it is not installed), pandas by
:func:`straggler_summary`.

>>> print(render_table([["threads", 1, 0.5], ["processes", 2, None]],
...                    ["scheduler", "N", "t (s)"]))
scheduler  N  t (s)
threads    1    0.5
processes  2      -
>>> print(render_table([["threads", "1"]], ["scheduler", "N"], fmt="markdown"))
| scheduler | N |
|:---|---:|
| threads | 1 |
"""

from __future__ import annotations

import io
import math
import shutil
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

__all__ = ["FORMATS", "TASK_COLUMNS", "frame_range", "render_table", "straggler_summary",
           "task_table"]

#: The formats of :func:`render_table`.
FORMATS = ("text", "markdown", "rich")

#: Shown for a missing value (None, NaN, pandas' NA).
MISSING = "-"


def _is_missing(value: Any) -> bool:
    if value is None:
        return True
    if isinstance(value, float):
        return math.isnan(value)
    return str(value) in ("<NA>", "nan", "NaT")


def _cell(value: Any, floatfmt: str) -> str:
    if isinstance(value, str):
        return value
    if _is_missing(value):
        return MISSING
    if isinstance(value, float) or type(value).__name__.startswith("float"):
        return format(float(value), floatfmt)
    return str(value)


def _alignments(align: str | Sequence[str] | None, n: int) -> list[str]:
    if align is None:
        return ["<"] + [">"] * (n - 1)
    out = [{"left": "<", "right": ">"}.get(a, a) for a in align]
    if len(out) != n or not set(out) <= {"<", ">"}:
        raise ValueError(f"align needs one '<' or '>' per column ({n}), got {align!r}")
    return out


def _rows(rows: Any, header: Sequence[str] | None) -> tuple[list[str] | None, list[Sequence[Any]]]:
    if hasattr(rows, "columns") and hasattr(rows, "itertuples"):  # a pandas DataFrame
        names = [str(c) for c in rows.columns] if header is None else list(header)
        return names, [tuple(r) for r in rows.itertuples(index=False)]
    return (None if header is None else list(header)), [tuple(r) for r in rows]


def render_table(
    rows: Iterable[Sequence[Any]] | Any,
    header: Sequence[str] | None = None,
    *,
    fmt: str = "text",
    align: str | Sequence[str] | None = None,
    title: str | None = None,
    floatfmt: str = ".3g",
    width: int | None = None,
    color: bool = False,
) -> str:
    """Render rows as a plain-text, Markdown or rich table.

    Parameters
    ----------
    rows : iterable of sequences, or pandas.DataFrame
        The cells, row by row. Strings are shown as they are, floats with
        ``floatfmt``, a missing value (None, NaN, pandas' NA) as ``-``. A
        DataFrame gives its rows (the index is left out) and, without
        ``header``, its column names.
    header : sequence of str, optional
        Column names (None: no header line; Markdown needs one).
    fmt : {"text", "markdown", "rich"}, optional
        ``"text"``: columns padded to their widest cell, two spaces apart, no
        trailing spaces. ``"markdown"``: a GitHub table. ``"rich"``: a rich table
        drawn with box characters (for the terminal); plain text when rich is not
        installed.
    align : str or sequence of str, optional
        One ``"<"`` (left) or ``">"`` (right) per column, or ``"left"``/``"right"``;
        default: the first column left (the row's label), the others right.
    title : str, optional
        A line above the table (rich: the table's title).
    floatfmt : str, optional
        Format of float cells (default ``".3g"``).
    width : int, optional
        Width of a rich table's console (default: the terminal's, at least 100).
    color : bool, optional
        Let rich write colour and style codes (for a terminal).

    Returns
    -------
    str
        The table, lines joined by newlines, with no final newline.

    Raises
    ------
    ValueError
        For an unknown ``fmt``, ``align`` of the wrong length, a row of the wrong
        length, or Markdown without a header.
    """
    if fmt not in FORMATS:
        raise ValueError(f"unknown table format {fmt!r}; valid options are: {', '.join(FORMATS)}")
    names, raw = _rows(rows, header)
    cells = [[_cell(v, floatfmt) for v in r] for r in raw]
    n = len(names) if names is not None else (len(cells[0]) if cells else 0)
    bad = [r for r in cells if len(r) != n]
    if bad:
        raise ValueError(f"every row needs {n} cells (one per column); got {bad[0]!r}")
    aligns = _alignments(align, n)
    if fmt == "markdown":
        return _markdown(names, cells, aligns, title)
    if fmt == "rich":
        try:
            return _rich(names, cells, aligns, title, width, color)
        except ImportError:
            pass
    return _text(names, cells, aligns, title)


def _text(names: list[str] | None, cells: list[list[str]], aligns: list[str],
          title: str | None) -> str:
    lines = [names] if names is not None else []
    lines += cells
    widths = [max((len(r[i]) for r in lines), default=0) for i in range(len(aligns))]
    out = [title] if title else []
    for r in lines:
        row = (f"{c:{a}{w}}" for c, a, w in zip(r, aligns, widths, strict=True))
        out.append("  ".join(row).rstrip())
    return "\n".join(out)


def _markdown(names: list[str] | None, cells: list[list[str]], aligns: list[str],
              title: str | None) -> str:
    if names is None:
        raise ValueError("a Markdown table needs a header")
    rule = {"<": ":---", ">": "---:"}
    out = [title, ""] if title else []
    out.append("| " + " | ".join(names) + " |")
    out.append("|" + "|".join(rule[a] for a in aligns) + "|")
    out += ["| " + " | ".join(r) + " |" for r in cells]
    return "\n".join(out)


def _rich(names: list[str] | None, cells: list[list[str]], aligns: list[str],
          title: str | None, width: int | None, color: bool) -> str:
    from rich.console import Console
    from rich.table import Table

    table = Table(title=title, show_header=names is not None)
    for i, a in enumerate(aligns):
        # the first column labels the row: never wrapped
        table.add_column(names[i] if names is not None else "",
                         justify="left" if a == "<" else "right", no_wrap=i == 0)
    for r in cells:
        table.add_row(*r)
    if width is None:
        width = max(shutil.get_terminal_size().columns, 100)
    buf = io.StringIO()
    console = Console(file=buf, width=width, force_terminal=color, no_color=not color,
                      highlight=False)
    console.print(table)
    return buf.getvalue().rstrip("\n")


# ------------------------------------------------------------------- timing records


def _frames(r: Mapping[str, Any]) -> str:
    """The frames of a record, first and last (``frame_stop`` is one past the last), as
    errors name them: "0-9"; the table said "0-10"; "none" where it had none."""
    start: Any = r.get("frame_start")
    stop: Any = r.get("frame_stop")
    return "" if _is_missing(start) or _is_missing(stop) else frame_range(int(start), int(stop))


def frame_range(start: int, stop: int) -> str:
    """Frames ``start`` to ``stop`` (one past the last) as people say them: ``"0-9"``,
    ``"5"`` for one frame, ``"none"`` for none.

    >>> frame_range(0, 10), frame_range(5, 6), frame_range(3, 3)
    ('0-9', '5', 'none')
    """
    if stop <= start:
        return "none"
    return f"{start}" if stop == start + 1 else f"{start}-{stop - 1}"


def _who(r: Mapping[str, Any]) -> str:
    rank = r.get("rank")
    return str(rank) if not _is_missing(rank) else str(r.get("worker"))[-4:]


def _worker(r: Mapping[str, Any]) -> str:
    worker = r.get("worker")
    return MISSING if _is_missing(worker) else str(worker).removeprefix("tcp://")


def _number(value: Any, spec: str = ".3f") -> str:
    try:
        value = float(value)
    except (TypeError, ValueError):
        return MISSING
    return MISSING if math.isnan(value) else format(value, spec)


def _seconds(key: str) -> Any:
    return lambda r: _number(r.get(key))


#: The phases that lie inside a record's ``wall`` (``t_wait`` only for an SPMD rank's).
_INSIDE = ("t_init_top", "t_init_traj", "t_warmup", "t_io", "t_compute", "t_comm_gather")


def _other(r: Mapping[str, Any]) -> str:
    """The seconds of ``wall`` no phase accounts for (0 at least): the table's phases and
    this add up to its ``total``. The table had no such column, and its phases of an MPI
    rank fell short of the total they stood beside, with nothing to say by how much."""
    from h5mdx.timing.records import SPMD_BACKENDS

    wall: Any = r.get("wall")
    phases = [*_INSIDE, *(("t_wait",) if r.get("backend") in SPMD_BACKENDS else ())]
    try:
        wall = float(wall)
        values: list[Any] = [r.get(p) for p in phases]
        known = [float(v) for v in values if not _is_missing(v)]
    except (TypeError, ValueError):
        return MISSING
    return MISSING if math.isnan(wall) else format(max(wall - sum(known), 0.0), ".3f")


def _host(r: Mapping[str, Any]) -> str:
    host = r.get("host")
    return MISSING if _is_missing(host) else str(host)[:12]


def _job(r: Mapping[str, Any]) -> str:
    job = r.get("slurm_job_id")
    return MISSING if _is_missing(job) else str(job)


#: The columns :func:`task_table` knows: name -> (alignment, cell of a record).
TASK_COLUMNS: dict[str, tuple[str, Any]] = {
    "rank": (">", _who),  # the MPI rank, else the end of the worker's name
    "worker": ("<", _worker),  # the worker's name (a distributed worker's address)
    "host": ("<", _host),
    "frames": ("<", _frames),
    "init_top": (">", _seconds("t_init_top")),
    "init_traj": (">", _seconds("t_init_traj")),
    "warmup": (">", _seconds("t_warmup")),
    "io": (">", _seconds("t_io")),
    "compute": (">", _seconds("t_compute")),
    "wait": (">", _seconds("t_wait")),
    "gather": (">", _seconds("t_comm_gather")),
    "other": (">", _other),  # the part of total no phase accounts for
    "total": (">", _seconds("wall")),
    "job": ("<", _job),
    "flag": ("<", lambda r: "STRAGGLER" if r.get("is_straggler") else ""),
}


def task_table(records: Any, columns: Sequence[str] | None = None, *,
               fmt: str = "text") -> str:
    """One line per task or MPI rank: its frames and the seconds of each phase.

    Parameters
    ----------
    records : pandas.DataFrame or iterable of mappings
        Timing records (schema of :mod:`h5mdx.timing.records`), in the order to
        show; ``is_straggler`` (:func:`~h5mdx.timing.stragglers.flag_stragglers`)
        fills the ``flag`` column.
    columns : sequence of str, optional
        Among :data:`TASK_COLUMNS`: ``rank`` (the MPI rank, else the end of the
        worker's name), ``worker`` (the worker's name, a distributed worker's address
        without ``tcp://``), ``host``, ``frames``, the phases ``init_top``,
        ``init_traj``, ``warmup``, ``io``, ``compute``, ``wait``, ``gather``,
        ``other`` (the part of ``total`` no phase accounts for) and ``total``
        (``wall``) in seconds, ``job`` (the SLURM job id) and ``flag``
        (``STRAGGLER``). The phases and ``other`` add up to ``total``; ``wait`` is part
        of it for an MPI rank (its wait for the others), not for a dask task (its
        worker's idle time before it). Default: all, with ``rank`` where every record
        has one (MPI ranks) and ``worker`` where not.
    fmt : str, optional
        As for :func:`render_table`.

    Returns
    -------
    str
    """
    unknown = [c for c in columns or () if c not in TASK_COLUMNS]
    if unknown:
        raise ValueError(f"unknown column(s) {unknown}; valid options are: "
                         f"{', '.join(TASK_COLUMNS)}")
    if hasattr(records, "to_dict"):
        records = records.to_dict("records")
    records = list(records)
    if columns is None:
        ranks = bool(records) and all(not _is_missing(r.get("rank")) for r in records)
        columns = [c for c in TASK_COLUMNS if c != ("worker" if ranks else "rank")]
    rows = [[TASK_COLUMNS[c][1](r) for c in columns] for r in records]
    header = ["" if c == "flag" else c for c in columns]
    return render_table(rows, header, fmt=fmt, align=[TASK_COLUMNS[c][0] for c in columns])


def straggler_summary(records: Any, meta: Mapping[str, Any] | None = None) -> str:
    """A plain-text report of timing records: per task/rank phases, stragglers, advice.

    Parameters
    ----------
    records : pandas.DataFrame
        Timing records (:mod:`h5mdx.timing.records` schema), e.g. the
        ``timing.csv`` that ``h5mdx mpi-rmsd --out DIR`` writes.
    meta : mapping, optional
        The run's metadata, for the header line: its ``file``, and its ``wall`` (the run's
        time measured on one clock), else the span from the first task's start to the
        last one's stop, which mixes the clocks of the hosts the tasks ran on.

    Returns
    -------
    str
        Lines: a header, the :func:`task_table` (one line per rank or task), the
        stragglers by the default rule (duration without warm-up > 1.5 x the median
        of the other tasks and > 50 ms longer; :func:`~h5mdx.timing.stragglers.straggler_rule`)
        with their slow phase, load imbalance, R_comp/IO and
        the advice of :func:`h5mdx.timing.stragglers.advice`.
    """
    from h5mdx.timing.records import SPMD_BACKENDS, spmd_wall
    from h5mdx.timing.stragglers import (
        advice,
        flag_stragglers,
        load_imbalance,
        ratios,
        straggler_rule,
    )

    df = records
    if df.empty:
        return "no timing records"
    flagged = flag_stragglers(df)
    rule = straggler_rule()  # the rule flag_stragglers applies, in its words
    backend = ", ".join(sorted(set(map(str, df["backend"]))))
    n = int(df["n_workers"].max())
    wall = _number((meta or {}).get("wall"))
    if df["backend"].isin(SPMD_BACKENDS).all():
        span = f"{spmd_wall(df['wall']):.3f} s (the longest rank)"
    elif wall != MISSING and df["run_id"].nunique() == 1:
        # the run's measured time, on one clock: the span of tasks on several hosts mixed
        # their clocks (a worker 30 s ahead said a run of 1 s took 31 s)
        span = f"{wall} s"
    else:
        span = f"{float(df['t_stop'].max() - df['t_start'].min()):.3f} s from first start " \
               "to last stop"
    lines = [f"timing: {len(df)} record(s), backend {backend}, {n} worker(s)/rank(s), "
             f"{span}"
             + (f", file {meta['file']}" if meta and meta.get("file") else "")]
    order = flagged.sort_values(["rank", "t_start"] if df["rank"].notna().all() else "t_start")
    lines.append(task_table(order))
    if not df["backend"].isin(SPMD_BACKENDS).all():
        lines.append("(seconds; a dask task's wait is its worker's idle time before it, "
                     "not part of its total)")
    slow = flagged[flagged["is_straggler"]]
    if slow.empty:
        lines.append(f"stragglers ({rule}): none")
    else:
        items = [
            f"{'rank ' + str(r['rank']) if not _is_missing(r['rank']) else r['task_key']} "
            f"({r['duration']:.3f} s > {r['threshold']:.3f} s, slow in {r['slow_phase']})"
            for _, r in slow.iterrows()
        ]
        lines.append(f"stragglers ({rule}): " + "; ".join(items))
    imb = load_imbalance(df)
    rat = ratios(df)
    r_io = rat["R_comp_io"].iloc[0] if len(rat) == 1 else None
    # of the work shared out (less warm-up and opening, as load_imbalance takes it); "-"
    # where there was none: a run of tasks of 0 s said "nan"
    lines.append(f"load imbalance (max/mean work): "
                 f"{_number(imb.max() if len(imb) else None, '.2f')}; "
                 f"R_comp/IO: {_number(r_io, '.3g')}")
    if "retries" in df and (df["retries"].fillna(0) > 0).any():  # capture's, distributed
        again = df[df["retries"].fillna(0) > 0]
        lines.append(f"run again: {len(again)} task(s) after their worker was lost, "
                     f"{int(again['retries'].sum())} earlier attempt(s) of "
                     f"{float(again['t_retried'].sum()):.3f} s in all (in no task's total)")
    for sentence in advice(df):
        lines.append(f"advice: {sentence}")
    return "\n".join(lines)
