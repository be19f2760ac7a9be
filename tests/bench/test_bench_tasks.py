"""``benchmarks/bench_tasks.py`` times graphs built as ``h5mdx.rmsd`` builds its own: the
timed compute runs each task once, and building the graph runs none."""

from __future__ import annotations

import dask
import numpy as np
import pytest


def test_the_graph_runs_each_task_once_and_building_it_none(bench_tasks, monkeypatch):
    calls: list[int] = []
    monkeypatch.setattr(bench_tasks, "_chain", lambda steps: calls.append(steps))
    array = bench_tasks.graph(5, 7)
    # dask's map_blocks without meta= calls the function once to infer it: a task's work
    # timed in every compute (this benchmark did, until 2026-11-26)
    assert calls == []
    assert array.chunks == ((bench_tasks.BLOCK,) * 5,)
    assert len(dict(array.__dask_graph__())) == 5
    with dask.config.set(scheduler="sync"):
        out = array.compute()
    assert calls == [7] * 5
    np.testing.assert_array_equal(out, np.zeros(5 * bench_tasks.BLOCK))


def test_each_graph_has_keys_of_its_own(bench_tasks):
    # the same graph computed twice must run twice, not find its result in a cache
    assert bench_tasks.graph(2, 3).name != bench_tasks.graph(2, 3).name


@pytest.mark.parametrize("saturation", [None, "inf"])
def test_the_report_says_what_a_compute_and_a_task_cost(bench_tasks, saturation):
    row = {"scheduler": "distributed", "workers": 2, "one_task_s": 0.0213,
           "many_tasks_s": 0.3, "per_compute_ms": 1.3, "per_task_ms": 4.25}
    results = {"tasks": 20, "ms": 20.0, "repeats": 3, "saturation": saturation,
               "rows": [row], "cores": 2, "versions": {}}
    text = bench_tasks.markdown(results)
    assert "| distributed | 2 | 21.3 | 300.0 | 1.3 | 4.2 |" in text
    assert ("worker-saturation`: inf" in text) == (saturation == "inf")


def test_a_distributed_compute_splits_into_its_parts(bench_tasks):
    distributed = pytest.importorskip("distributed")
    from h5mdx.parallel import local_cluster

    with local_cluster(1) as cluster, distributed.Client(cluster,
                                                         set_as_default=False) as client:
        phases = bench_tasks.compute_phases(client, repeats=3, pause=0.01)
    assert list(phases) == list(bench_tasks.PHASES)
    # each part is a span between two events of one compute, in order
    assert all(0 < ms < 5_000 for ms in phases.values()), phases


def test_the_report_shows_the_parts_of_a_distributed_compute(bench_tasks):
    phases = dict(zip(bench_tasks.PHASES, (3.0, 1.5, 4.0, 2.5), strict=True))
    row = {"scheduler": "distributed", "workers": 2, "one_task_s": 0.0213,
           "many_tasks_s": 0.3, "per_compute_ms": 1.3, "per_task_ms": 4.25,
           "phases_ms": phases}
    results = {"tasks": 20, "ms": 20.0, "repeats": 3, "rows": [row], "cores": 2,
               "versions": {}}
    assert "| 2 | 3.0 | 1.5 | 4.0 | 2.5 | 11.0 |" in bench_tasks.markdown(results)


def _chain_loaded() -> bool:
    import sys

    return bool(sys.modules["bench_tasks"]._chain.signatures)


def test_every_worker_has_the_benchmarks_function_loaded_before_timing(bench_tasks):
    # else each worker's first task loads it from numba's cache (0.3-1 s): on 16 workers
    # most one-task graphs of the 16-core run of 2026-11-26 ran on such a worker
    pytest.importorskip("distributed")
    bench_scale = __import__("bench_scale")
    with bench_scale.scheduler("distributed", 2, bench_tasks.warm_worker):
        client = dask.config.get("scheduler")
        loaded = client.run(_chain_loaded)
    assert list(loaded.values()) == [True, True]
