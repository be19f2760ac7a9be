"""Ctrl-C while h5mdx starts worker processes: one clean interrupt, no tracebacks.

A terminal sends Ctrl-C (SIGINT) to every process of the foreground group, worker
processes included. A worker still importing its modules then prints a
``KeyboardInterrupt`` traceback of its own, and a ``distributed`` cluster interrupted
halfway through its start is left to an exit handler that fails on its half-started
workers. :func:`interrupts_deferred` holds SIGINT while processes start: they are born
with it blocked (a thread's signal mask is inherited by the threads and processes it
starts), so only this process sees Ctrl-C, and it stops them as it ends. An interrupt
pressed during the block is raised as :class:`KeyboardInterrupt` when the block ends,
where the caller can close what it started.

Only the standard library is imported.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator
from typing import Any

__all__ = ["interrupts_deferred"]


@contextlib.contextmanager
def interrupts_deferred() -> Iterator[None]:
    """Hold Ctrl-C for the block: processes and threads started in it never receive it.

    SIGINT is blocked in the calling thread for the block, so what it starts inherits the
    blocked signal for good; in the main thread, with Python's own handler in place, a
    SIGINT that reaches another thread meanwhile is recorded rather than raised in the
    middle of the block. A Ctrl-C pressed during the block is raised as
    :class:`KeyboardInterrupt` as it ends (an exception of the block's own wins).
    Where signal masks do not exist (Windows) it holds nothing.
    """
    received: list[int] = []
    previous: Any = None
    if threading.current_thread() is threading.main_thread() \
            and signal.getsignal(signal.SIGINT) is signal.default_int_handler:
        previous = signal.signal(signal.SIGINT, lambda signum, frame: received.append(signum))
    mask = getattr(signal, "pthread_sigmask", None)
    if mask is not None:
        # multiprocessing's resource tracker, started by the first process or queue of
        # the block, would unblock SIGINT in the thread that started it: start it first
        from multiprocessing import resource_tracker

        resource_tracker.ensure_running()
    old_mask = mask(signal.SIG_BLOCK, {signal.SIGINT}) if mask is not None else None
    try:
        yield
    finally:
        if mask is not None:
            mask(signal.SIG_SETMASK, old_mask)  # a pending SIGINT is handled here
        if previous is not None:
            signal.signal(signal.SIGINT, previous)
    if received:
        raise KeyboardInterrupt
