"""``benchmarks/bench_scale.py --read-step-kib`` sets the size of each read from Python for
the whole run and records it with the results; ``--fused-kib`` the fused read's, on threads."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _run(tmp_path: Path, *extra: str) -> dict:
    env = {**os.environ, "H5MDX_BENCH_RESULTS": str(tmp_path / "results")}
    subprocess.run(
        [sys.executable, "benchmarks/bench_scale.py", "--frames", "300", "--layouts", "c100",
         "--workers", "1", "--schedulers", "threads", "--opens", "lazy", "--selections", "ca",
         "--repeats", "1", "--rss-frames", "0", "--grid-only", "--data", str(tmp_path),
         "--tag=-t", *extra],
        cwd=ROOT, env=env, check=True, capture_output=True, timeout=300)
    return json.loads((tmp_path / "results" / "scale-t.json").read_text())


def test_read_step_is_set_for_the_run_and_recorded(tmp_path):
    results = _run(tmp_path, "--read-step-kib", "512")
    assert results["read_step_bytes"] == 512 * 1024
    text = (tmp_path / "results" / "scale-t.md").read_text()
    assert "reads its next ~0.5 MiB" in text
    assert results["layouts"]["c100"]  # it ran


def test_without_the_option_the_library_default_is_recorded(tmp_path):
    from h5mdx.engine.chunking import READ_STEP_BYTES

    assert _run(tmp_path)["read_step_bytes"] == READ_STEP_BYTES


def test_a_read_step_below_one_kib_is_refused(tmp_path):
    proc = subprocess.run(
        [sys.executable, "benchmarks/bench_scale.py", "--read-step-kib", "0",
         "--data", str(tmp_path)],
        cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    assert "--read-step-kib must be at least 1" in proc.stderr


def test_the_fused_step_is_set_for_a_threads_run_and_recorded(tmp_path):
    results = _run(tmp_path, "--fused-kib", "256")
    assert results["fused_read_bytes"] == 256 * 1024
    text = (tmp_path / "results" / "scale-t.md").read_text()
    assert "reads its frames 0.25 MiB at a time" in text


def test_a_fused_step_is_refused_where_worker_processes_would_not_see_it(tmp_path):
    proc = subprocess.run(
        [sys.executable, "benchmarks/bench_scale.py", "--fused-kib", "256",
         "--schedulers", "threads,distributed", "--data", str(tmp_path)],
        cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    assert "--fused-kib needs --schedulers threads" in proc.stderr
