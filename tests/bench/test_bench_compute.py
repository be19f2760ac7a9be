"""``benchmarks/bench_compute.py`` splits a real RMSD compute on ``distributed`` into parts
that add up to the whole."""

from __future__ import annotations

import pytest


def test_a_compute_splits_into_parts_that_add_up(bench_compute, tmp_path):
    distributed = pytest.importorskip("distributed")
    from h5mdx.parallel import local_cluster

    bs = bench_compute.bs
    path = bs.build(str(tmp_path / "scale-contig-300.h5md"), 300, "contig")
    with local_cluster(1) as cluster, distributed.Client(cluster,
                                                         set_as_default=False) as client:
        bench_compute.compute_parts(client, path, bs.ca_indices())  # the workers warm up
        parts = bench_compute.compute_parts(client, path, None)
    assert all(parts[k] >= 0 for k in bench_compute.PARTS), parts
    assert sum(parts[k] for k in bench_compute.PARTS) == pytest.approx(parts["total"], abs=1e-6)
    assert parts["n_tasks"] >= 1
    assert 0 <= parts["idle"] < 1
    assert 0 < parts["empty"] < parts["total"] * 10, parts
    assert 0 < parts["empty1"] < parts["total"] * 10, parts
    assert 0 < parts["gathered"] < parts["total"] * 10, parts


def test_an_empty_graph_has_the_blocks_asked_for(bench_compute):
    distributed = pytest.importorskip("distributed")
    from h5mdx.parallel import local_cluster

    with local_cluster(1) as cluster, distributed.Client(cluster,
                                                         set_as_default=False) as client:
        ms = bench_compute.empty_compute(client, (3, 5, 2))
        gathered = bench_compute.empty_compute(client, (3, 5, 2), gather=True)
        # the scheduler ran three tasks of a graph named empty-*, not of the one before
        names = {str(k) for k in client.run_on_scheduler(
            lambda dask_scheduler: [t[0] for t in dask_scheduler.transition_log
                                    if str(t[0]).startswith("('empty-")])}
    assert ms > 0 and gathered > 0
    assert len(names) == 6, names  # three tasks each time, under a new name


def test_the_report_has_a_row_per_worker_count_and_selection(bench_compute):
    row = {"workers": 2, "selection": "ca", "floor_ms": 95.5, "total": 144.5,
           "vs_floor": 0.69, "open": 10.2, "client": 6.6, "tasks": 107.4, "finalize": 8.1,
           "result": 10.9, "idle": 0.19, "n_tasks": 8, "empty": 30.2, "empty1": 20.4,
           "gathered": 22.5, "bound": 0.82}
    before = {k: v for k, v in row.items()
              if k not in ("empty", "empty1", "gathered", "bound")}  # older results
    results = {"frames": 30000, "layout": "contig", "repeats": 3, "cores": 2, "versions": {},
               "rows": [row, {**before, "workers": 1}]}
    text = bench_compute.markdown(results)
    assert ("| 2 | ca | 95.5 | 144.5 | 0.69 | 10.2 | 6.6 | 107.4 | 8.1 | 10.9 | 19% | 8 "
            "| 30.2 | 20.4 | 22.5 | 0.82 |") in text
    assert ("| 1 | ca | 95.5 | 144.5 | 0.69 | 10.2 | 6.6 | 107.4 | 8.1 | 10.9 | 19% | 8 "
            "| - | - | - | - |") in text
    lines = text.splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith("| N |"))
    header, rule, *rows = lines[at:]
    assert header.count("|") == rule.count("|") == rows[0].count("|") == rows[1].count("|")
