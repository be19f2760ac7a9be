"""The one table renderer: text, Markdown and rich tables; the per-task table of records."""

from __future__ import annotations

import sys

import pandas as pd
import pytest

from h5mdx.timing import records as rec
from h5mdx.timing.report import render_table, task_table

HEADER = ["scheduler", "N", "t (s)"]
ROWS = [["threads", "1", "0.25"], ["distributed", "16", "1.5"]]


def test_text_pads_columns_and_aligns_numbers_right():
    lines = render_table(ROWS, HEADER).splitlines()
    assert lines == ["scheduler     N  t (s)",
                     "threads       1   0.25",
                     "distributed  16    1.5"]


def test_text_formats_floats_and_missing_values():
    text = render_table([["a", 0.123456, None], ["b", float("nan"), pd.NA]], ["x", "y", "z"],
                        floatfmt=".2f")
    assert text.splitlines()[1:] == ["a  0.12  -", "b     -  -"]


def test_text_align_title_and_no_header():
    text = render_table([["1", "a"], ["22", "bb"]], align="><", title="T")
    assert text.splitlines() == ["T", " 1  a", "22  bb"]
    assert render_table([["a", "1"]], align=["left", "right"]) == "a  1"


def test_markdown():
    text = render_table(ROWS, HEADER, fmt="markdown")
    assert text.splitlines() == ["| scheduler | N | t (s) |", "|:---|---:|---:|",
                                 "| threads | 1 | 0.25 |", "| distributed | 16 | 1.5 |"]


def test_dataframe_gives_its_columns():
    df = pd.DataFrame({"backend": ["threads"], "S": [1.0]}, index=[7])
    assert render_table(df, fmt="markdown").splitlines()[2] == "| threads | 1 |"
    assert render_table(df).splitlines()[0] == "backend  S"


def test_rich_table_has_title_columns_and_cells():
    pytest.importorskip("rich")
    text = render_table(ROWS, HEADER, fmt="rich", title="h5mdx bench: read", width=100)
    assert "h5mdx bench: read" in text and "\x1b[" not in text  # no colour codes
    assert "┃ scheduler" in text and "│ distributed │" in text and "1.5 │" in text
    assert "\x1b[" in render_table(ROWS, HEADER, fmt="rich", title="T", color=True)


def test_rich_missing_falls_back_to_text(monkeypatch):
    monkeypatch.setitem(sys.modules, "rich", None)
    monkeypatch.setitem(sys.modules, "rich.console", None)
    monkeypatch.setitem(sys.modules, "rich.table", None)
    assert render_table(ROWS, HEADER, fmt="rich", title="T") == "T\n" + render_table(ROWS, HEADER)


@pytest.mark.parametrize(("kwargs", "match"), [
    ({"fmt": "html"}, "valid options are: text, markdown, rich"),
    ({"align": "<>"}, "one '<' or '>' per column"),
    ({"align": "<>^"}, "one '<' or '>' per column"),
])
def test_bad_arguments(kwargs, match):
    with pytest.raises(ValueError, match=match):
        render_table(ROWS, HEADER, **kwargs)


def test_bad_rows_and_markdown_without_header():
    with pytest.raises(ValueError, match="every row needs 3 cells"):
        render_table([["a", "1"]], HEADER)
    with pytest.raises(ValueError, match="needs a header"):
        render_table(ROWS, fmt="markdown")


def _dask_records():
    rows = [{"run_id": "r", "backend": "threads", "n_workers": 2,
             "worker": f"thread-{1000 + i}", "task_key": f"k{i}", "kind": "rmsd",
             "frame_start": 10 * i, "frame_stop": 10 * i + 10, "t_start": 1.0 + i,
             "t_stop": 1.5 + i, "t_io": 0.125, "t_compute": 0.25} for i in range(2)]
    return rec.to_frame(rows)


def test_task_table_of_dask_tasks():
    lines = task_table(_dask_records()).splitlines()
    assert lines[0].split() == ["worker", "host", "frames", "init_top", "init_traj", "warmup",
                                "io", "compute", "wait", "gather", "other", "total", "job"]
    first = lines[1].split()
    # no rank: the worker's name; unknown phases and job: "-"; no warm-up: 0
    assert first[0] == "thread-1000" and first[2] == "0-9"
    assert first[3:6] == ["-", "-", "0.000"] and first[6:8] == ["0.125", "0.250"]
    assert first[-3:] == ["0.125", "0.500", "-"]  # 0.5 s, 0.375 s of it in phases


def test_task_table_columns_and_flag():
    df = _dask_records()
    df["is_straggler"] = [False, True]
    lines = task_table(df, ("frames", "io", "flag")).splitlines()
    assert lines == ["frames     io", "0-9     0.125", "10-19   0.125  STRAGGLER"]
    records = df.to_dict("records")
    assert task_table(records, ("frames", "io")) == task_table(df, ("frames", "io"))
    with pytest.raises(ValueError, match="unknown column"):
        task_table(df, ("frames", "disk"))


def test_task_table_markdown():
    text = task_table(_dask_records(), ("frames", "total"), fmt="markdown")
    assert text.splitlines()[1:] == ["|:---|---:|", "| 0-9 | 0.500 |", "| 10-19 | 0.500 |"]


def test_task_table_names_distributed_workers_whole():
    """Workers without a rank are named in full (an address's last four digits are not a
    rank, and two workers can share them)."""
    df = _dask_records()
    df["worker"] = ["tcp://127.0.0.1:40247", "tcp://127.0.0.1:50247"]
    lines = task_table(df).splitlines()
    assert lines[0].split()[0] == "worker"
    assert [line.split()[0] for line in lines[1:]] == ["127.0.0.1:40247", "127.0.0.1:50247"]
    df["rank"] = [0, 1]
    assert task_table(df).splitlines()[0].split()[0] == "rank"


def test_the_columns_of_a_rank_add_up_to_its_total():
    """An MPI rank of 1.0 s whose phases hold 0.8 s (0.1 s of it its wait for the others):
    the table showed the phases beside a total 0.2 s longer, nothing saying where it went;
    its ``other`` holds the rest, and a dask task's wait (idle before it) is not counted."""
    from h5mdx.timing.report import straggler_summary

    row = {"run_id": "r", "backend": "mpi-io", "n_workers": 1, "worker": "rank-0", "rank": 0,
           "task_key": "rank-0", "frame_start": 0, "frame_stop": 10, "t_start": 1.0,
           "t_stop": 2.0, "t_init_top": 0.05, "t_init_traj": 0.05, "t_io": 0.25,
           "t_compute": 0.25, "t_wait": 0.1, "t_comm_gather": 0.1}
    header, line = task_table(rec.to_frame([row])).splitlines()
    cells = dict(zip(header.split(), line.split(), strict=False))
    assert cells["other"] == "0.200" and cells["total"] == "1.000"
    parts = ("init_top", "init_traj", "warmup", "io", "compute", "wait", "gather", "other")
    assert sum(float(cells[c]) for c in parts) == pytest.approx(float(cells["total"]))
    task = rec.to_frame([{**row, "backend": "threads", "rank": None, "t_wait": 3.0}])
    header, line = task_table(task).splitlines()
    assert dict(zip(header.split(), line.split(), strict=False))["other"] == "0.300"
    assert "idle time before it, not part of its total" in straggler_summary(task)
    assert "not part of its total" not in straggler_summary(rec.to_frame([row]))


def test_a_summary_of_no_work_says_no_imbalance_not_nan():
    """Tasks of 0 s (a run of a few microseconds): the summary said 'load imbalance
    (max/mean busy): nan'; it says '-' as every table here does for no value."""
    from h5mdx.timing.report import straggler_summary

    df = _dask_records()
    df["t_stop"] = df["t_start"]
    df["wall"] = 0.0
    df[["t_io", "t_compute"]] = 0.0
    line = next(x for x in straggler_summary(df).splitlines() if x.startswith("load"))
    assert line == "load imbalance (max/mean work): -; R_comp/IO: -"
    line = next(x for x in straggler_summary(_dask_records()).splitlines()
                if x.startswith("load"))
    assert line == "load imbalance (max/mean work): 1.00; R_comp/IO: 2"


def test_the_summary_says_the_tasks_run_again():
    """capture() gives a task that dask ran again (its worker lost) one row with
    ``retries`` and ``t_retried``; the summary said nothing of the time lost so."""
    from h5mdx.timing.records import to_frame
    from h5mdx.timing.report import straggler_summary

    rows = [{"run_id": "r", "backend": "distributed", "n_workers": 2, "worker": f"w{i % 2}",
             "task_key": f"k{i}", "kind": "rmsd", "frame_start": 10 * i,
             "frame_stop": 10 * i + 10, "t_start": 100.0 + i, "t_stop": 100.5 + i,
             "t_io": 0.2, "t_compute": 0.3, "t_wait": 0.0, "retries": int(i == 1),
             "t_retried": 0.25 if i == 1 else 0.0} for i in range(4)]
    text = straggler_summary(to_frame(rows))
    assert ("run again: 1 task(s) after their worker was lost, 1 earlier attempt(s) of "
            "0.250 s in all (in no task's total)") in text.splitlines()
    assert "run again" not in straggler_summary(to_frame(rows).drop(columns="retries"))


def test_the_summary_takes_the_runs_wall_time_from_its_metadata():
    """The header's time of a dask run was the span from the first task's start to the
    last one's stop, whatever the metadata said: the tasks of workers on hosts whose
    clocks differ by 30 s said a run of 1.5 s took 31.5 s. The run's measured wall time
    (``meta["wall"]``, one clock) is said where it is known."""
    from h5mdx.timing.report import straggler_summary

    df = _dask_records()
    df.loc[1, ["t_start", "t_stop"]] += 30.0  # a worker whose clock is ahead
    header = straggler_summary(df, {"wall": 1.5, "run_id": "r"}).splitlines()[0]
    assert header == "timing: 2 record(s), backend threads, 2 worker(s)/rank(s), 1.500 s"
    header = straggler_summary(df).splitlines()[0]  # no metadata: the span, as before
    assert header.endswith(", 31.500 s from first start to last stop")
