"""The sampling of a time-dependent element: its ``step`` and ``time``.

Explicit or fixed-interval, matched to the frames its ``value`` stores: a writer stopped
between the value and its step, GROMACS' fill-valued tails, ESPResSo's entry k + 1, an
element with no ``step`` at all (frames numbered 0..n-1).
"""

from __future__ import annotations

import math
from dataclasses import replace

import h5py
import numpy as np

from h5mdx.errors import H5MDFormatError
from h5mdx.format.h5md._decimals import fixed_decimals, widened
from h5mdx.format.h5md._model import Sampling
from h5mdx.format.h5md._storage import (
    MAX_SMALL_READ,
    _addr,
    _attr,
    _check_dataset,
    _check_declared,
    _Ctx,
    _fill_value,
    _get,
    _has,
    _refresh,
    _storage_size,
    _unit_attr,
)

#: Largest number of frames for which a fixed-interval step/time array is built at
#: open time; above this a file is refused as implausible (an absurd declared shape).
MAX_FRAMES = 2**36


def _read_small(c: _Ctx, dset: h5py.Dataset, where: str, n: int | None = None,
                start: int = 0) -> np.ndarray:
    """``dset`` whole, or its entries ``start .. start + n - 1`` along axis 0."""
    _check_declared(c, dset, where)
    count = dset.size if n is None else n
    if int(count or 0) * max(1, dset.dtype.itemsize) > MAX_SMALL_READ:
        raise H5MDFormatError(
            c.filename, where, f"{dset.name} is too large to read at open time ({dset.shape})"
        )
    try:
        return np.asarray(dset[()] if n is None else dset[start:start + n])
    except (OSError, RuntimeError, ValueError, TypeError, KeyError) as err:
        raise H5MDFormatError(c.filename, where, f"cannot read {dset.name}: {err}") from None


_NUMBERED = "frames numbered 0..n-1"

#: The range of the steps served (int64)
_INT64 = np.iinfo(np.int64)


def _sampled_rows(c: _Ctx, name: str, m: int, n: int, path: str
                  ) -> tuple[int, int] | None:
    """Which entries of a ``step`` or ``time`` of ``m`` entries go with ``n`` frames of
    ``value`` in a finished file: ``(first, count)``, or None where they cannot be told
    (noted by the caller).

    As many: all. One more, from ESPResSo: all but the first (its writer, until a fix
    of June 2026, creates ``step`` and ``time`` with one entry and writes frame k's at
    k + 1: ``File::write`` in ``src/core/io/writer/h5md_core.cpp``). More: the first
    ``n`` (the writer stopped before the value). One fewer: all of them, the last frame
    of ``value`` left out (a writer stopped mid-frame: ESPResSo and GROMACS extend
    ``value`` before ``step`` and ``time``; GROMACS' new writer writes a frame's ``time``
    last, so a ``time`` one short beside a whole ``step`` is the same stop). A ``step``
    fewer by more: its entries, the frames of ``value`` after them left out (they were
    numbered 0..n-1 before, the steps and times of the whole element lost); an empty
    ``step`` beside frames is as none (frames numbered); a ``time`` fewer by more is
    ignored, the frames keep their steps.
    """
    shape = f"{name!r} has {m} entries but 'value' has {n} frames"
    if m == n or c.live:
        return 0, min(m, n)
    if m == n + 1 and c.creator.lower().startswith("espresso"):
        c.note(path, f"{shape} (ESPResSo's writer, until its fix of June 2026, wrote "
               f"frame k's {name} at entry k + 1, after one it created empty)",
               f"entries 1..{n} used")
        return 1, n
    if m > n:
        c.note(path, shape, f"the first {n} {name}s used")
        return 0, n
    if m == n - 1:
        c.note(path, f"{shape} (a writer stopped in the middle of a frame)",
               "the last frame of 'value' left out")
        return 0, m
    if name == "step" and 0 < m < n:
        c.note(path, f"{shape} (a writer grew 'value' ahead of 'step', or stopped between "
               "them)", f"the first {m} frame(s) read at their steps; the last {n - m} "
               "frame(s) of 'value', which have no step, left out")
        return 0, m
    return None


def _sampling_dataset(c: _Ctx, grp: h5py.Group, name: str, where: str) -> h5py.Dataset | None:
    """``grp/step`` or ``grp/time`` as a dataset, or None (absent or unusable: noted)."""
    if not _has(grp, name):
        return None
    try:
        obj = _get(c, grp, name, where)
    except H5MDFormatError as err:
        c.note(f"{where}/{name}", err.problem, f"{name!r} ignored")
        return None
    if not isinstance(obj, h5py.Dataset):
        c.note(f"{where}/{name}", f"{name!r} must be a dataset", f"{name!r} ignored")
        return None
    _check_dataset(c, obj, f"{where}/{name}")
    _refresh(c, obj)
    return obj


def _fixed_form(c: _Ctx, ds: h5py.Dataset, name: str, n: int, where: str) -> bool:
    """Whether ``ds`` (a ``step`` or ``time``) samples at a fixed interval: a scalar (H5MD
    1.1), or, noted, an array of one number with a numeric ``offset`` attribute beside a
    ``value`` of other than one frame (the interval written as an array: read as one
    explicit entry, it left the other frames without steps or times)."""
    if ds.shape == ():
        return True
    if ds.shape != (1,) or n == 1 or ds.dtype.kind not in "iuf" or _number(
            _attr(ds, "offset")) is None:
        return False
    c.note(f"{where}/{name}", f"{name!r} is an array of one entry with an 'offset' "
           f"attribute, not a scalar, beside {n} frames of 'value'",
           "read as fixed-interval sampling, its entry the interval")
    return True


def _number(raw: object) -> int | float | None:
    """``raw`` (an attribute as read) as one finite number, also where it is held in an
    array of one value; None where it is not one (a bool, a string, several values)."""
    value = raw[0] if isinstance(raw, list) and len(raw) == 1 else raw
    if isinstance(value, bool) or not isinstance(value, (int, float)) or (
            isinstance(value, float) and not math.isfinite(value)):
        return None
    return value


def _fixed_offset(c: _Ctx, ds: h5py.Dataset, name: str, where: str) -> int | float | None:
    """The ``offset`` of fixed-interval ``step`` or ``time`` ``ds`` (0 where it has none):
    an integer for a step (a float of a whole number within int64 converted), a finite
    number for a time; one held in an array of one value read. Both noted as minor (no
    value in doubt); None where it is none of these.
    """
    raw = _attr(ds, "offset")
    if raw is None:
        return 0
    value = _number(raw)
    if value is None or (name == "step" and isinstance(value, float) and (
            value != int(value) or abs(value) >= 2.0**63)):
        return None
    path = f"{where}/{name}"
    if value is not raw:
        c.note(path, f"the 'offset' of {name!r} is an array of one value ({raw!r}), not a "
               "scalar", f"offset {value!r} read", minor=True)
    if name == "step" and isinstance(value, float):
        c.note(path, f"the 'offset' of 'step' is {value!r}, not an integer",
               "converted to an integer", minor=True)
        value = int(value)
    return value


def _fixed_steps(c: _Ctx, step_ds: h5py.Dataset, n: int, where: str) -> np.ndarray | None:
    """Steps of fixed-interval sampling (scalar ``step`` with an ``offset``), or None."""
    path = f"{where}/step"
    interval = _read_small(c, step_ds, path).reshape(())
    offset = _fixed_offset(c, step_ds, "step", where)
    whole = interval.dtype.kind == "f" and bool(np.isfinite(interval)) and float(
        interval) == round(float(interval)) and abs(float(interval)) < 2.0**63
    if (interval.dtype.kind not in "iu" and not whole) or not isinstance(offset, int):
        c.note(path, "'step' and its 'offset' must be integers", _NUMBERED)
        return None
    if whole:
        c.note(path, f"'step' must be integer, not {step_ds.dtype}", "converted to integers")
    first, every = int(offset), int(interval)
    if not all(_INT64.min <= v <= _INT64.max for v in (every * max(n - 1, 0),
                                                         first + every * max(n - 1, 0))):
        c.note(path, f"steps {first} + {every} k of {n} frames do not fit 64-bit "
               "integers", _NUMBERED)
        return None
    return first + every * np.arange(n, dtype=np.int64)


def _column(c: _Ctx, dset: h5py.Dataset, name: str, path: str) -> bool:
    """Whether ``dset`` (a ``step`` or ``time``) is a column, shape ``(m, 1)``: one entry
    per row, as some writers store what H5MD says is of shape ``(m,)`` (noted)."""
    if dset.shape is None or dset.ndim != 2 or dset.shape[1] != 1:
        return False
    c.note(path, f"'{name}' has shape {dset.shape}, not ({dset.shape[0]},)",
           f"read as one {name} per row", minor=True)
    return True


def _explicit_steps(c: _Ctx, step_ds: h5py.Dataset, n: int, where: str
                    ) -> tuple[np.ndarray | None, tuple[int, int] | None]:
    """Steps of explicit sampling (one per frame), or None where unusable (noted); and
    the entries of ``step_ds`` and the first of them used (ESPResSo's: 1), for a ``time``
    of as many entries to be read from the same rows without a second note."""
    path = f"{where}/step"
    if step_ds.shape is None or (step_ds.ndim != 1 and not _column(c, step_ds, "step", path)):
        c.note(path, f"'step' has shape {step_ds.shape} but 'value' has {n} frames", _NUMBERED)
        return None, None
    if step_ds.dtype.kind not in "iuf":
        c.note(path, f"'step' must be integer, not {step_ds.dtype}", _NUMBERED)
        return None, None
    rows = _sampled_rows(c, "step", int(step_ds.shape[0]), n, path)
    if rows is None:
        c.note(path, f"'step' has shape {step_ds.shape} but 'value' has {n} frames",
               _NUMBERED)
        return None, None
    raw = _unwritten_steps_cut(c, step_ds, _read_small(c, step_ds, path, rows[1],
                                                      start=rows[0]).reshape(-1), path)
    if raw.dtype.kind == "f":
        if not np.all(np.isfinite(raw)) or not np.array_equal(raw, np.round(raw)):
            c.note(path, f"'step' must be integer, not {step_ds.dtype}", _NUMBERED)
            return None, None
        c.note(path, f"'step' must be integer, not {step_ds.dtype}", "converted to integers")
    if raw.size and _beyond_int64(raw):
        c.note(path, f"'step' holds {raw.max()}, beyond 64-bit integers", _NUMBERED)
        return None, None
    return raw.astype(np.int64, copy=False), (int(step_ds.shape[0]), rows[0])


def _beyond_int64(raw: np.ndarray) -> bool:
    """Whether steps ``raw`` (integers, or floats of whole numbers) hold one no int64
    holds (compared as Python numbers: a float16 step cannot hold 2**63)."""
    if raw.dtype.kind == "u":
        return int(raw.max()) > _INT64.max
    if raw.dtype.kind == "f":
        return not -(2.0**63) <= float(raw.min()) <= float(raw.max()) < 2.0**63
    return False


def _unwritten_steps_cut(c: _Ctx, step_ds: h5py.Dataset, raw: np.ndarray, path: str
                         ) -> np.ndarray:
    """``raw`` steps without the last entries that hold the fill value of ``step_ds``
    where it cannot be a step (not above the step before them): frames allocated but
    never written. GROMACS grows ``value``, ``step`` and ``time`` a chunk (20 frames) at a
    time, with fill value -1, and its reader counts the frames the same way
    (``GmxH5mdTimeDataBlock::getNumberOfFrames``)."""
    fill = _fill_value(step_ds)
    if fill is None or raw.ndim != 1 or not raw.size:
        return raw
    written = np.flatnonzero(raw != fill)
    if not written.size and raw.size > 1 and (fill < 0 or _storage_size(c, step_ds) == 0):
        # steps increase: not one written yet (a fill of 0 may be steps written as 0)
        c.note(path, f"'step' holds only its fill value {fill} ({raw.size} frame(s)): "
               "allocated but never written (GROMACS grows its datasets a chunk at a "
               "time)", "no frames read")
        return raw[:0]
    if not written.size:
        return raw  # one step, the fill value: it may be the step written
    keep = int(written[-1]) + 1
    if keep == raw.size or not fill <= raw[keep - 1]:
        return raw
    c.note(path, f"'step' holds its fill value {fill} from frame {keep} on "
           f"({raw.size - keep} frame(s)): allocated but never written (GROMACS grows its "
           "datasets a chunk at a time)", f"the {keep} frame(s) before them read")
    return raw[:keep]


def _only_fill(c: _Ctx, dset: h5py.Dataset, start: int, path: str) -> bool:
    """Whether the entries of ``dset`` from ``start`` on all hold its own fill value."""
    fill = _fill_value(dset)
    if fill is None:
        return False
    try:
        tail = _read_small(c, dset, path, int(dset.shape[0]) - start, start=start)
    except H5MDFormatError:  # too long to read at open time: not a chunk grown ahead
        return False
    return bool(np.all(tail == fill))


def _fixed_times(c: _Ctx, time_ds: h5py.Dataset, n: int, where: str) -> np.ndarray | None:
    """Times of fixed-interval sampling (scalar ``time`` with an ``offset``), or None."""
    t_raw = _read_small(c, time_ds, f"{where}/time").reshape(())
    t_off = _fixed_offset(c, time_ds, "time", where)
    if t_off is None or not math.isfinite(float(t_raw)):
        c.note(f"{where}/time", "'time' and its 'offset' must be finite numbers",
               "'time' ignored")
        return None
    interval = float(widened(t_raw.reshape(1))[0])  # a float32 0.1 as 0.1
    offset = float(t_off)
    if abs(offset) < 1e38 and float(np.float32(offset)) == offset:  # a float32 attribute's
        offset = float(widened(np.array([offset], np.float32))[0])
    times = fixed_decimals(offset, interval, n)  # 0.3, not 0.30000000000000004
    return offset + interval * np.arange(n, dtype=np.float64) if times is None else times


def _times(c: _Ctx, time_ds: h5py.Dataset | None, n: int, where: str,
           stored: int | None = None, like_step: tuple[int, int] | None = None
           ) -> np.ndarray | None:
    """Times of the frames (fixed or explicit), or None (absent or unusable: noted).
    ``stored``: the frames of ``value``, where its ``step`` holds fewer (``n``): a
    ``time`` of as many entries as ``value`` is not noted again. ``like_step``: the
    entries of an explicit ``step`` and the first used: a ``time`` of as many entries
    is read from the same rows, not noted again (one problem, said of the step)."""
    if time_ds is None:
        return None
    path = f"{where}/time"
    if time_ds.dtype.kind not in "iuf":
        c.note(path, f"'time' must be numeric, not {time_ds.dtype}", "'time' ignored")
        return None
    if _fixed_form(c, time_ds, "time", n, where):
        return _fixed_times(c, time_ds, n, where)
    if time_ds.ndim != 1 and not _column(c, time_ds, "time", path):
        c.note(path, f"'time' has shape {time_ds.shape} but 'value' has {n} frames",
               "'time' ignored")
        return None
    m = int(time_ds.shape[0])
    # beyond n, the fill value: frames never written, said of 'step' already
    if like_step is not None and m == like_step[0] and m != n:
        rows: tuple[int, int] | None = (like_step[1], n)  # the step's rows, said of it
    elif m > n and (m == stored or _only_fill(c, time_ds, n, path)):
        rows = (0, n)
    else:
        rows = _sampled_rows(c, "time", m, n, path)
    if rows is None:
        c.note(path, f"'time' has shape {time_ds.shape} but 'value' has {n} frames",
               "'time' ignored")
        return None
    try:
        raw = _read_small(c, time_ds, path, rows[1], start=rows[0]).reshape(-1)
    except H5MDFormatError as err:  # its declared size absurd: the frames stay, untimed
        c.note(path, err.problem, "'time' ignored")
        return None
    time = raw.astype(np.float64, copy=False)
    bad = np.flatnonzero(~np.isfinite(time))
    if bad.size:
        c.note(path, f"'time' holds {time[bad[0]]} at frame {int(bad[0])} ({bad.size} "
               "such frame(s))", "'time' ignored")
        return None
    kept = _unwritten_times_cut(c, time_ds, time, path)  # compared as stored, then
    return None if kept is None else widened(raw[:kept.size])  # a float32 0.1 as 0.1


def _unwritten_times_cut(c: _Ctx, time_ds: h5py.Dataset, time: np.ndarray, path: str
                         ) -> np.ndarray | None:
    """``time`` without its last entries that hold the fill value of ``time_ds`` where it
    cannot be a time (not above the time before them): frames whose ``time`` was not
    written yet. GROMACS writes a frame's value, step, then time into datasets grown 20
    frames at a time with fill value -1: a run stopped (or a live file read) before the
    time left the fill value as the last frame's time. The caller cuts the frames to the
    times kept; None where a finished file lacks the times of more than its last frame
    (noted: the frames are numbered by their steps, as for a ``time`` that short)."""
    fill = _fill_value(time_ds)
    written = np.flatnonzero(time != fill) if fill is not None else None
    if written is None or not written.size:
        return time
    keep = int(written[-1]) + 1
    if keep == time.size or not fill <= time[keep - 1]:
        return time
    if c.live:
        return time[:keep]
    problem = (f"'time' holds its fill value {fill} from frame {keep} on "
               f"({time.size - keep} frame(s)), where 'step' is written: times never written")
    if keep == time.size - 1:
        c.note(path, f"{problem} (a writer stopped in the middle of a frame)",
               "the last frame of 'value' left out")
        return time[:keep]
    c.note(path, problem, "'time' ignored")
    return None


_NO_STEP = ("time-dependent element has a 'value' but no 'step' (H5MD requires 'step' "
            "next to 'value')")


def _sampling(c: _Ctx, grp: h5py.Group, n_frames: int, where: str) -> Sampling:
    """The sampling of an element whose value has ``n_frames`` frames.

    In a live (SWMR) file the element may hold fewer steps/times than values (or more)
    while a writer appends: the sampling is then cut to the frames all three hold. A
    missing or unusable ``step`` is noted and the frames numbered 0..n-1.
    """
    if n_frames > MAX_FRAMES:
        raise H5MDFormatError(
            c.filename, where, f"declares {n_frames} frames, more than h5mdx accepts"
        )
    step_ds = _sampling_dataset(c, grp, "step", where)
    time_ds = _sampling_dataset(c, grp, "time", where)
    key = (_addr(step_ds) if step_ds is not None else ("implicit", where),
           _addr(time_ds) if time_ds is not None else None)
    if (*key, n_frames) in c.samplings:
        for i in c.sampling_problems[(*key, n_frames)]:  # they concern this element too
            p = c.problems[i]
            c.problems[i] = replace(p, shared_by=(*p.shared_by, where))
        return c.samplings[(*key, n_frames)]
    first = len(c.problems)
    c.samplings[(*key, n_frames)] = sampling = _read_sampling(
        c, grp, step_ds, time_ds, n_frames, where, key
    )
    c.sampling_problems[(*key, n_frames)] = range(first, len(c.problems))
    return sampling


def _beside_value(grp: h5py.Group) -> list[str]:
    """The datasets of element group ``grp`` other than ``value``, ``step`` and ``time``
    (hard links), sorted: H5MD-NOMAD's ensemble averages keep their axis there (``bins``,
    ``times``, with no ``step``), time-averaged data its ``error`` and ``count``."""
    try:
        return sorted(k for k in grp if k not in ("value", "step", "time")
                      and isinstance(grp.get(k, getlink=True), h5py.HardLink)
                      and isinstance(grp[k], h5py.Dataset))
    except (OSError, KeyError, RuntimeError, ValueError):
        return []


def _left_beside(grp: h5py.Group) -> str:
    """The datasets of :func:`_beside_value`, which are left out, as words to add to a
    note; "" where none."""
    names = _beside_value(grp)
    if not names:
        return ""
    return f"; beside 'value', {', '.join(repr(n) for n in names)} left out"


def _read_sampling(c: _Ctx, grp: h5py.Group, step_ds: h5py.Dataset | None,
                   time_ds: h5py.Dataset | None, n_frames: int, where: str,
                   key: tuple) -> Sampling:
    time_unit = _unit_attr(c, time_ds, f"{where}/time") if time_ds is not None else None
    fixed = step_ds is not None and _fixed_form(c, step_ds, "step", n_frames, where)
    step_rows = None
    if step_ds is None:
        if not _has(grp, "step"):
            c.note(where, _NO_STEP, f"no step: {_NUMBERED}{_left_beside(grp)}")
        step = None
    elif fixed:
        step = _fixed_steps(c, step_ds, n_frames, where)
    else:
        step, step_rows = _explicit_steps(c, step_ds, n_frames, where)
    n = n_frames if step is None else min(n_frames, step.shape[0])
    time = _times(c, time_ds, n, where, n_frames, step_rows)
    if time is not None and time.shape[0] < n:  # times lag behind (live, or stopped)
        n = time.shape[0]
        step = None if step is None else step[:n]
    if c.version == (1, 0) and step_ds is not None:  # minor: no value is in doubt
        if time_ds is None:
            c.note(where, "H5MD 1.0 asks for a 'time' beside 'step'", "frames timed by "
                   "their steps", minor=True)
        if fixed:
            c.note(f"{where}/step", "fixed-interval sampling (a scalar 'step' with an "
                   "offset) is H5MD 1.1's, not 1.0's", "read as H5MD 1.1 defines it",
                   minor=True)
    back = np.zeros(0, np.intp)
    if step is None:
        kind, step = "implicit", np.arange(n, dtype=np.int64)
    else:
        kind = "fixed" if fixed else "explicit"
        back = np.flatnonzero(np.diff(step) <= 0)
        if back.size:  # H5MD: the steps of successive frames increase
            i = int(back[0]) + 1
            c.note(f"{where}/step", f"'step' does not increase: frame {i} has step "
                   f"{int(step[i])} after {int(step[i - 1])} ({back.size} such frame(s))",
                   "frames kept in the order stored")
    if not back.size:  # a run appended from its start: said of its steps
        _note_time_back(c, time, where)
    return Sampling(kind, step, time, time_unit if time is not None else None, key)


def _note_time_back(c: _Ctx, time: np.ndarray | None, where: str) -> None:
    """Note a ``time`` that goes back (a run restarted from an earlier time, appended):
    the frames are served in the order stored, so the ``time`` index of the Dataset is
    not monotonic and ``.sel(time=...)`` refuses slices of it. H5MD asks only the steps
    to increase: no departure."""
    if time is None or time.size < 2:
        return
    back = np.flatnonzero(np.diff(time) < 0)
    if back.size:
        i = int(back[0]) + 1
        c.note(f"{where}/time", f"'time' goes back: frame {i} has time {time[i]:g} after "
               f"{time[i - 1]:g} ({back.size} such frame(s)); the time index is not "
               "monotonic", "frames kept in the order stored", departure=False)
