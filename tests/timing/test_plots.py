"""Figures drawn from saved timing records."""

from __future__ import annotations

import pandas as pd
import pytest

from h5mdx.timing import records as rec
from h5mdx.timing.plots import plot_gantt, plot_per_worker, plot_scaling
from h5mdx.timing.stragglers import run_table, speedup

image = pytest.importorskip("matplotlib.image")


def _records(run_id, n_workers, slow=None):
    rows, clock = [], dict.fromkeys(range(n_workers), 50.0)
    for i in range(6):
        w = i % n_workers
        io, comp = 0.1, 0.2 + (0.5 if slow == i else 0.0)
        rows.append({"run_id": run_id, "backend": "threads", "n_workers": n_workers,
                     "worker": f"thread-{w}", "task_key": f"k{i}", "kind": "rmsd",
                     "frame_start": i * 5, "frame_stop": i * 5 + 5, "t_start": clock[w],
                     "t_stop": clock[w] + io + comp, "t_io": io, "t_compute": comp,
                     "t_wait": 0.0 if i >= n_workers else 0.01})
        clock[w] += io + comp
    return rec.to_frame(rows)


@pytest.fixture
def saved(tmp_path):
    df = pd.concat([_records("n1", 1), _records("n2", 2, slow=3)], ignore_index=True)
    path = rec.save(df, tmp_path / "records.parquet", {"runs": ["n1", "n2"]})
    return rec.load(path)[0]


def _check_png(path, width, height):
    assert path.exists() and path.stat().st_size > 1000
    img = image.imread(path)
    assert img.shape[:2] == (height, width)


def test_per_worker_bars(saved, tmp_path):
    fig = plot_per_worker(saved, "n2", tmp_path / "w.png", figsize=(6, 4), dpi=50)
    _check_png(tmp_path / "w.png", 300, 200)
    # the legend is the figure's, beside the bars (on the axes it hid a worker's wait)
    assert fig.axes[0].get_legend() is None
    labels = [t.get_text() for t in fig.legends[0].get_texts()]
    assert labels[:2] == ["io", "compute"]
    heights = [p.get_height() for p in fig.axes[0].patches]
    assert sum(heights) == pytest.approx(saved.loc[saved.run_id == "n2", "wall"].sum()
                                         + saved.loc[saved.run_id == "n2", "t_wait"].sum())


def test_per_worker_title_is_clear_of_the_legend(saved):
    """The title of a bench's run ('... processes, N=2, run processes-n2-m1-r1') ran under
    the legend at the right of the default figure, its end hidden."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    df = saved.assign(run_id=saved["run_id"].str.replace("n2", "processes-n2-m1-r1"),
                      backend="processes")
    fig = plot_per_worker(df, "processes-n2-m1-r1")
    renderer = FigureCanvasAgg(fig).get_renderer()
    fig.draw(renderer)
    title = fig.axes[0].title
    assert not title.get_window_extent(renderer).overlaps(
        fig.legends[0].get_window_extent(renderer))
    assert title.get_text().endswith("N=2\nrun processes-n2-m1-r1")


def test_gantt_marks_straggler(saved, tmp_path):
    fig = plot_gantt(saved, "n2", tmp_path / "g.png")
    _check_png(tmp_path / "g.png", 1000, 450)
    ax = fig.axes[0]
    assert "1 straggler" in ax.get_title()
    assert [t.get_text() for t in ax.texts] == ["compute"]


def test_gantt_of_mpi_ranks_draws_their_wait(tmp_path):
    """An MPI rank waits for the others before the gather: its bar ended at its compute,
    2 s before the rank did."""
    rows = [{"run_id": "m", "backend": "mpi-io", "n_workers": 2, "worker": f"rank-{r}",
             "rank": r, "task_key": f"r{r}", "kind": "rmsd", "frame_start": 50 * r,
             "frame_stop": 50 * r + 50, "t_start": 10.0, "t_stop": 13.0, "t_io": 0.5,
             "t_compute": 2.4 if r else 0.4, "t_wait": 0.0 if r else 2.0,
             "t_comm_gather": 0.1} for r in (0, 1)]
    fig = plot_gantt(rec.to_frame(rows), "m")
    ax = fig.axes[0]
    ends = {}
    for bar in ax.patches:
        y = round(bar.get_y() + bar.get_height() / 2)
        ends[y] = max(ends.get(y, 0.0), bar.get_x() + bar.get_width())
    assert ends == pytest.approx({0: 3.0, 1: 3.0})  # both ranks run to the end
    labels = [t.get_text() for t in fig.legends[0].get_texts()]
    assert "wait" in labels
    # workers named by their MPI rank, on both charts (dask-mpi's were addresses)
    assert [t.get_text() for t in ax.get_yticklabels()] == ["rank 0", "rank 1"]
    bars = plot_per_worker(rec.to_frame(rows), "m").axes[0]
    assert [t.get_text() for t in bars.get_xticklabels()] == ["rank 0", "rank 1"]


def test_gantt_of_mpi_ranks_on_nodes_whose_clocks_differ():
    """Two ranks of 3 s; the second's node clock 0.3 s ahead: its bar was drawn 0.3 s
    after the first's, a start that never happened (the ranks leave a barrier together
    just before they note t_start). Every rank's bar starts at 0."""
    rows = [{"run_id": "m", "backend": "mpi-io", "n_workers": 2, "worker": f"rank-{r}",
             "rank": r, "task_key": f"r{r}", "kind": "rmsd", "frame_start": 50 * r,
             "frame_stop": 50 * r + 50, "t_start": 10.0 + 0.3 * r, "t_stop": 13.0 + 0.3 * r,
             "t_io": 1.0, "t_compute": 2.0, "t_wait": 0.0, "t_comm_gather": 0.0}
            for r in (0, 1)]
    ax = plot_gantt(rec.to_frame(rows), "m").axes[0]
    starts, ends = {}, {}
    for bar in ax.patches:
        y = round(bar.get_y() + bar.get_height() / 2)
        starts[y] = min(starts.get(y, 99.0), bar.get_x())
        ends[y] = max(ends.get(y, 0.0), bar.get_x() + bar.get_width())
    assert starts == {0: 0.0, 1: 0.0} and ends == pytest.approx({0: 3.0, 1: 3.0})
    assert ax.get_xlabel() == "time since the ranks left the first barrier (s)"


def test_gantt_outlines_a_straggler_rank_whole(tmp_path):
    """An MPI rank's bar holds its wait (at the barriers, the gather): a straggler rank
    that had waited got an outline and a label that stopped short of its bar's end by
    that wait."""
    rows = [{"run_id": "m", "backend": "mpi-io", "n_workers": 3, "worker": f"rank-{r}",
             "rank": r, "task_key": f"r{r}", "kind": "rmsd", "frame_start": 50 * r,
             "frame_stop": 50 * r + 50, "t_start": 10.0, "t_stop": 13.0 if r < 2 else 13.5,
             "t_io": 2.0 if r == 2 else 0.5, "t_compute": 0.4,
             "t_wait": 1.0 if r == 2 else 2.0, "t_comm_gather": 0.1} for r in (0, 1, 2)]
    fig = plot_gantt(rec.to_frame(rows), "m")
    ax = fig.axes[0]
    (outline,) = [p for p in ax.patches if not p.get_fill()]
    assert outline.get_x() == 0.0 and outline.get_width() == pytest.approx(3.5)
    assert [t.get_text() for t in ax.texts] == ["io"]
    assert ax.texts[0].xy[0] == pytest.approx(3.5)


def test_scaling_plot(saved, tmp_path):
    table = speedup(run_table(saved))
    fig = plot_scaling(table, tmp_path / "s.png", figsize=(8, 3), dpi=100)
    _check_png(tmp_path / "s.png", 800, 300)
    assert fig.axes[0].lines[0].get_ydata()[0] == 1.0  # S(1) = 1
    # one line per series, however many columns the table has (warm-up beside S and E)
    runs = pd.DataFrame({"backend": ["threads"] * 3, "n_workers": [1, 2, 4],
                         "wall": [4.0, 2.2, 1.3], "warmup": [0.10, 0.12, 0.15]})
    for table in (speedup(runs), speedup(runs).copy(deep=True).assign(extra=1)):
        if "extra" in table:
            table.attrs = {}  # read back from speedup.csv: no attrs
            table = table.drop(columns="extra")
        fig = plot_scaling(table)
        lines = {line.get_label(): len(line.get_xdata()) for line in fig.axes[0].lines}
        assert lines == {"threads": 3, "ideal": 3}


def test_plot_errors(saved):
    with pytest.raises(ValueError, match="not in the records"):
        plot_gantt(saved, "nope")
    with pytest.raises(ValueError, match="no timing records"):
        plot_per_worker(rec.empty())


def test_a_figure_is_shown_in_a_fresh_notebook(saved):
    """In a fresh IPython kernel a plot that is a cell's value showed only
    ``<Figure size 1000x450 with 1 Axes>`` (made without pyplot, no PNG formatter yet);
    the plots register IPython's PNG formatter as ``%matplotlib inline`` does. Found by
    an audit."""
    pytest.importorskip("IPython")
    from IPython.core.interactiveshell import InteractiveShell

    shell = InteractiveShell.instance()
    try:
        png = shell.display_formatter.formatters["image/png"]
        from matplotlib.figure import Figure

        png.type_printers.pop(Figure, None)  # a fresh kernel's
        data, _ = shell.display_formatter.format(plot_gantt(saved, "n2"))
        assert data["image/png"][:4] == b"\x89PNG"
    finally:
        InteractiveShell.clear_instance()


def test_gantt_of_a_run_joined_from_parts_with_repeated_labels():
    # one run's records concatenated from two parts (labels 0..5 twice): .at raised
    # "unhashable type: 'Series'"; each task's bar is now at its own start
    part = _records("n2", 2, slow=3)
    whole = pd.concat([part.iloc[:3], part.iloc[3:].set_axis(range(3))])
    ax = plot_gantt(whole).axes[0]
    t0 = part["t_start"].min()
    bars = [p for p in ax.patches if p.get_fill() and p.get_width() > 1e-9]  # no slivers
    starts = sorted(round(p.get_x(), 6) for p in bars)
    want = sorted(round(x, 6) for t in part["t_start"] - t0 for x in (t, t + 0.1))
    assert starts == want  # io, then compute, from each task's start


def test_per_worker_bars_of_mpi_ranks_are_in_rank_order():
    # 12 ranks: sorted by their names the bars ran rank 0, 1, 10, 11, 2, ..., so the
    # studies' per-rank figure put rank 10 third; rank r's io here is 0.1 * (r + 1)
    rows = [{"run_id": "m", "backend": "mpi-io", "n_workers": 12, "worker": f"rank-{r}",
             "rank": r, "task_key": f"m-{r}", "kind": "rmsd", "t_start": 5.0,
             "t_stop": 5.0 + 0.1 * (r + 1), "t_io": 0.1 * (r + 1), "t_wait": 0.0}
            for r in range(12)]
    ax = plot_per_worker(rec.to_frame(rows)).axes[0]
    assert [t.get_text() for t in ax.get_xticklabels()] == [f"rank {r}" for r in range(12)]
    io = [p.get_height() for p in ax.patches[:12]]  # the first phase drawn
    assert [round(h, 6) for h in io] == [round(0.1 * (r + 1), 6) for r in range(12)]


def test_gantt_rows_of_mpi_ranks_are_in_rank_order():
    # ranks leave the barrier together; the rows went by start time, so a node whose
    # clock ran behind put its ranks (2, 3) first
    rows = [{"run_id": "m", "backend": "mpi-io", "n_workers": 4, "worker": f"rank-{r}",
             "rank": r, "task_key": f"m-{r}", "kind": "rmsd",
             "t_start": 5.0 - (0.01 if r >= 2 else 0.0), "t_stop": 6.0, "t_io": 0.5,
             "t_wait": 0.0} for r in range(4)]
    ax = plot_gantt(rec.to_frame(rows)).axes[0]
    assert [t.get_text() for t in ax.get_yticklabels()] == [f"rank {r}" for r in range(4)]


def test_a_plot_that_fails_half_way_leaves_the_earlier_one(saved, tmp_path, monkeypatch):
    """A figure was saved straight into its file: a savefig stopped half-way (a full
    disk, Ctrl-C) left a torn PNG in place of the earlier plot (plot_gantt's and the
    other timing plots', h5mdx rmsd --plot's). Now it is saved beside it and renamed
    over it; the earlier plot stays whole and no temporary file is left."""
    import numpy as np
    import xarray as xr
    from matplotlib.figure import Figure

    from h5mdx.analysis.series import plot_series

    series = xr.DataArray(np.array([0.0, 1.5, 2.0]), dims="time",
                          coords={"time": ("time", [0.0, 1.0, 2.0], {"units": "ps"})},
                          attrs={"units": "Angstrom"})
    gantt, rmsd = tmp_path / "g.png", tmp_path / "rmsd.png"
    plot_gantt(saved, "n2", gantt)
    plot_series(series, str(rmsd))
    before = {p: p.read_bytes() for p in (gantt, rmsd)}
    real = Figure.savefig

    def torn(self, fname, *args, **kwargs):  # half a PNG, then the disk is full
        real(self, fname, *args, **kwargs)
        with open(fname, "r+b") as fh:
            fh.truncate(100)
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(Figure, "savefig", torn)
    with pytest.raises(OSError, match="No space left"):
        plot_gantt(saved, "n1", gantt)
    with pytest.raises(OSError, match="No space left"):
        plot_series(series * 2, str(rmsd))
    assert {p: p.read_bytes() for p in (gantt, rmsd)} == before
    _check_png(gantt, 1000, 450)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["g.png", "records.parquet",
                                                          "rmsd.png"]
