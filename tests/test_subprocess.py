"""The one subprocess runner (h5mdx._subprocess): bounded, captured, clear errors."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from h5mdx._subprocess import (
    RUN_AS_ROOT_ENV,
    CommandNotFoundError,
    CommandTimeoutError,
    allow_run_as_root,
    run,
)


def test_run_captures_text_and_returns_nonzero_exit():
    proc = run([sys.executable, "-c", "import sys; print('out'); print('err', file=sys.stderr); "
                "sys.exit(3)"], timeout=60)
    assert (proc.returncode, proc.stdout, proc.stderr) == (3, "out\n", "err\n")


def test_run_stdin_env_cwd(tmp_path):
    code = "import os, sys; print(sys.stdin.read(), os.environ['H5MDX_T'], os.getcwd())"
    proc = run([sys.executable, "-c", code], timeout=60, stdin="script",
               env={**os.environ, "H5MDX_T": "v"}, cwd=tmp_path)
    assert proc.stdout.split() == ["script", "v", str(tmp_path)]


def test_run_without_stdin_reads_nothing():
    proc = run([sys.executable, "-c", "import sys; print(repr(sys.stdin.read()))"], timeout=60)
    assert proc.stdout.strip() == "''"


def test_timeout_names_the_command_and_kills_its_children(tmp_path):
    pidfile = tmp_path / "child.pid"
    script = f"sleep 60 & echo $! > {pidfile}; wait"
    t0 = time.monotonic()
    with pytest.raises(CommandTimeoutError) as info:
        run(["bash", "-c", script], timeout=1)
    assert time.monotonic() - t0 < 30
    assert isinstance(info.value, subprocess.TimeoutExpired)
    assert str(info.value).startswith("bash -c ") and "within 1 s" in str(info.value)
    child = int(pidfile.read_text())
    for _ in range(50):  # the grandchild went with the group
        try:
            os.kill(child, 0)
        except ProcessLookupError:
            break
        time.sleep(0.1)
    else:
        pytest.fail(f"the child {child} of the timed-out command is still running")


def test_missing_executable_names_the_command():
    with pytest.raises(CommandNotFoundError, match=r"no-such-h5mdx-tool not found \(running "
                       r"no-such-h5mdx-tool --flag\)") as info:
        run(["no-such-h5mdx-tool", "--flag"], timeout=10)
    assert isinstance(info.value, FileNotFoundError)


def test_missing_cwd_is_not_a_missing_command(tmp_path):
    with pytest.raises(FileNotFoundError) as info:
        run([sys.executable, "-c", "pass"], timeout=10, cwd=tmp_path / "absent")
    assert not isinstance(info.value, CommandNotFoundError)


def test_allow_run_as_root():
    env = allow_run_as_root({"OMPI_ALLOW_RUN_AS_ROOT": "0"}, as_root=True)
    assert env == {"OMPI_ALLOW_RUN_AS_ROOT": "0", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"}
    assert allow_run_as_root({}, as_root=False) == {}
    is_root = hasattr(os, "geteuid") and os.geteuid() == 0
    default = allow_run_as_root({})
    assert (default == RUN_AS_ROOT_ENV) if is_root else default == {}
