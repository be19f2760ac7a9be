"""The scaling grid and ``h5mdx bench`` on a small file, with the read workload."""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time
import warnings

import h5py
import numpy as np
import pytest

from h5mdx.bench.grid import frames_per_block, read_workload, run_grid
from h5mdx.cli.bench import add_parser, run
from h5mdx.timing import records as rec
from infra import random_trajectory


@pytest.fixture(scope="module")
def h5md_file(tmp_path_factory):
    return random_trajectory(tmp_path_factory.mktemp("bench") / "traj.h5md", 48, 500, 4, 2)


def test_workloads_take_the_trajectory_not_a_groups_single_structure(h5md_file, tmp_path):
    """A file whose first particles group holds one time-independent structure (500
    atoms) beside a trajectory of 48 frames: the read workload read the structure's 500
    rows as 500 frames, and the RMSD's blocks were cut for 500 frames."""
    import shutil

    from h5mdx.bench.grid import rmsd_workload

    path = tmp_path / "with_structure.h5md"
    shutil.copy(h5md_file, path)
    with h5py.File(path, "a") as f:
        frames = f["particles/all/position/value"][:]
        f.create_group("particles/a_structure")["position"] = frames[0]
    wl = read_workload(path)
    assert wl.n_frames == 48 and wl.meta["dataset"] == "/particles/all/position/value"
    x = frames.astype(np.float64).reshape(48, -1)
    np.testing.assert_allclose(wl.build(10).compute(scheduler="sync"),
                               np.sqrt((x * x).sum(axis=1)))
    rw = rmsd_workload(path)
    assert rw.n_frames == 48 and rw.meta["layout"]["dataset"] == "/particles/all/position/value"


def test_frames_per_block():
    assert frames_per_block(98, 1, 1) == 98
    assert frames_per_block(98, 2, 3) == 17
    assert frames_per_block(4, 4, 3) == 1
    with pytest.raises(ValueError):
        frames_per_block(10, 0, 1)


def test_read_workload_finds_h5md_positions(h5md_file):
    wl = read_workload(h5md_file)
    assert wl.n_frames == 48 and wl.meta["dataset"] == "/particles/all/position/value"
    assert wl.meta["layout"]["hdf5_chunks"] == [4, 500, 3]
    with h5py.File(h5md_file) as f:
        x = f["/particles/all/position/value"][:].astype(np.float64).reshape(48, -1)
    np.testing.assert_allclose(wl.build(10).compute(scheduler="sync"),
                               np.sqrt((x * x).sum(axis=1)))


def test_building_the_read_workload_reads_nothing(h5md_file, monkeypatch):
    # without meta=, dask's map_blocks calls the function once at build time to infer it
    from h5mdx.bench import grid

    calls = []
    monkeypatch.setattr(grid, "_read_block", lambda frames, **kw: calls.append(len(frames)))
    read_workload(h5md_file).build(10)
    assert calls == []


def test_run_grid(h5md_file, tmp_path):
    out = tmp_path / "bench"
    res = run_grid(read_workload(h5md_file, repeat=5), schedulers=["threads"], workers=[1, 2],
                   blocks_per_worker=[1, 3], repeats=2, out=out, progress=False)
    assert len(res.metas) == 8 and res.runs.shape[0] == 8
    n_tasks = res.runs.set_index(["n_workers", "blocks_per_worker", "repeat"])["n_tasks"]
    assert n_tasks[(1, 1, 0)] == 1 and n_tasks[(2, 3, 1)] == 6  # 48 frames / (N M) per block
    sp = res.speedup.set_index(["n_workers", "blocks_per_worker"])
    assert sp.loc[(1, 1), "S"] == 1.0 and sp.loc[(1, 3), "E"] == 1.0  # S(1) = 1
    assert (sp["n_runs"] == 2).all()
    # files: one per run, the combined records, tables, figures and the report
    for meta in res.metas:
        df, m = rec.load(out / "runs" / f"{meta['run_id']}.parquet")
        assert set(df["run_id"]) == {meta["run_id"]} and m["blocks_per_worker"] in (1, 3)
        assert m["layout"]["dask_time_chunk"] == frames_per_block(48, m["n_workers"],
                                                                  m["blocks_per_worker"])
    combined, cmeta = rec.load(out / "records.parquet")
    assert len(combined) == res.runs["n_tasks"].sum() and len(cmeta["runs"]) == 8
    for name in ("runs.csv", "speedup.csv", "scaling.png", "gantt-threads-n2-m3-r1.png",
                 "workers-threads-n2-m3-r1.png"):
        assert (out / name).stat().st_size > 0
    report = (out / "report.md").read_text()
    assert "| scheduler | N | M |" in report and "| threads | 2 | 3 | 6 | 2 |" in report
    # the file's layout, not the first run's dask blocks (48 frames) as if every run's
    assert "- frames: 48; HDF5 layout: {'hdf5_chunks': [4, 500, 3]}\n" in report
    assert "![speed-up and efficiency](scaling.png)" in report
    assert "## Advice" in report


def test_a_grid_that_fails_keeps_the_runs_that_finished(h5md_file, tmp_path, monkeypatch,
                                                       capsys):
    """A scheduler failing after others finished leaves their records and tables in
    --out, and says so (bench wrote nothing)."""
    from h5mdx.bench import grid

    real = grid._dask_runs

    def failing(workload, scheduler, *args):
        if scheduler == "processes":
            raise RuntimeError("the cluster broke")
        return real(workload, scheduler, *args)

    monkeypatch.setattr(grid, "_dask_runs", failing)
    with pytest.raises(RuntimeError, match="the cluster broke"):
        run_grid(read_workload(h5md_file), schedulers=["threads", "processes"], workers=[1],
                 repeats=1, out=tmp_path / "o", progress=False)
    df, _ = rec.load(tmp_path / "o" / "records.parquet")
    assert set(df["backend"]) == {"threads"}
    assert "1 of 2 runs finished before the error" in capsys.readouterr().err


def test_an_mpi_backend_without_its_modules_is_refused_before_any_run(h5md_file, tmp_path,
                                                                      monkeypatch):
    """dask-mpi missing: bench refused after running the other schedulers, in mpirun,
    with a traceback."""
    import importlib.util

    from h5mdx.errors import MissingDependencyError

    found = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "dask_mpi" else found(name, *a))
    with pytest.raises(MissingDependencyError, match="dask-mpi backend needs (mpi4py and )?dask_mpi"):
        run_grid(read_workload(h5md_file), schedulers=["threads", "dask-mpi"], workers=[1],
                 repeats=1, out=tmp_path / "o", progress=False)
    assert not (tmp_path / "o").exists()  # nothing ran


def test_a_failed_mpirun_says_what_its_ranks_said():
    from h5mdx.bench.grid import _child_error

    stderr = ("Traceback (most recent call last):\n  File \"x.py\", line 3, in <module>\n"
              "rank 0 of 2 failed: H5MDReadError: f.h5 [/x]: reading frames 0-9 failed\n"
              "rank 1 of 2 failed: H5MDReadError: f.h5 [/x]: reading frames 0-9 failed\n"
              "  (run with --debug for the traceback)\n")
    assert _child_error(stderr) == ("rank 0 of 2 failed: H5MDReadError: f.h5 [/x]: reading "
                                    "frames 0-9 failed; rank 1 of 2 failed: H5MDReadError: "
                                    "f.h5 [/x]: reading frames 0-9 failed")
    assert _child_error("mpirun: command line wrong\n") == "mpirun: command line wrong"


@pytest.mark.mpi
def test_a_failed_mpi_io_run_says_what_rank_0_said_for_all_ranks(tmp_path):
    """mpi-rmsd reports a failure of every rank once, as 'all 2 ranks failed: ...': the
    bench's error gave Open MPI's closing lines instead ('Process name: [[...]]; Exit
    code: 1; ---')."""
    from infra import require_mpi

    require_mpi()
    from h5mdx.bench import grid

    bad = tmp_path / "not_h5md.h5md"
    bad.write_text("not HDF5\n")
    workload = grid.Workload(lambda fpb: None, 98, {"analysis": "rmsd", "file": str(bad)})
    with pytest.raises(ChildProcessError) as err:
        grid._run_mpi("mpi-io", 2, workload, "mpi-io-n2-r0", None)
    assert str(err.value) == (
        f"mpi-io with N=2 failed (exit 1): h5mdx mpi-rmsd: all 2 ranks failed: "
        f"H5MDFormatError: {bad}: not an HDF5 file (no HDF5 signature): H5MD files are "
        "HDF5 files")


def test_run_grid_rejects_unknown_scheduler(h5md_file):
    with pytest.raises(ValueError, match="valid options are: threads, processes, distributed"):
        run_grid(read_workload(h5md_file), schedulers=["mpi"], progress=False)


@pytest.mark.slow
def test_cli_bench(h5md_file, tmp_path, capsys):
    parser = argparse.ArgumentParser()
    add_parser(parser.add_subparsers(dest="command"))
    args = parser.parse_args([
        "bench", h5md_file, "--analysis", "read", "--scheduler", "threads,processes",
        "--workers", "1,2", "--blocks-per-worker", "2", "--repeats", "1",
        "--out", str(tmp_path / "o"), "--no-progress", "--delay", "24:0.3",
    ])
    assert args.func is run
    assert run(args) == 0
    text = capsys.readouterr().out
    assert "h5mdx bench: read" in text and "processes" in text and "threads" in text
    df, _ = rec.load(tmp_path / "o" / "records.parquet")
    assert set(df["backend"]) == {"threads", "processes"}
    slow = df[(df["n_workers"] == 2) & (df["frame_start"] == 24)]
    assert (slow["t_io"] >= 0.3).all() and len(slow) == 2  # the injected straggler
    assert (tmp_path / "o" / "report.md").exists()


def test_cli_bench_without_a_one_worker_run_says_why_speedup_is_empty(h5md_file, tmp_path,
                                                                      capsys):
    """--workers 2 (no 1-worker run): the table's S(N) and E(N) stood empty, nothing said
    why; a line says they need a 1-worker run and how to get one."""
    from h5mdx.cli import main

    assert main(["bench", h5md_file, "--analysis", "read", "--scheduler", "threads",
                 "--workers", "2", "--blocks-per-worker", "1", "--repeats", "1",
                 "--out", str(tmp_path / "o"), "--no-progress"]) == 0
    text = capsys.readouterr().out
    assert ("S(N) and E(N) are measured against t_1, the time of a 1-worker run: --workers 2 "
            "has none, so they are left empty (--workers 1,2 gives them)") in text
    import pandas as pd

    sp = pd.read_csv(tmp_path / "o" / "speedup.csv")
    assert sp["S"].isna().all()
    assert main(["bench", h5md_file, "--analysis", "read", "--scheduler", "threads",
                 "--workers", "1", "--blocks-per-worker", "1", "--repeats", "1",
                 "--out", str(tmp_path / "o1"), "--no-progress"]) == 0
    assert "1-worker run" not in capsys.readouterr().out


def test_a_selection_without_a_topology_is_the_command_line_s_error(h5md_file):
    """bench --select without --topology names the options (it spoke of the Python API
    after the grid had started)."""
    from h5mdx.bench.grid import rmsd_workload

    with pytest.raises(ValueError, match=r"--select 'name CA' needs --topology"):
        rmsd_workload(h5md_file, select="name CA")
    from h5mdx.cli import main

    assert main(["bench", h5md_file, "--analysis", "read", "--select", "name CA"]) == 2


def test_a_selection_in_a_file_holding_its_topology_needs_no_topology_option(tmp_path):
    """A file h5mdx convert wrote holds its atoms' names (VMD's structure module): bench
    --select runs on it without --topology, the RMSD MDAnalysis' (it was refused: "H5MD
    files store no atom names")."""
    mda = pytest.importorskip("MDAnalysis")
    d = pytest.importorskip("MDAnalysisTests.datafiles")
    from MDAnalysis.analysis import rms

    from h5mdx.bench.grid import rmsd_workload
    from h5mdx.cli import main

    path = tmp_path / "adk.h5md"
    assert main(["convert", d.PSF, d.DCD, str(path), "--no-progress"]) == 0
    wl = rmsd_workload(path, select="name CA")
    try:
        got = np.asarray(wl.build(49).compute())
    finally:
        if wl.close is not None:
            wl.close()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        want = rms.RMSD(mda.Universe(d.PSF, d.DCD), select="name CA").run().results.rmsd
    np.testing.assert_allclose(got.ravel(), want[:, 2], atol=1e-4)


def test_cli_rejects_bad_lists():
    parser = argparse.ArgumentParser()
    add_parser(parser.add_subparsers(dest="command"))
    with pytest.raises(SystemExit):
        parser.parse_args(["bench", "x.h5md", "--workers", "0,2"])


@pytest.mark.mpi
def test_run_grid_mpi_backends_side_by_side(adk_h5md_blocked, tmp_path):
    """mpi-io and dask-mpi run through mpirun and land in the same tables as dask."""
    from infra import require_mpi

    require_mpi()
    pytest.importorskip("dask_mpi")
    from MDAnalysisTests.datafiles import PSF

    from h5mdx.bench.grid import rmsd_workload

    workload = rmsd_workload(adk_h5md_blocked, topology=PSF, select="name CA")
    result = run_grid(workload, schedulers=["mpi-io", "dask-mpi", "threads"], workers=[1, 2],
                      repeats=1, out=tmp_path / "bench", progress=False)
    only_mpi = run_grid(workload, schedulers=["mpi-io"], workers=[1], repeats=1,
                        out=tmp_path / "mpi-only", progress=False)
    report = (tmp_path / "mpi-only" / "report.md").read_text()
    assert "- frames: 98;" in report  # from the records: an MPI run's metadata has none
    assert "less the warm-up" in report
    assert len(only_mpi.records) == 1
    rec.validate(result.records)
    assert set(result.records["backend"]) == {"mpi-io", "dask-mpi", "threads"}
    mpi = result.records[result.records["backend"] == "mpi-io"]
    assert sorted(mpi.groupby("run_id").size()) == [1, 2]  # one record per rank
    assert mpi[["t_init_top", "t_init_traj", "t_io", "t_compute", "t_wait",
                "t_comm_gather"]].notna().all().all()
    s1 = result.speedup[result.speedup["n_workers"] == 1]["S"]
    np.testing.assert_allclose(s1.to_numpy(dtype=float), 1.0)
    assert (tmp_path / "bench" / "report.md").is_file()


def test_a_missing_file_and_a_selection_of_nothing_are_said_before_the_grid(
        adk_h5md, tmp_path, capsys):
    """bench on a missing file printed h5py's errno text; a selection matching no atom
    was said after the progress bar had started."""
    from MDAnalysisTests.datafiles import PSF

    from h5mdx.cli import main

    missing = str(tmp_path / "nope.h5md")
    assert main(["bench", missing, "--out", str(tmp_path / "o1")]) == 1
    assert f"h5mdx bench: error: No such file: {missing!r}\n" in capsys.readouterr().err
    assert main(["bench", adk_h5md, "--topology", PSF, "--select", "name XX",
                 "--out", str(tmp_path / "o2")]) == 1
    captured = capsys.readouterr()
    assert "the selection 'name XX' matches no atom" in captured.err
    assert "runs" not in captured.err + captured.out  # no progress bar, no run
    assert not (tmp_path / "o2").exists()


def test_a_delay_at_a_frame_where_no_block_starts_is_warned():
    """--delay sleeps only in the task whose block starts at FRAME: at another frame it
    injected nothing, in silence."""
    import warnings

    from h5mdx.cli.bench import _warn_delay_without_block

    args = argparse.Namespace(delay="49:0.5", workers=[2], blocks_per_worker=[3])
    with pytest.warns(UserWarning, match=r"no block of any run starts at frame 49, so "
                      r"nothing sleeps; the blocks start at: N=2 M=3: 0, 17, 34, 51, 68, 85"):
        _warn_delay_without_block(49, 98, args)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        _warn_delay_without_block(17, 98, args)


@pytest.mark.parametrize(("frame", "who", "starts"), [
    (49, "the mpi-io runs", "mpi-io N=2: 0, 50"),
    (50, "the dask schedulers' runs", "N=2 M=1: 0, 49"),
])
def test_a_delay_where_no_mpi_rank_block_starts_is_warned(adk_h5md_blocked, tmp_path,
                                                         monkeypatch, frame, who, starts):
    """The mpi-io ranks' blocks are cut at the chunks (98 frames in chunks of 10, 2 ranks:
    0-50, 50-98), the dask blocks at 98 / (N M) (0-49, 49-98): --delay 49 slept in the
    threads runs and in no mpi-io run, in silence. Each is said now."""
    import h5mdx.bench.grid as grid
    from h5mdx.cli import main

    def no_grid(*args, **kwargs):
        raise ValueError("no grid")  # the warnings are said before the grid; stop there

    monkeypatch.setattr(grid, "run_grid", no_grid)
    with pytest.warns(UserWarning) as seen:
        assert main(["bench", adk_h5md_blocked, "--scheduler", "threads,mpi-io", "--workers", "2",
              "--blocks-per-worker", "1", "--delay", f"{frame}:0.1",
              "--out", str(tmp_path / "o"), "--no-progress"]) == 1
    said = [str(w.message) for w in seen if "--delay" in str(w.message)]
    assert said == [f"--delay {frame}:0.1: no block of {who} starts at frame {frame}, so "
                    f"nothing sleeps in them; the blocks start at: {starts}"]


def test_cli_refuses_an_output_that_is_a_file_before_the_grid(h5md_file, tmp_path, capsys,
                                                              monkeypatch):
    """``--out FILE`` ran the whole grid, then failed ('Not a directory: FILE/runs')."""
    import h5mdx.bench.grid as grid
    from h5mdx.cli import main

    def no_grid(*args, **kwargs):
        raise AssertionError("the grid ran")

    monkeypatch.setattr(grid, "run_grid", no_grid)
    out = tmp_path / "notes.txt"
    out.write_text("mine")
    assert main(["bench", h5md_file, "--analysis", "read", "--out", str(out),
                 "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert "is a file; the bench writes its records" in err and "Traceback" not in err
    assert out.read_text() == "mine"


def test_a_second_bench_into_the_same_out_asks_and_leaves_no_stale_run(h5md_file, tmp_path,
                                                                       capsys):
    """A second bench into the --out of a first replaced its records and report in silence
    and left the first's other runs in runs/ (and their figures) beside its own (found by
    an audit): it is refused without --overwrite, and with it only its own files stay."""
    from h5mdx.cli import main

    out = tmp_path / "o"
    first = ["bench", h5md_file, "--analysis", "read", "--scheduler", "threads",
             "--workers", "1,2", "--blocks-per-worker", "1", "--repeats", "1",
             "--out", str(out), "--no-progress"]
    assert main(first) == 0
    assert (out / "runs" / "threads-n2-m1-r0.parquet").exists()
    second = [*first[:7], "1", *first[8:]]  # --workers 1
    capsys.readouterr()
    assert main(second) == 2
    err = capsys.readouterr().err
    assert "holds the results of an earlier bench" in err and "--overwrite" in err
    (out / "gantt-mine.png").write_bytes(b"mine")  # no bench's: kept
    assert main([*second, "--overwrite"]) == 0
    assert sorted(p.name for p in (out / "runs").iterdir()) == ["threads-n1-m1-r0.parquet"]
    assert sorted(p.name for p in out.glob("*.png")) == [
        "gantt-mine.png", "gantt-threads-n1-m1-r0.png", "scaling.png",
        "workers-threads-n1-m1-r0.png"]
    df, _ = rec.load(out / "records.parquet")
    assert set(df["run_id"]) == {"threads-n1-m1-r0"}


def test_a_client_that_fails_to_start_leaves_no_cluster_running(h5md_file, monkeypatch):
    """bench --scheduler distributed: where the Client failed to connect to the cluster it
    had just started, the cluster's worker processes were left running (the cluster was
    closed only by a client that had started)."""
    distributed = pytest.importorskip("distributed")
    import h5mdx.parallel.local as local

    made = []
    real = local.local_cluster

    def spy(*args, **kwargs):
        made.append(real(*args, **kwargs))
        return made[-1]

    def no_client(*args, **kwargs):
        raise OSError("the client timed out")

    monkeypatch.setattr(local, "local_cluster", spy)
    monkeypatch.setattr(distributed, "Client", no_client)
    with pytest.raises(OSError, match="the client timed out"):
        run_grid(read_workload(h5md_file), schedulers=["distributed"], workers=[1],
                 repeats=1, progress=False)
    assert len(made) == 1 and made[0].status.name == "closed"


@pytest.mark.skipif(not os.path.isdir("/proc"), reason="needs /proc")
def test_ctrl_c_ends_a_processes_run_at_once(h5md_file, tmp_path):
    """Ctrl-C during a run of bench --scheduler processes waited for the running tasks
    (a --delay of a minute: a minute) before it exited, as dask's own pool does (found by
    an audit): its workers now end at once, as those of h5mdx rmsd."""
    env = {**os.environ, "TMPDIR": str(tmp_path)}  # where the timed run's spool appears
    proc = subprocess.Popen(
        [sys.executable, "-m", "h5mdx", "bench", h5md_file, "--analysis", "read",
         "--scheduler", "processes", "--workers", "2", "--blocks-per-worker", "1",
         "--repeats", "1", "--out", str(tmp_path / "o"), "--no-progress", "--delay", "0:60"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
        start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        while not list(tmp_path.glob("h5mdx-spool-*")) and time.monotonic() < deadline:
            time.sleep(0.2)
        time.sleep(3.0)  # the timed run's pool has taken the blocks: one sleeps a minute
        proc.send_signal(signal.SIGINT)
        t0 = time.monotonic()
        _, err = proc.communicate(timeout=30)
        assert proc.returncode == 130, err
        assert time.monotonic() - t0 < 20
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def test_every_worker_of_the_distributed_grid_is_warmed_up_before_it_is_timed():
    """The grid's local cluster warms every worker (the task's modules, the kernel) as h5mdx
    rmsd's does: the untimed warm-up compute left a worker that ran none of its tasks cold,
    and it imported h5mdx when it first took another worker's output, 0.3-0.9 s within a
    timed run of tasks of milliseconds (S(2) = 0.05 in notebook 02)."""
    pytest.importorskip("distributed")
    from h5mdx.bench.grid import _cluster

    def modules_loaded():
        import sys

        return "h5mdx.analysis.rmsd" in sys.modules

    with _cluster("distributed", 2) as client:
        assert len(client.scheduler_info()["workers"]) == 2
        assert all(client.run(modules_loaded).values())
        from h5mdx.parallel.workers import warm_up_seconds

        assert all(s > 0 for s in warm_up_seconds(client).values())


def test_the_report_says_stragglers_are_counted_over_every_repeat():
    """One straggler in each of 3 repeats of 2 tasks: the row read '2 tasks ... 3
    stragglers' beside medians, with nothing to say the 3 was over the repeats."""
    import pandas as pd

    from h5mdx.bench.grid import BenchResult, render_report
    from h5mdx.timing.stragglers import run_table, speedup

    frames, metas = [], []
    for rep in range(3):
        rid = f"threads-n2-m1-r{rep}"
        frames.append(rec.to_frame([
            {"run_id": rid, "backend": "threads", "n_workers": 2, "worker": f"w{w}",
             "task_key": f"{rid}-{w}", "kind": "read", "frame_start": 10 * w,
             "frame_stop": 10 * w + 10, "t_start": 10.0,
             "t_stop": 10.0 + (1.0 if w else 0.3), "t_io": 0.1, "t_compute": 0.1}
            for w in range(2)]))
        metas.append({"run_id": rid, "blocks_per_worker": 1, "repeat": rep})
    records = pd.concat(frames, ignore_index=True)
    runs = run_table(records, metas)
    report = render_report(BenchResult(records, runs, speedup(runs), metas, []))
    assert "| threads | 2 | 1 | 2 | 3 | 1.000 |  |  | 1.54 | 3 | 1 |" in report
    assert ("tasks, imbalance and R_comp/IO are medians over the runs, stragglers the tasks "
            "flagged in all of them.") in report


def test_the_report_of_records_without_frames_says_none():
    """Records whose tasks give no frame range (frame_stop all NA): render_report raised
    'int() argument must be ... not NAType' from the frames line."""
    from h5mdx.bench.grid import BenchResult, render_report
    from h5mdx.timing.stragglers import run_table, speedup

    records = rec.to_frame([{"run_id": "threads-n1-m1-r0", "backend": "threads",
                             "n_workers": 1, "worker": "w0", "task_key": "k", "kind": "x",
                             "t_start": 1.0, "t_stop": 2.0}])
    runs = run_table(records)
    report = render_report(BenchResult(records, runs, speedup(runs), [], []))
    assert "- frames: None; HDF5 layout: {}" in report


def test_mpi_backends_refuse_an_rmsd_they_would_not_compute_before_any_run(
        adk_h5md_blocked, h5md_file, tmp_path):
    """rmsd_workload(..., reference=5, weights="mass") on threads and mpi-io: mpirun ran
    h5mdx mpi-rmsd with reference 0 and no weights, and the grid set the two side by side
    as one computation; --analysis read failed at mpi-io after the threads'
    runs. Both are refused before any run now; the defaults pass."""
    from MDAnalysisTests.datafiles import PSF

    from h5mdx.bench import grid
    from h5mdx.bench.grid import rmsd_workload

    workload = rmsd_workload(adk_h5md_blocked, topology=PSF, select="name CA", reference=5,
                             weights="mass")
    with pytest.raises(ValueError, match=r"the mpi-io backend\(s\) run the RMSD with "
                                         r"reference=0, no weights and superposition, not "
                                         r"reference=5, weights='mass'"):
        run_grid(workload, schedulers=["threads", "mpi-io"], workers=[1], repeats=1,
                 out=tmp_path / "bench", progress=False)
    assert not (tmp_path / "bench").exists()  # no run, no partial results
    with pytest.raises(ValueError, match="runs the rmsd analysis only"):
        run_grid(read_workload(h5md_file), schedulers=["threads", "dask-mpi"], workers=[1],
                 repeats=1, out=tmp_path / "read", progress=False)
    assert not (tmp_path / "read").exists()
    same = rmsd_workload(adk_h5md_blocked, topology=PSF, select="name CA",
                         reference=np.int64(0), superposition=True, kernel="numpy")
    grid._check_mpi_workload(same, ["threads", "mpi-io", "dask-mpi"])  # as the MPI ones do


def test_the_csv_tables_say_their_units_in_a_sidecar(h5md_file, tmp_path):
    """runs.csv and speedup.csv held times (wall, busy, t_N, ...) that said no unit, only
    report.md's table "(s)"; each now has a sidecar <stem>.meta.json with the units, as
    timing.csv has, and keeps its column names."""
    import json

    import pandas as pd

    out = tmp_path / "bench"
    run_grid(read_workload(h5md_file), schedulers=["threads"], workers=[1, 2],
             blocks_per_worker=[1], repeats=1, out=out, progress=False)
    runs = pd.read_csv(out / "runs.csv", index_col="run_id")
    units = json.loads((out / "runs.meta.json").read_text())["units"]
    assert {"wall", "warmup", "busy"} <= set(runs.columns)
    assert units["wall"] == units["warmup"] == units["busy"] == "s"
    assert set(units) <= set(runs.columns) | {"run_id"}
    sp = pd.read_csv(out / "speedup.csv")
    units = json.loads((out / "speedup.meta.json").read_text())["units"]
    assert {"t_N", "t_N_min", "t_N_max", "S", "E"} <= set(sp.columns)
    assert units["t_N"].startswith("s ") and units["t_N_min"] == units["t_N_max"] == "s"
    assert units["S"].startswith("1 ") and set(units) <= set(sp.columns)
    assert sorted(p.name for p in out.iterdir() if p.name.startswith(".")) == []  # no temps
    from h5mdx._replace import CSV_DIGEST, csv_digest  # each pair says it belongs together

    for name in ("runs", "speedup"):
        side = json.loads((out / f"{name}.meta.json").read_text())
        assert side[CSV_DIGEST] == csv_digest(out / f"{name}.csv")


@pytest.mark.parametrize("analysis", ["rmsd", "read"])
def test_a_directory_or_a_file_not_hdf5_is_said_in_one_line(tmp_path, capsys, analysis):
    """bench on a directory printed h5py's '[Errno 21] Unable to open file (file read
    failed: time = ..., filename = ..., buf = 0x...)' over two lines, and on a file that
    is not HDF5 'Unable to open file (file signature not found)' without its name."""
    from h5mdx.cli import main

    (tmp_path / "adir").mkdir()
    (tmp_path / "junk.h5md").write_bytes(b"x" * 100)
    for name, said in (("adir", "is a directory, not an H5MD file"),
                       ("junk.h5md", "not an HDF5 file (no HDF5 signature)")):
        path = str(tmp_path / name)
        assert main(["bench", path, "--analysis", analysis, "--out",
                     str(tmp_path / "o"), "--no-progress"]) == 1
        err = capsys.readouterr().err
        assert err.startswith(f"h5mdx bench: error: {path}: {said}") and err.count("\n") == 1
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize(("options", "said"), [
    (["--scheduler", "threads,foo"], "h5mdx bench: --scheduler: unknown scheduler 'foo'; "
                                     "valid ones are: threads, processes"),
    (["--repeats", "0"], "h5mdx bench: --repeats must be at least 1, not 0\n"),
    (["--repeats", "-2"], "h5mdx bench: --repeats must be at least 1, not -2\n"),
    (["--delay", "foo"], "h5mdx bench: --delay 'foo' is not "
                         "FRAME:SECONDS[:PHASE]"),
    (["--analysis", "read", "--topology", "t.psf"], "h5mdx bench: --analysis read reads "
                                                    "every atom"),
])
def test_bad_option_values_are_usage_errors(h5md_file, tmp_path, capsys, monkeypatch,
                                            options, said):
    """An unknown scheduler, --repeats 0, a --delay not FRAME:SECONDS: said with exit
    status 1 and a '--debug for the traceback' hint, as a failure of the run; they are
    usage errors (exit status 2), one line, and nothing runs."""
    from h5mdx.bench import grid
    from h5mdx.cli import main

    monkeypatch.setattr(grid, "run_grid", lambda *a, **k: pytest.fail("the grid ran"))
    assert main(["bench", h5md_file, *options, "--out", str(tmp_path / "o"),
                 "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(said) and err.count("\n") == 1 and "--debug" not in err
    assert not (tmp_path / "o").exists()


def test_an_empty_scheduler_list_is_a_usage_error(h5md_file, tmp_path, capsys):
    """--scheduler '' (or ',') ran no run and ended in a traceback from pandas."""
    from h5mdx.cli import main

    for value in ("", ","):
        with pytest.raises(SystemExit) as stop:
            main(["bench", h5md_file, "--scheduler", value, "--out", str(tmp_path / "o")])
        assert stop.value.code == 2
        err = capsys.readouterr().err
        assert f"argument --scheduler: expected names like threads,processes, got {value!r}" \
            in err and "Traceback" not in err


@pytest.mark.parametrize("analysis", ["rmsd", "read"])
def test_a_position_without_frames_is_named(tmp_path, capsys, analysis):
    """A file whose position dataset is a scalar failed with 'tuple index out of range'
    and a --debug hint; the error names the file, the dataset and its shape."""
    from h5mdx.cli import main

    path = tmp_path / "scalar.h5md"
    with h5py.File(path, "w") as f:
        f.create_group("h5md").attrs["version"] = np.array([1, 1])
        f.create_group("particles/all/position")["value"] = 1.0
    assert main(["bench", str(path), "--analysis", analysis, "--out", str(tmp_path / "o"),
                 "--no-progress"]) == 1
    err = capsys.readouterr().err
    assert err == (f"h5mdx bench: error: {path} [/particles/all/position/value]: the position "
                   "dataset has shape (): no frames to read (H5MD's are (frames, particles, "
                   "dimension))\n")


def test_a_report_that_fails_half_way_leaves_the_earlier_one(h5md_file, tmp_path,
                                                             monkeypatch):
    """report.md was written straight into its file: a write stopped half-way (a full
    disk) left the earlier bench's report cut short; then, written beside it and renamed
    over it, the earlier report stayed beside this bench's records and tables, telling
    of other runs. Now the earlier report goes before the new records are written and
    the new one comes last: a write stopped half-way leaves no report.md."""
    from pathlib import Path

    out = tmp_path / "bench"
    run_grid(read_workload(h5md_file), schedulers=["threads"], workers=[1],
             blocks_per_worker=[1], repeats=1, out=out, progress=False)
    before = (out / "report.md").read_text()
    real = Path.write_text

    def full_disk(self, text, *args, **kwargs):
        if "report" not in self.name:
            return real(self, text, *args, **kwargs)
        real(self, text[:20], *args, **kwargs)
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(Path, "write_text", full_disk)
    with pytest.raises(OSError, match="No space left"):
        run_grid(read_workload(h5md_file), schedulers=["threads"], workers=[1],
                 blocks_per_worker=[1], repeats=1, out=out, progress=False)
    assert "# " in before and not (out / "report.md").exists()
    assert [p.name for p in out.iterdir() if p.name.startswith(".")] == []
    monkeypatch.setattr(Path, "write_text", real)
    run_grid(read_workload(h5md_file), schedulers=["threads"], workers=[1],
             blocks_per_worker=[1], repeats=1, out=out, progress=False)
    assert (out / "report.md").read_text().startswith(before.split("\n", 1)[0])


def test_a_bench_written_again_keeps_its_reports_mode_and_link(h5md_file, tmp_path):
    """report.md, removed before a bench's outputs are written (so that one stopped
    half-way leaves no report of other tables), came back with the umask's mode, and a
    report.md that was a symbolic link became a regular file. Now the new report gets
    the earlier one's group and mode, and a link stays a link to the file replaced."""
    import stat

    out, shared = tmp_path / "bench", tmp_path / "shared"
    shared.mkdir()
    run_grid(read_workload(h5md_file), schedulers=["threads"], workers=[1],
             blocks_per_worker=[1], repeats=1, out=out, progress=False)
    os.replace(out / "report.md", shared / "report.md")
    os.chmod(shared / "report.md", 0o664)
    (out / "report.md").symlink_to(shared / "report.md")
    umask = os.umask(0o022)
    try:
        run_grid(read_workload(h5md_file), schedulers=["threads"], workers=[1],
                 blocks_per_worker=[1], repeats=1, out=out, progress=False)
    finally:
        os.umask(umask)
    assert (out / "report.md").is_symlink()
    assert (shared / "report.md").read_text().startswith("# h5mdx bench report")
    assert stat.S_IMODE((shared / "report.md").stat().st_mode) == 0o664
    assert os.listdir(shared) == ["report.md"]
