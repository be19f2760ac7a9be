"""Phase timers that run *inside* a task (a dask block or an MPI rank).

A task wraps its work in :class:`BlockTimer` and its phases in
``timer.phase("io")`` / ``timer.phase("compute")``. When the environment
variable ``H5MDX_TIMING_SPOOL`` names a directory, the timer appends one JSON
line per task to a file of its own process in that directory; otherwise it
costs two ``perf_counter`` calls per phase and writes nothing. A spool directory
makes the records reach the parent from threads and process pools, which share
its file system. On distributed workers (local, dask-mpi or SLURM jobs on other
nodes, which may not see the client's temp dir) the variable is
``memory:<name>``: records stay in the worker process until the client takes
them (:func:`take_records`, through ``client.run``).

Only the standard library is used here: tasks import this module on workers.
"""

from __future__ import annotations

import json
import os
import socket
import sys
import threading
import time
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import FrameType
from typing import Any

__all__ = ["DELAY_ENV", "DELAY_PHASES", "MEMORY_SPOOL", "SPOOL_ENV", "BlockTimer",
           "current_task_key", "injected_delay", "parse_delay", "read_spool", "take_records"]

#: Environment variable naming the spool directory.
SPOOL_ENV = "H5MDX_TIMING_SPOOL"

#: Test hook: ``H5MDX_TIMING_DELAY="<frame_start>:<seconds>[:<phase>]"`` sleeps inside the
#: given phase (default ``io``) of the block starting at that frame (straggler injection).
DELAY_ENV = "H5MDX_TIMING_DELAY"

#: Prefix of a spool kept in the process's memory (``memory:<name>``).
MEMORY_SPOOL = "memory:"

_lock = threading.Lock()
#: Records of memory spools, by name, until taken.
_MEMORY: dict[str, list[dict[str, Any]]] = {}


class BlockTimer:
    """Time the phases of one task and spool the record.

    Parameters
    ----------
    frame_start, frame_stop : int
        The frame range (in the file's frame numbering) the task works on.
    kind : str, optional
        What the task does (e.g. ``"rmsd"``).
    extra : dict, optional
        More fields for the record (e.g. ``{"rank": 3}``).
    """

    def __init__(
        self,
        frame_start: int,
        frame_stop: int,
        kind: str = "task",
        extra: dict[str, Any] | None = None,
    ) -> None:
        self.frame_start = int(frame_start)
        self.frame_stop = int(frame_stop)
        self.kind = kind
        self.extra = dict(extra or {})
        self.phases: dict[str, float] = {}
        self.bytes_read = 0
        self.t_start = 0.0
        self.t_stop = 0.0
        self._p0 = 0.0
        # the injected delay (``DELAY_ENV``), read once: a task times its phases per read
        self._delay = injected_delay(self.frame_start)

    def __enter__(self) -> BlockTimer:
        self.t_start = time.time()
        self._p0 = time.perf_counter()
        return self

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        wall = time.perf_counter() - self._p0
        self.t_stop = self.t_start + wall
        if exc_type is None:
            self._spool(wall)

    @contextmanager
    def phase(self, name: str) -> Iterator[None]:
        """Accumulate the time spent in the ``with`` body under ``name``."""
        t0 = time.perf_counter()
        try:
            yield
            self._inject(name)
        finally:
            self.phases[name] = self.phases.get(name, 0.0) + time.perf_counter() - t0

    def add(self, name: str, seconds: float) -> None:
        """Add ``seconds`` timed elsewhere to phase ``name`` (e.g. by compiled code that
        reads and computes in one call); an injected delay of that phase is slept here."""
        self.phases[name] = self.phases.get(name, 0.0) + seconds + self._inject(name)

    def _inject(self, name: str) -> float:
        """Sleep the delay ``DELAY_ENV`` injects into phase ``name`` of this task, if any,
        once per task (a task that read in several parts slept it at each); the seconds
        slept."""
        if self._delay is None or self._delay[0] != name:
            return 0.0
        seconds, self._delay = self._delay[1], None
        time.sleep(seconds)
        return seconds

    def record(self, wall: float | None = None) -> dict[str, Any]:
        """The record of this task as a plain dict."""
        rec: dict[str, Any] = {
            "kind": self.kind,
            "frame_start": self.frame_start,
            "frame_stop": self.frame_stop,
            "t_start": self.t_start,
            "t_stop": self.t_stop,
            "wall": wall if wall is not None else self.t_stop - self.t_start,
            "bytes_read": int(self.bytes_read),
            "pid": os.getpid(),
            "host": socket.gethostname(),
            "thread": threading.get_ident(),
        }
        key = current_task_key()
        if key is not None:
            rec["task_key"] = key
        for key, value in self.phases.items():
            rec[f"t_{key}"] = value
        job = os.environ.get("SLURM_JOB_ID")
        if job:
            rec["slurm_job_id"] = job
        rec.update(self.extra)
        return rec

    def _spool(self, wall: float) -> None:
        spool = os.environ.get(SPOOL_ENV)
        if not spool:
            return
        if spool.startswith(MEMORY_SPOOL):
            with _lock:
                _MEMORY.setdefault(spool[len(MEMORY_SPOOL):], []).append(self.record(wall))
            return
        line = (json.dumps(self.record(wall)) + "\n").encode("utf-8")
        path = Path(spool) / f"{socket.gethostname()}-{os.getpid()}.jsonl"
        with _lock, open(path, "ab+") as fh:
            # a line cut short before (a full disk) has no newline: this record starts
            # on a line of its own, not joined onto it (both were lost)
            if fh.seek(0, os.SEEK_END) > 0:
                fh.seek(-1, os.SEEK_END)
                if fh.read(1) != b"\n":
                    line = b"\n" + line
            fh.write(line)


def current_task_key() -> str | None:
    """The key of the dask task running in this thread, as ``str(key)``, if known.

    On a ``distributed`` worker the key is in ``dask.context.thread_state``. The
    local (threads, processes, synchronous) schedulers run every task through
    ``dask.local.execute_task(key, ...)``, so the key is read from that frame of
    the call stack. Nothing is imported: outside dask this returns None.

    The stack walk (``sys._getframe``) stays because dask's local schedulers publish the
    running task's key nowhere else (``dask.context.thread_state.key`` is set by
    distributed only).
    """
    ctx = sys.modules.get("dask.context")
    key = getattr(getattr(ctx, "thread_state", None), "key", None)
    if key is not None:
        return str(key)
    if "dask.local" not in sys.modules:
        return None
    frame: FrameType | None = sys._getframe(1)
    for _ in range(64):
        if frame is None:
            break
        if frame.f_code.co_name == "execute_task" and frame.f_globals.get(
            "__name__"
        ) == "dask.local":
            key = frame.f_locals.get("key")
            return None if key is None else str(key)
        frame = frame.f_back
    return None


def injected_delay(frame_start: int) -> tuple[str, float] | None:
    """The delay ``DELAY_ENV`` (``frame:seconds[:phase]``) injects into the task (or MPI
    rank) whose frames start at ``frame_start``.

    Parameters
    ----------
    frame_start : int
        The first frame of the task.

    Returns
    -------
    tuple or None
        ``(phase, seconds)``, or None where the variable is unset or names another frame.
    """
    spec = os.environ.get(DELAY_ENV)
    if not spec:
        return None
    frame, seconds, phase = parse_delay(spec)
    return (phase, seconds) if frame == frame_start else None


#: The phases a delay can be injected into: every task and rank has them.
DELAY_PHASES = ("io", "compute")

#: The longest delay, in seconds (a day): --delay 0:1e308 passed (finite) and ended in a
#: traceback of time.sleep in the task (OverflowError).
MAX_DELAY_S = 86_400


def parse_delay(spec: str, source: str = DELAY_ENV) -> tuple[int, float, str]:
    """``(frame_start, seconds, phase)`` of a ``DELAY_ENV`` value ``frame:seconds[:phase]``.

    Parameters
    ----------
    spec : str
        The value.
    source : str, optional
        Where the value came from, for the error: the variable (default), or the
        command line's option (``"--delay"``).

    Raises
    ------
    ValueError
        Naming ``source`` and the form, where ``spec`` is not of it (a frame that is
        not an integer, negative or no seconds or more than a day, a phase other than
        ``io`` or ``compute``, which would inject nothing).

    Examples
    --------
    >>> parse_delay("40:0.5")
    (40, 0.5, 'io')
    """
    parts = str(spec).split(":")
    try:
        if not 2 <= len(parts) <= 3:
            raise ValueError
        frame, seconds = int(parts[0]), float(parts[1])
        phase = parts[2] if len(parts) == 3 else "io"
        if frame < 0 or not 0 <= seconds <= MAX_DELAY_S or phase not in DELAY_PHASES:
            raise ValueError
    except ValueError:
        raise ValueError(
            f"{source} {spec!r} is not FRAME:SECONDS[:PHASE]: the first frame "
            "of the task to slow (an integer >= 0), the seconds it sleeps (0 to "
            f"{MAX_DELAY_S:,}, a day) and the phase it sleeps in "
            f"({' or '.join(DELAY_PHASES)}, default io)") from None
    return frame, seconds, phase


def take_records(name: str) -> list[dict[str, Any]]:
    """The records this process kept for the memory spool ``name``, forgotten here.

    Parameters
    ----------
    name : str
        The name after ``memory:`` in ``H5MDX_TIMING_SPOOL``.

    Returns
    -------
    list of dict
        One dict per task run in this process since the last take.
    """
    with _lock:
        return _MEMORY.pop(name, [])


def read_spool(directory: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """Read every record spooled in ``directory``.

    Parameters
    ----------
    directory : path-like
        A spool directory (the value that ``H5MDX_TIMING_SPOOL`` had).

    Returns
    -------
    list of dict
        One dict per task, in no particular order. A line that holds no record (cut
        short by a full disk or a worker killed while writing it) is left out, with a
        warning naming the file and the line.
    """
    records: list[dict[str, Any]] = []
    for path in sorted(Path(directory).glob("*.jsonl")):
        bad: list[int] = []
        with open(path, encoding="utf-8", errors="replace") as fh:
            for number, line in enumerate(fh, 1):
                if not line.strip():
                    continue
                try:
                    record = json.loads(line)
                except ValueError:
                    record = None
                if isinstance(record, dict):
                    records.append(record)
                else:
                    bad.append(number)
        if bad:  # a line cut short (a full disk, a worker killed while writing it)
            warnings.warn(f"{path}: {len(bad)} spooled timing record(s) unreadable (line "
                          f"{', '.join(map(str, bad[:3]))}{', ...' if len(bad) > 3 else ''}"
                          ": cut short?), left out; the other records are read",
                          UserWarning, stacklevel=2)
    return records
