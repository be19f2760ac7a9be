"""h5mdx.engine.frames.read_ahead: a task's next reads run in a reader thread."""

from __future__ import annotations

import multiprocessing
import threading
import time

import numpy as np
import pytest
import xarray as xr

from h5mdx.engine import frames
from h5mdx.engine.frames import frame_reader, read_ahead, read_ahead_depth
from h5mdx.errors import H5MDReadError


def _spans(n: int, step: int) -> list[tuple[int, int]]:
    return [(a, min(n, a + step)) for a in range(0, n, step)]


@pytest.mark.parametrize("depth", [0, 1, 2, 3])
def test_each_span_arrives_whole_and_stays_until_the_next_is_asked_for(
        adk_h5md, adk_positions, depth):
    """The frames of a span are not read over while the caller holds them: the reader
    thread has time to read every span in flight before the caller looks again. A ring
    of ``depth`` buffers instead of ``depth + 1`` fails here."""
    with xr.open_dataset(adk_h5md, engine="h5md") as ds:
        read = frame_reader(ds.position.variable).bind()
        spans = _spans(98, 7)
        for _ in range(2):  # the second pass reuses the thread's buffers
            for (a, b), data in zip(spans, read_ahead(read, spans, depth), strict=True):
                first = data.copy()
                time.sleep(0.005)
                np.testing.assert_array_equal(data, adk_positions[a:b])
                np.testing.assert_array_equal(data, first)


def test_reads_run_in_another_thread_ahead_of_the_caller():
    calls: list[tuple[int, int, str]] = []
    done = threading.Event()

    def read(a: int, b: int) -> np.ndarray:
        calls.append((a, b, threading.current_thread().name))
        if a == 20:
            done.set()
        return np.full((b - a, 2, 3), a, dtype=np.float32)

    spans = _spans(30, 10)
    frames_read = read_ahead(read, spans, 2)
    first = next(frames_read)
    assert done.wait(5)  # spans 1 and 2 are read while the caller holds span 0
    assert first[0, 0, 0] == 0
    assert [c[:2] for c in calls] == spans
    assert all(name.startswith("h5mdx-read-ahead") for *_, name in calls)
    assert [d[0, 0, 0] for d in frames_read] == [10, 20]
    # depth 0: every read in the caller's thread, one by one
    calls.clear()
    assert [d[0, 0, 0] for d in read_ahead(read, spans, 0)] == [0, 10, 20]
    assert {name for *_, name in calls} == {threading.current_thread().name}


def test_an_error_reaches_the_caller_at_its_span_and_nothing_stays_in_flight():
    started: list[int] = []

    def read(a: int, b: int) -> np.ndarray:
        started.append(a)
        if a == 10:
            raise H5MDReadError("t.h5md", "/particles/all/position/value", "bad chunk")
        time.sleep(0.02)
        return np.zeros((b - a, 1, 3))

    got = []
    with pytest.raises(H5MDReadError, match="bad chunk"):
        for data in read_ahead(read, _spans(40, 10), 2):
            got.append(len(data))
    assert got == [10]
    # span 20 was in flight (read, or cancelled before it began); 30 never asked for
    assert started in ([0, 10], [0, 10, 20])
    seen = list(started)
    time.sleep(0.1)
    assert started == seen  # no read runs after the error reached the caller
    # the thread reads ahead again afterwards (nothing left marked busy)
    assert frames._READER.busy is False
    assert [len(d) for d in read_ahead(lambda a, b: np.zeros(b - a), _spans(4, 2), 2)] \
        == [2, 2]


def test_a_caller_that_stops_early_waits_for_the_reads_in_flight():
    finished: list[int] = []

    def read(a: int, b: int) -> np.ndarray:
        time.sleep(0.02)
        finished.append(a)
        return np.zeros(b - a)

    gen = read_ahead(read, _spans(100, 10), 3)
    next(gen)
    gen.close()
    assert finished == [0, 10, 20, 30]  # the three in flight ended before close returned
    time.sleep(0.1)
    assert finished == [0, 10, 20, 30]


def test_the_depth_a_task_reads_ahead(monkeypatch):
    monkeypatch.delenv(frames.READ_AHEAD_ENV, raising=False)
    monkeypatch.setattr(frames, "_cpus", lambda: 16)
    assert read_ahead_depth(1) == read_ahead_depth(4) == frames.READ_AHEAD == 2
    assert read_ahead_depth(8, 1) == read_ahead_depth(8, 4) == 2  # 8 processes of 1-4 tasks
    assert read_ahead_depth(9, 1) == read_ahead_depth(16, 1) == 0  # no spare core for each
    # more than 4 tasks share a GIL: a reader thread each would double the queue for it
    assert read_ahead_depth(5, 5) == read_ahead_depth(8, 8) == read_ahead_depth(8) == 0
    assert read_ahead_depth(None) == read_ahead_depth(0) == 0  # unknown: none
    monkeypatch.setattr(frames, "_cpus", lambda: 1)
    assert read_ahead_depth(1) == 0
    monkeypatch.setenv(frames.READ_AHEAD_ENV, "3")
    assert read_ahead_depth(16) == read_ahead_depth(None) == 3
    monkeypatch.setenv(frames.READ_AHEAD_ENV, "0")
    assert read_ahead_depth(1) == 0
    monkeypatch.setenv(frames.READ_AHEAD_ENV, "two")
    with pytest.raises(ValueError, match="H5MDX_READ_AHEAD must be a whole number"):
        read_ahead_depth(1)


def _read_ahead_in_child(queue) -> None:
    spans = _spans(9, 3)
    queue.put([int(d[0]) for d in read_ahead(lambda a, b: np.arange(a, b), spans, 2)])


def test_a_forked_process_gets_a_reader_thread_of_its_own():
    """The processes scheduler forks: the child inherits the executor without its thread."""
    assert [int(d[0]) for d in read_ahead(lambda a, b: np.arange(a, b), _spans(9, 3), 2)] \
        == [0, 3, 6]
    ctx = multiprocessing.get_context("fork")
    queue = ctx.Queue()
    child = ctx.Process(target=_read_ahead_in_child, args=(queue,))
    child.start()
    try:
        assert queue.get(timeout=20) == [0, 3, 6]
    finally:
        child.join(10)
        if child.is_alive():
            child.kill()
    assert child.exitcode == 0
