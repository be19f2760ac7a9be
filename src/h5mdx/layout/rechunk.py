"""Rewrite an H5MD file with another storage layout (or into a Zarr store).

:func:`rechunk` copies every group, dataset, attribute and link of the input.
The ``value`` datasets of time-dependent elements (particles, box edges,
observables) get the new layout (chunks of whole frames, compression); every
other dataset is copied as it is, but with the compression asked for where one is
(``_refilterable``: not scalars and small unchunked datasets). An object reachable
under several paths (hard links, such as the ``step``/``time`` datasets that
MDAnalysis shares between elements) stays one object; soft and external links stay
links.
Data moves in blocks of whole output chunks (at most ``buffer_mib``), so
memory stays bounded whatever the file size.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import os
import time as _time
import warnings
from collections.abc import Iterator
from typing import Any

import h5py
import numpy as np

from h5mdx._progress import progress_bar
from h5mdx.errors import H5MDReadError
from h5mdx.format.checksums import Digests, dataset_checksums
from h5mdx.format.compression import compression_kwargs
from h5mdx.format.h5md import (
    ElementInfo,
    FileInfo,
    free_form,
    object_address,
    open_h5md,
    reference_paths,
    scan,
)
from h5mdx.format.writer import SMALL_UNCHUNKED_BYTES, Layout, ensure_room, written_file
from h5mdx.layout._atomic import atomic_output, raise_if_interrupted
from h5mdx.layout.convert import ConvertStats, _check_output_name, _size, is_zarr_path
from h5mdx.layout.diagnosis import _frame_bytes

__all__ = ["rechunk", "time_dependent_elements"]

_DEFLATE, _SHUFFLE, _FLETCHER32, _SZIP, _NBIT, _SCALEOFFSET, _LZF = 1, 2, 3, 4, 5, 6, 32000


def time_dependent_elements(info: FileInfo) -> list[ElementInfo]:
    """Every time-dependent element of a file (particles, box edges, observables,
    connectivity)."""
    out: list[ElementInfo] = []
    for pg in info.particles.values():
        out.extend(e for e in pg.elements.values() if e.time_dependent)
        if pg.box is not None and pg.box.edges is not None and pg.box.edges.time_dependent:
            out.append(pg.box.edges)
    out.extend(e for e in info.observables.values() if e.time_dependent)
    out.extend(e for e in info.connectivity.values() if e.time_dependent)
    return out


def _addr(obj: Any) -> tuple[Any, ...]:
    return (obj.file.id.fileno, *object_address(obj))


#: The attributes of HDF5's dimension scales (netCDF-4's dimensions), which hold object
#: references: made again by attaching the scales in the output (:func:`_make_refs`).
_DIMENSION_LIST, _REFERENCE_LIST = "DIMENSION_LIST", "REFERENCE_LIST"


def _copy_attrs(src: Any, dst: Any, refs: list[tuple[str, str | None, Any]] | None = None) -> None:
    """Copy the attributes of ``src`` to ``dst``; an object reference (H5MD's
    ``particles_group``) is put in ``refs`` as ``(dst path, name, source paths)``, to be
    made once its target exists in the output (:func:`_make_refs`): copied as it is, it
    would hold an address in the input file. So are the scales attached to a dataset's
    axes (``DIMENSION_LIST``, with each scale's ``REFERENCE_LIST``: copied as they were,
    the copy's could not be read)."""
    for name in src.attrs:
        aid = src.attrs.get_id(name)
        if refs is not None and name in (_DIMENSION_LIST, _REFERENCE_LIST) \
                and isinstance(src, h5py.Dataset) and _holds_refs(aid.dtype):
            if name == _DIMENSION_LIST:
                refs.append((dst.name, name, [reference_paths(src, np.asarray(axis, object))
                                              for axis in src.attrs[name]]))
            continue  # a scale's REFERENCE_LIST: made by attaching it
        if refs is not None and h5py.check_ref_dtype(aid.dtype) is h5py.Reference:
            refs.append((dst.name, name, reference_paths(src, src.attrs[name])))
            continue
        if refs is not None and h5py.check_ref_dtype(aid.dtype) is h5py.RegionReference:
            refs.append((dst.name, name, _Regions.of(src, src.attrs[name])))
            continue
        dst.attrs.create(name, src.attrs[name], dtype=_same_type(aid))


def _same_type(oid: Any) -> Any:
    """The type to create a copy of the attribute or dataset ``oid`` with: its own HDF5
    type for text (numpy's dtype made a NULLTERM or SPACEPAD fixed-length string
    NULLPAD), else its numpy dtype."""
    tid = oid.get_type()
    return h5py.Datatype(tid) if tid.get_class() == h5py.h5t.STRING else oid.dtype


def _group_like(src: h5py.Group, gdst: h5py.Group, name: str) -> h5py.Group:
    """A new group ``name`` in ``gdst`` made with the creation properties of ``src``: its
    order of links and attributes tracked where the source's is (h5py's default, names in
    alphabetical order, reordered a file written with ``track_order=True``)."""
    lcpl = h5py.h5p.create(h5py.h5p.LINK_CREATE)
    lcpl.set_char_encoding(h5py.h5t.CSET_UTF8)
    return h5py.Group(h5py.h5g.create(gdst.id, name.encode(), lcpl=lcpl,
                                      gcpl=src.id.get_create_plist()))


def _file_like(fin: h5py.File) -> dict[str, Any]:
    """``h5py.File`` keywords of a copy of ``fin``: its root group's creation order
    tracked where the input's is (links or attributes), and its user block (the bytes
    before HDF5's signature, another program's header) as large."""
    gcpl = fin["/"].id.get_create_plist()
    kwargs: dict[str, Any] = {"track_order": bool(
        (gcpl.get_link_creation_order() | gcpl.get_attr_creation_order())
        & h5py.h5p.CRT_ORDER_TRACKED)}
    if fin.userblock_size:
        kwargs["userblock_size"] = fin.userblock_size
    return kwargs


def _copy_userblock(src: str, tmp: str) -> None:
    """Copy the user block of ``src`` into the copy ``tmp``, made as large and closed
    (a copy's user block was lost: the input's header, the copy's signature at 0)."""
    with h5py.File(tmp, "r") as f:
        size = int(f.userblock_size)
    if size:
        with open(src, "rb") as fin, open(tmp, "r+b") as fout:
            fout.write(fin.read(size))


@dataclasses.dataclass(frozen=True)
class _Regions:
    """Region references of the input, to be made again in the output: the path of each
    one's dataset and its selection (a dataspace), None for a null or unreadable one; an
    object array of them, or one. Copied as they are, an attribute's held addresses in the
    input (it read as garbage), a dataset's were made null by HDF5."""

    targets: Any

    @classmethod
    def of(cls, obj: h5py.HLObject, value: Any) -> _Regions:
        def target(ref: Any) -> tuple[str, Any] | None:
            try:
                return (str(obj.file[ref].name), h5py.h5r.get_region(ref, obj.id)) \
                    if ref else None
            except (KeyError, OSError, RuntimeError, TypeError, ValueError):
                return None

        if isinstance(value, np.ndarray):
            targets = np.empty(value.size, dtype=object)  # of tuples: not a 2-D array
            targets[:] = [target(r) for r in value.ravel()]
            return cls(targets.reshape(value.shape))
        return cls(target(value))

    def refs(self, fout: h5py.File) -> Any:
        """The region references in ``fout`` to the same datasets and selections."""
        def ref(target: tuple[str, Any] | None) -> Any:
            if target is None or target[0] not in fout:
                return h5py.RegionReference()
            return h5py.h5r.create(fout.id, target[0].encode(), h5py.h5r.DATASET_REGION,
                                   target[1])

        if isinstance(self.targets, np.ndarray):
            return np.array([ref(t) for t in self.targets.ravel()],
                            dtype=h5py.regionref_dtype).reshape(self.targets.shape)
        return ref(self.targets)


def _holds_refs(dtype: np.dtype) -> bool:
    """Whether ``dtype`` holds object references: variable-length sequences of them
    (``DIMENSION_LIST``), or a field of them (``REFERENCE_LIST``)."""
    base = h5py.check_vlen_dtype(dtype)
    fields = [dtype[n] for n in dtype.names] if dtype.names else []
    return any(h5py.check_ref_dtype(d) is h5py.Reference for d in (base, *fields)
               if d is not None)


def _refs(fout: h5py.File, paths: Any) -> Any:
    """Object references in ``fout`` to ``paths`` (a str, or an object array of them; a
    null reference for None, or a path the output lacks)."""
    def ref(path: str | None) -> Any:
        return fout[path].ref if path is not None and path in fout else h5py.Reference()

    if isinstance(paths, np.ndarray):
        return np.array([ref(p) for p in paths.ravel()],
                        dtype=h5py.ref_dtype).reshape(paths.shape)
    return ref(paths)


def _make_refs(fout: h5py.File, refs: list[tuple[str, str | None, Any]]) -> None:
    """Make the object references of ``refs`` in ``fout``, to the same paths: those of an
    attribute ``name``, or of a dataset (``name`` None: HDF5 copies the references of a
    dataset to another file as null ones, silently)."""
    for where, name, paths in refs:
        if isinstance(paths, _Regions):
            value = paths.refs(fout)
            if name is None:
                fout[where][()] = value
            else:
                fout[where].attrs.create(name, value, dtype=h5py.regionref_dtype)
        elif name is None:
            fout[where][()] = _refs(fout, paths)
        elif name == _DIMENSION_LIST:  # the scales of each axis, attached again
            for axis, scales in enumerate(paths):
                for path in scales.ravel():
                    if path is not None and path in fout:
                        fout[where].dims[axis].attach_scale(fout[path])
        else:
            fout[where].attrs.create(name, _refs(fout, paths), dtype=h5py.ref_dtype)


#: SZIP's options mask bit of nearest-neighbour coding (HDF5's H5_SZIP_NN_OPTION_MASK)
_SZIP_NN = 32


def _szip(dset: h5py.Dataset, values: tuple[int, ...]) -> dict[str, Any]:
    """create_dataset keyword arguments of the SZIP filter of ``dset`` (its options mask
    and pixels per block), where this h5py encodes it; else none, with a warning (the
    data are copied uncompressed)."""
    if "szip" in h5py.filters.encode and len(values) >= 2:
        method = "nn" if values[0] & _SZIP_NN else "ec"
        return {"compression": "szip", "compression_opts": (method, int(values[1]))}
    warnings.warn(f"{dset.file.filename} [{dset.name}]: SZIP-compressed, which this HDF5 "
                  "cannot write; copied uncompressed (pass a compression to rechunk)",
                  UserWarning, stacklevel=5)
    return {}


def _fitting(filters: dict[str, Any], dset: h5py.Dataset, chunks: tuple[int, ...]
             ) -> dict[str, Any]:
    """``filters`` (:func:`_source_filters` of ``dset``) for chunks of shape ``chunks``:
    without SZIP, with a warning, where a chunk holds fewer values than its pixels per
    block, which HDF5 refuses ('pixels per block greater than total number of elements in
    the chunk': a rechunk to smaller chunks failed where SZIP had been dropped)."""
    if filters.get("compression") != "szip":
        return filters
    block = int(filters["compression_opts"][1])  # (method, pixels per block)
    if math.prod(chunks) >= block:
        return filters
    warnings.warn(f"{dset.file.filename} [{dset.name}]: SZIP-compressed in blocks of "
                  f"{block} values, more than a chunk of {chunks} holds; copied "
                  "uncompressed (pass a compression to rechunk, or larger chunks)",
                  UserWarning, stacklevel=4)
    return {k: v for k, v in filters.items() if k not in ("compression", "compression_opts")}


def _unrounded(filters: dict[str, Any], dset: h5py.Dataset, chunks: tuple[int, ...]
               ) -> dict[str, Any]:
    """``filters`` without HDF5's scale-offset filter, with a warning, where it rounds
    (floating-point values to some decimals, integers to some bits) and the chunks
    change: it rounds each chunk from that chunk's own minimum, so applied again to other
    chunks it changes values already rounded, silently (a float64 0.66666667 stored with
    ``scaleoffset=3`` in chunks of 2 values became 0.66633333 in a copy of chunks of 4).
    Kept where lossless (integers at their automatic bits) or where
    the chunks are the input's."""
    digits = filters.get("scaleoffset")
    if digits is None or tuple(chunks) == dset.chunks or (
            dset.dtype.kind in "iu" and int(digits) == 0):
        return filters
    what = f"{digits} decimals" if dset.dtype.kind == "f" else f"{digits} bits"
    warnings.warn(f"{dset.file.filename} [{dset.name}]: stored with HDF5's scale-offset "
                  f"filter ({what}), which rounds each chunk from its own minimum: applied "
                  f"again to chunks of {tuple(chunks)}, not {dset.chunks}, it would change "
                  "the values; copied without it (the values are the same)", UserWarning,
                  stacklevel=4)
    return {k: v for k, v in filters.items() if k != "scaleoffset"}


def _new_filters(spec: str, dset: h5py.Dataset) -> dict[str, Any]:
    """create_dataset keyword arguments of the compression ``spec`` for a copy of
    ``dset``: none, with a warning, for Blosc on variable-length data (strings), on
    which hdf5plugin's Blosc filter divides by zero and kills the process (SIGFPE: a
    rechunk --compression blosc of a file with a string observable died without a word)."""
    kwargs = compression_kwargs(spec)
    if kwargs.get("compression") != _BLOSC or h5py.check_vlen_dtype(dset.dtype) is None:
        return kwargs
    warnings.warn(f"{dset.file.filename} [{dset.name}]: variable-length data, which "
                  "HDF5's Blosc filter cannot compress (it crashes); copied uncompressed "
                  "(gzip, lzf or zstd compress it)", UserWarning, stacklevel=4)
    return {}


def _source_filters(dset: h5py.Dataset) -> dict[str, Any]:
    """create_dataset keyword arguments that reproduce a dataset's filter pipeline (SZIP
    where this h5py writes it; N-bit, which packs a datatype of fewer bits than its size,
    not: the copy holds the values at the full size of their numpy type, with a
    warning)."""
    out: dict[str, Any] = {}
    plist = dset.id.get_create_plist()
    for i in range(plist.get_nfilters()):
        code, _flags, values, _name = plist.get_filter(i)
        if code == _DEFLATE:
            out["compression"], out["compression_opts"] = "gzip", int(values[0]) if values else 4
        elif code == _SHUFFLE:
            out["shuffle"] = True
        elif code == _FLETCHER32:
            out["fletcher32"] = True
        elif code == _LZF:
            out["compression"] = "lzf"
        elif code == _SCALEOFFSET:
            out["scaleoffset"] = dset.scaleoffset
        elif code == _SZIP:
            out.update(_szip(dset, tuple(int(v) for v in values)))
        elif code == _NBIT:
            warnings.warn(f"{dset.file.filename} [{dset.name}]: N-bit packed; copied at the "
                          f"full {dset.dtype.itemsize * 8} bits of its values (the values "
                          "are the same)", UserWarning, stacklevel=4)
        else:  # a plugin filter (blosc, zstd, ...)
            out["compression"] = int(code)
            out["compression_opts"] = tuple(int(v) for v in values)
            out["allow_unknown_filter"] = True
    return out


def _external_target(filename: str, src: str, dst: str) -> str:
    """The file name an external link of ``src`` to ``filename`` takes in ``dst``: HDF5
    looks for a relative one next to the file holding the link, so a copy into another
    directory points to the same file by a name relative to ``dst`` (kept as it was, the
    copy's link dangled: its data unreachable, silently). Absolute
    names, and names of no file next to ``src`` (found through ``HDF5_EXT_PREFIX`` or the
    working directory), are kept."""
    if os.path.isabs(filename):
        return filename
    src_dir = os.path.dirname(os.path.abspath(src))
    dst_dir = os.path.dirname(os.path.abspath(dst))
    target = os.path.join(src_dir, filename)
    if os.path.samefile(src_dir, dst_dir) or not os.path.exists(target):
        return filename
    try:
        return os.path.relpath(target, dst_dir)
    except ValueError:  # another drive (Windows)
        return os.path.abspath(target)


def _relocated_virtual(src: Any, gdst: h5py.Group, name: str, dst_file: str) -> bool:
    """Make the virtual dataset ``src`` as ``name`` in ``gdst`` with its source files
    named relative to ``dst_file`` (:func:`_external_target`), where a relative name
    changes; False (nothing made) otherwise. HDF5 looks for a relative source file next
    to the virtual dataset's file: copied as it was into another directory, the copy read
    the fill value in place of every mapped value, silently."""
    if not isinstance(src, h5py.Dataset) or not src.is_virtual:
        return False
    maps = src.virtual_sources()
    names = [m.file_name if m.file_name == "." else
             _external_target(m.file_name, src.file.filename, dst_file) for m in maps]
    if names == [m.file_name for m in maps]:
        return False  # nothing relative to change
    spaces = [_source_space(m, src.file.filename) for m in maps]
    if any(sp is None for sp in spaces):
        return False  # as it is: a source missing already
    dcpl = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
    fill = np.zeros((1,), dtype=src.dtype)
    src.id.get_create_plist().get_fill_value(fill)
    dcpl.set_fill_value(fill)
    for m, file_name, space in zip(maps, names, spaces, strict=True):
        dcpl.set_virtual(m.vspace, file_name.encode(), m.dset_name.encode(), space)
    h5py.h5d.create(gdst.id, name.encode(), src.id.get_type(), src.id.get_space(), dcpl=dcpl)
    return True


def _source_space(m: Any, vds_file: str) -> Any:
    """The source dataspace of the mapping ``m`` of a virtual dataset of ``vds_file``,
    with its selection: HDF5 stores a whole-dataset selection without the source's
    extent (read back as a scalar), so that one is taken from the source dataset; None
    where it cannot be opened."""
    if m.src_space.get_select_type() != h5py.h5s.SEL_ALL \
            or m.src_space.get_select_npoints() == m.vspace.get_select_npoints():
        return m.src_space
    path = m.file_name if m.file_name == "." or os.path.isabs(m.file_name) else \
        os.path.join(os.path.dirname(os.path.abspath(vds_file)), m.file_name)
    try:
        with h5py.File(vds_file if path == "." else path, "r") as f:
            return f[m.dset_name].id.get_space()
    except (OSError, KeyError, ValueError):
        return None


class _Copier:
    def __init__(self, fin: h5py.File, fout: h5py.File, layout: Layout,
                 targets: dict[tuple[int, int], ElementInfo], buffer_bytes: int,
                 advance: Any, verify: bool = False) -> None:
        self.fin, self.fout = fin, fout
        self.layout = layout
        self.targets = targets
        self.buffer_bytes = buffer_bytes
        self.advance = advance
        self.seen: dict[tuple[int, int], str] = {}
        self.digests = Digests(enabled=verify)  # of the rechunked datasets, as written
        self.copied: list[tuple[str, str]] = []  # (source path, output path) copied as is
        self.elements: list[str] = []
        # object references (of attributes, of datasets: name None), made at the end
        self.refs: list[tuple[str, str | None, Any]] = []

    def walk(self, gsrc: h5py.Group, gdst: h5py.Group) -> None:
        for name in gsrc:
            link = gsrc.get(name, getlink=True)
            if isinstance(link, h5py.SoftLink):
                gdst[name] = h5py.SoftLink(link.path)
                continue
            if isinstance(link, h5py.ExternalLink):
                target = _external_target(link.filename, self.fin.filename,
                                          self.fout.filename)
                gdst[name] = h5py.ExternalLink(target, link.path)
                continue
            obj = gsrc[name]
            key = _addr(obj)
            if key in self.seen:
                gdst[name] = self.fout[self.seen[key]]  # a hard link to the same object
                continue
            if isinstance(obj, h5py.Group):
                g = _group_like(obj, gdst, name)
                _copy_attrs(obj, g, self.refs)
                self.seen[key] = g.name
                self.walk(obj, g)
            elif isinstance(obj, h5py.Dataset) and key in self.targets:
                self.seen[key] = self._rechunk(obj, gdst, name, self.targets[key])
            else:  # datasets and named datatypes copied as they are, their attributes apart
                if _refilterable(obj, self.layout):
                    self._refilter(obj, gdst, name)
                else:
                    try:
                        if not _relocated_virtual(obj, gdst, name, self.fout.filename):
                            self.fin.copy(obj, gdst, name=name, without_attrs=True)
                    except OSError as err:
                        raise H5MDReadError(self.fin.filename, obj.name,
                                            f"cannot copy it: {err}") from None
                _copy_attrs(obj, gdst[name], self.refs)
                self.seen[key] = gdst[name].name
                kind = h5py.check_ref_dtype(obj.dtype) if isinstance(obj, h5py.Dataset) \
                    else None
                if kind is h5py.Reference:
                    self.refs.append((gdst[name].name, None, reference_paths(obj, obj[()])))
                elif kind is h5py.RegionReference:
                    self.refs.append((gdst[name].name, None, _Regions.of(obj, obj[()])))
                elif isinstance(obj, h5py.Dataset):
                    self.copied.append((obj.name, gdst[name].name))

    def _rechunk(self, src: h5py.Dataset, gdst: h5py.Group, name: str,
                 el: ElementInfo) -> str:
        n = src.shape[0]
        frame_bytes = int(np.prod(src.shape[1:], dtype=np.int64)) * src.dtype.itemsize
        kwargs: dict[str, Any] = {}
        if self.layout.contiguous:
            chunk = None
            maxshape = None
        else:
            small = not el.path.startswith("/particles/") or el.name == "box_edges"
            chunk = self.layout.frames(frame_bytes, n, small=small)
            kwargs["chunks"], maxshape = _frame_chunks(src, chunk)
            if self.layout.compression is None:
                kwargs.update(_unrounded(_fitting(_source_filters(src), src, kwargs["chunks"]),
                                         src, kwargs["chunks"]))
            else:
                kwargs.update(_new_filters(self.layout.compression, src))
        if el.fillvalue is not None:
            kwargs["fillvalue"] = src.fillvalue
        if chunk is None:  # HDF5 allocates it whole at the first write
            ensure_room(self.fout.filename, n * frame_bytes)
        dst = gdst.create_dataset(name, shape=src.shape, maxshape=maxshape,
                                  dtype=_same_type(src.id), track_order=bool(
                                      src.id.get_create_plist().get_attr_creation_order()),
                                  **kwargs)
        _copy_attrs(src, dst, self.refs)
        # blocks of whole output chunks, aligned to input chunks when cheap
        unit = chunk or max(1, self.layout.frames(frame_bytes, n))
        if src.chunks:
            lcm = math.lcm(unit, src.chunks[0])
            if lcm * frame_bytes <= 4 * self.buffer_bytes:
                unit = lcm
        block = max(unit, (self.buffer_bytes // max(1, frame_bytes)) // unit * unit)
        if src.chunks:  # HDF5 keeps state for every chunk a read spans (~7 KiB each)
            block = min(block, max(unit, _CHUNKS_PER_READ * src.chunks[0] // unit * unit))
        block = min(block, max(n, 1))
        buf = np.empty((block, *src.shape[1:]), dtype=src.dtype)
        room = _Room(self.fout.filename, compressed="compression" in kwargs)
        self.digests.update(dst.name, buf[:0])  # an entry even for no frames
        report = _reported(el)
        for a in range(0, n, block):
            raise_if_interrupted()  # a Ctrl-C Python dropped in a callback
            b = min(n, a + block)
            view = buf[: b - a]
            if b > a:
                try:
                    src.read_direct(view, np.s_[a:b], np.s_[0:b - a])
                except OSError as err:  # a damaged chunk: name the file and the frames
                    raise H5MDReadError(self.fin.filename, src.name,
                                        f"cannot read frames {a}-{b - 1}: {err}") from None
                if chunk is not None:
                    ensure_room(self.fout.filename, room.need(view.nbytes))
                dst[a:b] = view
                room.wrote(view.nbytes)
                self.digests.update(dst.name, view)
            if report:
                self.advance(b - a)
        self.elements.append(el.path)
        return dst.name


    def _refilter(self, src: h5py.Dataset, gdst: h5py.Group, name: str) -> None:
        """Copy ``src`` (no time series' values) with the compression asked for, in its
        own chunks (HDF5's guess for a contiguous one), in blocks of at most the buffer;
        compared with the input by ``--verify`` as a copy."""
        kwargs: dict[str, Any] = {"chunks": src.chunks or True,
                                  **_new_filters(str(self.layout.compression), src)}
        plist = src.id.get_create_plist()
        if plist.fill_value_defined() == h5py.h5d.FILL_VALUE_USER_DEFINED:
            kwargs["fillvalue"] = src.fillvalue
        dst = gdst.create_dataset(name, shape=src.shape, maxshape=src.maxshape,
                                  dtype=_same_type(src.id),
                                  track_order=bool(plist.get_attr_creation_order()), **kwargs)
        row = max(1, src.nbytes // max(1, src.shape[0]))
        block = max(1, self.buffer_bytes // row)
        if src.chunks and block > src.chunks[0]:
            block -= block % src.chunks[0]
        room = _Room(self.fout.filename, compressed="compression" in kwargs)
        for a in range(0, src.shape[0], block):
            raise_if_interrupted()
            b = min(src.shape[0], a + block)
            try:
                values = src[a:b]
            except OSError as err:
                raise H5MDReadError(self.fin.filename, src.name,
                                    f"cannot read rows {a}-{b - 1}: {err}") from None
            ensure_room(self.fout.filename, room.need(values.nbytes))
            dst[a:b] = values
            room.wrote(values.nbytes)


def _refilterable(obj: Any, layout: Layout) -> bool:
    """Whether ``obj``, a dataset or named datatype that is no time series' values (a
    ``step``, ``time``, fixed-in-time data, ``/parameters``, connectivity), is copied with
    the compression asked for (``rechunk --compression``) rather than as it is: a dataset
    of one or more rows of fixed-size values (no references, no variable-length data,
    neither virtual nor external), chunked, or of at least
    :data:`~h5mdx.format.writer.SMALL_UNCHUNKED_BYTES` (not for ``none``: an unchunked
    one has no filters to drop). Before, only the time series were: a "compress
    everything" copy left the rest as the input had it."""
    if layout.compression is None or layout.contiguous or not isinstance(obj, h5py.Dataset):
        return False
    if not obj.shape or obj.size == 0 or obj.dtype.hasobject or obj.is_virtual \
            or obj.external:
        return False
    wanted = bool(compression_kwargs(layout.compression))
    if obj.chunks:
        return wanted or obj.id.get_create_plist().get_nfilters() > 0
    return wanted and obj.nbytes >= SMALL_UNCHUNKED_BYTES


def _frame_chunks(src: h5py.Dataset, frames: int
                  ) -> tuple[tuple[int, ...], tuple[int | None, ...]]:
    """Chunks of ``frames`` whole frames of ``src`` and the copy's maximum shape (the
    input's, resizable in time where the input was not chunked). An axis of no values
    (an element of no particles, ``(frames, 0, 3)``) gets chunks of 1 and no limit:
    HDF5 takes no chunk of 0, nor one past a fixed limit of 0 (the copy failed with a
    bare 'All chunk dimensions must be positive')."""
    maxshape = src.maxshape if src.chunks else (None, *src.shape[1:])
    chunks = (frames, *(max(1, int(s)) for s in src.shape[1:]))
    maxshape = (maxshape[0], *(None if s == 0 else m
                               for s, m in zip(src.shape[1:], maxshape[1:], strict=True)))
    return chunks, maxshape


def _reported(el: ElementInfo) -> bool:
    """Whether the frames copied of ``el`` advance the progress bar: positions, and
    elements of frames of 4 KiB or more (velocities, forces). The bar's total counts
    the frames of all of them: it was the positions' alone, and a copy of positions,
    velocities and forces ended at '9/3 frames'."""
    return el.name == "position" or (len(el.shape) > 2 and _frame_bytes(el) >= 4096)


#: Input chunks one read may span at most: a read of 64 MiB of one-frame chunks of 10
#: atoms spanned 560,000 of them, and HDF5 took 3.9 GB (4,096 chunks: ~30 MB).
_CHUNKS_PER_READ = 4096


class _Room:
    """What the next block needs on the output's disk: its bytes, or for a compressed
    output its bytes at the compression seen so far (the file's growth over the bytes
    written), none before the first block has shown it (the check keeps its margin). The
    bytes uncompressed refused a 0.6 MiB gzip copy with 50 MiB free."""

    def __init__(self, filename: str, compressed: bool) -> None:
        self.filename, self.compressed = filename, compressed
        self.start = self._size()
        self.raw = 0

    def _size(self) -> int:
        try:
            return os.path.getsize(self.filename)
        except OSError:
            return 0

    def need(self, nbytes: int) -> int:
        if not self.compressed:
            return nbytes
        if not self.raw:
            return 0
        ratio = max(0, self._size() - self.start) / self.raw
        return int(nbytes * min(1.0, 1.25 * ratio))  # a quarter more, for a worse block

    def wrote(self, nbytes: int) -> None:
        self.raw += nbytes


def _particle_count(info: Any) -> tuple[int, int | None]:
    """Particles of the file's first particles group with time-dependent positions (else
    its first group), and their frames, for the summary: from ``position``, else any
    per-particle element (a velocity-only dump; time-independent data: no frames, None).
    The group whose positions the summary's frame bytes come from, where a file has
    several."""
    groups = sorted(info.particles.values(), key=lambda pg: not (
        "position" in pg.elements and pg.elements["position"].time_dependent))
    for pg in groups:
        ranked = sorted(pg.elements.items(),
                        key=lambda item: (item[0] != "position", not item[1].time_dependent))
        for _, e in ranked:
            axis = 1 if e.time_dependent else 0
            if len(e.shape) > axis:
                return int(e.shape[axis]), (int(e.shape[0]) if e.time_dependent else None)
    return 0, None


def rechunk(
    src: str | os.PathLike[str],
    dst: str | os.PathLike[str],
    *,
    frames_per_chunk: int | None = None,
    chunk_mib: float | None = None,
    contiguous: bool = False,
    compression: str | None = None,
    overwrite: bool = False,
    verify: bool = False,
    buffer_mib: float = 64.0,
    progress: bool = False,
) -> ConvertStats:
    """Copy an H5MD file with a new layout for its time-dependent elements.

    Parameters
    ----------
    src : str or path-like
        The input H5MD file (never modified).
    dst : str or path-like
        The output file; a name ending in ``.zarr`` writes a Zarr store (one group
        per H5MD group: the first particles group at the root, others under
        ``particles/<name>``, observables under ``observables``).
    frames_per_chunk, chunk_mib, contiguous : optional
        The new chunking (see :class:`h5mdx.format.writer.Layout`); default chunks of whole
        frames of about 4 MiB.
    compression : str, optional
        New compression (``none``, ``gzip[:L]``, ``lzf``, ``blosc``, ``zstd``), of the
        time series and of every other dataset of rows (step, time, fixed-in-time data,
        parameters; not scalars nor small unchunked ones); default: keep each dataset's
        filters.
    overwrite : bool, default False
        Replace an existing output.
    verify : bool, default False
        Re-read the output and compare a checksum of every dataset with the input.
    buffer_mib : float, default 64
        Largest block of data held in memory while copying.
    progress : bool, default False
        Show a progress bar.

    Returns
    -------
    ConvertStats

    Raises
    ------
    FileExistsError
        If ``dst`` exists and ``overwrite`` is False.
    H5MDReadError
        If verification finds a difference.
    """
    layout = Layout(frames_per_chunk=frames_per_chunk, chunk_mib=chunk_mib,
                    contiguous=contiguous, compression=compression)
    if not 0 < buffer_mib < math.inf:
        raise ValueError(f"buffer_mib must be a finite number > 0, not {buffer_mib}")
    src = os.fspath(src)
    dst = os.fspath(dst)
    _check_output_name(dst, is_zarr_path(dst), True, "rechunk")  # not an HDF5 file as .xtc
    info = scan(src)
    elements = time_dependent_elements(info)
    main = next((e for pg in info.particles.values() for n, e in pg.elements.items()
                 if n == "position" and e.time_dependent), None)
    frame_bytes = _frame_bytes(main) if main is not None else None  # for the summary
    n_atoms, n_frames = _particle_count(info)
    if n_frames is None:  # the particles' frames, not an observable's sampled more often
        n_frames = max((e.shape[0] for e in elements), default=0)
    if is_zarr_path(dst):
        if compression is None and not contiguous:  # keep the input's, as HDF5 filters are
            layout = dataclasses.replace(layout, compression=_kept_for_zarr(src, main))
        return _rechunk_zarr(src, dst, info, layout, overwrite=overwrite, verify=verify,
                             n_frames=n_frames, n_atoms=n_atoms, buffer_mib=buffer_mib,
                             progress=progress, frame_bytes=frame_bytes)
    t0 = _time.perf_counter()
    buffer_bytes = int(buffer_mib * 2**20)
    with atomic_output(dst, overwrite=overwrite, inputs=[src], hdf5=True) as tmp:
        with open_h5md(src, rdcc_nbytes=buffer_bytes // 2) as fin, \
                written_file(tmp, **_file_like(fin)) as fout:
            targets = {_addr(fin[e.value_path]): e for e in elements}
            total = sum(e.shape[0] for e in elements if _reported(e))
            with progress_bar(total or None, f"rechunk -> {os.path.basename(dst)}",
                              progress) as advance:
                copier = _Copier(fin, fout, layout, targets, buffer_bytes, advance, verify)
                _copy_attrs(fin, fout, copier.refs)  # the root's references too
                copier.seen[_addr(fin)] = "/"  # a hard link back to the root: to the root
                copier.walk(fin, fout)
                _make_refs(fout, copier.refs)
        _copy_userblock(src, tmp)
        verified = False
        if verify:
            with _verifying(dst, progress):
                _verify(copier, src, tmp, dst)
            verified = True
        seconds = _time.perf_counter() - t0
        size = _size(tmp)
    described = layout.describe(n_frames, frame_bytes)
    if frames_per_chunk is None and not contiguous and main is not None \
            and _chunked_otherwise(layout, main, elements):
        # the frames of the positions' chunks, not of a float64 velocity's (half as many)
        described = described.replace(" MiB), ", " MiB) for the positions, as many MiB of "
                                      "whole frames for each other element, ", 1)
    return ConvertStats(output=dst, n_frames=n_frames, n_atoms=n_atoms,
                        elements=copier.elements, seconds=seconds, bytes_written=size,
                        layout=described if compression is not None or contiguous
                        else described.replace("compression none", "compression kept"),
                        verified=verified)


def _chunked_otherwise(layout: Layout, main: ElementInfo, elements: list[ElementInfo]
                       ) -> bool:
    """Whether a per-particle element gets chunks of another number of frames than the
    positions ``main`` (a float64 velocity beside float32 positions). Any element of
    other frame bytes counted, the box's edges too, whose chunks follow their own rule:
    the summary of a copy of MDAnalysis' files said each other element had its own
    chunks where all had the positions'."""
    want = layout.frames(_frame_bytes(main), main.shape[0])
    return any(layout.frames(_frame_bytes(e), e.shape[0]) != want for e in elements
               if e.path.startswith("/particles/") and e.name != "box_edges")


@contextlib.contextmanager
def _verifying(dst: str, progress: bool) -> Iterator[None]:
    """A bar of the time elapsed while the copy is read back (seconds a GB, silent after
    the copy's bar had reached 100 %)."""
    with progress_bar(None, f"verify {os.path.basename(dst)}", progress, unit=None,
                      elapsed=True):
        yield


def _verify(copier: _Copier, src: str, tmp: str, dst: str) -> None:
    """Read the output back: the rechunked datasets against the digests taken while
    writing, the datasets copied as they are against the input's."""
    written = copier.digests.hexdigests()
    got = dataset_checksums(tmp, written)
    bad = [p for p, h in written.items() if got[p] != h]
    src_sums = dataset_checksums(src, [s for s, _ in copier.copied])
    out_sums = dataset_checksums(tmp, [d for _, d in copier.copied])
    bad += [d for s, d in copier.copied if src_sums[s] != out_sums[d]]
    with h5py.File(tmp, "r") as f:  # datasets of object references: to the same paths
        bad += [where for where, name, paths in copier.refs if name is None and not
                np.array_equal(np.asarray(reference_paths(f[where], f[where][()]), dtype=object),
                               np.asarray(paths, dtype=object))]
    if bad:
        raise H5MDReadError(dst, bad[0], "verification failed: the output differs "
                            "from the input")


def _zarr_groups(info: FileInfo) -> list[tuple[str, str | None, dict[str, ElementInfo]]]:
    """(H5MD group, Zarr group, elements to verify by digest) of every group copied: the
    particles groups (the first at the root), the observables and the connectivity with
    their subgroups, the groups of ``/parameters``, and those of the root groups H5MD
    does not define (:func:`_free_form_groups`)."""
    groups: list[tuple[str, str | None, dict[str, ElementInfo]]] = []
    for i, pg in enumerate(info.particles.values()):
        els = {n: e for n, e in pg.elements.items()}
        if pg.box is not None and pg.box.edges is not None:
            els["box_edges"] = pg.box.edges
        groups.append((pg.group, None if i == 0 else pg.group, els))
    for root, subs in (("observables", info.observable_groups),
                       ("connectivity", info.connectivity_groups)):
        for sub in ("", *subs):
            direct = info.elements_under(root, sub)
            if direct:
                path = f"{root}/{sub}".rstrip("/")
                groups.append((path, path, direct))
    return groups + _free_form_groups(info)


def _free_form_groups(info: FileInfo) -> list[tuple[str, str, dict[str, ElementInfo]]]:
    """(H5MD group, Zarr group, elements) of each group that holds data in the root groups
    H5MD does not define (RMPCDMD's ``/fields``: :func:`~h5mdx.format.h5md.free_form`),
    as the engine opens them: its elements and datasets directly under it (they were left
    out of a copy to Zarr, silently); ``/parameters``' first, walked
    so too (a group of it laid out as an element is one, as the engine opens it)."""
    groups: list[tuple[str, str, dict[str, ElementInfo]]] = []
    for root in ("parameters", *info.other_groups):
        if root == "parameters" and not info.parameters:
            continue
        found = free_form(info.filename, root, info=info)
        for sub in found.groups:
            els = {n.rpartition("/")[2]: e for n, e in found.elements.items()
                   if n.rpartition("/")[0] == sub}
            if els or any(n.rpartition("/")[0] == sub for n in found.datasets):
                path = f"{root}/{sub}".rstrip("/")
                groups.append((path, path, els))
    return groups


def _verify_zarr(ds: Any, src: str, store: str, dst: str, els: dict[str, ElementInfo]) -> None:
    """The Zarr copy of ``ds`` against the input: numeric elements by digest (read in
    blocks), the other variables (strings, parameters) by value."""
    import zarr

    from h5mdx.layout.export import zarr_checksums

    # values read at scan time (an attribute) or computed (edges from LAMMPS' bounds) are
    # compared by value
    numeric = {n: e for n, e in els.items()
               if e.dtype.kind in "biufc" and n in ds and e.data is None and e.bounds is None}
    want = dataset_checksums(src, [e.value_path for e in numeric.values()])
    got = zarr_checksums(store, list(numeric))
    bad = [n for n, e in numeric.items() if want[e.value_path] != got[n]]
    root = zarr.open_group(store, mode="r")
    for n in ds.data_vars:
        if n in numeric:
            continue
        mine = np.asarray(ds[n].values)
        theirs = np.asarray(root[str(n)][...])  # type: ignore[index]  # an array
        if mine.dtype.kind in "SUO" or theirs.dtype.kind in "SUO":
            mine, theirs = mine.astype(str), theirs.astype(str)
        if mine.shape != theirs.shape or not np.array_equal(
                mine, theirs, equal_nan=mine.dtype.kind in "fc"):
            bad.append(str(n))
    if bad:
        raise H5MDReadError(dst, bad[0], "verification failed: the Zarr copy differs "
                            "from the input")


def _taken(store: str, zgroup: str) -> bool:
    """Whether the path ``zgroup`` of the Zarr ``store`` passes through an array (a root
    group H5MD does not define named as a variable of the first particles group, which
    the store holds at its root: ``/time``)."""
    import zarr

    node: Any = zarr.open_group(store, mode="r")
    for part in zgroup.split("/"):
        node = node.get(part)
        if node is None:
            return False
        if not isinstance(node, zarr.Group):
            return True
    return False


#: The registered HDF5 filters of Zstandard and Blosc
_ZSTD, _BLOSC = 32015, 32001
#: Blosc's compressors by the number its HDF5 filter (32001) stores last
_BLOSC_NAMES = {0: "blosclz", 1: "lz4", 2: "lz4hc", 4: "zlib", 5: "zstd"}


def _kept_for_zarr(src: str, main: Any) -> str | None:
    """The compression of the positions ``main`` of ``src`` as a spec a Zarr store takes
    (gzip, zstd or blosc at the input's level): a copy into Zarr keeps it, as a copy into
    HDF5 keeps the filters (the store was written uncompressed); None (no compression)
    for none, or a filter Zarr has not (LZF)."""
    if main is None:
        return None
    try:
        with h5py.File(src, "r") as f:
            kwargs = _source_filters(f[main.value_path])
    except (OSError, KeyError):
        return None
    code, opts = kwargs.get("compression"), kwargs.get("compression_opts")
    if code == "gzip":
        return f"gzip:{int(opts if opts is not None else 4)}"
    values = tuple(opts or ())
    if code == _ZSTD:
        return f"zstd:{int(values[0])}" if values and 1 <= int(values[0]) <= 22 else "zstd"
    if code == _BLOSC:
        if len(values) > 6 and int(values[6]) in _BLOSC_NAMES and 0 <= int(values[4]) <= 9:
            return f"blosc:{_BLOSC_NAMES[int(values[6])]}:{int(values[4])}"
        return "blosc"
    return None


def _rechunk_zarr(src: str, dst: str, info: FileInfo, layout: Layout, *, overwrite: bool,
                  verify: bool, n_frames: int, n_atoms: int,
                  buffer_mib: float = 64.0, progress: bool = False,
                  frame_bytes: int | None = None) -> ConvertStats:
    import xarray as xr

    from h5mdx.layout.export import dataset_to_zarr

    t0 = _time.perf_counter()
    names: list[str] = []
    groups = _zarr_groups(info)
    if not groups:  # it failed saying "the writer produced no output"
        raise ValueError(f"{src}: holds no particles, observables, connectivity or "
                         "parameters: nothing to copy into a Zarr store")
    with atomic_output(dst, overwrite=overwrite, inputs=[src], directory=True) as tmp:
        for h5group, zgroup, els in groups:
            if names and zgroup is not None and _taken(tmp, zgroup):
                warnings.warn(f"{src} [/{h5group}]: its name is an array of the Zarr store's "
                              "root (the first particles group's); left out of "
                              f"{os.path.basename(dst)}", UserWarning, stacklevel=2)
                continue
            # blocks of about buffer_mib (whole HDF5 chunks): dask holds a few at a time
            with xr.open_dataset(src, engine="h5md", group=h5group, chunks={},
                                 chunk_mib=buffer_mib) as ds:
                dataset_to_zarr(ds, tmp, layout=layout, group=zgroup,
                                mode="w-" if zgroup is None and not names else "a",
                                progress=progress and bool(ds.data_vars),
                                description=f"rechunk {h5group} -> {os.path.basename(dst)}")
                names.append(h5group)
                if verify:
                    store = tmp if zgroup is None else os.path.join(tmp, zgroup)
                    with _verifying(dst, progress):
                        _verify_zarr(ds, src, store, dst, els)
        seconds = _time.perf_counter() - t0
        size = _size(tmp)
    return ConvertStats(output=dst, n_frames=n_frames, n_atoms=n_atoms, elements=names,
                        seconds=seconds, bytes_written=size,
                        layout=layout.describe(n_frames, frame_bytes),
                        verified=verify)
