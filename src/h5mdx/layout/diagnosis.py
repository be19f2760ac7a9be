"""The layout diagnosis: is the storage layout of an H5MD file making reads slow?

:func:`diagnose` is a pure function of :func:`h5mdx.format.h5md.scan` results (no file
access, no xarray). For every large time-dependent element it names the
problem in the user's terms, estimates the read time per frame relative to the
recommended layout (chunks of whole frames, about 1-8 MiB each, no or light
compression) and gives the ``h5mdx rechunk`` command that fixes it.

The cost model is deliberately simple and calibrated on one-call h5py reads of
adenylate kinase (3341 atoms) measured on the development machine (see
``benchmarks/bench_layouts.py``): a good layout streams at about 5.5 GB/s; every
chunk touched costs about 11 µs of lookup; every separate contiguous run that
must be copied out of a chunk costs about 6.5 ns (chunks that split the
``x, y, z`` axis make one run per value); gzip decompresses at about 0.8 GB/s
of output after HDF5's byte shuffle and 0.2 GB/s without it (``bench_layouts.py
--only block100 gzip1 gzip1-shuffle``: 0.60 and 0.18 GB/s read, against 2.42 uncompressed,
on 2 cores), lzf about 1 GB/s and blosc/zstd about 1.5 GB/s.
"""

from __future__ import annotations

import functools
import math
import os
import re
import shlex
from dataclasses import asdict, dataclass, replace
from typing import Any

from h5mdx.format.deflate_probe import GzipSavings, gzip_savings
from h5mdx.format.h5md import ElementInfo, FileInfo, compression_name, scan
from h5mdx.format.text import human_bytes

__all__ = [
    "Finding",
    "diagnose",
    "finding_dict",
    "read_cost",
    "recommended_frames",
    "render_findings",
]

#: Recommended chunk size (whole frames), and the accepted range, in bytes.
TARGET_CHUNK = 4 * 2**20
GOOD_RANGE = (1 * 2**20, 8 * 2**20)
#: Elements smaller than this are not worth a finding.
MIN_ELEMENT_BYTES = 16 * 2**20

_GOOD_BW = 5.5e9
_CHUNK_COST = 11e-6
_RUN_COST = 6.5e-9
#: (gzip without the byte shuffle: float coordinates inflate about 4x slower)
_DECOMPRESS_BW = {"gzip": 0.8e9, "gzip-unshuffled": 0.2e9, "lzf": 1.0e9, "blosc": 1.5e9,
                  "zstd": 1.5e9}


def _cost_codec(codec: str | None, el: ElementInfo) -> str | None:
    """The codec's name in the cost model: gzip's speed depends on the shuffle."""
    return "gzip-unshuffled" if codec == "gzip" and not el.shuffled else codec


def _chunk_cache() -> int:
    """The bytes of HDF5's default chunk cache per dataset (1 MiB before HDF5 2.0, 8 MiB
    since), which h5py uses unless told otherwise."""
    import h5py

    try:
        return int(h5py.h5p.create(h5py.h5p.FILE_ACCESS).get_cache()[2])
    except (AttributeError, IndexError, TypeError, ValueError, RuntimeError):
        return 2**20


@dataclass(frozen=True)
class Finding:
    """One observation of the layout diagnosis.

    Attributes
    ----------
    severity : {"ok", "info", "warning", "problem"}
        ``problem``: reads are several times slower than they need to be.
    code : str
        Stable identifier (``split-frames``, ``small-chunks``, ``large-chunks``,
        ``compression``, ``contiguous``, ``good``).
    element : str
        H5MD path of the element.
    message : str
        What is wrong, in the user's terms.
    cost : float or None
        Estimated read time per frame relative to the recommended layout.
    fix : str or None
        The command that fixes it.
    """

    severity: str
    code: str
    element: str
    message: str
    cost: float | None = None
    fix: str | None = None


def _human(n: float) -> str:
    """A size as the advice gives it: whole KiB."""
    return human_bytes(n, kib_digits=0)


def _frame_bytes(el: ElementInfo) -> int:
    return math.prod(el.shape[1:]) * el.dtype.itemsize


def recommended_frames(frame_bytes: int, n_frames: int) -> int:
    """Frames per chunk of the recommended layout (about 4 MiB of whole frames).

    Parameters
    ----------
    frame_bytes : int
        Bytes of one frame of the element.
    n_frames : int
        Frames of the element (a chunk never holds more).

    Returns
    -------
    int
        Frames per chunk, at least 1.
    """
    return max(1, min(int(n_frames) or 1, TARGET_CHUNK // max(1, frame_bytes)))


def _codec(el: ElementInfo) -> str | None:
    if el.compression is not None and compression_name(el.compression) in _DECOMPRESS_BW:
        return compression_name(el.compression)  # h5py's name, or a plugin filter's id
    names = " ".join(el.filters).lower()
    for key in ("blosc", "zstd", "deflate", "lzf"):
        if key in names:
            return {"deflate": "gzip"}.get(key, key)
    # another compressor (bitshuffle's LZ4, szip, bzip2): costed at the model's 1 GB/s,
    # where it was no compression at all (bitshuffle saving 12% was 'a good layout')
    return compression_name(el.compression)


def read_cost(shape: tuple[int, ...], itemsize: int, chunks: tuple[int, ...] | None,
              codec: str | None = None) -> float:
    """Modelled seconds per frame of a one-call sequential read (see module docstring).

    Parameters
    ----------
    shape : tuple of int
        The dataset's shape, frames first.
    itemsize : int
        Bytes per value.
    chunks : tuple of int or None
        The chunk shape; None for contiguous storage.
    codec : str, optional
        Where the chunks are compressed: ``"gzip"`` (after the byte shuffle),
        ``"gzip-unshuffled"``, ``"lzf"``, ``"blosc"`` or ``"zstd"``.

    Returns
    -------
    float
        Seconds per frame, from the model's bandwidth and per-chunk costs.
    """
    frame_elems = math.prod(shape[1:]) if len(shape) > 1 else 1
    frame_bytes = frame_elems * itemsize
    t = frame_bytes / _GOOD_BW
    if chunks is None:
        return t
    per_frame_chunks = math.prod(math.ceil(s / c) for s, c in zip(shape[1:], chunks[1:],
                                                                    strict=False))
    t += _CHUNK_COST * per_frame_chunks / max(1, chunks[0])
    run = 1
    for s, c in zip(reversed(shape[1:]), reversed(chunks[1:]), strict=False):
        run *= c
        if c != s:
            break
    t += _RUN_COST * frame_elems / max(1, run)
    if codec is not None:
        t += frame_bytes / _DECOMPRESS_BW.get(codec, 1e9)
    return t


def _fix(info: FileInfo, frames: int | None, compression: str | None) -> str:
    """The ``h5mdx rechunk`` command; ``frames`` None: rechunk's default, about 4 MiB of
    whole frames for each element (each element's recommended chunks)."""
    src = info.filename
    stem, _ext = os.path.splitext(src)
    dst = f"{stem}.rechunked.h5md"
    cmd = f"h5mdx rechunk {shlex.quote(src)} {shlex.quote(dst)}"
    if frames is not None:
        cmd += f" --frames-per-chunk {frames}"
    if compression is not None:
        cmd += f" --compression {compression}"
    return cmd


def _large_chunks(el: ElementInfo, chunk_bytes: int, cost: float, fix: str | None) -> Finding:
    """Chunks of many frames: a warning where filters make each frame decode the chunk,
    a note where uncompressed (HDF5 reads only the frames asked for)."""
    assert el.chunks is not None
    if el.filters:
        return Finding(
            "warning", "large-chunks", el.path,
            f"chunks of {_human(chunk_bytes)} ({el.chunks[0]} frames) passed through filters "
            f"({', '.join(el.filters)}): reading one frame decodes {el.chunks[0]} frames of "
            "data, and frame-by-frame readers other than h5mdx decode a chunk per frame when "
            f"it is larger than HDF5's chunk cache ({_human(_chunk_cache())} here)",
            cost=cost, fix=fix)
    return Finding(
        "info", "large-chunks", el.path,
        f"chunks of {_human(chunk_bytes)} ({el.chunks[0]} frames): uncompressed, so HDF5 "
        "reads only the frames asked for and frame-by-frame reading is not slowed; but "
        "readers that make one task per chunk (xarray chunks={} with other engines) "
        f"make tasks of {_human(chunk_bytes)}",
        cost=cost, fix=fix)


def _advice(el: ElementInfo, info: FileInfo | None = None) -> tuple[int, str | None, float]:
    """What the fix of ``el`` would be: its recommended frames per chunk, the compression
    to change to (None: kept) and the share of space its compression saves. gzip without
    the shuffle is advised with it where a probe of the data of ``info``'s file does not
    find it smaller without (positions rounded to 0.01 Å: 52% saved without, 37% with)."""
    codec = _codec(el)
    saved = 1.0 - el.storage_size / el.nbytes if codec and el.storage_size and el.nbytes else 0.0
    keep = None
    if codec is not None:
        # compression that saves little is not worth its read time; gzip without the
        # shuffle is best rewritten with it (h5mdx's gzip adds it): on adk's coordinates
        # it inflates 2.7x faster and saves 19% where unshuffled saves 7%, while lzf (the
        # advice before) saves nothing and so was flagged again as not worth it
        probe = _probe(info, el)
        keep = "none" if saved < 0.2 else (
            "gzip" if codec == "gzip" and not el.shuffled
            and (probe is None or _shuffle_pays(probe)) else None)
    return recommended_frames(_frame_bytes(el), el.shape[0]), keep, saved


def _chunk_share(el: ElementInfo, rec: int, keep: str | None, t: float, cost: float
                 ) -> tuple[float, str]:
    """The read time of ``el``'s chunks (``t`` per frame) over that of ``rec``-frame chunks
    compressed as ``el`` is: the chunks' own share, which their findings' severity follows;
    and the words that say it, with the whole ``cost`` apart where the fix changes the
    compression too (1-frame chunks of gzip saving 17% were a problem, '8.3x the read time
    of 34-frame chunks', when 34-frame gzip chunks read only 1.06x faster)."""
    same = read_cost(el.shape, el.dtype.itemsize, (rec, *el.shape[1:]),
                     _cost_codec(_codec(el), el))
    share = t / same
    words = f"about {share:.1f}x the read time of {rec}-frame chunks"
    if keep is not None:
        words += (f" ({cost:.1f}x that of the fix's layout, which changes the compression "
                  "too)")
    return share, words


def _diagnose_element(info: FileInfo, el: ElementInfo) -> list[Finding]:
    n = el.shape[0]
    rec, keep, saved = _advice(el, info)
    codec = _codec(el)
    good_t = read_cost(el.shape, el.dtype.itemsize, (rec, *el.shape[1:]),
                       None if keep == "none" else (keep or _cost_codec(codec, el)))
    t = read_cost(el.shape, el.dtype.itemsize, el.chunks, _cost_codec(codec, el))
    cost = t / good_t
    share, than = _chunk_share(el, rec, keep, t, cost)
    out: list[Finding] = []
    where = el.path
    if el.chunks is None:
        out.append(Finding("info", "contiguous", where,
                           "contiguous storage: the fastest to read, but it cannot be compressed "
                           "or appended to", cost=cost))
        return out
    chunk_bytes = math.prod(el.chunks) * el.dtype.itemsize
    per_frame = math.prod(math.ceil(s / c) for s, c in zip(el.shape[1:], el.chunks[1:],
                                                            strict=False))
    fix = _fix(info, rec, keep)
    severity = "problem" if share >= 2.0 else "warning"
    # frames larger than a good chunk, split into good chunks of one frame each: a frame
    # reads only its own bytes, in a few lookups (a 5.7 MiB frame in two chunks: 1.01x)
    whole = el.chunks[0] == 1 and chunk_bytes >= GOOD_RANGE[0] and rec == 1
    if per_frame > 1 and not whole:
        out.append(Finding(
            severity, "split-frames", where,
            f"each frame is spread over {per_frame} chunks of {el.chunks}; reading one frame "
            + (f"looks up {per_frame} chunks" if el.chunks[0] == 1 else  # not '1 frames'
               f"reads {el.chunks[0]} frames of data ({_human(per_frame * chunk_bytes)})")
            + f"; {than}",
            cost=cost, fix=fix))
    if chunk_bytes < GOOD_RANGE[0] and el.chunks[0] < n:
        n_chunks = math.ceil(n / el.chunks[0]) * per_frame
        out.append(Finding(
            "warning" if per_frame == 1 and share < 2.0 else severity, "small-chunks", where,
            f"chunks of {_human(chunk_bytes)} ({el.chunks[0]} frame"
            f"{'s' if el.chunks[0] != 1 else ''} each, {n_chunks} chunks): each chunk is a "
            "separate HDF5 lookup, and readers that follow the chunks (xarray chunks={} with "
            "other engines, one dask task per chunk) make one task per "
            f"{'frame' if el.chunks[0] == 1 else f'{el.chunks[0]} frames'}; h5mdx's engine "
            f"groups them into blocks; {than}",
            cost=cost, fix=fix))
    if chunk_bytes > 4 * GOOD_RANGE[1] and el.chunks[0] > 1:
        out.append(_large_chunks(el, chunk_bytes, cost, fix))
    if codec is not None:
        msg = _compression_message(info, el, codec, saved, keep, chunk_bytes)
        out.append(Finding("warning" if keep else "info", "compression", where, msg,
                           cost=cost, fix=_fix(info, rec, keep) if keep else None))
    if not out:
        what = (f"{el.chunks[0]} whole frame{'s' if el.chunks[0] != 1 else ''}" if not whole
                else f"one frame in {per_frame} parts")
        out.append(Finding("ok", "good", where,
                           f"chunks of {what} ({_human(chunk_bytes)}): "
                           "a good layout for reading", cost=cost))
    return out


def _compression_message(info: FileInfo, el: ElementInfo, codec: str, saved: float,
                         keep: str | None, chunk_bytes: int) -> str:
    """What the compression finding of ``el`` says: what it saves and costs, and of the
    byte shuffle where gzip or zstd is stored without it."""
    fb = _frame_bytes(el)
    level = f" level {el.compression_opts}" if codec == "gzip" and el.compression_opts else ""
    dec = fb / _DECOMPRESS_BW.get(_cost_codec(codec, el) or "", 1e9)
    ratio = (dec + fb / _GOOD_BW) / (fb / _GOOD_BW)
    msg = (f"{codec}{level} compression saves "  # not '-0%' where it adds bytes
           f"{f'{saved:.0%} of the space' if saved >= 0.005 else 'no space'} "
           f"({_human(el.nbytes)} stored in {_human(el.storage_size)}) but costs about "
           f"{ratio:.0f}x the serial read time of uncompressed data (decompression); "
           "with many parallel readers the cost is shared")
    if el.chunks and chunk_bytes > _chunk_cache() and el.chunks[0] > 1:
        msg += (f"; frame-by-frame readers other than h5mdx (h5py, MDAnalysis) decompress "
                f"a whole {_human(chunk_bytes)} chunk for every frame ({el.chunks[0]}x the "
                f"work) because it does not fit HDF5's chunk cache "
                f"({_human(_chunk_cache())} here)")
    probe = _probe(info, el)
    measured = "" if probe is None else (
        f" (gzip of its first {probe.frames} frame{'s' if probe.frames != 1 else ''} saves "
        f"{probe.shuffled:.0%} with the shuffle, {probe.plain:.0%} without)")
    if probe is not None and not _shuffle_pays(probe):
        msg += (f"; it is stored without HDF5's byte shuffle filter, which would not make "
                f"it smaller{measured}")
    elif codec in ("gzip", "zstd") and el.dtype.kind == "f" and not el.shuffled:
        msg += ("; it is stored without HDF5's byte shuffle filter, without which float "
                "coordinates compress little and inflate slowly (h5mdx's --compression "
                f"{codec} adds it)")
    if keep == "none":
        msg += "; for so little saving, store it uncompressed"
    elif keep == "gzip":
        msg += (f"; rewritten with the shuffle it reads about 3x faster and saves "
                f"{'more' if probe is None else 'as much or more'}{measured} (lzf, which "
                "needs no shuffle, barely compresses coordinates)")
    return msg


#: How much less gzip after the shuffle may save than without it and still be advised
#: (it inflates about 3x faster).
_SHUFFLE_SLACK = 0.05


def _shuffle_pays(probe: GzipSavings) -> bool:
    """Whether rewriting gzip with the shuffle keeps (about) the space it saves."""
    return probe.shuffled >= probe.plain - _SHUFFLE_SLACK


def _probe(info: FileInfo | None, el: ElementInfo) -> GzipSavings | None:
    """gzip's savings on ``el``'s first chunk with and without the shuffle, where it is
    stored gzip without it (else None: nothing to measure, or nothing readable)."""
    if info is None or _codec(el) != "gzip" or el.shuffled or not el.value_path:
        return None
    try:
        st = os.stat(info.filename)
    except OSError:
        return None
    return _probe_file(os.fspath(info.filename), el.value_path, el.compression_opts,
                       el.chunks[0] if el.chunks else None, (st.st_mtime_ns, st.st_size))


@functools.lru_cache(maxsize=32)
def _probe_file(path: str, value_path: str, level: Any, frames: int | None,
                stamp: tuple[int, int]) -> GzipSavings | None:
    """:func:`~h5mdx.format.deflate_probe.gzip_savings`, once per file version (``stamp``):
    the findings, the one fix and the list of elements worth their compression ask."""
    del stamp  # the cache key only
    return gzip_savings(path, value_path, level, frames)


def diagnose(info: FileInfo | str | os.PathLike[str], *,
             min_bytes: int = MIN_ELEMENT_BYTES) -> list[Finding]:
    """Layout findings for every large time-dependent particles element of a file.

    Parameters
    ----------
    info : FileInfo or path-like
        From :func:`h5mdx.format.h5md.scan`, or the file, scanned here.
    min_bytes : int, optional
        Elements smaller than this (uncompressed) are skipped: their layout does
        not matter.

    Returns
    -------
    list of Finding
        Empty when nothing is large enough to matter.
    """
    if not isinstance(info, FileInfo):
        info = scan(info)
    out: list[Finding] = []
    fixed: list[ElementInfo] = []
    worth: list[ElementInfo] = []  # compressed, for a saving worth its read time
    for pg in info.particles.values():
        for el in pg.elements.values():
            if (el.time_dependent and len(el.shape) >= 2 and el.nbytes >= min_bytes
                    and el.shape[0] > 1):
                found = _diagnose_element(info, el)
                out.extend(found)
                if any(f.fix for f in found):
                    fixed.append(el)
                if _codec(el) is not None and _advice(el, info)[1] is None:
                    worth.append(el)
    return _one_fix(info, out, fixed, worth)


def _not_decompressed(findings: list[Finding], worth: list[ElementInfo]) -> list[Finding]:
    """``findings`` without the fix ``--compression none`` of an element compressed for
    little saving, where another's compression saves its space (``worth``): rechunk's
    options apply to every element, and the one command decompressed them all (positions
    saving 34% written uncompressed for velocities saving 13%). That element's findings
    say so, and compare its chunks no more with uncompressed ones."""
    names = ", ".join(el.path for el in worth)
    dropped = {f.element for f in findings if f.code == "compression" and f.fix
               and f.fix.endswith("--compression none")}
    out = []
    for f in findings:
        if f.element in dropped and f.code == "compression":
            f = replace(f, fix=None, message=f"{f.message} (not in the fix: rechunk's "
                        f"--compression applies to every element, and {names} saves "
                        "its space)")
        elif f.element in dropped:
            f = replace(f, message=re.sub(r" \([\d.]+x that of the fix's layout, which "
                                          r"changes the compression too\)", "", f.message))
        out.append(f)
    return out


def _one_fix(info: FileInfo, findings: list[Finding], fixed: list[ElementInfo],
             worth: list[ElementInfo] | None = None) -> list[Finding]:


    """``findings`` with one command for the file where its elements' fixes differ:
    rechunk's options apply to every element, so two commands (``--frames-per-chunk 69``
    for float positions, ``34`` for double velocities) wrote one output each undoing the
    other. Frames per chunk that differ become rechunk's default (about 4 MiB of whole
    frames for each element, each element's recommendation); gzip wins over no
    compression (an element compressed for little saving is then said again, uncompressed
    at once); no compression loses to a compression that saves its space (``worth``)."""
    advice = [_advice(el, info)[:2] for el in fixed]
    if worth and any(keep == "none" for _frames, keep in advice):
        advice = [(frames, None if keep == "none" else keep) for frames, keep in advice]
        findings = _not_decompressed(findings, worth)
    elif len({_fix(info, frames, keep) for frames, keep in advice}) < 2:
        return findings
    frames = {frames for frames, _keep in advice}
    keeps = {keep for _frames, keep in advice} - {None}
    fix = _fix(info, frames.pop() if len(frames) == 1 else None,
               "gzip" if "gzip" in keeps else keeps.pop() if keeps else None)
    return [replace(f, fix=fix) if f.fix else f for f in findings]


def finding_dict(f: Finding) -> dict[str, Any]:
    """A JSON-able dict of a finding (keys as the :class:`Finding` attributes).

    Parameters
    ----------
    f : Finding

    Returns
    -------
    dict
        ``cost`` rounded to 2 decimals.
    """
    d = asdict(f)
    if d["cost"] is not None:
        d["cost"] = round(float(d["cost"]), 2)
    return d


def render_findings(findings: list[Finding]) -> list[str]:
    """Text lines for ``h5mdx info``, one command per distinct fix at the end.

    Parameters
    ----------
    findings : list of Finding

    Returns
    -------
    list of str
    """
    lines = []
    for f in findings:
        lines.append(f"[{f.severity}] {f.element}: {f.message}")
    fixes = list(dict.fromkeys(f.fix for f in findings if f.fix))
    for fix in fixes:
        lines.append(f"fix: {fix}")
    return lines
