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
