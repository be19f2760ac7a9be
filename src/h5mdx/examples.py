"""The main example: a real-size adk trajectory, C-alpha RMSD at the read floor, a report.

What ``h5mdx example`` does, as library calls:

1. :func:`build_adk_trajectory` writes (once; cached by frame count) an H5MD
   file of ``frames`` frames of adenylate kinase (3341 atoms) made from the 98
   frames of MDAnalysisTests' PSF/DCD: frames 0-97 are the DCD's frames
   exactly; the trajectory then runs back and forth through them
   (:func:`source_index`), every later frame moved by a small rigid
   rotation and translation plus Gaussian noise of 0.05 Å, drawn from a
   generator seeded by the frame number, so the file is the same on every
   machine and the RMSD stays meaningful. Layout: chunks of 100 whole frames
   (~3.8 MiB), uncompressed -- the layout that reads fastest in blocks.
2. The RMSD on a local cluster, the read floor (:func:`floor_reader`: plain h5py,
   one slab per worker process, page cache warm) and raw reads of the same bytes
   (``os.preadv``, no HDF5: the ceiling above the floor) are timed in paired rounds,
   each timing all three back to back, so that they see the same spell of a shared
   machine (each round's seconds go to ``rounds.json``); a last RMSD runs with
   per-task timing (:func:`h5mdx.timing.capture`), which the Gantt chart shows.
3. :func:`mdanalysis_sample_rate` times MDAnalysis' ``RMSD`` on the first
   frames of the same file, to extrapolate to all frames.
4. :func:`summary_lines` and :func:`write_report` turn the figures into a few
   lines of text and a small HTML report with plots.
"""

from __future__ import annotations

import contextlib
import html
import json
import math
import os
import platform
import shlex
import shutil
import time
import warnings
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import h5py
import numpy as np

from h5mdx._machine import cpu_description
from h5mdx._signals import interrupts_deferred

__all__ = [
    "DEFAULT_FRAMES",
    "ExampleResult",
    "build_adk_trajectory",
    "floor_reader",
    "machine_description",
    "mdanalysis_sample_rate",
    "plot_rmsd",
    "read_floor",
    "run_example",
    "source_index",
    "summary_lines",
    "timing_split",
    "write_report",
]

#: Default number of frames of the example trajectory (~1.2 GB).
DEFAULT_FRAMES = 30_000

_POSITION = "particles/trajectory/position/value"
_FRAMES_PER_CHUNK = 100
_NOISE = 0.05  # Å, standard deviation of the per-coordinate noise
_MAX_ANGLE = math.radians(10.0)
_MAX_SHIFT = 2.0  # Å
_SEED = 15
_RECIPE = 3  # bump when the construction changes: cached files are rebuilt


def _adk_source() -> tuple[Any, np.ndarray, float, float]:
    """The adk Universe, its 98 frames (float32, Å), first time and dt (ps)."""
    from h5mdx._optional import import_optional

    mda = import_optional("MDAnalysis", "the adk example")
    datafiles = import_optional("MDAnalysisTests.datafiles", "the adk example data")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # DCD/PSF warnings about missing box and dt
        u = mda.Universe(datafiles.PSF, datafiles.DCD)
        frames = np.stack([ts.positions.copy() for ts in u.trajectory]).astype(np.float32)
        t0, dt = float(u.trajectory[0].time), float(u.trajectory.dt)
    return u, frames, t0, dt


def _rotations(rng: np.random.Generator, n: int) -> np.ndarray:
    """``n`` rotation matrices about random axes by angles up to ``_MAX_ANGLE``."""
    axis = rng.standard_normal((n, 3))
    axis /= np.linalg.norm(axis, axis=1, keepdims=True)
    half = 0.5 * rng.uniform(0.0, _MAX_ANGLE, n)
    w, (x, y, z) = np.cos(half), (axis * np.sin(half)[:, None]).T
    return np.stack([
        np.stack([1 - 2 * (y * y + z * z), 2 * (x * y - z * w), 2 * (x * z + y * w)], -1),
        np.stack([2 * (x * y + z * w), 1 - 2 * (x * x + z * z), 2 * (y * z - x * w)], -1),
        np.stack([2 * (x * z - y * w), 2 * (y * z + x * w), 1 - 2 * (x * x + y * y)], -1),
    ], axis=1)


def source_index(frame: Any, n_source: int = 98) -> Any:
    """The source frame behind ``frame``: forward, then backward, then forward ...

    ``0, 1, ..., n-1, n-1, n-2, ..., 0, 0, 1, ...``: consecutive frames are always
    neighbours in the source, so the long trajectory goes back and forth along
    the DCD's transition without jumps.
    """
    k = np.asarray(frame) % (2 * n_source)
    return np.where(k < n_source, k, 2 * n_source - 1 - k)


def perturbed_frames(source: np.ndarray, start: int, stop: int) -> np.ndarray:
    """Frames ``[start, stop)`` of the example trajectory built from ``source``.

    Parameters
    ----------
    source : numpy.ndarray
        The original frames, shape ``(n_source, n_atoms, 3)``.
    start, stop : int
        Frame range.

    Returns
    -------
    numpy.ndarray
        float32 ``(stop - start, n_atoms, 3)``. Frames below ``n_source`` are the
        source frames unchanged; frame ``i`` above is source frame
        ``source_index(i)`` rotated about its centre, shifted and with Gaussian
        noise, from a generator seeded by ``i`` (so any block gives the same frames).
    """
    n_src = len(source)
    out = source[source_index(np.arange(start, stop), n_src)].copy()
    for j, i in enumerate(range(max(start, n_src), stop), start=max(start, n_src) - start):
        rng = np.random.default_rng((_SEED, i))
        frame = out[j].astype(np.float64)
        centre = frame.mean(axis=0)
        rot = _rotations(rng, 1)[0]
        shift = rng.uniform(-_MAX_SHIFT, _MAX_SHIFT, 3)
        noise = rng.standard_normal(frame.shape) * _NOISE
        out[j] = ((frame - centre) @ rot.T + centre + shift + noise).astype(np.float32)
    return out


def _recipe(frames: int) -> str:
    return json.dumps({"recipe": _RECIPE, "frames": frames, "seed": _SEED, "noise": _NOISE,
                       "frames_per_chunk": _FRAMES_PER_CHUNK}, sort_keys=True)


def _cached(path: str, frames: int) -> bool:
    """Whether ``path`` is a complete example file of ``frames`` frames and this recipe."""
    if not os.path.exists(path):
        return False
    try:
        with h5py.File(path, "r") as f:
            return (f.attrs.get("h5mdx_example") == _recipe(frames)
                    and f[_POSITION].shape[0] == frames)
    except (OSError, KeyError):
        return False


def build_adk_trajectory(
    path: str | os.PathLike[str],
    frames: int = DEFAULT_FRAMES,
    *,
    progress: bool = True,
    block: int = 1000,
) -> str:
    """Write the example adk trajectory of ``frames`` frames to H5MD (once; cached).

    Parameters
    ----------
    path : path-like
        The H5MD file. If it already holds this example with ``frames`` frames it
        is reused; otherwise it is (re)built in a temporary file next to it and
        renamed into place when complete.
    frames : int, default 30,000
        Number of frames (at least 98, the frames of the DCD); 30,000 frames of
        3341 atoms are 1.2 GB.
    progress : bool, default True
        Show a progress bar.
    block : int, default 1000
        Frames generated per write (memory: ``block * n_atoms * 12`` bytes).

    Returns
    -------
    str
        ``path``. Its topology is :func:`h5mdx.testing.adk_topology`.

    Raises
    ------
    ValueError
        If ``frames`` is below 98.
    """
    from h5mdx._progress import progress_bar
    from h5mdx.format.writer import ELEMENT_UNITS, ElementSpec, H5MDWriter, Layout
    from h5mdx.layout._atomic import atomic_output
    from h5mdx.layout.convert import _static

    path = os.fspath(path)
    u, source, t0, dt = _adk_source()
    if frames < len(source):
        raise ValueError(f"the example needs at least {len(source)} frames (the DCD's), "
                         f"not {frames}")
    if _cached(path, frames):
        return path
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    n_atoms = source.shape[1]
    spec = ElementSpec("position", (n_atoms, 3), np.float32, ELEMENT_UNITS["position"])
    layout = Layout(frames_per_chunk=_FRAMES_PER_CHUNK)
    desc = f"building {os.path.basename(path)} ({frames:,} frames)"
    first_step = round(t0 / dt) if dt > 0 else 0
    with atomic_output(path, overwrite=True, hdf5=True) as tmp, h5py.File(tmp, "w") as f:
        f.attrs["h5mdx_example"] = _recipe(frames)
        with H5MDWriter(f, [spec], n_frames=frames, layout=layout, static=_static(u.atoms),
                        author="h5mdx example") as writer, \
                progress_bar(frames, desc, progress) as advance:
            for a in range(0, frames, block):
                b = min(frames, a + block)
                idx = np.arange(a, b)
                # steps counted in dt, as the DCD's own (step 1 at 1 ps; adk_example's too)
                writer.extend(idx + first_step, t0 + idx * dt,
                              position=perturbed_frames(source, a, b))
                advance(b - a)
    return path


def _ignore_interrupts() -> None:
    """A reader process leaves Ctrl-C to the example, which stops it (no tracebacks);
    where signal masks exist they are born deaf to it already (h5mdx._signals)."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)


def _ping(_: int) -> int:
    time.sleep(0.05)  # keep the first workers busy so the pool starts all of them
    return os.getpid()


#: The read floor's buffer in a reader process, kept between its reads (see _read_slab).
_SLAB: dict[str, np.ndarray] = {}


def _read_slab(path: str, start: int, stop: int) -> int:
    """Read frames ``[start, stop)`` of the positions with plain h5py; bytes read.

    The fastest way plain h5py streams a dataset: whole chunks of about 4 MiB at a time
    (:func:`h5mdx.engine.chunking.read_step`, the pieces RMSD tasks read) into one buffer
    this process keeps. Each read lands in memory that is mapped and in the CPU cache,
    so what is timed is h5py reading the file. One call into a new array would time the
    kernel handing over a fresh page every 4 KiB as well; on the 2-core VM that made the
    floor anything from 11,000 to 121,000 frames/s for the same file, depending on what
    the machine had done before. One call into a large buffer kept between reads ran
    42,000-187,000 frames/s (``benchmarks/bench_scale.py``; docs/performance.md, "Where
    the time goes").
    """
    from h5mdx.engine.chunking import read_step

    with h5py.File(path, "r") as f:
        d = f[_POSITION]
        frame_bytes = d.dtype.itemsize * math.prod(d.shape[1:])
        step = read_step(frame_bytes, d.chunks[0] if d.chunks else 1)
        buf = _SLAB.get("buffer")
        if buf is None or buf.shape != (step, *d.shape[1:]) or buf.dtype != d.dtype:
            buf = _SLAB["buffer"] = np.empty((step, *d.shape[1:]), dtype=d.dtype)
        for a in range(start, stop, step):
            b = min(stop, a + step)
            d.read_direct(buf, np.s_[a:b], np.s_[0:b - a])
    return (stop - start) * frame_bytes


def _read_spans(path: str, spans: list[tuple[int, int]]) -> int:
    """Read the byte ``spans`` (offset, length) of ``path`` with ``os.preadv`` into one
    buffer this process keeps, no HDF5: what the file system hands over at best."""
    need = max((n for _, n in spans), default=0)
    buf = _SLAB.get("raw")
    if buf is None or buf.size < need:
        buf = _SLAB["raw"] = np.empty(need, dtype=np.uint8)
    fd = os.open(path, os.O_RDONLY)
    try:
        for offset, n in spans:
            os.preadv(fd, [memoryview(buf)[:n]], offset)  # type: ignore[arg-type]
    finally:
        os.close(fd)
    return sum(n for _, n in spans)


def _byte_spans(path: str, slabs: list[tuple[int, int]]) -> list[list[tuple[int, int]]]:
    """Where each slab's frames lie in ``path``: (offset, length) of every chunk of it
    (the example's positions are stored uncompressed), or one run if contiguous."""
    from h5mdx.format.chunk_index import index_all_chunks

    with h5py.File(path, "r") as f:
        d = f[_POSITION]
        frame_bytes = d.dtype.itemsize * math.prod(d.shape[1:])
        if d.chunks is None:
            at = int(d.id.get_offset())
            return [[(at + a * frame_bytes, (b - a) * frame_bytes)] for a, b in slabs]
        n_frames, rows = d.shape[0], d.chunks[0]
        # HDF5's index in one pass (get_chunk_info(i) walks it again for every i: hours
        # for 100,000 one-frame chunks), else chunk by chunk on HDF5 before 1.12.3
        index = index_all_chunks(d)
        if index is None:
            index = {tuple(int(x) for x in c.chunk_offset): (int(c.byte_offset), int(c.size), 0)
                     for c in (d.id.get_chunk_info(i) for i in range(d.id.get_num_chunks()))}
    # chunks of whole frames: the last one holds fewer frames than it stores
    located = sorted((coord[0], at, min(size, (min(n_frames, coord[0] + rows) - coord[0])
                                         * frame_bytes))
                     for coord, (at, size, _mask) in index.items())
    return [[(at, n) for row, at, n in located if a <= row < b] for a, b in slabs]


def _slabs(n_frames: int, chunk: int, workers: int) -> list[tuple[int, int]]:
    """``workers`` contiguous frame ranges, split at chunk boundaries."""
    n_chunks = math.ceil(n_frames / chunk)
    edges = [min(n_frames, chunk * round(k * n_chunks / workers)) for k in range(workers + 1)]
    return [(a, b) for a, b in zip(edges[:-1], edges[1:], strict=True) if b > a]


def _floor_slabs(path: str, workers: int) -> list[tuple[int, int]]:
    """The floor's slabs of the positions of ``path``: one per reading process.

    Chunked: split at chunk boundaries, as the RMSD's blocks are. Contiguous: any frame
    is a boundary (a contiguous dataset is not one chunk of all its frames: read as one,
    a single process read the whole file at every N, and the floor of a contiguous
    layout stayed flat from 1 to 16 cores).
    """
    with h5py.File(path, "r") as f:
        d = f[_POSITION]
        n_frames, chunk = d.shape[0], d.chunks[0] if d.chunks else 1
    return _slabs(n_frames, chunk, workers)


@contextlib.contextmanager
def floor_reader(path: str | os.PathLike[str], workers: int = 1
                 ) -> Iterator[Callable[..., tuple[float, int]]]:
    """Inside the block, a function that reads the positions of ``path`` once with plain h5py.

    The function returns the seconds the read took and the bytes read. Each of
    ``workers`` processes (started on entry, not timed) reads one contiguous slab of
    whole chunks, as the RMSD's workers do; one process reads them all where
    ``workers`` is 1, not this one, whose memory and threads are those of whatever else
    it runs. Each process reads its slab a few MiB of whole chunks at a time into one
    buffer of its own (``_read_slab``): h5py's best way to stream a file. Kept
    open, the same readers can be timed between other runs, so that the floor and what
    is compared with it see the same spell of a shared machine
    (``benchmarks/bench_scale.py``).

    Parameters
    ----------
    path : path-like
        An H5MD file with ``particles/trajectory/position``.
    workers : int, default 1
        Reading processes.

    Yields
    ------
    callable
        ``read(raw=False) -> (seconds, bytes)``; ``raw=True`` reads the same bytes with
        ``os.preadv``, no HDF5 (the chunks' byte ranges located once, at the first such
        read, not timed): the most the file system hands over, the ceiling above h5py's
        floor.
    """
    from concurrent.futures import ProcessPoolExecutor
    from multiprocessing import get_context

    path = os.fspath(path)
    workers = max(1, workers)
    slabs = _floor_slabs(path, workers)
    spans: list[list[tuple[int, int]]] = []  # located at the first raw read, not before
    with ProcessPoolExecutor(workers, mp_context=get_context("spawn"),
                             initializer=_ignore_interrupts) as pool:
        with interrupts_deferred():  # the readers are born deaf to Ctrl-C, even importing
            list(pool.map(_ping, range(workers)))

        def read(raw: bool = False) -> tuple[float, int]:
            t0 = time.perf_counter()
            if raw:
                if not spans:
                    spans.extend(_byte_spans(path, slabs))
                    t0 = time.perf_counter()
                nbytes = sum(pool.map(_read_spans, [path] * len(spans), spans))
            else:
                nbytes = sum(pool.map(_read_slab, *zip(*((path, a, b) for a, b in slabs),
                                                       strict=True)))
            return time.perf_counter() - t0, nbytes

        yield read


def read_floor(path: str | os.PathLike[str], workers: int = 1, repeats: int = 2
               ) -> dict[str, float]:
    """How fast this machine reads the positions of ``path`` with plain h5py.

    One untimed read warms the page cache; then the best of ``repeats`` reads
    (:func:`floor_reader`: each of ``workers`` processes, started beforehand and not
    timed, reads one contiguous slab of whole chunks, as the RMSD's workers do).

    Parameters
    ----------
    path, workers
        As for :func:`floor_reader`.
    repeats : int, default 2
        Timed reads.

    Returns
    -------
    dict
        ``workers, frames, bytes, seconds, frames_per_s, gb_per_s`` (GB = 1e9 bytes).
    """
    with floor_reader(path, workers) as read:
        times = [read() for _ in range(repeats + 1)][1:]
    seconds, nbytes = min(times)
    with h5py.File(os.fspath(path), "r") as f:
        n_frames = f[_POSITION].shape[0]
    return _floor_figures(workers, n_frames, nbytes, seconds)


def _floor_figures(workers: int, n_frames: int, nbytes: int, seconds: float
                   ) -> dict[str, float]:
    """:func:`read_floor`'s dict for a read of ``n_frames`` frames (``nbytes``) in ``seconds``."""
    return {"workers": float(max(1, workers)), "frames": float(n_frames),
            "bytes": float(nbytes), "seconds": seconds,
            "frames_per_s": n_frames / seconds, "gb_per_s": nbytes / seconds / 1e9}


def mdanalysis_sample_rate(path: str | os.PathLike[str], topology: str, select: str = "name CA",
                           frames: int = 300) -> dict[str, Any]:
    """Time MDAnalysis' ``RMSD`` on the first ``frames`` frames of ``path``.

    Only ``RMSD.run`` is timed (not building the Universe), serially, as
    MDAnalysis runs by default.

    Parameters
    ----------
    path : path-like
        The H5MD file (read by MDAnalysis' own H5MD reader).
    topology : str
        Topology file.
    select : str, default "name CA"
        Atom selection.
    frames : int, default 300
        Frames to run on (capped at the trajectory's length).

    Returns
    -------
    dict
        ``version, frames, seconds, frames_per_s`` and ``rmsd`` (numpy array, Å).
    """
    from h5mdx._optional import import_optional

    mda = import_optional("MDAnalysis", "the MDAnalysis comparison")
    from MDAnalysis.analysis import rms

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        u = mda.Universe(topology, os.fspath(path))
        n = min(int(frames), u.trajectory.n_frames)
        analysis = rms.RMSD(u, select=select)
        t0 = time.perf_counter()
        analysis.run(stop=n)
        seconds = time.perf_counter() - t0
    return {"version": mda.__version__, "frames": n, "seconds": seconds,
            "frames_per_s": n / seconds, "rmsd": np.asarray(analysis.results.rmsd[:, 2])}


def timing_split(records: Any) -> dict[str, float]:
    """Fractions of the workers' busy time spent in I/O, compute, warm-up and the rest.

    Parameters
    ----------
    records : pandas.DataFrame
        Timing records (see :mod:`h5mdx.timing.records`).

    Returns
    -------
    dict
        ``io, compute, warmup, other`` (fractions summing to 1) and ``busy`` (s).
    """
    from h5mdx.timing.records import busy

    total = float(busy(records).sum())
    parts = {name: float(records[f"t_{name}"].fillna(0.0).sum())
             for name in ("io", "compute", "warmup")}
    if total <= 0:
        return {**dict.fromkeys(parts, 0.0), "other": 0.0, "busy": 0.0}
    out = {name: v / total for name, v in parts.items()}
    out["other"] = max(0.0, 1.0 - sum(out.values()))
    out["busy"] = total
    return out


def machine_description() -> str:
    """The machine in a few words: cores and what they are, operating system, kernel.

    E.g. ``"2 CPUs (AMD EPYC, 2 CPUs = 2 cores x 1 thread, AVX2, FMA, L2 512 KiB a core,
    L3 32 MiB per 2 CPUs), Debian GNU/Linux 12 (bookworm), Linux 6.1 x86_64"``.
    """
    from h5mdx._machine import usable_cpus

    total, usable = os.cpu_count() or 1, usable_cpus()
    # the CPU figures are those this process may use (its affinity: taskset, a batch job)
    head = f"{total} CPUs" if usable == total else f"{total} CPUs, {usable} usable here"
    parts = [f"{head} ({cpu_description()})"]
    try:
        info = platform.freedesktop_os_release()
        parts.append(info.get("PRETTY_NAME", info.get("NAME", "")))
    except (OSError, AttributeError):
        pass
    release = ".".join(platform.release().split("-")[0].split(".")[:2])
    parts.append(f"{platform.system()} {release} {platform.machine()}".strip())
    return ", ".join(p for p in parts if p)


@dataclass
class ExampleResult:
    """Everything :func:`run_example` measured and wrote.

    Attributes
    ----------
    out : str
        Output directory.
    trajectory : str
        The H5MD file.
    n_frames, n_atoms, n_selected : int
        Frames, atoms in the file, atoms in the selection.
    nbytes : int
        Size of the position dataset (bytes).
    chunks : tuple of int
        HDF5 chunk shape of the positions.
    built_seconds : float or None
        Time to build the file (None: it was cached).
    workers : int
        Worker processes of the local cluster.
    select : str
        The atom selection.
    seconds : float
        Wall time of the RMSD computation (cluster start-up excluded).
    rmsd : xarray.DataArray
        The RMSD series.
    floor : dict
        The read floor (:func:`read_floor`'s keys): in :func:`run_example`, the median of
        the paired rounds' floor reads.
    mda : dict or None
        :func:`mdanalysis_sample_rate` (None when skipped).
    records : pandas.DataFrame
        Per-task timing records.
    warmup : dict
        Worker -> seconds its kernel load took before the timed run.
    files : dict
        Name -> path of every output.
    ratios : list of float
        Each paired round's RMSD speed over its floor read (empty: not paired).
    raw : dict
        The same bytes read with ``os.preadv``, no HDF5 (:func:`floor_reader`,
        ``raw=True``): the median of the rounds' reads, keys as ``floor`` (empty: not run).
    raw_ratios : list of float
        Each round's RMSD speed over its raw read.
    rounds : dict
        Each round's seconds: ``rmsd``, ``floor`` and ``raw`` (saved as ``rounds.json``).
    argv : list of str
        The command's options, for the report's "reproduce" line (empty: called from
        Python).
    """

    out: str
    trajectory: str
    n_frames: int
    n_atoms: int
    n_selected: int
    nbytes: int
    chunks: tuple[int, ...]
    built_seconds: float | None
    workers: int
    select: str
    seconds: float
    rmsd: Any
    floor: dict[str, float]
    mda: dict[str, Any] | None
    records: Any
    warmup: dict[str, float] = field(default_factory=dict)
    files: dict[str, str] = field(default_factory=dict)
    ratios: list[float] = field(default_factory=list)
    raw: dict[str, float] = field(default_factory=dict)
    raw_ratios: list[float] = field(default_factory=list)
    rounds: dict[str, list[float]] = field(default_factory=dict)
    argv: list[str] = field(default_factory=list)

    @property
    def vs_floor(self) -> float:
        """RMSD speed over the read floor: the median of the rounds' ratios where paired."""
        if self.ratios:
            return float(np.median(self.ratios))
        return self.floor["seconds"] / self.seconds

    @property
    def vs_raw(self) -> float | None:
        """RMSD speed over the raw reads of the same bytes: the median of the rounds'."""
        return float(np.median(self.raw_ratios)) if self.raw_ratios else None

    @property
    def frames_per_s(self) -> float:
        """RMSD frames per second."""
        return self.n_frames / self.seconds

    @property
    def gb_per_s(self) -> float:
        """Position bytes per second of the RMSD (GB = 1e9 bytes)."""
        return self.nbytes / self.seconds / 1e9


def _straggler_text(records: Any, before: dict[str, float] | None = None) -> tuple[str, str]:
    """The straggler line and the warm-up line of the summary.

    ``before`` is the warm-up per worker done before the timed run, if any.
    """
    from h5mdx.timing.stragglers import flag_stragglers, straggler_rule, warmup_summary

    flagged = flag_stragglers(records)
    slow = flagged[flagged["is_straggler"]]
    rule = straggler_rule()
    if slow.empty:
        text = f"stragglers: none of {len(flagged)} tasks ({rule})"
    else:
        worst = slow.sort_values("duration", ascending=False)
        items = ", ".join(f"frames {r.frame_start}-{r.frame_stop} {r.duration:.2f} s "
                          f"({r.slow_phase})" for r in worst.head(3).itertuples())
        more = f" and {len(slow) - 3} more" if len(slow) > 3 else ""
        text = (f"stragglers: {len(slow)} of {len(flagged)} tasks (median "
                f"{float(flagged['duration'].median()):.3f} s): {items}{more} ({rule})")
    warm = warmup_summary(records)
    parts = []
    if before:
        parts.append(f"modules imported and kernel loaded on {len(before)} worker(s) before "
                     f"the timed run in {max(before.values()):.2f} s (not timed)")
    if before:
        parts.append("one untimed pass first (workers open the file, page cache warm)")
    if warm["n_tasks"]:
        parts.append(f"kernel load and chunk lookup {warm['seconds']:.2f} s in "
                     f"{warm['n_tasks']:.0f} task(s) ({100 * warm['fraction']:.0f}% of the "
                     "work), kept apart from stragglers")
    return text, "warm-up: " + ("; ".join(parts) if parts else "none recorded")


def _times(x: float) -> str:
    return f"{x:,.0f}x" if x >= 10 else f"{x:.2f}x"  # 0.94x, 1.04x (not "1x")


def _rounds_text(result: ExampleResult) -> str:
    """How the floor ratio was measured, for the summary and the report."""
    r = result.ratios
    if not r:
        return "measured now"
    # the ratio is paired round by round: not the ratio of the two medians beside it
    return (f"medians of {len(r)} rounds timing each back to back; the ratio is the median "
            f"of the rounds' ratios, by round {_times(min(r))}-{_times(max(r))}")


def summary_lines(result: ExampleResult) -> list[str]:
    """The example's summary: speed, read floor, MDAnalysis, I/O split, stragglers, outputs.

    The ``outputs`` line appears once ``result.files`` has a ``report``.

    Parameters
    ----------
    result : ExampleResult

    Returns
    -------
    list of str
    """
    fl = result.floor
    lines = [
        f"rmsd  {result.n_frames:,} frames  in {result.seconds:.2f} s  "
        f"{result.frames_per_s:,.0f} frames/s  {result.gb_per_s:.2f} GB/s  "
        f"= {_times(result.vs_floor)} the h5py read floor of this machine "
        f"({fl['frames_per_s']:,.0f} frames/s, {fl['gb_per_s']:.2f} GB/s with "
        f"{fl['workers']:.0f} h5py reader(s), {_rounds_text(result)})",
    ]
    raw = result.raw
    if raw and result.vs_raw is not None:
        lines.append(
            f"raw reads of the same bytes (os.preadv, no HDF5, {raw['workers']:.0f} "
            f"process(es)): {raw['frames_per_s']:,.0f} frames/s, {raw['gb_per_s']:.2f} GB/s; "
            f"the RMSD runs at {_times(result.vs_raw)} of them (h5mdx reads the chunks "
            "itself, past HDF5, then computes: the copy from the page cache and the kernel)")
    if result.mda is not None:
        lines.append(_mda_text(result))
    split = timing_split(result.records)
    warm = f"  warm-up {100 * split['warmup']:.0f}%" if split["warmup"] > 0 else ""
    lines.append(f"I/O {100 * split['io']:.0f}%  compute {100 * split['compute']:.0f}%{warm}  "
                 f"other {100 * split['other']:.0f}% of the workers' busy time "
                 f"({_plural(len(result.records), 'task')} on "
                 f"{_plural(result.workers, 'worker')}, one more run with per-task timing)")
    lines.extend(_straggler_text(result.records, result.warmup))
    f = result.files
    if "report" in f:
        others = ", ".join(os.path.basename(f[k]) for k in f if k != "report")
        lines.append(f"outputs: {f['report']} (with {others})")
    return lines


def _plural(n: int, word: str, many: str | None = None) -> str:
    return f"{n} {word if n == 1 else many or word + 's'}"


def _mda_text(result: ExampleResult) -> str:
    """MDAnalysis' speed on the frames it ran, and what it would take for all of them."""
    m = result.mda
    assert m is not None
    diff = float(np.max(np.abs(result.rmsd.values[:m["frames"]] - m["rmsd"])))
    if m["frames"] >= result.n_frames:
        took, how = m["seconds"], "every frame"
    else:
        took, how = result.n_frames / m["frames_per_s"], "sampled, extrapolated to all"
    return (f"MDAnalysis {m['version']} (serial, as it runs by default): {m['frames']} frames "
            f"in {m['seconds']:.2f} s -> {m['frames_per_s']:,.0f} frames/s ({how}: "
            f"{took:,.2f} s) -> h5mdx is {_times(took / result.seconds)} faster; same RMSD "
            f"to {diff:.1g} Å")


def _html_rows(result: ExampleResult) -> list[tuple[str, str]]:
    fl, split = result.floor, timing_split(result.records)
    rows = [
        ("machine", machine_description()),
        ("trajectory", f"{os.path.basename(result.trajectory)}: {result.n_frames:,} frames x "
                       f"{result.n_atoms:,} atoms, {result.nbytes / 1e9:.2f} GB of positions, "
                       f"chunks {result.chunks}, uncompressed; {SYNTHETIC}"),
        ("selection", f"{result.select!r} ({result.n_selected} atoms)"),
        ("RMSD", f"{result.seconds:.2f} s, {result.frames_per_s:,.0f} frames/s, "
                 f"{result.gb_per_s:.2f} GB/s on a local dask.distributed cluster of "
                 f"{_plural(result.workers, 'worker process', 'worker processes')}"),
        ("read floor (h5py)", f"{fl['seconds']:.2f} s, {fl['frames_per_s']:,.0f} frames/s, "
                              f"{fl['gb_per_s']:.2f} GB/s with {fl['workers']:.0f} reader(s)"),
        ("RMSD / read floor", f"{result.vs_floor:.2f}x ({_rounds_text(result)})"),
    ]
    raw = result.raw
    if raw and result.vs_raw is not None:
        rows += [("raw reads (os.preadv)", f"{raw['seconds']:.2f} s, "
                  f"{raw['frames_per_s']:,.0f} frames/s, {raw['gb_per_s']:.2f} GB/s with "
                  f"{raw['workers']:.0f} process(es): the same bytes, no HDF5"),
                 ("RMSD / raw reads", f"{result.vs_raw:.2f}x (median of the rounds' ratios)")]
    if result.mda is not None:
        rows.append(("MDAnalysis", _mda_text(result)))
    rows.append(("versions", _versions()))
    rows.append(("reproduce", shlex.join(["h5mdx", "example", *result.argv])))
    rows.append(("busy time split", ", ".join(f"{k} {100 * split[k]:.0f}%" for k in
                                              ("io", "compute", "warmup", "other"))))
    texts = _straggler_text(result.records, result.warmup)
    rows.extend((name, text.split(": ", 1)[1])
                for name, text in zip(("stragglers", "warm-up"), texts, strict=True))
    return rows


def write_report(result: ExampleResult) -> dict[str, str]:
    """Write the Gantt chart, the per-worker bars and ``report.html`` into ``result.out``.

    The RMSD plot, ``rmsd.csv`` and ``timing.csv`` are expected there already
    (:func:`run_example` writes them); the page links every file relatively.

    Parameters
    ----------
    result : ExampleResult

    Returns
    -------
    dict
        Name -> path of the files written (``gantt``, ``workers``, ``report``).
    """
    from h5mdx.timing.plots import plot_gantt, plot_per_worker

    out = result.out
    files = {"gantt": os.path.join(out, "gantt.png"),
             "workers": os.path.join(out, "workers.png"),
             "report": os.path.join(out, "report.html")}
    plot_gantt(result.records, path=files["gantt"])
    plot_per_worker(result.records, path=files["workers"])
    table = "\n".join(f"<tr><th>{html.escape(k)}</th><td>{html.escape(v)}</td></tr>"
                      for k, v in _html_rows(result))
    links = " · ".join(f'<a href="{html.escape(os.path.basename(p))}">'
                       f"{html.escape(os.path.basename(p))}</a>"
                       for k, p in {**result.files, **files}.items() if k != "report")
    figures = "\n".join(
        f'<h2>{title}</h2>\n<img src="{name}" alt="{title}" style="max-width:100%">'
        for title, name in ((_what(result.select), "rmsd.png"),
                            ("Tasks by worker, coloured by phase (the run with per-task "
                             "timing, after the rounds)", "gantt.png"),
                            ("Time per worker and phase", "workers.png")))
    page = f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>h5mdx example report</title>
<style>body{{font-family:sans-serif;max-width:60em;margin:2em auto}}
th{{text-align:left;padding-right:1em;vertical-align:top}}pre{{background:#f4f4f4;padding:1em}}
</style></head><body>
<h1>h5mdx example: {html.escape(_what(result.select))} of adenylate kinase</h1>
<p>Measured {html.escape(time.strftime('%Y-%m-%d %H:%M %Z'))} on
{html.escape(machine_description())}.</p>
<pre>{html.escape(chr(10).join(summary_lines(result)))}</pre>
<table>
{table}
</table>
<p>Files: {links}</p>
{figures}
</body></html>
"""
    tmp = files["report"] + ".part"
    with open(tmp, "w", encoding="utf-8") as fh:
        fh.write(page)
    os.replace(tmp, files["report"])
    return files


def _what(select: str) -> str:
    """The RMSD's name in titles: ``C-alpha RMSD`` for ``name CA``, else the selection."""
    return "C-alpha RMSD" if select.strip() == "name CA" else f"RMSD of {select!r}"


def plot_rmsd(rmsd: Any, path: str, zoom: int = 392, *, select: str = "name CA") -> None:
    """The RMSD series (top) and its first ``zoom`` frames (bottom), as PNG.

    Parameters
    ----------
    rmsd : xarray.DataArray
        The series on ``time``.
    path : str
        Output PNG.
    zoom : int, default 392
        Frames in the lower panel (default: two forward-and-back passes).
    select : str, default "name CA"
        The selection, named in the title.
    """
    from h5mdx.timing.plots import _figure

    t = np.asarray(rmsd["time"].values)
    y = np.asarray(rmsd.values)
    unit = rmsd["time"].attrs.get("units", "")
    fig = _figure((8.0, 5.0), 100)
    top, bottom = fig.subplots(2, 1)
    top.plot(t, y, lw=0.3)
    top.set_title(f"{_what(select)} to frame 0, all {y.size:,} frames")
    bottom.plot(t[:zoom], y[:zoom], lw=1)
    bottom.axvspan(t[0], t[min(97, y.size - 1)], color="0.9", label="the DCD's own 98 frames")
    bottom.set_title(f"first {min(zoom, y.size)} frames")
    bottom.legend(fontsize="small", loc="lower right")
    for ax in (top, bottom):
        ax.set_xlabel(f"time ({unit})")
        ax.set_ylabel(f"RMSD ({rmsd.attrs.get('units', '')})")
    fig.savefig(path, dpi=fig.dpi, format="png")


def _describe_file(path: str) -> tuple[int, int, int, tuple[int, ...]]:
    with h5py.File(path, "r") as f:
        d = f[_POSITION]
        return d.shape[0], d.shape[1], int(d.size * d.dtype.itemsize), tuple(d.chunks or ())


#: What the example's trajectory is, said wherever its figures are shown.
SYNTHETIC = ("made from the 98 frames of MDAnalysisTests' adk DCD, played back and forth "
             "with small rigid moves and 0.05 Å noise (not a real simulation)")


def _versions() -> str:
    """The versions the figures depend on."""
    import dask

    from h5mdx._version import __version__

    parts = [f"h5mdx {__version__}", f"python {platform.python_version()}",
             f"numpy {np.__version__}", f"h5py {h5py.__version__}",
             f"HDF5 {h5py.version.hdf5_version}", f"dask {dask.__version__}"]
    for name in ("distributed", "numba", "xarray", "MDAnalysis"):
        try:
            parts.append(f"{name} {__import__(name).__version__}")
        except ImportError:
            continue
    return ", ".join(parts)


#: Rounds of the example's timed comparison: each times the read floor and the RMSD once.
ROUNDS = 5


def _run_rmsd(path: str, out: str, select: str, workers: int, progress: bool,
              rounds: int = ROUNDS) -> tuple[Any, dict[str, Any], int, dict[str, float]]:
    """The RMSD and the read floor in paired rounds, then one run with per-task timing.

    The cluster (modules imported and kernel loaded on each worker) and the floor's reader
    processes start first; one untimed pass of each opens the file everywhere and warms the page cache.
    Then each of ``rounds`` rounds times one plain-h5py read of the positions
    (:func:`floor_reader`) and one RMSD on the cluster, back to back (their order
    alternating), so that both see the same spell of a shared machine; a last RMSD
    runs under :func:`h5mdx.timing.capture` (with the progress bar) for
    ``out/timing.csv``.

    Returns the result, the paired timings (``floor``: :func:`read_floor`'s dict from the
    median floor read; ``rmsd_seconds``, ``floor_seconds``: each round's), the number of
    selected atoms and the warm-up per worker.
    """
    import MDAnalysis as mda
    import xarray as xr

    import h5mdx  # noqa: F401 - registers the engine and the ds.md accessor
    from h5mdx.parallel.schedulers import compute as _progress
    from h5mdx.parallel.schedulers import scheduler_context
    from h5mdx.parallel.workers import warm_up_seconds
    from h5mdx.testing import adk_topology
    from h5mdx.timing import capture

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        n_selected = int(mda.Universe(adk_topology()).select_atoms(select).n_atoms)
    with xr.open_dataset(path, engine="h5md", topology=adk_topology()) as ds, \
            scheduler_context("distributed", workers) as client, \
            floor_reader(path, workers) as read:
        warm = warm_up_seconds(client)  # scheduler_context loaded the kernel on each worker
        lazy = ds.md.rmsd(0, select=select)

        def rmsd_once() -> float:
            t0 = time.perf_counter()
            future = client.compute(lazy)
            future.result()
            seconds = time.perf_counter() - t0
            future.release()  # forgotten before the next round asks for the same keys
            return seconds

        # one untimed pass each: every worker opens the file and locates its chunks, the
        # readers open it too, the page cache is warm; the rounds measure the steady state
        _, nbytes = read()
        read(raw=True)
        rmsd_once()
        floor_t: list[float] = []
        raw_t: list[float] = []
        rmsd_t: list[float] = []
        for r in range(max(1, rounds)):
            if r % 2:
                rmsd_t.append(rmsd_once())
                floor_t.append(read()[0])
                raw_t.append(read(raw=True)[0])
            else:
                raw_t.append(read(raw=True)[0])
                floor_t.append(read()[0])
                rmsd_t.append(rmsd_once())
        with capture(backend="distributed", client=client, n_workers=workers,
                     meta={"file": path, "selection": select, "warmup": warm}) as run:
            result = _progress(client, lazy, progress)
        run.save(os.path.join(out, "timing.csv"))
    n = int(result.sizes["time"])
    floor = _floor_figures(workers, n, nbytes, float(np.median(floor_t)))
    raw = _floor_figures(workers, n, nbytes, float(np.median(raw_t)))
    return result, {"floor": floor, "raw": raw, "floor_seconds": floor_t,
                    "raw_seconds": raw_t, "rmsd_seconds": rmsd_t}, n_selected, warm


#: The directory, in the output directory, where a run writes its outputs before they
#: take their names together (by process: one killed leaves it, the next run removes it)
_STAGE = ".example-partial-"


@contextlib.contextmanager
def _staged(out: str) -> Iterator[str]:
    """A fresh staging directory in ``out`` for the block, removed where it ends in an
    exception (Ctrl-C included); those of processes no longer running go first."""
    from h5mdx.layout._atomic import pid_alive

    for name in os.listdir(out):
        if name.startswith(_STAGE) and name[len(_STAGE):].isdigit():
            pid = int(name[len(_STAGE):])
            if pid != os.getpid() and not pid_alive(pid):
                shutil.rmtree(os.path.join(out, name), ignore_errors=True)
    stage = os.path.join(out, f"{_STAGE}{os.getpid()}")
    shutil.rmtree(stage, ignore_errors=True)
    os.makedirs(stage)
    try:
        yield stage
    except BaseException:
        shutil.rmtree(stage, ignore_errors=True)
        raise


def _publish(res: ExampleResult, out: str) -> None:
    """Move the staged outputs into ``out`` (each a rename, after all were written), and
    point ``res`` at them."""
    stage = res.out
    for name in sorted(os.listdir(stage)):  # every file: timing.csv's timing.meta.json too
        os.replace(os.path.join(stage, name), os.path.join(out, name))
    res.files = {key: os.path.join(out, os.path.basename(p)) for key, p in res.files.items()}
    shutil.rmtree(stage, ignore_errors=True)
    res.out = out


def _ratios(read_seconds: list[float], paired: dict[str, Any]) -> list[float]:
    """Each round's RMSD speed over its read: the read's seconds over the RMSD's."""
    return [r / t for r, t in zip(read_seconds, paired["rmsd_seconds"], strict=True)]


def run_example(
    out: str | os.PathLike[str] = "h5mdx-example",
    frames: int = DEFAULT_FRAMES,
    *,
    workers: int = 2,
    select: str = "name CA",
    mda_frames: int = 300,
    progress: bool = True,
    echo: Callable[[str], None] = print,
    argv: Sequence[str] | None = None,
) -> ExampleResult:
    """Build (or reuse) the example trajectory, time the RMSD, compare, write the report.

    Parameters
    ----------
    out : path-like, default "h5mdx-example"
        Output directory (created); the trajectory is cached there as
        ``adk-<frames>.h5md``.
    frames : int, default 30,000
        Frames of the trajectory.
    workers : int, default 2
        Worker processes of the local dask cluster (and h5py readers of the floor).
    select : str, default "name CA"
        MDAnalysis selection for the RMSD.
    mda_frames : int, default 300
        Frames MDAnalysis runs on (0: skip the comparison).
    progress : bool, default True
        Progress bars.
    echo : callable, default print
        Receives a line for each step as it starts.
    argv : sequence of str, optional
        The command's options, shown in the report to reproduce it.

    Returns
    -------
    ExampleResult
    """
    from h5mdx.analysis.series import write_series
    from h5mdx.testing import adk_topology
    from h5mdx.timing.records import load

    out = os.fspath(out)
    os.makedirs(out, exist_ok=True)
    path = os.path.join(out, f"adk-{frames}.h5md")
    t0 = time.perf_counter()
    cached = _cached(path, frames)
    build_adk_trajectory(path, frames, progress=progress)
    built = None if cached else time.perf_counter() - t0
    n_frames, n_atoms, nbytes, chunks = _describe_file(path)
    echo(f"trajectory: {path}  {n_frames:,} frames x {n_atoms:,} atoms, {nbytes / 1e9:.2f} GB, "
         f"chunks {chunks}, uncompressed "
         + ("(cached)" if built is None else f"(built in {built:.1f} s)"))
    echo(f"machine: {machine_description()}")
    echo(f"trajectory: {SYNTHETIC}")
    echo(f"{_what(select)} ({select!r}) on a local dask.distributed cluster of "
         f"{_plural(workers, 'worker process', 'worker processes')} against the h5py "
         f"read floor ({workers} h5py reader process(es)) and raw reads of the same bytes: "
         f"{ROUNDS} rounds timing all three, then one run with per-task timing ...")
    with _staged(out) as stage:  # the outputs appear together, or the last run's stay
        result, paired, n_selected, warm = _run_rmsd(path, stage, select, workers, progress)
        files = {"rmsd_plot": os.path.join(stage, "rmsd.png"),
                 "rmsd": os.path.join(stage, "rmsd.csv"),
                 "timing": os.path.join(stage, "timing.csv")}
        write_series(files["rmsd"], result)
        plot_rmsd(result, files["rmsd_plot"], select=select)
        records, _ = load(files["timing"])
        mda = None
        if mda_frames > 0:
            echo(f"MDAnalysis RMSD on the first {min(mda_frames, n_frames)} frames ...")
            mda = mdanalysis_sample_rate(path, adk_topology(), select, mda_frames)
        res = ExampleResult(out=stage, trajectory=path, n_frames=n_frames, n_atoms=n_atoms,
                            n_selected=n_selected, nbytes=nbytes, chunks=chunks,
                            built_seconds=built, workers=workers, select=select,
                            seconds=float(np.median(paired["rmsd_seconds"])), rmsd=result,
                            floor=paired["floor"], mda=mda, records=records, warmup=warm,
                            files=files, ratios=_ratios(paired["floor_seconds"], paired),
                            raw=paired["raw"],
                            raw_ratios=_ratios(paired["raw_seconds"], paired),
                            rounds={k: paired[f"{k}_seconds"] for k in ("rmsd", "floor", "raw")},
                            argv=list(argv or []))
        res.files["rounds"] = os.path.join(stage, "rounds.json")
        with open(res.files["rounds"], "w", encoding="utf-8") as fh:
            json.dump({"seconds": res.rounds, "frames": n_frames, "bytes": nbytes,
                       "workers": workers, "select": select}, fh, indent=1)
        res.files.update(write_report(res))
        _publish(res, out)
    return res

