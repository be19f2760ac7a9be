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


@pytest.fixture(scope="module")
def bench_scale():
    yield from _benchmark("bench_scale")


@pytest.fixture(scope="module")
def bench_threads():
    pytest.importorskip("numba")
    yield from _benchmark("bench_threads")


@pytest.fixture(scope="module")
def bench_fused():
    pytest.importorskip("numba")
    yield from _benchmark("bench_fused")


@pytest.fixture(scope="module")
def bench_blocks():
    yield from _benchmark("bench_blocks")


@pytest.fixture(scope="module")
def bench_mapped():
    pytest.importorskip("numba")
    yield from _benchmark("bench_mapped")
