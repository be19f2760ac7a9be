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
    assert [name for name, _ in steps] == ["kernel", "tasks", "contig-low", "compute",
                                           "mapped", "step1024", "step4096", "threads"]
    shared = (ROOT / "benchmarks" / "bench_scale.py").read_text()
    for _name, args in steps:
        script, *options = args.split()
        source = (ROOT / "benchmarks" / f"{script}.py").read_text()
        for opt in (o.split("=")[0] for o in options if o.startswith("--")):
            assert f'"{opt}"' in source or f'"{opt}"' in shared, (script, opt)
    assert [name for name, _ in _next({"NEXT_ONLY": "mapped,kernel"})] == ["kernel", "mapped"]
