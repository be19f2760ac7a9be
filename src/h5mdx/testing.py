"""Helpers that write H5MD files for tests, notebooks and benchmarks.

:func:`write_h5md` writes the file with plain h5py, element by element, so
tests can cover every H5MD storage kind (explicit and fixed-interval sampling,
time-independent elements, several particle groups, compression, fill
values) independently of h5mdx's own writer.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

import h5py
import numpy as np

__all__ = ["adk_example", "adk_topology", "assert_rmsd_close", "write_element", "write_h5md"]


def _write_h5md_header(f: h5py.File, creator: str = "h5mdx.testing") -> None:
    h5md = f.create_group("h5md")
    h5md.attrs["version"] = np.array([1, 1], dtype=np.int32)
    h5md.create_group("author").attrs["name"] = "h5mdx tests"
    c = h5md.create_group("creator")
    c.attrs["name"] = creator
    c.attrs["version"] = "0"


def write_element(
    group: h5py.Group,
    name: str,
    value: np.ndarray,
    *,
    step: np.ndarray | int | None = None,
    time: np.ndarray | float | None = None,
    step_offset: int = 0,
    time_offset: float = 0.0,
    unit: str | None = None,
    time_unit: str | None = "ps",
    chunks: tuple[int, ...] | bool | None = None,
    compression: str | None = None,
    compression_opts: Any = None,
    shuffle: bool = False,
    fillvalue: Any = None,
    link_sampling_from: h5py.Group | None = None,
) -> h5py.Group | h5py.Dataset:
    """Write one H5MD element with h5py.

    ``step=None`` writes a time-independent dataset. An integer ``step`` (and a
    float ``time``) writes fixed-interval sampling with ``offset`` attributes; arrays
    write explicit sampling. ``link_sampling_from`` hard-links ``step``/``time`` of
    another element instead of writing them.

    Parameters
    ----------
    group : h5py.Group
        The group to write the element in (a particles or observables group).
    name : str
        The element's name (``position``, ``velocity``, ``energy``...).
    value : numpy.ndarray
        The values: frames first for a time-dependent element.
    step, time : array_like, int or float, optional
        Explicit sampling (one per frame), or a fixed interval (scalar).
    step_offset, time_offset : int or float, optional
        The ``offset`` attributes of fixed-interval sampling.
    unit, time_unit : str or None, optional
        The ``unit`` attributes of ``value`` and ``time`` (None: none written).
    chunks : tuple of int or bool, optional
        HDF5 chunk shape (``True``: h5py's guess); default contiguous.
    compression, compression_opts, shuffle, fillvalue : optional
        Passed to :meth:`h5py.Group.create_dataset` for ``value``.
    link_sampling_from : h5py.Group, optional
        An element whose ``step`` and ``time`` this one shares, by hard links.

    Returns
    -------
    h5py.Group or h5py.Dataset
        The element's group, or the dataset of a time-independent element.
    """
    kwargs: dict[str, Any] = {}
    if chunks is not None:
        kwargs["chunks"] = chunks
    if compression is not None:
        kwargs["compression"] = compression
        if compression_opts is not None:
            kwargs["compression_opts"] = compression_opts
    if shuffle:
        kwargs["shuffle"] = True
    if fillvalue is not None:
        kwargs["fillvalue"] = fillvalue
    if step is None and link_sampling_from is None:
        dset = group.create_dataset(name, data=value, **kwargs)
        if unit is not None:
            dset.attrs["unit"] = unit
        return dset
    el = group.create_group(name)
    dset = el.create_dataset("value", data=value, **kwargs)
    if unit is not None:
        dset.attrs["unit"] = unit
    if link_sampling_from is not None:
        el["step"] = link_sampling_from["step"]
        if "time" in link_sampling_from:
            el["time"] = link_sampling_from["time"]
        return el
    assert step is not None  # time-independent elements returned above
    if np.ndim(step) == 0:
        s = el.create_dataset("step", data=np.int64(step))
        s.attrs["offset"] = np.int64(step_offset)
        if time is not None:
            t = el.create_dataset("time", data=np.float64(time))
            t.attrs["offset"] = np.float64(time_offset)
            if time_unit:
                t.attrs["unit"] = time_unit
    else:
        el.create_dataset("step", data=np.asarray(step, dtype=np.int64))
        if time is not None:
            t = el.create_dataset("time", data=np.asarray(time))
            if time_unit:
                t.attrs["unit"] = time_unit
    return el


def write_h5md(
    path: str | os.PathLike[str],
    particles: Mapping[str, Mapping[str, Mapping[str, Any]]],
    *,
    box: Mapping[str, Mapping[str, Any]] | None = None,
    observables: Mapping[str, Mapping[str, Any]] | None = None,
    parameters: Mapping[str, Any] | None = None,
) -> str:
    """Write a small H5MD file.

    Parameters
    ----------
    path : path-like
        Output file.
    particles : mapping
        ``{group: {element: kwargs of write_element (with "value")}}``.
    box : mapping, optional
        ``{group: {"dimension": 3, "boundary": [...], "edges": kwargs or None}}``. A
        group not named gets the box H5MD requires without edges: boundary ``none``, the
        dimension of its ``position`` (3 without one); a group mapped to None gets none.
        The boundary defaults to ``periodic`` with edges, else ``none``.
    observables : mapping, optional
        ``{"name" or "sub/name": kwargs of write_element}``.
    parameters : mapping, optional
        ``{name: value}`` written as datasets under ``/parameters``.

    Returns
    -------
    str
        The path written (atomically: a file already there, even one still open for
        reading, is replaced; one another process writes is refused).
    """
    from h5mdx.layout._atomic import atomic_output

    path = os.fspath(path)
    # written aside and renamed into place: a file a Dataset still has open is replaced
    # (that Dataset then refuses to read on), where HDF5 refused to truncate it
    with atomic_output(path, overwrite=True, hdf5=True) as tmp, h5py.File(tmp, "w") as f:
        _write_h5md_header(f)
        pgrp = f.create_group("particles")
        for gname, elements in particles.items():
            g = pgrp.create_group(gname)
            for ename, kw in elements.items():
                kw = dict(kw)
                link = kw.pop("link_sampling_from", None)
                write_element(
                    g, ename, link_sampling_from=g[link] if link else None, **kw
                )
            if box and gname in box and box[gname] is None:
                continue
            if box and gname in box:
                spec = dict(box[gname])
                dim = int(spec.get("dimension", 3))
                periodic = "periodic" if spec.get("edges") is not None else "none"
                boundary = spec.get("boundary", [periodic] * dim)
            else:
                spec = {}
                dim = _dimension(elements.get("position"))
                boundary = ["none"] * dim
            b = g.create_group("box")
            b.attrs["dimension"] = np.int32(dim)
            b.attrs["boundary"] = np.array([x.encode() for x in boundary], dtype="S8")
            edges = spec.get("edges")
            if edges is not None:
                edges = dict(edges)
                link = edges.pop("link_sampling_from", None)
                write_element(b, "edges", link_sampling_from=g[link] if link else None, **edges)
        if observables:
            ogrp = f.create_group("observables")
            for oname, kw in observables.items():
                parent = ogrp
                *subs, leaf = oname.split("/")
                for sub in subs:
                    parent = parent.require_group(sub)
                write_element(parent, leaf, **kw)
        if parameters:
            par = f.create_group("parameters")
            for name, value in parameters.items():
                par.create_dataset(name, data=value)
    return path


def _dimension(position: Mapping[str, Any] | None) -> int:
    """The number of spatial components of a ``position`` element's kwargs (3 without)."""
    if position is None:
        return 3
    value = np.asarray(position["value"])
    time_dependent = position.get("step") is not None or position.get("link_sampling_from")
    tail = value.shape[1:] if time_dependent else value.shape
    return int(tail[-1]) if len(tail) == 2 and 1 <= tail[-1] <= 3 else 3


def adk_example(path: str | os.PathLike[str] | None = None, *, frames_per_chunk: int = 10) -> str:
    """Write the adenylate-kinase example trajectory (MDAnalysisTests PSF/DCD) to H5MD.

    The file (98 frames, 3341 atoms, positions in Å, time in ps, masses, charges
    and species from the topology) is written once with :func:`h5mdx.layout.convert.convert`
    and reused.

    Parameters
    ----------
    path : path-like, optional
        Where to write; default ``~/.cache/h5mdx/adk-c<frames_per_chunk>.h5md``.
    frames_per_chunk : int, default 10
        HDF5 chunk length along time.

    Returns
    -------
    str
        The path of the H5MD file. Its topology is :func:`adk_topology`.
    """
    from h5mdx._optional import import_optional
    from h5mdx.layout.convert import convert

    datafiles = import_optional("MDAnalysisTests.datafiles", "the adk example data")
    ours = path is None
    if path is None:
        cache = os.path.join(os.path.expanduser("~"), ".cache", "h5mdx")
        os.makedirs(cache, exist_ok=True)
        path = os.path.join(cache, f"adk-c{frames_per_chunk}.h5md")
    path = os.fspath(path)
    unlike = _unlike_adk_example(path, frames_per_chunk, ours) if os.path.exists(path) \
        else None
    if unlike is not None and not ours:  # another file: never replaced
        raise FileExistsError(f"{path} exists but is not the adk example ({unlike}); remove "
                              "it, or give adk_example another path")
    if not os.path.exists(path) or unlike is not None:  # absent, or the cache's is stale
        convert(datafiles.PSF, [datafiles.DCD], path, frames_per_chunk=frames_per_chunk,
                progress=False, overwrite=True)
    return path


def _unlike_adk_example(path: str, frames_per_chunk: int, cache: bool = False) -> str | None:
    """How the H5MD file at ``path`` differs from :func:`adk_example`'s; None where alike
    (``cache``: the cache's copy, also stale where an older h5mdx wrote it without the
    topology it holds now)."""
    from h5mdx.errors import H5MDError
    from h5mdx.format.h5md import scan

    try:
        info = scan(path)
    except (H5MDError, OSError, ValueError) as err:
        return f"it cannot be read as H5MD: {err}"
    if cache and info.vmd_structure is None:
        return "no VMD structure module (an older h5mdx wrote it)"
    pg = info.particles.get("trajectory")
    pos = None if pg is None else pg.elements.get("position")
    if pos is None:
        return "no /particles/trajectory/position"
    if pos.shape != (98, 3341, 3):
        return f"positions of shape {pos.shape}, not (98, 3341, 3)"
    if pos.chunks is None or pos.chunks[0] != min(frames_per_chunk, 98):  # at most its frames
        return f"chunks {pos.chunks}, not of {frames_per_chunk} frames"
    return None


def adk_topology() -> str:
    """Path of the adenylate-kinase PSF topology shipped with MDAnalysisTests."""
    from h5mdx._optional import import_optional

    return import_optional("MDAnalysisTests.datafiles", "the adk example data").PSF


def assert_rmsd_close(actual: Any, expected: Any, atol: float = 1e-4) -> None:
    """Assert two RMSD series agree to ``atol`` Å (default 1e-4).

    Parameters
    ----------
    actual, expected : array_like
        The series (DataArrays, arrays or lists), frame by frame.
    atol : float, default 1e-4
        The largest difference allowed, in Å; no relative tolerance.

    Raises
    ------
    AssertionError
        Where any frame differs by more (numpy's report names it).
    """
    np.testing.assert_allclose(np.asarray(actual), np.asarray(expected), rtol=0, atol=atol)
