"""``h5mdx bench``'s option values refused before the grid runs, as usage errors (exit 2)."""

from __future__ import annotations

import pytest

from h5mdx.cli import main
from infra import random_trajectory


@pytest.fixture(scope="module")
def small(tmp_path_factory):
    return random_trajectory(tmp_path_factory.mktemp("bench_options") / "t.h5md", 12, 5, 4, 7)


def test_more_workers_than_cpus_are_refused(small, tmp_path, capsys, monkeypatch):
    """--workers 1,1000 on two CPUs started 1,000 worker processes (here 3 on 2); as h5mdx example, the
    bench refuses more workers than the CPUs this process may use, before the grid."""
    from h5mdx import _machine

    monkeypatch.setattr(_machine, "usable_cpus", lambda: 2)
    out = tmp_path / "b"
    assert main(["bench", small, "--workers", "1,3", "--scheduler", "threads", "--repeats",
                 "1", "--blocks-per-worker", "1", "--out", str(out), "--no-progress"]) == 2
    captured = capsys.readouterr()
    assert captured.err == ("h5mdx bench: --workers 3 is more than the 2 CPUs this "
                            "process may use: the bench times worker processes (and MPI "
                            "ranks) of this machine, so give at most 2\n")
    assert captured.out == "" and not out.exists()
