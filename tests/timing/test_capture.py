"""capture(): one merged record per task from threads, processes and distributed runs."""

from __future__ import annotations

import ast
import importlib
import os
import time
from pathlib import Path

import dask
import h5py
import numpy as np
import pytest

from h5mdx.bench.grid import read_workload
from h5mdx.timing import capture, flag_stragglers
from h5mdx.timing.phases import DELAY_ENV, SPOOL_ENV
from h5mdx.timing.records import busy, phase_sum, validate

N_FRAMES, FPB = 64, 8


@pytest.fixture(scope="module")
def frames_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("timing") / "frames.h5"
    data = np.random.default_rng(1).random((N_FRAMES, 3000, 3), dtype=np.float32)
    with h5py.File(path, "w") as f:
        f.create_dataset("x", data=data, chunks=(FPB, 3000, 3))
    return str(path), data


def _expected(data):
    x = data.astype(np.float64).reshape(len(data), -1)
    return np.sqrt((x * x).sum(axis=1))


def _check_records(run, n_workers, backend):
    df = run.records
    validate(df)
    assert len(df) == N_FRAMES // FPB  # one row per block
    assert set(df["backend"]) == {backend} and set(df["n_workers"]) == {n_workers}
    assert sorted(df["frame_start"]) == list(range(0, N_FRAMES, FPB))
    assert (df["frame_stop"] - df["frame_start"] == FPB).all()
    assert df["task_key"].is_unique
    assert (df["bytes_read"] == FPB * 3000 * 3 * 4).all()
    assert run.n_unmatched == 0
    # unknown phases stay unknown
    assert df[["t_init_top", "t_init_traj", "t_comm_gather"]].isna().all().all()
    # the measured phases add up to each task's wall time: never to more, and for the
    # median task to within 2 ms; a task preempted between two of its phases on a loaded
    # machine has a gap no phase holds (one of 8 tasks of 2-6 ms lost 4 ms so)
    gap = df["wall"] - phase_sum(df)
    assert (gap >= -2e-3 - 0.05 * df["wall"]).all(), gap
    assert gap.median() <= 2e-3 + 0.05 * df["wall"].median(), gap
    # no worker was busy for longer than the run, and waits are idle gaps
    per_worker = busy(df).groupby(df["worker"]).sum()
    assert len(per_worker) <= n_workers
    assert per_worker.sum() <= run.wall * n_workers
    assert (per_worker <= run.wall).all()
    assert (df["t_wait"] >= 0).all()
    assert (df["t_start"] >= run.t_run_start).all() and (df["t_stop"] <= run.t_run_stop).all()
    return df


def test_threads(frames_file):
    path, data = frames_file
    arr = read_workload(path, "x", repeat=3).build(FPB)
    with capture(backend="threads", n_workers=2, meta={"file": path}) as run:
        (values,) = dask.compute(arr, scheduler="threads", num_workers=2)
    np.testing.assert_allclose(values, 3 * _expected(data), rtol=1e-10)
    df = _check_records(run, 2, "threads")
    assert df["worker"].str.startswith("thread-").all()
    # the key is the (fused) map_blocks key, whose block index gives the frames
    for key, start in zip(df["task_key"], df["frame_start"], strict=True):
        name, index = ast.literal_eval(key)
        assert name.endswith(arr.name) and index * FPB == start
    # scheduler times bracket the in-task times
    assert (df["sched_start"] <= df["t_start"] + 1e-3).all()
    assert (df["sched_stop"] >= df["t_stop"] - 1e-3).all()
    # t_wait: idle gap since the previous task of the worker (or the run's start)
    for _, grp in df.sort_values("t_start").groupby("worker"):
        gaps = grp["t_start"].to_numpy() - np.r_[run.t_run_start, grp["t_stop"].to_numpy()[:-1]]
        assert (grp["t_wait"].to_numpy() <= gaps + 1e-9).all()
    assert run.meta["file"] == path and run.meta["wall"] == pytest.approx(run.wall)


def test_environment_restored_and_spool_removed(frames_file, monkeypatch):
    path, _ = frames_file
    monkeypatch.delenv(SPOOL_ENV, raising=False)
    arr = read_workload(path, "x").build(32)
    with capture(backend="synchronous", env={DELAY_ENV: "999:1"}) as run:
        spool = os.environ[SPOOL_ENV]
        assert os.environ[DELAY_ENV] == "999:1"
        arr.compute(scheduler="synchronous")
    assert SPOOL_ENV not in os.environ and DELAY_ENV not in os.environ
    assert not os.path.exists(spool)
    assert len(run.records) == 2 and set(run.records["worker"]) == {"main"}


def test_all_tasks_adds_untimed_tasks(frames_file):
    path, _ = frames_file
    arr = read_workload(path, "x").build(FPB).sum()
    with capture(backend="threads", n_workers=2, all_tasks=True) as run:
        arr.compute(scheduler="threads", num_workers=2)
    df = run.records
    validate(df)
    timed = df["t_io"].notna()
    assert timed.sum() == N_FRAMES // FPB and (~timed).sum() >= 1
    assert df.loc[~timed, "frame_start"].isna().all()


def test_processes(frames_file):
    path, data = frames_file
    arr = read_workload(path, "x").build(FPB)
    with capture(backend="processes", n_workers=2) as run:
        (values,) = dask.compute(arr, scheduler="processes", num_workers=2, chunksize=1)
    np.testing.assert_allclose(values, _expected(data), rtol=1e-10)
    df = _check_records(run, 2, "processes")
    assert df["worker"].str.startswith("pid-").all()
    assert not (df["worker"] == f"pid-{os.getpid()}").any()


@pytest.fixture(scope="module")
def client():
    distributed = pytest.importorskip("distributed")
    from h5mdx.parallel import local_cluster

    with local_cluster(2) as cluster, \
            distributed.Client(cluster) as c:
        yield c


def test_distributed(frames_file, client):
    path, data = frames_file
    arr = read_workload(path, "x").build(FPB)
    client.compute(arr, sync=True)  # warm-up
    with capture(client=client) as run:
        values = client.compute(arr, sync=True)
    np.testing.assert_allclose(values, _expected(data), rtol=1e-10)
    df = _check_records(run, 2, "distributed")
    workers = set(client.scheduler_info()["workers"])
    assert set(df["worker"]) <= workers
    assert (df["t_transfer"] == 0).all()  # the blocks need no input from other workers
    # the workers' environment is restored
    assert all(v is None for v in client.run(os.environ.get, SPOOL_ENV).values())


def test_distributed_workers_need_no_shared_spool_directory(frames_file, client, tmp_path):
    """Workers on other nodes may not see the client's directories: their records come
    back through the client, and a spool directory they cannot reach costs nothing (a
    worker that wrote there failed the analysis itself)."""
    import shutil

    path, data = frames_file
    arr = read_workload(path, "x").build(FPB)
    with capture(client=client, spool_dir=tmp_path) as run:
        for spool in tmp_path.iterdir():  # as unreachable as on another node
            shutil.rmtree(spool)
        values = client.compute(arr, sync=True)
    np.testing.assert_allclose(values, _expected(data), rtol=1e-10)
    df = _check_records(run, 2, "distributed")
    assert sorted(df["frame_start"]) == list(range(0, N_FRAMES, FPB))


def test_distributed_task_stream_not_truncated(frames_file, client):
    """More tasks than dask's task-stream buffer would keep: all of them are recorded."""
    path, _ = frames_file
    arr = read_workload(path, "x").build(1)
    with dask.config.set({"distributed.scheduler.dashboard.status.task-stream-length": 10,
                          "distributed.scheduler.dashboard.tasks.task-stream-length": 10}):
        with capture(client=client) as run:
            client.compute(arr, sync=True)
    assert len(run.records) == N_FRAMES
    assert len(run.scheduler_records) >= N_FRAMES


@pytest.mark.parametrize("phase", ["io", "compute"])
def test_injected_delay_is_the_straggler(frames_file, phase):
    path, _ = frames_file
    arr = read_workload(path, "x", repeat=3).build(FPB)
    arr.compute(scheduler="threads", num_workers=2)  # warm-up
    with capture(backend="threads", n_workers=2, env={DELAY_ENV: f"24:0.5:{phase}"}) as run:
        arr.compute(scheduler="threads", num_workers=2)
    df = flag_stragglers(run.records)
    slow = df[df["is_straggler"]]
    assert 24 in slow["frame_start"].tolist()
    assert slow.set_index("frame_start").loc[24, "slow_phase"] == phase
    assert df.set_index("frame_start").loc[24, f"t_{phase}"] >= 0.5


def test_clean_run_has_no_false_stragglers(frames_file):
    """Without injected delays no task is flagged.

    Tasks of ~35 ms (400 passes of the reduction) keep the timing noise small, but
    the two cores are shared with other processes, which can stretch one task by
    half: the test uses factor 2 instead of the default 1.5.
    """
    path, _ = frames_file
    arr = read_workload(path, "x", repeat=400).build(FPB)
    arr.compute(scheduler="threads", num_workers=2)  # warm-up
    with capture(backend="threads", n_workers=2) as run:
        arr.compute(scheduler="threads", num_workers=2)
    df = flag_stragglers(run.records, factor=2.0)
    assert not df["is_straggler"].any(), df[["frame_start", "duration", "threshold"]]


def test_capture_rejects_mpi_backend():
    with pytest.raises(ValueError, match="MPI ranks write their own records"):
        with capture(backend="mpi-io"):
            pass


def test_a_capture_of_another_scheduler_says_so(frames_file, client):
    """The records of a block are those of the scheduler captured: a compute that went
    elsewhere (the default client, or threads under capture('processes')) warns."""
    import warnings

    path, data = frames_file
    arr = read_workload(path, "x").build(FPB)
    with pytest.warns(UserWarning, match="recorded no task"):
        with capture(backend="threads", n_workers=2) as run:
            client.compute(arr, sync=True)  # on the cluster, not on threads
    assert len(run.records) == 0
    with pytest.warns(UserWarning, match="tasks ran in this process, not on the processes"):
        with capture(backend="processes", n_workers=2) as run:
            dask.compute(arr, scheduler="threads", num_workers=2)
    with pytest.warns(UserWarning, match="tasks ran in this process, not on the distributed"):
        with capture(client=client) as run:
            dask.compute(arr, scheduler="threads", num_workers=2)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the scheduler captured: nothing to say
        with capture(backend="threads", n_workers=2) as run:
            dask.compute(arr, scheduler="threads", num_workers=2)
        with capture(client=client) as run:
            client.compute(arr, sync=True)
    assert len(run.records) == N_FRAMES // FPB


def test_a_delay_not_of_the_form_is_refused_at_once(frames_file, capsys):
    """H5MDX_TIMING_DELAY (bench --delay) is FRAME:SECONDS[:PHASE]: anything else is a
    clear error before a run, naming the form (--delay 0 failed mid-grid with 'list index
    out of range', and a phase no task has injected nothing). The message began
    'H5MDX_TIMING_DELAY (--delay)' wherever it came from: on the command line it names
    --delay, in the library the variable."""
    from h5mdx.cli import main
    from h5mdx.timing.phases import parse_delay

    assert parse_delay("24:0.5:compute") == (24, 0.5, "compute")
    for spec in ("0", "abc", "0:x", "-1:0.5", "0:-1", "0:0.5:IO", "0:0.5:init_top", "1:2:io:4"):
        with pytest.raises(ValueError, match=r"is not FRAME:SECONDS\[:PHASE\]"):
            parse_delay(spec)
    # the library names the variable it read; the command line its option
    with pytest.raises(ValueError, match=r"^H5MDX_TIMING_DELAY '0' is not FRAME"):
        parse_delay("0")
    with pytest.raises(ValueError, match=r"^H5MDX_TIMING_DELAY '0:0.5:init_top' is not"):
        with capture(backend="threads", env={DELAY_ENV: "0:0.5:init_top"}):
            pass
    path, _ = frames_file
    assert main(["bench", path, "--analysis", "read", "--scheduler", "threads",
                 "--workers", "1", "--delay", "0", "--out", str(Path(path).parent / "b"),
                 "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert "h5mdx bench: --delay '0' is not FRAME:SECONDS[:PHASE]" in err
    assert DELAY_ENV not in err


def test_a_failed_computation_gets_no_warning_of_its_own():
    """A computation that raises inside capture() raises its error alone (it was preceded
    by a warning that the tasks ran on another scheduler)."""
    import warnings

    def boom():
        raise RuntimeError("the real error")

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(RuntimeError, match="the real error"):
            with capture(backend="threads", n_workers=1):
                dask.delayed(boom)().compute(scheduler="threads")


@pytest.mark.slow
def test_a_worker_killed_mid_run_costs_no_wait_after_it(adk_h5md, adk_universe):
    """A worker killed with SIGKILL during a captured run (its nanny starts another):
    collecting the records waited 30 s for the dead worker's address, and the run's
    reported time took it in (50 s where the records said 20 s)."""
    import signal
    import threading
    import time

    import xarray as xr
    from distributed import Client

    import h5mdx
    from h5mdx.parallel import local_cluster

    ca = adk_universe.select_atoms("name CA").indices
    with local_cluster(2) as cluster, Client(cluster) as client, \
            xr.open_dataset(adk_h5md, engine="h5md") as ds:
        client.run(lambda: None)  # workers up
        pids = list(client.run(os.getpid).values())
        lazy = h5mdx.rmsd(ds.position, select=ca, frames_per_block=25)
        killer = threading.Timer(4.0, os.kill, (pids[-1], signal.SIGKILL))
        t0 = time.perf_counter()
        with capture(client=client, env={DELAY_ENV: "50:6"}) as run:
            killer.start()
            values = lazy.compute()
        elapsed = time.perf_counter() - t0
    assert values.shape == (98,)
    # the delayed task runs 6 s (twice, where its worker was the one killed): no 30 s more
    assert elapsed < 25, elapsed
    assert run.meta["wall"] <= elapsed


def test_an_injected_delay_is_slept_once_per_task(monkeypatch):
    """A task that reads in several parts (h5mdx's RMSD on the threaded scheduler) enters
    its ``io`` phase more than once: the delay was slept at each, 2 s of a
    ``49:1.0`` in the docs' straggler example."""
    from h5mdx.timing.phases import BlockTimer

    monkeypatch.setenv(DELAY_ENV, "49:0.2")
    timer = BlockTimer(49, 56)
    t0 = time.perf_counter()
    with timer:
        for _ in range(3):
            with timer.phase("io"):
                pass
        timer.add("io", 0.0)
    assert 0.2 <= time.perf_counter() - t0 < 0.35
    assert 0.2 <= timer.phases["io"] < 0.35


def test_a_process_pool_started_before_the_capture_says_so(frames_file):
    """A pool of the user's own, started before capture('processes'), never sees the spool
    variable: its tasks spooled nothing and the records were empty, without a word (an
    audit); it now warns, naming the pool."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    path, _ = frames_file
    arr = read_workload(path, "x").build(FPB)
    with ProcessPoolExecutor(2, mp_context=multiprocessing.get_context("spawn")) as pool:
        [f.result() for f in [pool.submit(int) for _ in range(2)]]  # its processes up
        with pytest.warns(UserWarning, match="a process pool started before capture"):
            with capture(backend="processes", n_workers=2) as run:
                dask.compute(arr, scheduler="processes", pool=pool)
    assert len(run.scheduler_records) >= N_FRAMES // FPB and len(run.records) == 0


def test_a_cluster_of_workers_in_this_process_is_no_other_scheduler(frames_file):
    """With LocalCluster(processes=False) (a notebook's usual cluster) the workers run in
    this process: capture(client=client) warned that the tasks 'ran in this process, not on
    the distributed scheduler' of every run on it. Only a compute that
    did not go to the cluster (its scheduler saw no task) warns."""
    import warnings

    distributed = pytest.importorskip("distributed")
    path, _ = frames_file
    arr = read_workload(path, "x").build(FPB)
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=False,
                                  dashboard_address=":0") as cluster, \
            distributed.Client(cluster) as client:
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            with capture(client=client) as run:
                client.compute(arr, sync=True)
        df = _check_records(run, 2, "distributed")
        assert set(df["worker"]) <= set(client.scheduler_info()["workers"])
        with pytest.warns(UserWarning, match="tasks ran in this process, not on the distrib"):
            with capture(client=client) as run:
                dask.compute(arr, scheduler="threads", num_workers=2)


def _kill_worker(client, victim):
    """SIGKILL the worker process ``victim`` (its results lost with it) and wait until
    the scheduler no longer lists it."""
    import signal

    os.kill(client.run(os.getpid, workers=[victim])[victim], signal.SIGKILL)
    deadline = time.monotonic() + 60
    while victim in client.scheduler_info()["workers"]:
        assert time.monotonic() < deadline, "the killed worker stayed listed"
        time.sleep(0.05)


def _sleeping_block(i, seconds):
    import time

    from h5mdx.timing.phases import BlockTimer

    with BlockTimer(i, i + 1, kind="sleep") as timer, timer.phase("compute"):
        time.sleep(seconds)
    return i


def test_waits_of_a_worker_of_two_threads_are_per_thread(frames_file):
    """A distributed worker of two threads runs two tasks side by side: t_wait was the
    worker's idle time as a whole, so the thread that started second had no wait for the
    time it sat idle, and per thread waits and tasks did not add up to the run (found by an
    audit). Each thread now adds up: its waits and tasks span the run's start to its last
    task's end."""
    distributed = pytest.importorskip("distributed")
    tasks = [dask.delayed(_sleeping_block)(i, s) for i, s in enumerate((0.3, 0.1, 0.1, 0.1))]
    with distributed.LocalCluster(n_workers=1, threads_per_worker=2, processes=False,
                                  dashboard_address=":0") as cluster, \
            distributed.Client(cluster) as client:
        client.submit(int).result()  # the worker up
        with capture(client=client) as run:
            client.compute(tasks, sync=True)
    df = run.records
    thread = {r["frame_start"]: r["thread"] for r in run.spooled}
    lanes = df.groupby(df["frame_start"].map(thread))
    assert lanes.ngroups == 2
    # the run's start on the worker's clock: noted as the block began
    t0 = run.worker_t0[df["worker"].iloc[0]]
    assert run.t_run_start - 1.0 < t0 <= run.t_run_start
    for _, lane in lanes:
        spent = lane["t_wait"].sum() + lane["wall"].sum()
        assert spent == pytest.approx(lane["t_stop"].max() - t0, abs=1e-6)


def test_local_workers_default_to_the_cpus_dask_uses(monkeypatch):
    """A job given 3 of a node's 64 cores: dask's threads scheduler runs 3 threads, but
    the records said n_workers = 64 (os.cpu_count), and the load imbalance divided the
    work by 64."""
    import dask.system

    from h5mdx.timing.capture import _count_workers

    monkeypatch.setattr(os, "cpu_count", lambda: 64)
    monkeypatch.setattr(dask.system, "CPU_COUNT", 3)
    with dask.config.set(num_workers=None):
        assert _count_workers("threads", None) == 3
        assert _count_workers("processes", None) == 3
        assert _count_workers("synchronous", None) == 1
    with dask.config.set(num_workers=2):
        assert _count_workers("threads", None) == 2


def test_tasks_of_a_worker_that_left_are_said_to_be_missing(frames_file):
    """A worker retired before the block ended (a SLURM job's walltime, an adaptive
    cluster scaling down) takes the in-task records it kept in memory: the records held
    the other worker's tasks only, and nothing said so. A warning says how many tasks
    are missing and where they ran; ``n_lost`` counts them."""
    distributed = pytest.importorskip("distributed")
    from h5mdx.parallel import local_cluster

    path, _ = frames_file
    arr = read_workload(path, "x").build(FPB)
    with local_cluster(2) as cluster, distributed.Client(cluster) as client:
        client.compute(arr, sync=True)  # warm-up
        with capture(client=client) as run:
            blocks = arr.persist()
            distributed.wait(blocks)
            held = {w: len(keys) for w, keys in client.has_what().items() if keys}
            leaving = max(held, key=held.get)
            client.retire_workers([leaving])  # its results move; its records do not
        with pytest.warns(RuntimeWarning, match=rf"{held[leaving]} timed task\(s\) ran on 1 "
                          rf"worker\(s\) that left before the end of the run \({leaving}\)"):
            df = run.records
    assert run.n_lost == held[leaving] >= 1
    assert len(df) + run.n_lost == N_FRAMES // FPB
    assert leaving not in set(df["worker"])


def test_workers_that_join_during_the_block_are_counted(frames_file):
    """A cluster of one worker that grows to two in the block (SLURM worker jobs that
    start while the computation runs, an adaptive cluster): the records said n_workers 1
    for tasks run by two workers, and speed-up tables put the run at N=1. A count given
    by the caller is kept."""
    distributed = pytest.importorskip("distributed")
    from h5mdx.parallel import local_cluster

    path, _ = frames_file
    arr = read_workload(path, "x", repeat=3).build(FPB)
    with local_cluster(1) as cluster, distributed.Client(cluster) as client:
        client.compute(arr, sync=True)  # warm-up
        with capture(client=client) as run:
            cluster.scale(2)
            client.wait_for_workers(2)
            client.compute(arr, sync=True)
        with capture(client=client, n_workers=1) as given:
            client.compute(arr, sync=True)
    df = run.records
    assert run.n_workers == 2 and run.meta["n_workers"] == 2
    assert set(df["n_workers"]) == {2} and len(df) == N_FRAMES // FPB
    assert set(given.records["n_workers"]) == {1} and given.meta["n_workers"] == 1


def test_tasks_of_a_worker_that_joins_during_the_block_are_recorded(frames_file, tmp_path):
    """A worker that joins the cluster while the block runs, started elsewhere with an
    environment of its own (a SLURM worker job leaving the queue late): the spool variable
    was set only on the workers there at the start, so its tasks timed into nothing and
    the records lacked them. Its environment is its own again after the block."""
    import subprocess
    import sys

    distributed = pytest.importorskip("distributed")
    from h5mdx.parallel import local_cluster

    path, _ = frames_file
    arr = read_workload(path, "x", repeat=3).build(FPB)
    env = {k: v for k, v in os.environ.items() if k != SPOOL_ENV}
    with local_cluster(1) as cluster, distributed.Client(cluster) as client:
        client.compute(arr, sync=True)  # warm-up
        first = set(client.scheduler_info()["workers"])
        with capture(client=client) as run:
            late = subprocess.Popen(
                [sys.executable, "-m", "distributed.cli.dask_worker",
                 cluster.scheduler_address, "--nthreads", "1", "--no-nanny",
                 "--local-directory", str(tmp_path)], env=env,
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            try:
                client.wait_for_workers(2, timeout=60)
                newcomer = (set(client.scheduler_info()["workers"]) - first).pop()
                client.compute(arr, sync=True, workers=[newcomer])
            except BaseException:
                late.kill()
                raise
        try:
            assert client.run(os.environ.get, SPOOL_ENV, workers=[newcomer]) == {
                newcomer: None}
        finally:
            client.retire_workers([newcomer])
            late.wait(timeout=60)
    df = run.records
    assert len(df) == N_FRAMES // FPB and set(df["worker"]) == {newcomer}
    assert sorted(df["frame_start"]) == list(range(0, N_FRAMES, FPB))


def test_a_task_run_again_after_its_worker_was_lost_is_one_row(frames_file):
    """A worker killed after it ran its tasks (their results lost with it; dask runs them
    again elsewhere): capture(all_tasks=True) gave each such task two rows, an untimed one
    on the dead worker and the timed one, and the straggler analysis counted two tasks.
    Each task is one row, its last attempt's, with ``retries`` and the seconds of the
    earlier attempts in ``t_retried``."""
    distributed = pytest.importorskip("distributed")
    from h5mdx.parallel import local_cluster

    path, _ = frames_file
    arr = read_workload(path, "x", repeat=3).build(FPB)
    with local_cluster(2) as cluster, distributed.Client(cluster) as client:
        client.compute(arr, sync=True)  # warm-up
        with capture(client=client, all_tasks=True) as run:
            blocks = arr.persist()
            distributed.wait(blocks)
            held = {w: set(keys) for w, keys in client.has_what().items() if keys}
            victim = max(held, key=lambda w: len(held[w]))
            _kill_worker(client, victim)
            assert blocks.sum().compute() > 0  # the lost blocks run again
    df = run.records
    validate(df)
    assert df["task_key"].is_unique
    timed = df[df["frame_start"].notna()]
    assert len(timed) == N_FRAMES // FPB
    again = timed["frame_start"].isin({k[1] * FPB for k in held[victim]})  # (name, block)
    assert again.sum() == len(held[victim]) >= 1
    assert (timed.loc[again, "retries"] == 1).all()
    assert (timed.loc[again, "t_retried"] > 0).all()
    assert victim not in set(timed.loc[again, "worker"])
    assert (timed.loc[~again, "retries"] == 0).all()
    assert (timed.loc[~again, "t_retried"] == 0).all()
    assert victim in run.removed and run.n_lost == 0


def test_a_graph_computed_twice_in_the_block_keeps_both_runs(frames_file):
    """Computing the same graph twice in one block runs each task twice on workers that
    stay: two tasks each, not one task run again."""
    distributed = pytest.importorskip("distributed")
    from h5mdx.parallel import local_cluster

    path, _ = frames_file
    arr = read_workload(path, "x").build(FPB)
    with local_cluster(2) as cluster, distributed.Client(cluster) as client:
        client.compute(arr, sync=True)  # warm-up
        with capture(client=client, all_tasks=True) as run:
            client.compute(arr, sync=True)
            client.compute(arr, sync=True)
    timed = run.records[run.records["frame_start"].notna()]
    assert len(timed) == 2 * (N_FRAMES // FPB)
    assert (timed.groupby("task_key").size() == 2).all()
    assert (timed["retries"] == 0).all() and (timed["t_retried"] == 0).all()


def test_a_worker_lost_and_started_again_is_not_one_more_worker(frames_file):
    """A worker of a 2-worker cluster killed during the block, its nanny starting another
    in its place: the workers that ran the block's tasks were three addresses, and the
    records said n_workers 3 of a cluster that never had more than 2 (load imbalance
    and speed-up divided by 3). The count is the most workers at once."""
    distributed = pytest.importorskip("distributed")
    from h5mdx.parallel import local_cluster

    path, _ = frames_file
    arr = read_workload(path, "x").build(FPB)
    with local_cluster(2) as cluster, distributed.Client(cluster) as client:
        client.compute(arr, sync=True)  # warm-up
        with capture(client=client) as run:
            client.compute(arr, sync=True)
            victim = sorted(client.scheduler_info()["workers"])[0]
            _kill_worker(client, victim)
            client.wait_for_workers(2, timeout=60)  # its nanny's new worker
            client.compute(arr, sync=True)
    workers = {str(r["worker"]) for r in run.scheduler_records}
    assert victim in workers and len(workers) == 3  # three addresses ran tasks ...
    assert run.n_workers == 2 and run.meta["n_workers"] == 2  # ... two at a time
    assert set(run.records["n_workers"]) == {2}


def test_a_worker_that_did_not_answer_is_not_said_to_have_left(frames_file, monkeypatch):
    """A worker the scheduler still lists that did not answer the request for its records
    within the collection's bound (busy under a task holding the GIL) was said to have
    "left before the end of the run". Only a worker the scheduler removed has left; this
    one is said not to have answered, and is kept apart in ``unanswered``."""
    distributed = pytest.importorskip("distributed")
    from h5mdx.parallel import local_cluster
    # the module, not the function h5mdx.timing.capture
    capture_module = importlib.import_module("h5mdx.timing.capture")

    path, _ = frames_file
    arr = read_workload(path, "x").build(FPB)
    real = capture_module._from_live_workers
    silent = []

    def one_silent(client, fn, *args):  # (only the records are collected so)
        answers = real(client, fn, *args)
        # as distributed says a connect timeout
        answers[silent[0]] = OSError(f"Timed out trying to connect to {silent[0]}")
        return answers

    monkeypatch.setattr(capture_module, "_from_live_workers", one_silent)
    with local_cluster(2) as cluster, distributed.Client(cluster) as client:
        client.compute(arr, sync=True)  # warm-up
        with capture(client=client) as run:
            blocks = arr.persist()
            distributed.wait(blocks)
            held = {w: len(keys) for w, keys in client.has_what().items() if keys}
            silent.append(max(held, key=held.get))
        with pytest.warns(RuntimeWarning, match=rf"{held[silent[0]]} timed task\(s\) ran on "
                          r"1 worker\(s\) that did not answer within 5 s when asked for their "
                          r"records at the end of the run, though the scheduler still lists "
                          rf"them \(busy .*\) \({silent[0]}\)") as said:
            df = run.records
    assert not any("left before the end" in str(w.message) for w in said)
    assert run.unanswered == {silent[0]} and run.removed == set()
    assert run.n_lost == held[silent[0]] and len(df) + run.n_lost == N_FRAMES // FPB


def test_the_bound_a_silent_worker_did_not_answer_within_is_the_one_applied(monkeypatch):
    """The warning of a worker that did not give its records said "did not answer within
    5s", the scheduler's connect timeout, while the bound its answer was awaited for is
    ``ANSWER_TIMEOUT_S``: a run given 3 s (a loaded machine's) was told 5s. There is one
    bound now, and the warning says it."""
    capture_module = importlib.import_module("h5mdx.timing.capture")
    monkeypatch.setattr(capture_module, "ANSWER_TIMEOUT_S", 0.5)
    run = capture_module.TimingRun("r", "distributed", 2, {})
    silent, spoke = "tcp://10.0.0.2:1", "tcp://10.0.0.1:1"
    run.answered, run.unanswered = {spoke}, {silent}

    def sched(i, worker):
        return {"key": f"('rmsd-a', {i})", "worker": worker, "status": "memory"}

    with pytest.warns(RuntimeWarning, match=r"2 timed task\(s\) ran on 1 worker\(s\) that "
                      r"did not answer within 0\.5 s when asked for their records"):
        capture_module._warn_lost(run, [sched(0, spoke)], [sched(1, silent), sched(2, silent)])
    assert run.n_lost == 2


def test_a_spool_plugin_that_reaches_a_worker_after_its_run_ended_does_nothing(
        frames_file, monkeypatch):
    """A worker stopped during the block that woke after it could get the spool plugin's
    removal before its addition: the removal found nothing (a KeyError in its log), the
    addition set the spool variables for good, and its records piled up in memory nobody
    collected. The plugin belongs to its run, and once the run has ended its setup (and
    a late request to set the variables) does nothing."""
    distributed = pytest.importorskip("distributed")
    capture_module = importlib.import_module("h5mdx.timing.capture")
    made = []

    def keep(*args):
        made.append(capture_module_spool(*args))
        return made[-1]

    capture_module_spool = capture_module._spool_plugin
    monkeypatch.setattr(capture_module, "_spool_plugin", keep)
    monkeypatch.delenv(SPOOL_ENV, raising=False)
    path, _ = frames_file
    arr = read_workload(path, "x").build(FPB)
    with distributed.LocalCluster(n_workers=1, threads_per_worker=2, processes=False,
                                  dashboard_address=":0") as cluster, \
            distributed.Client(cluster) as client:
        with capture(client=client) as run:
            client.compute(arr, sync=True)
            spool = os.environ[SPOOL_ENV]
        assert len(run.records) == N_FRAMES // FPB and SPOOL_ENV not in os.environ
        (plugin,) = made
        # the plugin's addition, reaching the worker after the run ended (and its removal)
        client.register_plugin(plugin, name="late-spool")
        assert SPOOL_ENV not in os.environ
        client.unregister_worker_plugin("late-spool")
        assert SPOOL_ENV not in os.environ
        # so for the request to set the variables, sent at the start
        late = client.run(capture_module._set_env_of_run, {SPOOL_ENV: spool},
                          spool)
        assert list(late.values()) == [None] and SPOOL_ENV not in os.environ


def test_a_worker_whose_clock_is_ahead_waits_no_longer_for_it(frames_file):
    """A worker on a node whose clock is 30 s ahead of the client's: its first task's
    wait was its start (its clock) less the run's start (the client's clock), 30 s of
    waiting that never happened. Waits are measured on the worker's clock, from the
    run's start as that worker noted it."""
    distributed = pytest.importorskip("distributed")
    from h5mdx.parallel import local_cluster

    def clock_ahead(seconds=30.0):
        import time as _time

        real = _time.time
        _time.time = lambda: real() + seconds  # as a node whose clock is ahead

    path, _ = frames_file
    arr = read_workload(path, "x").build(FPB)
    with local_cluster(2) as cluster, distributed.Client(cluster) as client:
        client.compute(arr, sync=True)  # warm-up
        ahead = sorted(client.scheduler_info()["workers"])[0]
        client.run(clock_ahead, workers=[ahead])
        with capture(client=client) as run:
            client.compute(arr, sync=True)
    df = run.records
    assert len(df) == N_FRAMES // FPB and ahead in set(df["worker"])
    assert (df["t_wait"] < 5.0).all(), df[["worker", "t_wait"]]
    assert run.worker_t0[ahead] > run.t_run_start + 25
    for worker, own in df.groupby("worker"):  # within the worker's run, on its clock
        spent = own["t_wait"].sum() + own["wall"].sum()
        assert 0 < spent <= own["t_stop"].max() - run.worker_t0[worker] + 1e-6


def test_a_spooled_record_cut_short_is_left_out_with_a_warning(tmp_path):
    """A spool file whose last line was cut short (a full disk, a worker killed while
    writing it) failed the whole capture at its end with a bare JSONDecodeError: the
    run's other records were lost. Now that line is left out with a warning naming the
    file and the line, and the other records are read."""
    import json

    from h5mdx.timing.phases import read_spool

    good = {"task_key": "('rmsd-a', 0)", "t_io": 0.5}
    path = tmp_path / "host-123.jsonl"
    path.write_text(json.dumps(good) + "\n\n" + '{"task_key": "(\'rmsd-a\', 1)", "t_i')
    (tmp_path / "host-124.jsonl").write_text(json.dumps({**good, "t_io": 0.25}) + "\n")
    with pytest.warns(UserWarning, match=r"host-123\.jsonl: 1 spooled timing record\(s\) "
                                         r"unreadable \(line 3: cut short\?\), left out"):
        records = read_spool(tmp_path)
    assert records == [good, {**good, "t_io": 0.25}]


def test_a_record_spooled_after_a_line_cut_short_starts_a_line_of_its_own(
        tmp_path, monkeypatch):
    """A spool line cut short (a full disk) had no newline: the next record the same
    process spooled was appended onto it, and both were lost. The next record now starts
    on a new line: only the cut line is left out."""
    import json
    import socket

    from h5mdx.timing.phases import BlockTimer, read_spool

    monkeypatch.setenv(SPOOL_ENV, str(tmp_path))
    monkeypatch.delenv(DELAY_ENV, raising=False)
    path = tmp_path / f"{socket.gethostname()}-{os.getpid()}.jsonl"
    path.write_text(json.dumps({"frame_start": 0, "t_io": 0.5}) + "\n" + '{"frame_st')
    with BlockTimer(8, 16, kind="sleep"):
        pass
    with pytest.warns(UserWarning, match=r"1 spooled timing record\(s\) unreadable "
                                         r"\(line 2: cut short\?\)"):
        records = read_spool(tmp_path)
    assert [(r["frame_start"], r.get("frame_stop")) for r in records] == [(0, None), (8, 16)]
    assert records[1]["kind"] == "sleep"
    with BlockTimer(16, 24, kind="sleep"):  # a whole last line: no blank line between
        pass
    text = path.read_text()
    assert text.count("\n") == 4 and "\n\n" not in text


def test_a_record_of_no_key_is_matched_on_its_worker_s_clock():
    """An in-task record of no known key is matched to the scheduler record of its worker
    whose window holds it; the windows (scheduler's clock) were compared with the
    record's times (the worker's clock) as they were: on a node whose clock is 30 s
    behind no window held it, the record was unmatched (with a warning) and its task
    took a second row of its own. The worker's clock offset, from its tasks matched by
    key (else its ``scheduler_delay``), is now added to the windows first."""
    from h5mdx.timing.capture import TimingRun

    run = TimingRun("r", "distributed", 2, {"backend": "distributed", "n_workers": 2})
    run.all_tasks = True
    run.t_run_start, run.t_run_stop = 1000.0, 1010.0
    behind, lone = "tcp://10.0.0.2:1", "tcp://10.0.0.3:1"
    run.pid_to_worker = {2: behind, 3: lone}
    run.worker_t0 = {behind: 970.0, lone: 960.0}
    run.scheduler_delay = {behind: 30.0, lone: 40.0}

    def sched(key, worker, start, stop):
        return {"key": key, "worker": worker, "worker_id": 7, "sched_start": start,
                "sched_stop": stop, "t_transfer": 0.0, "status": "memory"}

    def spooled(key, pid, start, stop, frame):
        rec = {"pid": pid, "host": "h", "thread": 7, "kind": "rmsd", "frame_start": frame,
               "frame_stop": frame + 8, "t_start": start, "t_stop": stop, "t_io": 0.4,
               "t_compute": 0.5}
        return rec if key is None else {**rec, "task_key": key}

    run.scheduler_records = [sched("('rmsd-a', 0)", behind, 1001.0, 1002.0),
                             sched("('rmsd-a', 1)", behind, 1003.0, 1004.0),
                             sched("('rmsd-a', 2)", lone, 1001.0, 1002.0)]
    run.spooled = [spooled("('rmsd-a', 0)", 2, 971.01, 972.0, 0),
                   spooled(None, 2, 973.01, 974.0, 8),    # offset -30 s, from the key above
                   spooled(None, 3, 961.01, 962.0, 16)]   # -40 s, its scheduler_delay
    df = run.records.set_index("task_key")
    assert run.n_unmatched == 0
    assert sorted(df.index) == ["('rmsd-a', 0)", "('rmsd-a', 1)", "('rmsd-a', 2)"]
    assert df["frame_start"].to_dict() == {"('rmsd-a', 0)": 0, "('rmsd-a', 1)": 8,
                                           "('rmsd-a', 2)": 16}
    assert df.loc["('rmsd-a', 1)", "sched_start"] == pytest.approx(1003.0)
    assert df.loc["('rmsd-a', 1)", "t_wait"] == pytest.approx(1.01)   # 973.01 - 972.0


def test_untimed_tasks_of_a_worker_whose_clock_is_behind_wait_no_longer():
    """distributed reports a task's ``startstops`` on the scheduler's clock, while the
    in-task records and the run's start on a worker are on the worker's clock. Untimed
    tasks kept the scheduler's times: on a node whose clock is 30 s behind, an untimed
    task waited 30 s that never happened. Now they are put on their worker's clock, by the
    offset its timed tasks show (else the worker's own ``scheduler_delay``)."""
    from h5mdx.timing.capture import TimingRun

    run = TimingRun("r", "distributed", 2, {"backend": "distributed", "n_workers": 2})
    run.all_tasks = True
    run.t_run_start, run.t_run_stop = 1000.0, 1010.0
    behind, plain, lone = "tcp://10.0.0.2:1", "tcp://10.0.0.1:1", "tcp://10.0.0.3:1"
    run.pid_to_worker = {2: behind, 1: plain, 3: lone}
    run.worker_t0 = {behind: 970.0, plain: 1000.0, lone: 960.0}
    run.scheduler_delay = {behind: 30.0, plain: 0.0, lone: 40.0}

    def sched(key, worker, start, stop):
        return {"key": key, "worker": worker, "worker_id": 7, "sched_start": start,
                "sched_stop": stop, "t_transfer": 0.0, "status": "memory"}

    def spooled(key, pid, start, stop):
        return {"task_key": key, "pid": pid, "host": "h", "thread": 7, "kind": "rmsd",
                "frame_start": 0, "frame_stop": 8, "t_start": start, "t_stop": stop,
                "t_io": 0.4, "t_compute": 0.5}

    run.scheduler_records = [
        sched("('load-a', 0)", behind, 1000.5, 1001.0),    # untimed, before the timed one
        sched("('rmsd-a', 0)", behind, 1001.2, 1002.2),
        sched("('sum-a', 0)", behind, 1002.5, 1003.0),     # untimed, after it
        sched("('rmsd-a', 1)", plain, 1000.2, 1001.2),
        sched("('sum-a', 1)", plain, 1001.5, 1002.0),
        sched("('sum-a', 2)", lone, 1000.5, 1001.0),       # a worker that timed nothing
    ]
    run.spooled = [spooled("('rmsd-a', 0)", 2, 971.21, 972.2),
                   spooled("('rmsd-a', 1)", 1, 1000.21, 1001.2)]
    df = run.records.set_index("task_key")
    assert len(df) == 6
    wait = df["t_wait"]
    assert wait["('load-a', 0)"] == pytest.approx(0.51)      # 970.51 - 970
    assert wait["('rmsd-a', 0)"] == pytest.approx(0.2)       # 971.21 - 971.01
    assert wait["('sum-a', 0)"] == pytest.approx(0.31)       # 972.51 - 972.2
    assert wait["('rmsd-a', 1)"] == pytest.approx(0.21)
    assert wait["('sum-a', 1)"] == pytest.approx(0.31)
    assert wait["('sum-a', 2)"] == pytest.approx(0.5)        # 960.5 - 960
    assert df.loc["('sum-a', 0)", "t_start"] == pytest.approx(972.51)
    assert df.loc["('sum-a', 0)", "sched_start"] == pytest.approx(1002.5)  # kept as is
    assert df.loc["('sum-a', 0)", "wall"] == pytest.approx(0.5)


def test_a_stopped_worker_does_not_hold_the_capture(frames_file, monkeypatch):
    """A worker stopped (SIGSTOP, as a node that hangs) but still connected never answers
    client.run, which has no bound: capture's start waited for it forever, and so did its
    end. Each wait is bounded now: the worker is said not to have answered, the tasks of
    the others are recorded. (A watchdog wakes the worker after 30 s, so that the code
    before the fix fails here instead of hanging.)"""
    import signal
    import threading

    distributed = pytest.importorskip("distributed")
    from h5mdx.parallel import local_cluster

    capture_module = importlib.import_module("h5mdx.timing.capture")
    monkeypatch.setattr(capture_module, "ANSWER_TIMEOUT_S", 3.0, raising=False)
    path, _ = frames_file
    arr = read_workload(path, "x").build(FPB)
    with local_cluster(2) as cluster, distributed.Client(cluster) as client:
        client.compute(arr, sync=True)  # warm-up
        pids = client.run(os.getpid)
        stopped, other = sorted(pids)
        os.kill(pids[stopped], signal.SIGSTOP)
        woken = threading.Timer(30.0, os.kill, (pids[stopped], signal.SIGCONT))
        woken.start()
        try:
            t0 = time.monotonic()
            with pytest.warns(RuntimeWarning, match=rf"1 worker\(s\) did not answer when "
                              rf"asked, at the start of the block, to time their tasks "
                              rf"\(stopped, .*\({stopped}: {stopped} did not answer within "
                              r"3 s\)"):
                with capture(client=client) as run:
                    t_entered = time.monotonic() - t0
                    client.compute(arr, workers=[other], sync=True)
                    t1 = time.monotonic()
            t_left = time.monotonic() - t1
        finally:
            woken.cancel()
            os.kill(pids[stopped], signal.SIGCONT)
    assert t_entered < 15 and t_left < 15, (t_entered, t_left)  # 3 s a wait, not 30
    assert run.unanswered == {stopped} and run.answered == {other}
    df = run.records
    assert len(df) == N_FRAMES // FPB and set(df["worker"]) == {other}
