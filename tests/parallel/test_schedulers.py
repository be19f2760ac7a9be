"""One scheduler vocabulary for every command (h5mdx.parallel.schedulers)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
import xarray as xr

from h5mdx.bench.grid import SCHEDULERS as BENCH
from h5mdx.cli import build_parser
from h5mdx.cli.rmsd import AUTO
from h5mdx.cli.rmsd import SCHEDULERS as RMSD
from h5mdx.format import direct
from h5mdx.parallel.schedulers import ALIASES, SCHEDULERS, canonical, local_scheduler
from h5mdx.timing.records import BACKENDS


def test_every_command_draws_from_one_vocabulary():
    assert set(SCHEDULERS) <= set(BACKENDS)
    assert set(RMSD) - {AUTO} <= set(SCHEDULERS)  # auto: one of them, chosen per file
    assert set(BENCH) <= set(SCHEDULERS)
    assert set(ALIASES.values()) <= set(SCHEDULERS)


def test_old_name_mpi_is_dask_mpi(capsys):
    assert canonical("mpi") == "dask-mpi"
    assert "dask-mpi" in capsys.readouterr().err
    args = build_parser().parse_args(["rmsd", "x.h5md", "--scheduler", "mpi"])
    assert args.scheduler == "dask-mpi"
    args = build_parser().parse_args(["rmsd", "x.h5md"])
    assert args.scheduler == AUTO and args.workers is None


def test_local_scheduler_threads_where_reads_are_direct(adk_h5md, adk_h5md_blocked,
                                                         adk_h5md_fletcher, monkeypatch):
    monkeypatch.setenv(direct.ENV_VAR, "1")
    for path in (adk_h5md, adk_h5md_blocked):
        with xr.open_dataset(path, engine="h5md") as ds:
            assert local_scheduler(ds) == (
                "threads", "threads of one process read position in parallel")
    with xr.open_dataset(adk_h5md_fletcher, engine="h5md") as ds:
        name, why = local_scheduler(ds)
        assert name == "distributed"
        assert "position is read through HDF5" in why and "filters (3,)" in why
        ds["position"] = ds.position.load()  # in memory: nothing read through HDF5
        assert local_scheduler(ds)[0] == "threads"
        assert local_scheduler(ds.drop_vars("position")) == ("threads", "no position to read")
    monkeypatch.setenv(direct.ENV_VAR, "0")
    with xr.open_dataset(adk_h5md_blocked, engine="h5md") as ds:
        assert local_scheduler(ds) == (
            "distributed", "position is read through HDF5, one call at a time per process "
            "(H5MDX_DIRECT_READ=0)")


def test_local_compute_does_not_import_distributed(adk_h5md_blocked):
    """dask imports distributed (0.3-0.4 s) at a compute given a scheduler's name; the
    threads of h5mdx rmsd compute without it, and the reference frame of a dask-backed
    Dataset is read without it (an audit found that read importing it)."""
    script = (
        "import sys, numpy as np, xarray as xr\n"
        "from h5mdx.parallel.schedulers import compute, scheduler_context\n"
        f"ds = xr.open_dataset({adk_h5md_blocked!r}, engine='h5md')\n"
        f"blocks = xr.open_dataset({adk_h5md_blocked!r}, engine='h5md', chunks={{}})\n"
        "blocks.md.rmsd(0, select=np.arange(0, 3341, 7))  # reads its reference frame\n"
        "with scheduler_context('threads', 2):\n"
        "    got = compute(None, ds.md.rmsd(0, select=np.arange(0, 3341, 7)), False)\n"
        "print(got.shape, 'distributed' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         check=True).stdout
    assert out.split() == ["(98,)", "False"]


def test_a_small_job_on_threads_loads_no_numba(adk_h5md_blocked):
    """h5mdx rmsd on threads loaded numba and its kernels (0.5-0.8 s) before the graph
    gave a job this small the numpy kernel: the kernel its graph runs is loaded,
    none here; a large job still loads numba before the clock starts."""
    pytest.importorskip("numba")
    script = (
        "import sys\n"
        "from h5mdx.cli import main\n"
        f"rc = main(['rmsd', {adk_h5md_blocked!r}, '--scheduler', 'threads', "
        "'--no-progress'])\n"
        "print(rc, 'numba' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         check=True).stdout
    assert out.split()[-2:] == ["0", "False"]
    script = script.replace("'--no-progress'", "'--no-progress', '--kernel', 'numba'")
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         check=True).stdout
    assert out.split()[-2:] == ["0", "True"]


def test_the_progress_bar_is_drawn_on_a_terminal_only(adk_h5md_blocked, monkeypatch):
    """A log file (a SLURM job's stderr) would keep every redraw of the bar."""
    import io

    from h5mdx.parallel.schedulers import compute, scheduler_context

    class Terminal(io.StringIO):
        def isatty(self):
            return True

    for stream, drawn in ((io.StringIO(), False), (Terminal(), True)):
        monkeypatch.setattr(sys, "stderr", stream)
        with xr.open_dataset(adk_h5md_blocked, engine="h5md") as ds, \
                scheduler_context("threads", 2):
            got = compute(None, ds.md.rmsd(0, select=np.arange(0, 3341, 7)), True)
        assert got.shape == (98,)
        assert ("100% Completed" in stream.getvalue()) is drawn


def test_outputs_that_could_not_be_written_are_refused_before_the_run(adk_h5md, tmp_path,
                                                                      capsys, monkeypatch):
    """--out, --plot and --timing are checked before the RMSD runs: a suffix that cannot
    be written, or a file where a directory must be, failed only after the whole run
    (hours on a cluster)."""
    from h5mdx.cli import main
    from h5mdx.parallel import schedulers

    ran = []
    monkeypatch.setattr(schedulers, "scheduler_context",
                        lambda *a, **k: ran.append(True))  # never reached
    a_file = tmp_path / "file"
    a_file.write_text("x")
    for argv, said in ((["--out", str(tmp_path / "r.parquet")], "not .parquet"),
                       (["--plot", str(tmp_path / "r.xyz")], "not .xyz"),
                       (["--out", str(tmp_path)], "is a directory"),
                       (["--timing", str(a_file)], "the timing records need a directory"),
                       (["--out", str(a_file / "r.csv")], "cannot be written"),
                       # root may "write" into /proc: it failed only after the run
                       (["--out", "/proc/x.csv"], "a kernel file system"),
                       (["--timing", str(a_file / "t")], "the timing records")):
        assert main(["rmsd", str(adk_h5md), "--scheduler", "threads", *argv]) == 2, argv
        assert said in capsys.readouterr().err
    assert ran == []


def test_outputs_that_would_overwrite_each_other_are_refused_before_the_run(
        adk_h5md, tmp_path, capsys, monkeypatch):
    """--timing T with --out T/timing.csv wrote the series over the timing records (and
    its sidecar over their timing.meta.json) without a word; --out X --timing X made X
    the timing directory, then failed to write the series there after the whole run;
    --out and --plot of one name (no suffix) kept the plot alone. Each is refused before
    the run, naming the two outputs."""
    from h5mdx.cli import main
    from h5mdx.parallel import schedulers

    ran = []
    monkeypatch.setattr(schedulers, "scheduler_context",
                        lambda *a, **k: ran.append(True))  # never reached
    t = tmp_path / "t"
    for argv, said in (
            (["--timing", str(t), "--out", str(t / "timing.csv")],
             f"the series file (--out) and the timing records are the same file, "
             f"'{t / 'timing.csv'}'"),
            (["--timing", str(t), "--out", str(t / "timing")],
             f"the series' sidecar and the timing records' sidecar are the same file, "
             f"'{t / 'timing.meta.json'}'"),
            (["--timing", str(t), "--out", str(t)],
             f"the series file (--out) '{t}' is where the timing records' directory "
             f"(--timing '{t}') goes"),
            (["--timing", str(t / "sub"), "--plot", str(t)],
             f"the plot (--plot) '{t}' is where the timing records' directory"),
            (["--out", str(tmp_path / "r"), "--plot", str(tmp_path / "r")],
             "the series file (--out) and the plot (--plot) are the same file")):
        assert main(["rmsd", str(adk_h5md), "--scheduler", "threads", *argv]) == 2, argv
        assert said in capsys.readouterr().err, argv
    assert ran == [] and not t.exists()


def test_a_selection_matching_nothing_fails_before_a_scheduler_is_chosen(
        adk_h5md, capsys, monkeypatch):
    """--select matching no atom said "scheduler threads (...)" (and started the cluster)
    before its error; it fails first, with no traceback hint."""
    from MDAnalysisTests.datafiles import PSF

    from h5mdx.cli import main
    from h5mdx.parallel import schedulers

    ran = []
    monkeypatch.setattr(schedulers, "scheduler_context",
                        lambda *a, **k: ran.append(True))  # never reached
    assert main(["rmsd", str(adk_h5md), "--topology", PSF, "--select", "name XX"]) == 2  # a usage error
    err = capsys.readouterr().err
    assert "the selection 'name XX' matches no atom" in err, err
    assert "scheduler" not in err and "--debug" not in err
    assert ran == []


def _children(pid: int) -> list[int]:
    """Live processes whose parent is ``pid`` (from /proc)."""
    out = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as fh:
                fields = fh.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid and fields[0] != "Z":
            out.append(int(entry))
    return out


def _default_hangup() -> None:
    """A hang-up ends the child as in a terminal: under nohup (a CI runner) this test
    process, and so its children, ignore SIGHUP, and h5mdx leaves an ignored one so."""
    signal.signal(signal.SIGHUP, signal.SIG_DFL)


def _slow_rmsd(path, scheduler: str) -> subprocess.Popen:
    """h5mdx rmsd on 2 workers whose first block sleeps a minute, once both workers run."""
    env = {**os.environ, "H5MDX_TIMING_DELAY": "0:60:io"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "h5mdx", "rmsd", str(path), "--scheduler",
         scheduler, "--workers", "2", "--frames-per-block", "10", "--no-progress"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
        start_new_session=True, preexec_fn=_default_hangup)
    deadline = time.monotonic() + 60
    while len(_children(proc.pid)) < 2 and time.monotonic() < deadline:
        time.sleep(0.2)
    return proc


@pytest.mark.skipif(not os.path.isdir("/proc"), reason="needs /proc")
@pytest.mark.parametrize("scheduler, sig", [("processes", signal.SIGTERM),
                                            ("distributed", signal.SIGTERM),
                                            ("processes", signal.SIGHUP)])
def test_sigterm_ends_the_worker_processes_too(adk_h5md_blocked, tmp_path, scheduler, sig):
    """``kill PID`` (or a batch system ending the job, or a closed terminal's SIGHUP)
    unwinds h5mdx rmsd as Ctrl-C does: exit 128 + the signal, and no worker process
    outlives it (with the processes scheduler they lived on, holding its output pipes; a
    hang-up killed h5mdx alone; found by audits)."""
    proc = _slow_rmsd(adk_h5md_blocked, scheduler)
    try:
        time.sleep(2.0)  # the workers have taken their blocks
        workers = _children(proc.pid)
        assert len(workers) >= 2
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=60)
        assert proc.returncode == 128 + sig, err
        assert "h5mdx: terminated" in err
        deadline = time.monotonic() + 20
        alive = workers
        while alive and time.monotonic() < deadline:
            time.sleep(0.5)
            alive = [pid for pid in workers if os.path.exists(f"/proc/{pid}")
                     and open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[0] != "Z"]
        assert alive == []
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def test_a_failed_task_on_a_local_cluster_is_one_line(tmp_path):
    """A damaged chunk under --scheduler distributed: one error naming the file, the
    element and the frames, without the workers' 'Compute Failed' log and its traceback
    before it."""
    import h5py

    from h5mdx.testing import write_h5md

    values = np.random.default_rng(0).normal(size=(20, 5, 3)).astype(np.float32)
    path = write_h5md(tmp_path / "bad.h5md", {"g": {"position": {
        "value": values, "step": np.arange(20), "chunks": (10, 5, 3), "compression": "gzip"}}})
    with h5py.File(path, "r+") as f:
        f["particles/g/position/value"].id.write_direct_chunk((10, 0, 0), b"not gzip" * 10)
    proc = subprocess.run([sys.executable, "-m", "h5mdx", "rmsd", str(path), "--scheduler",
                           "distributed", "--workers", "1", "--no-progress"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1
    err = proc.stderr
    assert "bad.h5md [/particles/g/position/value]: reading frame" in err, err
    assert "Compute Failed" not in err and "Traceback" not in err, err


def _sigint_blocked(pid: int) -> bool:
    with open(f"/proc/{pid}/status") as fh:
        mask = next(line for line in fh if line.startswith("SigBlk:")).split()[1]
    return bool(int(mask, 16) & (1 << (signal.SIGINT - 1)))


@pytest.mark.skipif(not os.path.isdir("/proc"), reason="needs /proc")
@pytest.mark.parametrize("scheduler", ["processes", "distributed"])
def test_ctrl_c_to_the_group_is_one_clean_interrupt(adk_h5md_blocked, scheduler):
    """A terminal's Ctrl-C reaches every process of the group: the workers (started with
    SIGINT blocked, h5mdx._signals) leave it to h5mdx rmsd, which ends them and says
    "interrupted" (exit 130), with no worker's KeyboardInterrupt traceback."""
    proc = _slow_rmsd(adk_h5md_blocked, scheduler)
    try:
        time.sleep(2.0)
        workers = [pid for pid in _children(proc.pid)
                   if "resource_tracker" not in open(f"/proc/{pid}/cmdline").read()]
        assert len(workers) >= 2 and all(_sigint_blocked(pid) for pid in workers)
        os.killpg(proc.pid, signal.SIGINT)
        _, err = proc.communicate(timeout=60)
        assert proc.returncode == 130, err
        # no worker's KeyboardInterrupt (distributed's teardown races are hushed, but one
        # logged by the garbage collector after the teardown may still slip through)
        assert "h5mdx: interrupted" in err and "KeyboardInterrupt" not in err, err
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


@pytest.mark.parametrize("scheduler", ["threads", "processes"])
def test_rmsd_timing_records_every_task_on_the_local_schedulers(adk_h5md_blocked, tmp_path,
                                                                scheduler):
    """--scheduler processes --timing wrote a header and no row: the pool's processes had
    started before the capture set the spool variable, so no task recorded its phases."""
    from h5mdx.parallel.schedulers import compute_rmsd
    from h5mdx.timing import load

    with xr.open_dataset(adk_h5md_blocked, engine="h5md") as ds:
        result, _, _ = compute_rmsd(ds, select=np.arange(0, 3341, 7), scheduler=scheduler,
                                    workers=2, frames_per_block=10, progress=False,
                                    timing=str(tmp_path / "t"))
    assert result.shape == (98,)
    df, _ = load(tmp_path / "t" / "timing.csv")
    assert len(df) == 10
    assert (df["backend"] == scheduler).all()
    covered = np.zeros(98, int)
    for start, stop in zip(df["frame_start"], df["frame_stop"], strict=True):
        covered[int(start):int(stop)] += 1
    assert (covered == 1).all()


@pytest.mark.parametrize("scheduler", ["threads", "processes"])
def test_an_interrupted_run_leaves_no_empty_timing_directory(adk_h5md_blocked, tmp_path,
                                                             monkeypatch, scheduler):
    """``h5mdx rmsd --timing DIR`` stopped by Ctrl-C (or a failed task) left an empty DIR,
    made before the run; it is made when the records are saved."""
    from h5mdx.parallel import schedulers

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(schedulers, "compute", interrupted)
    with xr.open_dataset(adk_h5md_blocked, engine="h5md") as ds, \
            pytest.raises(KeyboardInterrupt):
        schedulers.compute_rmsd(ds, select=np.arange(0, 3341, 7), scheduler=scheduler,
                                workers=2, frames_per_block=10, progress=False,
                                timing=str(tmp_path / "t"))
    assert os.listdir(tmp_path) == []


def _second_task_kills_its_worker(real):
    """``schedulers.compute`` whose RMSD task 1 ends its worker process (``os._exit``),
    as a worker killed by the system for its memory would end."""
    import dask.array as da

    def compute(client, result, enabled):
        data = result.data
        graph = dict(data.__dask_graph__())
        graph[(data.name, 1)] = (os._exit, 3)
        dying = da.Array(graph, data.name, data.chunks, dtype=data.dtype)
        return real(client, result.copy(data=dying), enabled)

    return compute


@pytest.mark.parametrize(("scheduler", "match"), [
    ("distributed", r"adk_blocked\.h5md \[/particles/trajectory/position\]: computing "
                    r"the RMSD of frames 10-19 failed: each of the \d+ workers that ran it "
                    r"died \(killed, out of memory, or crashed"),
    ("processes", r"adk_blocked\.h5md: a worker process ended abruptly \(killed, out of "
                  r"memory, or crashed"),
])
def test_a_worker_that_dies_under_a_task_is_named_by_file_and_frames(
        adk_h5md_blocked, monkeypatch, scheduler, match):
    """A worker process that died under a task reached the command line as distributed's
    KilledWorker naming only the task's key ('rmsd-<token>', 1), or the process pool's
    BrokenProcessPool naming nothing; both were bare tracebacks (neither is an error
    the command line reports in one line)."""
    pytest.importorskip("distributed")
    from h5mdx.errors import H5MDReadError
    from h5mdx.parallel import schedulers

    monkeypatch.setattr(schedulers, "compute",
                        _second_task_kills_its_worker(schedulers.compute))
    with xr.open_dataset(adk_h5md_blocked, engine="h5md") as ds, \
            pytest.raises(H5MDReadError, match=match):
        schedulers.compute_rmsd(ds, select=np.arange(0, 3341, 7), scheduler=scheduler,
                                workers=2, frames_per_block=10, progress=False)


def test_a_cluster_that_fails_to_close_does_not_hide_the_runs_error(monkeypatch):
    """Closing a local cluster whose nanny was restarting a worker killed under a task
    failed with distributed's "can only join a started process" (a flaky CI run), and
    that AssertionError replaced the error naming the file and the task's frames."""
    pytest.importorskip("distributed")
    from h5mdx.errors import H5MDReadError
    from h5mdx.parallel import local, schedulers

    real = local.local_cluster

    def failing_close(*args, **kwargs):
        cluster = real(*args, **kwargs)
        close = cluster.close

        def close_then_fail(*a, **k):
            close(*a, **k)
            raise AssertionError("can only join a started process")

        cluster.close = close_then_fail
        return cluster

    monkeypatch.setattr(local, "local_cluster", failing_close)
    with pytest.raises(H5MDReadError, match="the run's own error"), \
            schedulers.scheduler_context("distributed", 1, warm=False):
        raise H5MDReadError("t.h5md", None, "the run's own error")
