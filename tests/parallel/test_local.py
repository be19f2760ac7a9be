"""The one local cluster (h5mdx.parallel.local_cluster): no dashboard and no port 8787 by default."""

from __future__ import annotations

import urllib.error
import urllib.request

import pytest

pytest.importorskip("distributed")  # an optional dependency of h5mdx, not one of its modules

from h5mdx.parallel import local_cluster  # noqa: E402


def _status(port: int, path: str) -> int:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=30) as answer:
            return answer.status
    except urllib.error.HTTPError as err:
        return err.code


@pytest.mark.parametrize("dashboard", [False, True])
def test_http_server_on_a_free_port_dashboard_only_when_asked(dashboard):
    if dashboard:
        pytest.importorskip("bokeh")  # distributed serves its dashboard with bokeh
    with local_cluster(1, dashboard=dashboard, processes=False) as cluster:
        port = cluster.scheduler_info["services"]["dashboard"]
        assert port != 8787
        assert _status(port, "/health") == 200
        assert _status(port, "/status") == (200 if dashboard else 404)


def _environ(names):
    import os

    return {name: os.environ.get(name) for name in names}


def test_this_process_keeps_its_environment_and_the_workers_get_the_nannys(monkeypatch):
    import os

    import dask
    import distributed

    from h5mdx.parallel.local import _nanny_environ_names

    names = _nanny_environ_names()
    assert "MALLOC_TRIM_THRESHOLD_" in names and "PYTHONHASHSEED" in names
    for name in names:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("OMP_NUM_THREADS", "3")  # one the user set: kept as it was
    with local_cluster(1) as cluster, distributed.Client(cluster) as client:
        assert _environ(names) == {name: ("3" if name == "OMP_NUM_THREADS" else None)
                                   for name in names}
        remote = next(iter(client.run(_environ, names).values()))
    assert _environ(names)["MALLOC_TRIM_THRESHOLD_"] is None
    assert os.environ["OMP_NUM_THREADS"] == "3"
    trim = str(dask.config.get("distributed.nanny.pre-spawn-environ")["MALLOC_TRIM_THRESHOLD_"])
    assert remote["MALLOC_TRIM_THRESHOLD_"] == trim  # the workers still start with it
    assert remote["OMP_NUM_THREADS"] == "3" and remote["PYTHONHASHSEED"]
