"""What the example measured, as a summary, an HTML report and plots.

:class:`ExampleResult` holds every figure :func:`h5mdx.examples.run.run_example` measured;
:func:`summary_lines` turns them into the few lines ``h5mdx example`` prints and
:func:`write_report` into ``report.html`` with its plots.
"""

from __future__ import annotations

import html
import math
import os
import platform
import shlex
import time
from dataclasses import dataclass, field
from typing import Any

import h5py
import numpy as np

from h5mdx._machine import cpu_description
from h5mdx._replace import replacing
from h5mdx.examples.trajectory import SYNTHETIC

__all__ = ["ExampleResult", "machine_description", "plot_rmsd", "summary_lines",
           "timing_split", "write_report"]


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


#: The parts of :func:`timing_split`, in the order they are shown.
_PARTS = ("io", "compute", "warmup", "other")


def _percents(split: dict[str, float]) -> dict[str, int]:
    """:func:`timing_split`'s fractions in whole percent that add up to 100.

    Each is rounded down, then those with the largest remainders up, one percent each
    (each rounded alone, they showed 99% or 101% in all).

    Examples
    --------
    >>> _percents({"io": 0.335, "compute": 0.335, "warmup": 0.0, "other": 0.33, "busy": 1.0})
    {'io': 34, 'compute': 33, 'warmup': 0, 'other': 33}
    """
    exact = {k: 100 * split[k] for k in _PARTS}
    out = {k: math.floor(v) for k, v in exact.items()}
    if split["busy"] > 0:
        short = max(0, 100 - sum(out.values()))
        for k in sorted(_PARTS, key=lambda k: out[k] - exact[k])[:short]:
            out[k] += 1
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
    via_h5py : str or None
        Why the RMSD read the positions through h5py (``H5MDX_DIRECT_READ=0``, a filter:
        :func:`h5mdx.engine.arrays.why_reads_take_turns`); None where it read the chunks
        itself, past HDF5.
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
    via_h5py: str | None = None

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
    from h5mdx.timing.report import frame_range
    from h5mdx.timing.stragglers import flag_stragglers, straggler_rule, warmup_summary

    flagged = flag_stragglers(records)
    slow = flagged[flagged["is_straggler"]]
    rule = straggler_rule()
    if slow.empty:
        text = f"stragglers: none of {plural(len(flagged), 'task')} ({rule})"
    else:
        worst = slow.sort_values("duration", ascending=False)
        items = ", ".join(f"frames {frame_range(r.frame_start, r.frame_stop)} {r.duration:.2f} s "
                          f"({r.slow_phase})" for r in worst.head(3).itertuples())
        more = f" and {len(slow) - 3} more" if len(slow) > 3 else ""
        text = (f"stragglers: {len(slow)} of {plural(len(flagged), 'task')} (median "
                f"{float(flagged['duration'].median()):.3f} s): {items}{more} ({rule})")
    warm = warmup_summary(records)
    share = _percents(timing_split(records))["warmup"]  # as the busy-time split shows it
    parts = []
    if before:
        parts.append(f"modules imported and kernel loaded on {len(before)} worker(s) before "
                     f"the timed run in {max(before.values()):.2f} s (not timed)")
    if before:
        parts.append("one untimed pass first (workers open the file, page cache warm)")
    if warm["n_tasks"]:
        parts.append(f"kernel load and chunk lookup {figure(warm['seconds'])} s in "
                     f"{warm['n_tasks']:.0f} task(s) ({share}% of the "
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
        f"rmsd  {result.n_frames:,} frames  in {figure(result.seconds)} s  "
        f"{result.frames_per_s:,.0f} frames/s  {figure(result.gb_per_s)} GB/s  "
        f"= {_times(result.vs_floor)} the h5py read floor of this machine "
        f"({fl['frames_per_s']:,.0f} frames/s, {figure(fl['gb_per_s'])} GB/s with "
        f"{fl['workers']:.0f} h5py reader(s), {_rounds_text(result)})",
    ]
    raw = result.raw
    if raw and result.vs_raw is not None:
        lines.append(
            f"raw reads of the same bytes (os.preadv, no HDF5, {raw['workers']:.0f} "
            f"process(es)): {raw['frames_per_s']:,.0f} frames/s, {figure(raw['gb_per_s'])} GB/s; "
            f"the RMSD runs at {_times(result.vs_raw)} of them ({_read_path(result)})")
    if result.mda is not None:
        lines.append(_mda_text(result))
    split = timing_split(result.records)
    pct = _percents(split)
    warm = f"  warm-up {pct['warmup']}%" if split["warmup"] > 0 else ""
    lines.append(f"I/O {pct['io']}%  compute {pct['compute']}%{warm}  "
                 f"other {pct['other']}% of the workers' busy time "
                 f"({plural(len(result.records), 'task')} on "
                 f"{plural(result.workers, 'worker')}, one more run with per-task timing)")
    lines.extend(_straggler_text(result.records, result.warmup))
    f = result.files
    if "report" in f:
        others = ", ".join(os.path.basename(f[k]) for k in f if k != "report")
        lines.append(f"outputs: {f['report']} (with {others})")
    return lines


def _read_path(result: ExampleResult) -> str:
    """How the RMSD read the positions, beside the raw reads' figures."""
    if result.via_h5py is None:
        return ("h5mdx reads the chunks itself, past HDF5, then computes: the copy from the "
                "page cache and the kernel")
    return f"h5mdx read the positions through h5py here ({result.via_h5py}), then computed"


def figure(x: float) -> str:
    """``x`` to three significant figures at least: ``0.104``, ``0.00367``, ``1.20``, ``53.63``.

    With two decimals, a read of 0.0037 s showed as 0.00 s beside its 121,820 frames/s,
    and 0.0384 s as 0.04 s (500 frames / 0.04 s is not the 13,017 frames/s shown).
    """
    return f"{x:,.2f}" if x >= 1 else f"{x:#.3g}"


def plural(n: int, word: str, many: str | None = None) -> str:
    """``"1 task"``, ``"2 tasks"``: ``n`` and ``word``, or ``many`` (default ``word + "s"``)."""
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
    ratio = took / result.seconds
    # "0.50x faster" was said of an RMSD that took twice MDAnalysis' time (a loaded machine)
    than = f"{_times(ratio)} faster" if ratio >= 1 else f"{_times(1 / ratio)} slower"
    return (f"MDAnalysis {m['version']} (serial, as it runs by default): {m['frames']} frames "
            f"in {figure(m['seconds'])} s -> {m['frames_per_s']:,.0f} frames/s ({how}: "
            f"{figure(took)} s) -> h5mdx is {than}; same RMSD to {diff:.1g} Å")


def _html_rows(result: ExampleResult) -> list[tuple[str, str]]:
    fl, split = result.floor, timing_split(result.records)
    rows = [
        ("machine", machine_description()),
        ("trajectory", f"{os.path.basename(result.trajectory)}: {result.n_frames:,} frames x "
                       f"{result.n_atoms:,} atoms, {figure(result.nbytes / 1e9)} GB of positions, "
                       f"chunks {result.chunks}, uncompressed; {SYNTHETIC}"),
        ("selection", f"{result.select!r} ({result.n_selected} atoms)"),
        ("RMSD", f"{figure(result.seconds)} s, {result.frames_per_s:,.0f} frames/s, "
                 f"{figure(result.gb_per_s)} GB/s on a local dask.distributed cluster of "
                 f"{plural(result.workers, 'worker process', 'worker processes')}"),
        ("read floor (h5py)", f"{figure(fl['seconds'])} s, {fl['frames_per_s']:,.0f} frames/s, "
                              f"{figure(fl['gb_per_s'])} GB/s with {fl['workers']:.0f} reader(s)"),
        ("RMSD / read floor", f"{result.vs_floor:.2f}x ({_rounds_text(result)})"),
    ]
    raw = result.raw
    if raw and result.vs_raw is not None:
        rows += [("raw reads (os.preadv)", f"{figure(raw['seconds'])} s, "
                  f"{raw['frames_per_s']:,.0f} frames/s, {figure(raw['gb_per_s'])} GB/s with "
                  f"{raw['workers']:.0f} process(es): the same bytes, no HDF5"),
                 ("RMSD / raw reads", f"{result.vs_raw:.2f}x (median of the rounds' ratios)")]
    if result.mda is not None:
        rows.append(("MDAnalysis", _mda_text(result)))
    rows.append(("versions", _versions()))
    rows.append(("reproduce", shlex.join(["h5mdx", "example", *result.argv])))
    pct = _percents(split)
    rows.append(("busy time split", ", ".join(f"{k} {pct[k]}%" for k in _PARTS)))
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
    figures = "\n".join(  # the selection's title escaped: 'prop z < 30', quotes
        f'<h2>{html.escape(title)}</h2>\n<img src="{name}" alt="{html.escape(title)}" '
        'style="max-width:100%">'
        for title, name in ((rmsd_title(result.select), "rmsd.png"),
                            ("Tasks by worker, coloured by phase (the run with per-task "
                             "timing, after the rounds)", "gantt.png"),
                            ("Time per worker and phase", "workers.png")))
    page = f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>h5mdx example report</title>
<style>body{{font-family:sans-serif;max-width:60em;margin:2em auto}}
th{{text-align:left;padding-right:1em;vertical-align:top}}pre{{background:#f4f4f4;padding:1em}}
</style></head><body>
<h1>h5mdx example: {html.escape(rmsd_title(result.select))} of adenylate kinase</h1>
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
    with replacing(files["report"]) as tmp:  # whole, with the replaced page's mode
        tmp.write_text(page, encoding="utf-8")
    return files


def rmsd_title(select: str) -> str:
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
    top.set_title(f"{rmsd_title(select)} to frame 0, all {y.size:,} frames")
    bottom.plot(t[:zoom], y[:zoom], lw=1)
    bottom.axvspan(t[0], t[min(97, y.size - 1)], color="0.9", label="the DCD's own 98 frames")
    bottom.set_title(f"first {min(zoom, y.size)} frames")
    bottom.legend(fontsize="small", loc="lower right")
    for ax in (top, bottom):
        ax.set_xlabel(f"time ({unit})")
        ax.set_ylabel(f"RMSD ({rmsd.attrs.get('units', '')})")
    with replacing(path) as tmp:  # a savefig stopped half-way leaves the earlier plot
        fig.savefig(tmp, dpi=fig.dpi, format="png")

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
