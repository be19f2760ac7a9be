"""``benchmarks/device.sh run`` leaves each finished benchmark's results in one archive under
``$OUT`` (the lent machine's tool brings back at most 8 files a call)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
def test_each_benchmark_run_packs_its_results_into_one_archive(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    env = {**os.environ, "PYTHON": sys.executable, "OUT": str(out),
           "H5MDX_BENCH_DATA": str(tmp_path / "data")}
    for tag in ("-a", "-b"):
        subprocess.run(
            ["bash", "benchmarks/device.sh", "run", "bench_tasks", "--workers", "1",
             "--tasks", "2", "--ms", "1", "--schedulers", "threads", "--repeats", "1",
             f"--tag={tag}"],
            cwd=ROOT, env=env, check=True, capture_output=True, timeout=300)
    assert sorted(p.name for p in out.iterdir()) == [
        "results-bench_tasks-0.tgz", "results-bench_tasks-1.tgz"]
    for k, tag in enumerate(("-a", "-b")):
        with tarfile.open(out / f"results-bench_tasks-{k}.tgz") as tar:
            names = sorted(tar.getnames())
            assert names == ["results", f"results/tasks{tag}.json", f"results/tasks{tag}.md"]
            data = json.load(tar.extractfile(f"results/tasks{tag}.json"))
        assert data["tasks"] == 2
        [row] = data["rows"]
        assert (row["scheduler"], row["workers"]) == ("threads", 1)
        assert row["many_tasks_s"] > 0 and row["one_task_s"] > 0
    # nothing written into the checkout's own results
    assert not list((ROOT / "benchmarks" / "results").glob("tasks-[ab].*"))


def _next(env_extra):
    env = {**os.environ, "NEXT_DRY": "1", **env_extra}
    out = subprocess.run(["bash", "benchmarks/device.sh", "next"], cwd=ROOT, env=env,
                         check=True, capture_output=True, text=True, timeout=60).stdout
    return [line.split(": ", 2)[1:] for line in out.splitlines()
            if line.startswith("==> device.sh next: ")]


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
def test_next_lists_the_runs_still_to_do_and_each_takes_its_options():
    """``device.sh next`` runs every step in order (``NEXT_ONLY`` picks some); each step's
    benchmark exists and has every option the step gives it."""
    steps = _next({})
    assert [name for name, _ in steps] == ["kernel", "kernel512", "compute100k",
                                           "mapped-real", "mapped-real8", "fused256",
                                           "fused1024", "tasks", "compressed"]
    shared = (ROOT / "benchmarks" / "bench_scale.py").read_text()
    for _name, args in steps:
        script, *options = args.split()
        source = (ROOT / "benchmarks" / f"{script}.py").read_text()
        for opt in (o.split("=")[0] for o in options if o.startswith("--")):
            assert f'"{opt}"' in source or f'"{opt}"' in shared, (script, opt)
    assert [name for name, _ in _next({"NEXT_ONLY": "tasks,mapped-real"})] == ["mapped-real",
                                                                              "tasks"]


FAKE_PYTHON = r"""#!/usr/bin/env bash
# a Python without dask: "import dask" works only with the installed .site on PYTHONPATH
echo "$*" >> "$CALLS"
case "$1 $2" in
"-c import dask, distributed, h5mdx") [[ ":${PYTHONPATH:-}:" == *"/.site:"* ]] ;;
"-m pip") mkdir -p "${@: -2:1}" ;;  # pip install ... --target DIR WHEEL: DIR made
"- .whl") ls .whl/*.whl ;;  # the wheels to install: all of them
*) exit 0 ;;  # the cpu line, the benchmark
esac
"""


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
def test_runs_install_the_wheels_once_and_again_when_they_change(tmp_path):
    """Each step of ``device.sh next`` is a ``run`` of its own: the wheels go into ``.site``
    once, later runs reuse it, and other wheels (h5mdx rebuilt) are installed anew."""
    (tmp_path / "benchmarks").mkdir()
    shutil.copy(ROOT / "benchmarks" / "device.sh", tmp_path / "benchmarks")
    (tmp_path / ".whl").mkdir()
    (tmp_path / ".whl" / "h5mdx-0.1.0-py3-none-any.whl").write_bytes(b"one")
    fake = tmp_path / "python"
    fake.write_text(FAKE_PYTHON)
    fake.chmod(0o755)
    calls = tmp_path / "calls"
    env = {**os.environ, "PYTHON": str(fake), "CALLS": str(calls)}
    env.pop("PYTHONPATH", None)

    def installs() -> int:
        subprocess.run(["bash", "benchmarks/device.sh", "run", "bench_x"], cwd=tmp_path,
                       env=env, check=True, capture_output=True, timeout=60)
        return sum(line.startswith("-m pip install") for line in calls.read_text().splitlines())

    assert installs() == 1
    assert installs() == 1  # reused
    (tmp_path / ".whl" / "h5mdx-0.1.0-py3-none-any.whl").write_bytes(b"two")
    assert installs() == 2  # other wheels: installed anew
    assert installs() == 2
