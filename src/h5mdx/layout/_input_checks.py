"""Checks of what :func:`h5mdx.layout.convert.convert` reads, made before anything is
written: a file cut inside a frame, or holding more than MDAnalysis reads of it (a DCD,
XTC, TRR, XYZ, TRZ file; a GRO file of several frames); a Universe that reads its file
without converting its units; an H5MD input scaled by a ``unit_factor`` MDAnalysis
ignores."""

from __future__ import annotations

import contextlib
import os
import warnings
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

from h5mdx.errors import H5MDReadError

__all__ = ["check_unit_factors", "check_units_converted", "check_whole_frames", "h5md_inputs",
           "without_empty"]

#: The quantities a reader's ``units`` names, with MDAnalysis' kind of unit and base unit
_BASE_UNITS = (("length", "length", "Angstrom"), ("time", "time", "ps"),
               ("velocity", "speed", "Angstrom/ps"), ("force", "force", "kJ/(mol*Angstrom)"))


def without_empty(trajectories: Sequence[Any], out: str, partial: bool) -> list[Any]:
    """The trajectories but those of 0 bytes (a run that stopped before its first frame),
    each said in a warning, with ``partial``; without it an empty one is refused, naming
    it, before anything is written. MDAnalysis said only 'XDR read error = endoffile' of
    an empty XTC among others, naming them all."""
    empty = [t for t in trajectories if isinstance(t, (str, os.PathLike))
             and os.path.isfile(t) and os.path.getsize(t) == 0]
    if not empty:
        return list(trajectories)
    kept = [t for t in trajectories if t not in empty]
    if partial and kept:
        for t in empty:
            warnings.warn(f"{os.fspath(t)}: the file is empty (0 bytes): it holds no frames "
                          "and is left out (partial=True)", UserWarning, stacklevel=3)
        return kept
    fix = (": pass partial=True (--partial on the command line) to convert the frames of "
           "the others" if kept else "")
    raise H5MDReadError(os.fspath(empty[0]), None, "the file is empty (0 bytes): it holds "
                        f"no frames; nothing written to {out}{fix}")


def check_units_converted(u: Any, out: str) -> None:
    """Refuse a Universe whose reader was opened with ``convert_units=False``, where its
    file's units are not MDAnalysis': its values are then in the file's units, and were
    written labelled as MDAnalysis' (a TRR's positions in nm as 'Angstrom', 10 times too
    small)."""
    from MDAnalysis.units import get_conversion_factor

    ts = u.trajectory.ts  # velocities and forces count where the trajectory has them
    held = {"velocity": ts.has_velocities, "force": ts.has_forces}
    for reader in getattr(u.trajectory, "readers", None) or [u.trajectory]:
        if getattr(reader, "convert_units", True):
            continue
        units = getattr(reader, "units", None) or {}
        native = []
        for quantity, kind, base in _BASE_UNITS:
            unit = units.get(quantity) if held.get(quantity, True) else None
            try:
                same = unit is None or get_conversion_factor(kind, unit, base) == 1
            except (KeyError, ValueError, TypeError):  # a unit MDAnalysis does not know
                same = False
            if not same:
                native.append(f"{quantity} in {unit}")
        if native:
            raise ValueError(
                f"{getattr(reader, 'filename', None) or 'the Universe'}: its reader was "
                f"opened with convert_units=False, so MDAnalysis gives its values in the "
                f"file's units ({', '.join(native)}), and convert writes them labelled in "
                "MDAnalysis' (Angstrom, ps, Angstrom/ps, kJ/(mol*Angstrom)): open the "
                f"Universe without convert_units=False; nothing written to {out}")


def check_unit_factors(inputs: Sequence[str], out: str) -> None:
    """Refuse an H5MD input whose particles' values are scaled by H5MD-NOMAD's
    ``unit_factor``, which MDAnalysis' H5MD reader ignores: positions stored in units of
    10 nm were written 10 times too small (323.1 Å read by h5mdx, 32.3 Å written)."""
    import h5py

    from h5mdx.errors import H5MDUnitError

    for f in h5md_inputs(inputs):
        found: list[tuple[str, Any]] = []

        def visit(name: str, obj: Any, found: list[tuple[str, Any]] = found) -> None:
            factor = obj.attrs.get("unit_factor") if isinstance(obj, h5py.Dataset) else None
            if factor is not None and np.size(factor) == 1 and float(np.ravel(factor)[0]) != 1:
                found.append((name, factor))

        with contextlib.suppress(OSError, KeyError, TypeError, ValueError):
            particles = f.get("particles")
            if isinstance(particles, h5py.Group):
                particles.visititems(visit)
        if found:
            path, factor = found[0]
            raise H5MDUnitError(
                f"{f.filename} [/particles/{path}]: values in units of unit_factor "
                f"{float(np.ravel(factor)[0])!r} x the unit (H5MD-NOMAD's), which MDAnalysis' "
                f"H5MD reader ignores: convert would write them that many times off; nothing "
                f"written to {out}. h5mdx reads the factor: xr.open_dataset(IN, engine='h5md', "
                "convert_units=True).md.to_h5md(OUT) writes the file in MDAnalysis' units (after "
                "import h5mdx)")


def frames_before(k: int) -> str:
    """``"the frame"`` or ``"the k frames"``, of frames before a damaged one ("the 1
    frames before it")."""
    return "the frame" if k == 1 else f"the {k} frames"


def check_whole_frames(u: Any, out: str, partial: bool) -> None:
    """Raise where an input file ends inside a frame or holds more after the last frame
    MDAnalysis reads (:func:`_damaged_end`); with ``partial``, warn that the frames before
    it are converted instead (a run that crashed while writing its last frame).

    The Universe is left at the frame it was at: :func:`_xdr_end` reads the last frames,
    and a selection by position (``around``, ``prop z < 30``) was then made in the last
    frame, not the first."""
    at = u.trajectory.ts.frame
    readers = getattr(u.trajectory, "readers", None) or [u.trajectory]
    for reader in readers:
        problem = _damaged_end(reader)
        if problem is None:
            continue
        name = getattr(reader, "filename", None)
        if partial and reader.n_frames:
            warnings.warn(f"{name}: {problem}; {frames_before(reader.n_frames)} before it "
                          f"{'is' if reader.n_frames == 1 else 'are'} converted (partial=True)", UserWarning, stacklevel=3)
            continue
        # none before it that MDAnalysis reads (a cut TRZ file): partial=True cannot help
        fix = (": pass partial=True (--partial on the command line) to convert "
               f"{frames_before(reader.n_frames)} before it") if reader.n_frames else ""
        raise H5MDReadError(name, None, f"{problem}; nothing written to {out}{fix}")
    if any(getattr(r, "_xdr", None) is not None and r.n_frames for r in readers):
        with warnings.catch_warnings():  # said as the frame was first read
            warnings.simplefilter("ignore")
            u.trajectory[at]  # a ChainReader's Timestep is its readers': each moved it


def _damaged_end(reader: Any) -> str | None:
    """What is wrong with the end of a reader's file (None: nothing): a DCD file that
    ends inside a frame (MDAnalysis counts its frames from the file's size and reads the
    whole ones, so a cut file converted without a word), an XTC or TRR file that holds
    more after its last frame (:func:`_xdr_end`)."""
    problem = _xdr_end(reader) or _text_end(reader) or _trz_end(reader) or _gro_end(reader)
    if problem is not None:
        return problem
    dcd = getattr(reader, "_file", None)
    sizes = [getattr(dcd, name, None) for name in ("_header_size", "_firstframesize",
                                                    "_framesize")]
    name = getattr(reader, "filename", None)
    if None in sizes or not name or not os.path.isfile(name) or not reader.n_frames:
        return None
    header, first, frame = (int(x) for x in sizes)  # type: ignore[arg-type]  # no None
    whole = header + first + (int(reader.n_frames) - 1) * frame
    extra = os.path.getsize(name) - whole
    if 0 < extra < frame:
        return (f"the file ends {extra} bytes into frame {reader.n_frames + 1} (of "
                f"{frame} bytes): it was cut while written or copied; MDAnalysis reads "
                f"only the {reader.n_frames} whole frames")
    return None


def _gro_end(reader: Any) -> str | None:
    """Where a GRO file holds more frames than its first, what to say (None: one frame).
    MDAnalysis' GRO reader reads a file's first frame alone: a GRO file of 2 frames was
    converted as 1, with exit 0."""
    from MDAnalysis.lib.util import anyopen

    name = getattr(reader, "filename", None)
    if type(reader).__name__ != "GROReader" or not name or not os.path.isfile(name):
        return None
    per_frame = int(reader.n_atoms) + 3  # the title, the atoms' count, the atoms, the box
    try:
        with anyopen(name, "rt") as fh:
            lines = sum(1 for line in fh if line.strip())
    except (OSError, UnicodeDecodeError):
        return None
    if lines <= per_frame:
        return None
    return (f"the file holds {lines // per_frame} frames ({lines} lines, of {per_frame} a "
            "frame), and "
            "MDAnalysis' GRO reader reads its first frame only: write the frames as a "
            f"trajectory (gmx trjconv -f {os.path.basename(name)} -o frames.xtc) and convert "
            "that, with the GRO file as the topology")


def _trz_end(reader: Any) -> str | None:
    """Where a TRZ file ends inside a frame, what to say (None: it does not). MDAnalysis
    counts a TRZ file's frames from its size and counts none where the size is not whole
    frames: a cut file read as 0 frames, said as 'the trajectory has 0 frames', and one
    after another trajectory was left out of the copy without a word."""
    header, frame = getattr(reader, "_headerdtype", None), getattr(reader, "_dtype", None)
    name = getattr(reader, "filename", None)
    if type(reader).__name__ != "TRZReader" or header is None or frame is None or not name \
            or not os.path.isfile(name):
        return None
    body = os.path.getsize(name) - int(header.itemsize)
    if body <= 0 or not body % int(frame.itemsize):
        return None
    whole, extra = divmod(body, int(frame.itemsize))
    return (f"the file ends {extra} bytes into frame {whole + 1} (of {frame.itemsize} "
            f"bytes): it was cut while written or copied; MDAnalysis reads no frame of a "
            f"TRZ file that is not whole frames: a copy of its first "
            f"{int(header.itemsize) + whole * int(frame.itemsize)} bytes holds the {whole} "
            f"whole frames")


def _text_end(reader: Any) -> str | None:
    """Where an XYZ file holds more than whole frames after its last one, what follows
    (None: nothing, or blank lines). MDAnalysis counts an XYZ file's frames as its lines
    over the lines of one frame, rounded down, and notes where each starts: a file cut
    inside frame 7 read as 6 frames, converted with exit 0. A compressed file
    (``.xyz.bz2``) is not checked: its offsets are not the file's."""
    name = getattr(reader, "filename", None)
    if type(reader).__name__ != "XYZReader" or not name or not os.path.isfile(name) \
            or getattr(reader, "compression", None):
        return None
    n = int(reader.n_frames)  # counts the frames, and notes their offsets, at first use
    offsets = getattr(reader, "_offsets", None)
    if not isinstance(offsets, list) or len(offsets) <= n:
        return None
    try:
        with open(name, "rb") as fh:
            fh.seek(int(offsets[n]))
            rest = fh.read()
    except OSError:
        return None
    lines = rest.strip().count(b"\n") + 1 if rest.strip() else 0
    if not lines:
        return None
    return (f"{lines} lines follow its frame {n}, of the {reader.n_atoms + 2} lines of a "
            f"frame: the file is cut inside frame {n + 1} (MDAnalysis counts its whole "
            f"frames, and reads only the {n} before)")


def _xdr_end(reader: Any) -> str | None:
    """Where an XTC or TRR file goes on after the last frame MDAnalysis counts, what
    follows (None: nothing). MDAnalysis counts the frames by scanning the file and stops,
    without a word, at a damaged frame (a TRR of 10 frames garbled in its middle read as
    its first 5, and converted with exit 0). The last frame is read to find where it
    ends; where that read fails, the frames' count says so as they are written
    (:func:`h5mdx.layout.convert._check_all_read`)."""
    xdr: Any = getattr(reader, "_xdr", None)
    name = getattr(reader, "filename", None)
    if not hasattr(xdr, "_bytes_tell") or not name or not os.path.isfile(name) \
            or not reader.n_frames:
        return None
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            reader[reader.n_frames - 1]
        end = int(xdr._bytes_tell())
    except Exception:  # MDAnalysis raises many kinds of errors; said later
        return None
    extra = os.path.getsize(name) - end
    if extra > 0:
        return (f"{extra} bytes follow its frame {reader.n_frames}, which ends at byte "
                f"{end}: the file is damaged or cut there (MDAnalysis counts the frames up "
                f"to a frame it cannot read, and reads only the {reader.n_frames} before)")
    return None


def h5md_inputs(trajectories: Sequence[Any]) -> Iterator[Any]:
    """Each input that is an HDF5 file, open (read-only); those that cannot be read skip."""
    import h5py

    for t in trajectories:
        if not isinstance(t, (str, os.PathLike)):
            continue
        try:
            if not h5py.is_hdf5(t):
                continue
            with h5py.File(t, "r") as f:
                yield f
        except OSError:
            continue
