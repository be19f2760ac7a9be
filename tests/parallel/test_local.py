"""The one local cluster (h5mdx.parallel.local_cluster): no dashboard and no port 8787 by default."""

from __future__ import annotations

import os
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
    assert remote["MALLOC_TRIM_THRESHOLD_"] is None  # h5mdx's workers start without it
    assert remote["OMP_NUM_THREADS"] == "3" and remote["PYTHONHASHSEED"]
    # asked for, the workers get distributed's value; this process still keeps its own
    trim = str(dask.config.get("distributed.nanny.pre-spawn-environ")["MALLOC_TRIM_THRESHOLD_"])
    with local_cluster(1, trim_memory=True) as cluster, \
            distributed.Client(cluster) as client:
        remote = next(iter(client.run(_environ, names).values()))
    assert remote["MALLOC_TRIM_THRESHOLD_"] == trim
    assert _environ(names)["MALLOC_TRIM_THRESHOLD_"] is None


def test_a_users_own_malloc_trim_reaches_the_workers(monkeypatch):
    """Set in this process's environment (the user's shell), the variable is the user's
    choice: the workers start with it."""
    import distributed

    monkeypatch.setenv("MALLOC_TRIM_THRESHOLD_", "131072")
    with local_cluster(1) as cluster, distributed.Client(cluster) as client:
        remote = next(iter(client.run(_environ, ["MALLOC_TRIM_THRESHOLD_"]).values()))
    assert remote == {"MALLOC_TRIM_THRESHOLD_": "131072"}


def _wait_until_restored(names, timeout=60.0):
    """While a nanny starts a worker this process has its variables: wait for the end.

    ``Client.restart`` can return with a nanny still starting a worker: distributed's exit
    callback of the old process may start one more after the restart's own.
    """
    import time

    deadline = time.monotonic() + timeout
    while _environ(names) != dict.fromkeys(names):
        assert time.monotonic() < deadline, f"still set after {timeout} s: {_environ(names)}"
        time.sleep(0.05)


async def _die() -> None:
    import os

    os._exit(1)


def test_a_restarted_worker_leaves_this_process_its_environment_too(monkeypatch):
    import time

    import distributed

    from h5mdx.parallel.local import _nanny_environ_names

    names = _nanny_environ_names()
    for name in names:
        monkeypatch.delenv(name, raising=False)
    with local_cluster(2) as cluster, distributed.Client(cluster) as client:
        first = set(client.run(_environ, names))
        client.restart()  # every nanny starts a new worker process
        client.wait_for_workers(2)
        _wait_until_restored(names)
        remote = list(client.run(_environ, names).values())
        assert not first & set(client.run(_environ, names))  # new workers, new addresses
        assert all(env["PYTHONHASHSEED"] and env["MALLOC_TRIM_THRESHOLD_"] is None
                   for env in remote)  # restarted workers start as the first ones did
        # a worker that dies is started again by its nanny: the same, without a restart
        victim = next(iter(client.scheduler_info()["workers"]))
        client.run(_die, workers=[victim], wait=False)
        deadline = time.monotonic() + 60
        while victim in client.scheduler_info()["workers"] or len(
            client.scheduler_info()["workers"]
        ) < 2:
            assert time.monotonic() < deadline, "the nanny did not start a new worker"
            time.sleep(0.1)
        _wait_until_restored(names)
    assert _environ(names) == dict.fromkeys(names)


def test_overlapping_starts_restore_what_was_there_before_the_first(monkeypatch):
    import os

    from h5mdx.parallel.local import _environ_restored

    monkeypatch.setenv("H5MDX_TEST_VAR", "user")
    outer = _environ_restored(["H5MDX_TEST_VAR"])
    inner = _environ_restored(["H5MDX_TEST_VAR"])
    outer.__enter__()
    os.environ["H5MDX_TEST_VAR"] = "nanny"
    inner.__enter__()  # a second start saves nothing: the first one's copy stands
    outer.__exit__(None, None, None)
    assert os.environ["H5MDX_TEST_VAR"] == "nanny"  # one start is still under way
    inner.__exit__(None, None, None)
    assert os.environ["H5MDX_TEST_VAR"] == "user"


def _profiling(dask_worker) -> tuple[bool, bool]:
    import dask

    return ("profile" in dask_worker.periodic_callbacks,
            bool(dask.config.get("distributed.worker.profile.enabled")))


@pytest.mark.parametrize("dashboard", [False, True])
def test_workers_sample_their_stacks_only_for_a_dashboard(dashboard):
    """The statistical profiler (every 10 ms) runs only where the dashboard can show it;
    a restarted worker gets the same config, and this process's config is untouched."""
    import dask
    import distributed

    if dashboard:
        pytest.importorskip("bokeh")
    with local_cluster(1, dashboard=dashboard) as cluster, \
            distributed.Client(cluster) as client:
        assert set(client.run(_profiling).values()) == {(dashboard, dashboard)}
        client.restart()
        assert set(client.run(_profiling).values()) == {(dashboard, dashboard)}
    assert dask.config.get("distributed.worker.profile.enabled") is True


def test_own_environ_is_the_value_from_before_a_start_under_way(monkeypatch):
    """While a nanny starts a worker it may have set the variable in this process; a
    nanny made then asks for this process's own value, not that one."""
    import os

    from h5mdx.parallel.local import MALLOC_TRIM, _environ_restored, _own_environ

    monkeypatch.delenv(MALLOC_TRIM, raising=False)
    with _environ_restored([MALLOC_TRIM]):
        os.environ[MALLOC_TRIM] = "65536"  # what a starting nanny sets
        assert _own_environ(MALLOC_TRIM) is None
    assert _own_environ(MALLOC_TRIM) is None
    monkeypatch.setenv(MALLOC_TRIM, "131072")  # the user's own
    with _environ_restored([MALLOC_TRIM]):
        os.environ[MALLOC_TRIM] = "65536"
        assert _own_environ(MALLOC_TRIM) == "131072"
    assert _own_environ(MALLOC_TRIM) == "131072"


# ------------------------------------------------------------------------------ Ctrl-C
_CTRL_C = r"""
import os, signal, sys, threading, time
from h5mdx.parallel import local_cluster

def blocked(pid):
    with open(f"/proc/{pid}/status") as fh:
        mask = next(line for line in fh if line.startswith("SigBlk:")).split()[1]
    return bool(int(mask, 16) & (1 << (signal.SIGINT - 1)))

if __name__ == "__main__":
    if sys.argv[1] == "mask":
        from distributed import Client
        with local_cluster(2) as cluster, Client(cluster) as client:
            workers = list(client.run(os.getpid).values())
            print("workers", all(blocked(p) for p in workers), len(workers))
            print("main", blocked(os.getpid()))
    else:  # Ctrl-C to the whole process group while the workers start (a terminal's)
        threading.Timer(float(sys.argv[2]), os.killpg, (os.getpgrp(), signal.SIGINT)).start()
        try:
            with local_cluster(2):
                time.sleep(30)
        except KeyboardInterrupt:
            print("interrupted")
"""


def _ctrl_c(tmp_path, *args):
    import subprocess
    import sys

    script = tmp_path / "ctrl_c.py"
    script.write_text(_CTRL_C)
    return subprocess.run([sys.executable, str(script), *args], capture_output=True,
                          text=True, timeout=120, start_new_session=True)


@pytest.mark.skipif(not os.path.exists("/proc/self/status"), reason="needs Linux's /proc")
def test_worker_processes_are_born_deaf_to_ctrl_c(tmp_path):
    """A terminal sends Ctrl-C to every process of the group: the workers had printed a
    KeyboardInterrupt traceback each (those still importing), and a cluster interrupted in
    its start failed in an exit handler. The workers now start with SIGINT blocked (and
    multiprocessing's resource tracker, which unblocks it in the thread that starts it,
    first); this process keeps it."""
    done = _ctrl_c(tmp_path, "mask")
    assert done.returncode == 0, done.stderr
    assert "workers True 2" in done.stdout and "main False" in done.stdout


@pytest.mark.skipif(not hasattr(os, "killpg"), reason="needs process groups")
@pytest.mark.parametrize("after", [0.3, 1.5])
def test_ctrl_c_while_workers_start_is_one_clean_keyboard_interrupt(tmp_path, after):
    """Ctrl-C to the whole group while the cluster starts (its workers importing, or up):
    one KeyboardInterrupt in this process, with the cluster closed; no traceback from a
    worker or from distributed's exit handler."""
    done = _ctrl_c(tmp_path, "interrupt", str(after))
    assert done.stdout.strip() == "interrupted", (done.stdout, done.stderr)
    assert "Traceback" not in done.stderr and "Error" not in done.stderr, done.stderr
