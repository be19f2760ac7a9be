"""RMSD tasks that read ahead of the kernel give the same numbers, and do it only with
a spare core for each task."""

from __future__ import annotations

import warnings

import dask
import numpy as np
import pytest
import xarray as xr
from MDAnalysis.analysis import rms
from MDAnalysisTests.datafiles import PSF

import h5mdx
from h5mdx.analysis import blocks, plan
from h5mdx.engine import frames
from h5mdx.testing import assert_rmsd_close


@pytest.fixture(scope="module")
def expected_ca(adk_universe):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return rms.RMSD(adk_universe, select="name CA").run().results.rmsd[:, 2]


@pytest.fixture
def depths(monkeypatch):
    """The read-ahead depth of each task, and reads of 2 chunks (20 frames) at a time."""
    seen: list[int] = []
    real = blocks.read_ahead

    def recording(read, spans, depth=frames.READ_AHEAD):
        seen.append(depth)
        return real(read, spans, depth)

    monkeypatch.setattr(blocks, "read_ahead", recording)
    monkeypatch.setattr(plan, "READ_STEP_BYTES", 20 * 3341 * 12)
    return seen


def _rmsd(path, scheduler, **config):
    # the scheduler as the graph is built: that is where rmsd counts the tasks at once
    with xr.open_dataset(path, engine="h5md", topology=PSF) as ds, \
            dask.config.set(scheduler=scheduler, **config):
        return h5mdx.rmsd(ds.position, select="name CA", frames_per_block=50).values


@pytest.mark.parametrize("env", ["0", "1", "2", "3"])
def test_every_depth_gives_the_same_bytes_as_mdanalysis(adk_h5md_blocked, expected_ca, depths,
                                                       monkeypatch, env):
    monkeypatch.setenv(frames.READ_AHEAD_ENV, "0")
    one_by_one = _rmsd(adk_h5md_blocked, "sync")
    monkeypatch.setenv(frames.READ_AHEAD_ENV, env)
    for scheduler in ("sync", "threads"):
        got = _rmsd(adk_h5md_blocked, scheduler, num_workers=2)
        np.testing.assert_array_equal(got, one_by_one)
        assert_rmsd_close(got, expected_ca, atol=1e-4)
    assert depths[-4:] == [int(env)] * 4  # 2 tasks of 50 frames, 3 reads each, twice


def test_a_task_reads_ahead_only_with_a_spare_core_for_each_task(adk_h5md_blocked,
                                                                 expected_ca, depths,
                                                                 monkeypatch):
    monkeypatch.delenv(frames.READ_AHEAD_ENV, raising=False)
    # frames_per_block=50: 2 tasks, so at most 2 at once whatever the threads
    for cpus, scheduler, workers, depth in ((2, "sync", None, 2), (1, "sync", None, 0),
                                            (4, "threads", 2, 2), (2, "threads", 2, 0),
                                            (3, "threads", 2, 0), (4, "threads", 8, 2),
                                            (3, "threads", 8, 0)):
        monkeypatch.setattr(frames, "_cpus", lambda cpus=cpus: cpus)
        depths.clear()
        config = {"num_workers": workers} if workers else {}
        assert_rmsd_close(_rmsd(adk_h5md_blocked, scheduler, **config), expected_ca,
                          atol=1e-4)
        assert depths == [depth, depth], (cpus, scheduler, workers)


def test_the_tasks_of_a_client_count_per_machine(local_client):
    """Both workers of the 2-process cluster run on this machine: 2 tasks at once, one in
    each process."""
    with dask.config.set(scheduler=local_client):
        by_host = plan._threads_by_host()
        assert list(by_host.values()) == [[1, 1]]
        assert plan._threads_per_host(by_host) == sum(local_client.nthreads().values()) \
            == plan._worker_count(by_host) == 2
        assert plan._threads_per_process(by_host) == 1
    with dask.config.set(scheduler="sync"):
        assert plan._threads_per_host(plan._threads_by_host()) == 1


def test_threads_share_one_process_and_processes_do_not():
    for scheduler, by_host, per_process in (("threads", {"": [8]}, 8),
                                            ("processes", {"": [1] * 8}, 1)):
        with dask.config.set(scheduler=scheduler, num_workers=8):
            assert plan._threads_by_host() == by_host
            assert plan._threads_per_host(by_host) == plan._worker_count(by_host) == 8
            assert plan._threads_per_process(by_host) == per_process


def test_many_threads_of_one_process_read_more_at_a_time_and_not_ahead(
        adk_h5md_blocked, expected_ca, depths, monkeypatch):
    """Past 4 tasks in one process (one GIL), reads grow and none runs ahead."""
    monkeypatch.delenv(frames.READ_AHEAD_ENV, raising=False)
    monkeypatch.setattr(frames, "_cpus", lambda: 64)  # a spare core for every task
    monkeypatch.setattr(plan, "READ_STEP_BYTES", 10 * 3341 * 12)  # one 10-frame chunk
    # 98 frames: tasks of 25 frames are 4 at once, whatever the threads (a chunk at a time,
    # read ahead); 10 tasks of 10 frames on 8 or 16 threads: 8 or 10 at once in one process
    # (2 chunks at a time, none ahead); 20 tasks of 5 frames on 16 threads: 4 chunks
    for workers, fpb, depth, step in ((4, 25, 2, 10), (16, 25, 2, 10), (8, 10, 0, 20),
                                      (16, 10, 0, 20), (16, 5, 0, 40)):
        depths.clear()
        with xr.open_dataset(adk_h5md_blocked, engine="h5md", topology=PSF) as ds, \
                dask.config.set(scheduler="threads", num_workers=workers):
            got = h5mdx.rmsd(ds.position, select="name CA", frames_per_block=fpb)
            graph = dict(got.data.__dask_graph__())
            # a task ends (..., step, host_threads, process_threads, lead, where)
            steps = {task[-5] for task in graph.values()
                     if isinstance(task, tuple) and task and task[0] is blocks._lazy_block}
            assert_rmsd_close(got.values, expected_ca, atol=1e-4)
        assert set(depths) == {depth}, (workers, fpb)
        assert steps == {step}, (workers, fpb)


def test_the_local_schedulers_count_the_cpus_dask_runs(monkeypatch):
    """Without ``num_workers``, dask's pools run ``dask.system.CPU_COUNT`` (the process's
    affinity and cgroup limits); the plan took ``os.cpu_count()``, and under taskset or a
    SLURM job's cgroup cut blocks for CPUs no task ran on."""
    import os

    import dask.system

    monkeypatch.setattr(dask.system, "CPU_COUNT", 3)
    monkeypatch.setattr(os, "cpu_count", lambda: 64)
    with dask.config.set(scheduler="threads", num_workers=None):
        assert plan._threads_by_host() == {"": [3]}
    with dask.config.set(scheduler="processes", num_workers=None):
        assert plan._worker_count(plan._threads_by_host()) == 3
