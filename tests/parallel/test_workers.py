"""Workers: kernel warm-up at cluster start, and clean output when results are recomputed."""

from __future__ import annotations

import logging

import numpy as np
import pytest
import xarray as xr

import h5mdx
from h5mdx.analysis.qcp import has_numba, warm_up
from h5mdx.testing import write_h5md

distributed = pytest.importorskip("distributed")


@pytest.fixture(scope="module")
def traj(tmp_path_factory):
    rng = np.random.default_rng(3)
    base = rng.normal(scale=10.0, size=(300, 3))
    value = (base[None] + rng.normal(scale=0.3, size=(400, 300, 3))).astype(np.float32)
    path = tmp_path_factory.mktemp("w") / "w.h5md"
    return write_h5md(path, {"all": {"position": {"value": value, "chunks": (25, 300, 3),
                                                  "step": np.arange(400)}}}), value


def test_warm_up_is_done_once_per_process():
    warm_up()
    assert warm_up() == 0.0


@pytest.mark.skipif(not has_numba(), reason="the numpy kernel needs no warm-up")
def test_cluster_workers_load_the_kernel_before_any_task(local_client):
    from h5mdx.parallel.workers import warm_up_seconds, warm_up_workers

    first = warm_up_workers(local_client)
    assert len(first) == len(local_client.scheduler_info()["workers"])
    # loading happened in the plugin's setup on each worker: registering again adds nothing
    again = warm_up_workers(local_client)
    assert again == pytest.approx(first, abs=1e-3)
    assert warm_up_seconds(local_client) == again


def test_a_fresh_worker_imports_what_an_rmsd_task_needs_in_its_warm_up():
    """Unpickling the first RMSD task imports dask.array and the engine (~0.4 s on the
    2-core VM): part of the warm-up, not of the first task."""
    import sys

    from h5mdx.parallel import local_cluster
    from h5mdx.parallel.workers import TASK_MODULES, warm_up_workers

    def loaded() -> list[bool]:
        return [name in sys.modules for name in (*TASK_MODULES, "dask.array")]

    with local_cluster(1) as cluster, distributed.Client(cluster,
                                                         set_as_default=False) as client:
        assert list(client.run(loaded).values()) == [[False, False]]  # a fresh worker
        seconds = warm_up_workers(client)
        assert list(client.run(loaded).values()) == [[True, True]]
    assert all(s > 0 for s in seconds.values())


def test_no_run_spec_noise_when_recomputing_or_reopening(traj, local_client, caplog):
    """Twice the same result, and again after reopening the file: no scheduler warnings."""
    path, value = traj
    sel = np.arange(0, 300, 7)
    results = []
    with caplog.at_level(logging.WARNING, logger="distributed.scheduler"):
        for chunks in (None, {}):
            for _ in range(2):  # reopen
                with xr.open_dataset(path, engine="h5md", chunks=chunks) as ds:
                    for _ in range(2):  # recompute
                        lazy = h5mdx.rmsd(ds.position, select=sel)
                        results.append(local_client.compute(lazy).result().values)
    noise = [r.getMessage() for r in caplog.records if "run_spec" in r.getMessage()]
    assert not noise, noise[0]
    for r in results[1:]:
        np.testing.assert_array_equal(r, results[0])
    want = h5mdx.rmsd_qcp(value[0, sel], value[:, sel], kernel="numpy")
    np.testing.assert_allclose(results[0], want, atol=1e-5)
