"""The benchmark scripts under ``benchmarks/`` imported as modules for their tests."""

from __future__ import annotations

import importlib
import os
import sys

import pytest

BENCHMARKS = os.path.join(os.path.dirname(__file__), "..", "..", "benchmarks")


def _benchmark(name: str):
    sys.path.insert(0, BENCHMARKS)  # bench_threads imports bench_scale beside it
    try:
        yield importlib.import_module(name)
    finally:
        sys.path.remove(BENCHMARKS)


def _fixture(name: str, needs_numba: bool = False):
    """A module-scoped fixture named ``name``: that benchmark script, imported."""

    @pytest.fixture(scope="module", name=name)
    def benchmark():
        if needs_numba:
            pytest.importorskip("numba")
        yield from _benchmark(name)

    return benchmark


bench_scale = _fixture("bench_scale")
bench_blocks = _fixture("bench_blocks")
bench_everyday = _fixture("bench_everyday")
bench_parts = _fixture("bench_parts")
bench_threads = _fixture("bench_threads", needs_numba=True)
bench_fused = _fixture("bench_fused", needs_numba=True)
bench_mapped = _fixture("bench_mapped", needs_numba=True)
bench_kernel = _fixture("bench_kernel", needs_numba=True)
bench_tasks = _fixture("bench_tasks", needs_numba=True)
bench_compute = _fixture("bench_compute", needs_numba=True)
bench_open_chunks = _fixture("bench_open_chunks", needs_numba=True)
bench_cli = _fixture("bench_cli")
bench_open_tree = _fixture("bench_open_tree")
bench_layouts = _fixture("bench_layouts")
bench_open = _fixture("bench_open")
