"""xarray adapters of the layout tools: Dataset -> H5MD, frames -> Zarr.

:func:`to_h5md` writes any Dataset of the h5mdx data model (for example after
``isel`` or a ``select=``) to an H5MD file through :class:`h5mdx.format.writer.H5MDWriter`,
block of output chunks by block, so a lazy (dask) Dataset never has to fit in
memory. :class:`ZarrWriter` streams frames into a Zarr store with xarray's
``to_zarr`` (append along ``time``) such that ``xr.open_zarr(store)`` gives
the same variables, coordinates and units as ``xr.open_dataset(h5md,
engine="h5md")`` for the equivalent H5MD file.
"""

from __future__ import annotations

import contextlib
import math
import os
import warnings
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

import h5py
import numpy as np
import xarray as xr

from h5mdx._optional import import_optional
from h5mdx.format.checksums import Digests, array_digest
from h5mdx.format.compression import parse_compression
from h5mdx.format.schema import (
    ATOM_DIM,
    BOX_VECTOR_DIM,
    BOX_VECTOR_LABELS,
    SPATIAL_DIM,
    SPATIAL_LABELS,
    STEP_COORD,
    TIME_DIM,
)
from h5mdx.format.writer import (
    BOX_MEMBERS,
    ElementSpec,
    H5MDWriter,
    Layout,
    check_element_names,
    check_frame_shapes,
    check_group_name,
    check_steps_increase,
    id_element,
)
from h5mdx.layout._atomic import atomic_output, raise_if_interrupted

__all__ = ["ZarrWriter", "dataset_to_zarr", "missing_chunks", "open_zarr_store", "to_h5md",
           "to_zarr", "zarr_checksums", "zarr_compressors", "zarr_particles_groups"]


@contextlib.contextmanager
def _quiet_zarr() -> Iterator[None]:
    """Silence zarr's notes about v3 string dtypes and consolidated metadata."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*does not have a Zarr V3 specification.*")
        warnings.filterwarnings("ignore", message=".*[Cc]onsolidated metadata.*")
        yield


def zarr_compressors(spec: str | None) -> list[Any] | None:
    """Zarr (format 3) compressors for a compression spec of :class:`~h5mdx.format.writer.Layout`.

    The spec is read by :func:`~h5mdx.format.compression.parse_compression`:
    ``none`` gives no compressor, ``gzip[:L]``, ``zstd[:L]`` and
    ``blosc[:CODEC[:L]]`` the Zarr codecs; ``lzf`` (HDF5 only) is refused. Only blosc
    shuffles here: Zarr's core codecs have no byte shuffle (HDF5 files get it before gzip
    and zstd), and a store that needs numcodecs' would not open in other Zarr readers.
    """
    codecs = import_optional("zarr.codecs", "writing Zarr stores")
    comp = parse_compression(spec)
    if comp.codec == "none":
        return None
    if comp.codec == "gzip":
        return [codecs.GzipCodec(level=comp.level)]
    if comp.codec == "zstd":
        return [codecs.ZstdCodec(level=comp.level)]
    if comp.codec == "blosc":
        return [codecs.BloscCodec(cname=comp.blosc_codec, clevel=comp.level,
                                  shuffle="shuffle" if comp.shuffle else "noshuffle")]
    raise ValueError(
        f"compression {spec!r} is not available for Zarr; use none, gzip[:L], zstd[:L] "
        "or blosc[:CODEC[:L]]"
    )


# ----------------------------------------------------------------------------- Zarr

#: Entries per chunk of the 1-D ``time`` variables a Zarr store gets (``time``, ``step``,
#: one-value observables): 512 KiB of float64, two files for 100,000 frames. Chunked like
#: the positions instead (104 frames of 4 MiB), they took 962 files each, which
#: ``xr.open_zarr`` reads at every open (``time``) and at every compute of a result on
#: ``time`` (``step``): ~40 ms each on 2 cores.
TIME_CHUNK_ENTRIES = 1 << 16


def _time_chunk(n_frames: int | None) -> tuple[int]:
    """The chunk of a 1-D ``time`` variable of ``n_frames`` frames (None: unknown)."""
    return (max(1, min(int(n_frames), TIME_CHUNK_ENTRIES)) if n_frames
            else TIME_CHUNK_ENTRIES,)


def open_zarr_store(path: str | os.PathLike[str], *, check_chunks: bool = False,
                    group: str | None = None) -> xr.Dataset:
    """A Zarr store (as ``h5mdx convert OUT.zarr`` writes it) opened lazily, without dask,
    as ``xr.open_dataset(path, engine="zarr")`` opens it, but for integers with a fill
    value (H5MD's ``id``, -1 for absent particles): integers, as the h5md engine serves
    them, the fill value in their encoding, where CF decoding makes them floats.

    ``group`` opens one of its groups (``"particles/solvent"``: a store copied from a file
    of several particles groups holds the first at its root, the others there; see
    :func:`zarr_particles_groups`), with the coordinates it shares with the root. With
    ``check_chunks``, warn (:class:`~h5mdx.errors.H5MDConformanceWarning`) of each
    array on ``time`` that lacks chunks, whose frames read as NaN: a store h5mdx writes has
    them all. It lists the store (30-80 ms for 1000 chunks on a local disk).

    Raises
    ------
    h5mdx.errors.H5MDFormatError
        Naming the store, where it cannot be opened as one.
    """
    from h5mdx.errors import H5MDFormatError

    import_optional("zarr", "reading Zarr stores")  # xarray would only list its engines
    group = (group or "").strip("/") or None
    try:
        # quiet: a store without consolidated metadata (copied by hand) opens as well,
        # with xarray's 5-line note of it, printed by h5mdx info and rmsd
        with _quiet_zarr():
            ds = _open_store(path, group)
    except (OSError, ValueError, KeyError) as err:
        where = f" [{group}]" if group else ""
        raise H5MDFormatError(os.fspath(path), None,
                              f"cannot open it{where} as a Zarr store: {err}") from err
    for var in ds.variables.values():  # errors reading them can name the store
        var.encoding.setdefault("source", ds.encoding.get("source", os.fspath(path)))
    if isinstance(ds.attrs.get("source"), str) and "name" in ds.coords:
        # a store copied before dataset_to_zarr left the file's path out: its own names
        _drop_own_topology(ds, [ds.attrs["source"]])
    if check_chunks:
        _check_stored_chunks(os.fspath(path), ds, group)
    return ds


def _open_store(path: str | os.PathLike[str], group: str | None) -> xr.Dataset:
    """The store (its ``group``) for :func:`open_zarr_store`."""
    if group is None:
        return _open_integers_kept(path)
    # the root's coordinates on axes of the group's sizes (stored at the root); not a
    # tree: a group of other frames or atoms does not line up with the root
    ds = _open_integers_kept(path, group=group)
    with xr.open_dataset(path, engine="zarr", chunks=None) as root:
        shared = {k: v.variable.load() for k, v in root.coords.items()
                  if k not in ds.variables
                  and all(ds.sizes.get(d) == n for d, n in v.sizes.items())}
    return ds.assign_coords(shared)


def _open_integers_kept(path: str | os.PathLike[str], **kwargs: Any) -> xr.Dataset:
    """``xr.open_dataset(path, engine="zarr", chunks=None)``, its integers with a
    ``_FillValue`` (H5MD's ``id``, -1 for absent particles) kept integers, the fill value
    in their encoding, as the h5md engine serves them: CF's decoding made them floats
    (NaN for -1), and a store of selected atoms then had no ``id`` to find them in the
    whole system's topology."""
    ds = xr.open_dataset(path, engine="zarr", chunks=None, **kwargs)
    names = [str(name) for name, var in ds.variables.items()
             if var.dtype.kind == "f" and var.encoding.get("_FillValue") is not None
             and np.dtype(var.encoding.get("dtype", var.dtype)).kind in "iu"
             and "scale_factor" not in var.encoding and "add_offset" not in var.encoding]
    if not names:
        return ds
    ds.close()
    ds = xr.open_dataset(path, engine="zarr", chunks=None,
                         mask_and_scale={name: False for name in names}, **kwargs)
    for name in names:
        var = ds.variables[name]
        fill = var.attrs.pop("_FillValue", None)
        if fill is not None:
            var.encoding["_FillValue"] = fill
    return ds


def zarr_particles_groups(path: str | os.PathLike[str]) -> dict[str, str]:
    """The particles groups of a Zarr store h5mdx wrote, by name: the Zarr group holding
    each (``""``, the root, for the first; ``"particles/<name>"`` for the others).

    >>> zarr_particles_groups("mix.zarr")  # doctest: +SKIP
    {'solute': '', 'solvent': 'particles/solvent'}
    """
    zarr = import_optional("zarr", "reading Zarr stores")
    try:
        root = zarr.open_group(os.fspath(path), mode="r")
    except (OSError, ValueError, KeyError):
        return {}
    out: dict[str, str] = {}
    first = str(root.attrs.get("h5md_group", "")).rpartition("/")[2]
    if first or "position" in root:
        out[first or "particles"] = ""
    sub = root.get("particles") if hasattr(root, "get") else None
    if sub is not None and hasattr(sub, "group_keys"):
        for name in sorted(sub.group_keys()):
            out.setdefault(str(name), f"particles/{name}")
    return out


def zarr_group_holds(path: str | os.PathLike[str], name: str,
                     group: str | None = None) -> bool:
    """Whether a particles group of a Zarr store h5mdx wrote (``group``, by its name, where
    given) holds an array ``name`` (``"name"``: the atoms' names, which selections are
    made in); never raises."""
    zarr = import_optional("zarr", "reading Zarr stores")
    try:
        root = zarr.open_group(os.fspath(path), mode="r")
        found = zarr_particles_groups(path)
        if group is not None:
            key = group.strip("/").removeprefix("particles/")
            found = {key: found[key]} if key in found else found  # the open says so
        groups = [root if not where else root.get(where) for where in found.values()]
        return any(group is not None and name in group for group in groups)
    except (OSError, ValueError, KeyError, TypeError):
        return False


def _check_stored_chunks(path: str, ds: xr.Dataset, group: str | None = None) -> None:
    from h5mdx.errors import H5MDConformanceWarning

    for name, (stored, expected, fill) in missing_chunks(path, ds, group).items():
        warnings.warn(H5MDConformanceWarning(
            f"{path} [{name}]: stores {stored} of its {expected} chunks (a copy or a write "
            f"that did not finish?); the frames of the others read as {fill}"), stacklevel=3)


def missing_chunks(path: str | os.PathLike[str], ds: xr.Dataset, group: str | None = None,
                   *, root: Any = None) -> dict[str, tuple[int, int, Any]]:
    """The arrays on ``time`` of the store ``path`` (its ``group``, opened as ``ds``) that
    lack chunks: ``{name: (chunks stored, chunks expected, fill value)}``. Zarr reads a
    missing chunk as the fill value (NaN positions, silently); a store h5mdx writes has
    them all. ``root``: the store's root Zarr group, where the caller has it open."""
    if root is None:
        import zarr

        try:
            root = zarr.open_group(os.fspath(path), mode="r")
        except (OSError, ValueError, KeyError):
            return {}
    out = {}
    for name, var in ds.variables.items():
        if not var.ndim or TIME_DIM not in var.dims:
            continue
        try:
            array: Any = root[f"{group}/{name}" if group else str(name)]
            stored, expected = int(array.nchunks_initialized), int(array.nchunks)
        except (OSError, ValueError, KeyError, TypeError):
            continue
        if stored < expected:
            out[str(name)] = (stored, expected, array.fill_value)
    return out


#: Largest single chunk (bytes) ``contiguous`` may make of a Zarr array: Zarr writes a
#: chunk whole, so the chunk of the whole trajectory is held in memory.
MAX_ONE_CHUNK_BYTES = 2**30


def _check_one_chunk(nbytes: int, store: str) -> None:
    if nbytes > MAX_ONE_CHUNK_BYTES:
        raise ValueError(
            f"{store}: contiguous makes one Zarr chunk of {nbytes / 2**30:.1f} GiB, which Zarr "
            "writes whole from memory; a store this large needs chunks (--chunk-mib, "
            "--frames-per-chunk)")


def _dims(spec: ElementSpec) -> tuple[str, ...]:
    if spec.name == "box_edges":
        return (TIME_DIM, BOX_VECTOR_DIM, SPATIAL_DIM)[-(1 + len(spec.frame_shape)):]
    tail: list[str] = []
    for i, _size in enumerate(spec.frame_shape):
        if i == 0:
            tail.append(ATOM_DIM)
        elif i == 1 and len(spec.frame_shape) == 2:
            tail.append(SPATIAL_DIM)
        else:
            tail.append(f"{spec.name}_dim_{i + 1}")
    return (TIME_DIM, *tail)


class ZarrWriter:
    """Stream frames into a Zarr store laid out as the h5md engine presents H5MD.

    Same interface as :class:`h5mdx.format.writer.H5MDWriter` (``append``, ``extend``,
    ``close``, context manager). Each ``time`` chunk is written by one
    ``Dataset.to_zarr(append_dim="time")`` call, so memory holds one chunk.

    Parameters
    ----------
    store : str or path-like
        The Zarr directory to create.
    elements : iterable of ElementSpec
        Time-dependent elements (``box_edges`` for the box).
    n_frames : int, optional
        Number of frames when known (caps the chunk length).
    layout : Layout, optional
        Chunking (``contiguous`` means one chunk along time) and compression.
    group : str, default "trajectory"
        Name recorded in the ``h5md_group`` attribute.
    boundary : sequence of str, optional
        Box boundary (attribute of ``box_edges``).
    static : mapping, optional
        ``name -> (array, unit, attrs)`` per-atom variables (``species``, ``mass``, ...).
    time_unit : str, default "ps"
        Unit of the ``time`` coordinate.
    author : str, optional
        Recorded as the ``author_name`` attribute.
    checksum : bool, default False
        Keep a BLAKE2 digest of everything written, as
        :class:`h5mdx.format.writer.H5MDWriter` does.
    atom_coords : mapping, optional
        ``name -> (array, attrs)`` coordinates on ``atom`` (``name``, ``resid``, ...: those
        the h5md engine serves from an H5MD file's structure module).
    """

    def __init__(
        self,
        store: str | os.PathLike[str],
        elements: Iterable[ElementSpec],
        *,
        n_frames: int | None = None,
        layout: Layout | None = None,
        group: str = "trajectory",
        boundary: Iterable[str] | None = None,
        static: Mapping[str, tuple[Any, str | None, Mapping[str, Any]]] | None = None,
        time_unit: str | None = "ps",
        author: str | None = None,
        checksum: bool = False,
        atom_coords: Mapping[str, tuple[Any, Mapping[str, Any]]] | None = None,
    ) -> None:
        from h5mdx._version import __version__

        self.store = os.fspath(store)
        self.layout = layout or Layout()
        check_group_name(group)
        self.specs = {e.name: e for e in elements}
        self.n_frames = n_frames
        big = max(self.specs.values(), key=lambda e: e.frame_bytes)
        if self.layout.contiguous:
            self.block = max(1, int(n_frames or self.layout.frames(big.frame_bytes, None)))
            _check_one_chunk(self.block * big.frame_bytes, self.store)
        else:
            self.block = self.layout.frames(big.frame_bytes, n_frames)
        self.chunks = {n: (self._chunk_frames(s, big.frame_bytes), *s.frame_shape)
                       for n, s in self.specs.items()}
        self.compressors = zarr_compressors(self.layout.compression)
        self.time_unit = time_unit
        has_box = "box_edges" in self.specs
        self.boundary = list(boundary) if boundary is not None else (
            ["periodic" if has_box else "none"] * 3)
        self.static = dict(static or {})
        self.atom_coords = dict(atom_coords or {})
        self.attrs = {
            "h5md_version": "1.1",
            "author_name": author or os.environ.get("USER") or "unknown",
            "creator_name": "h5mdx",
            "creator_version": __version__,
            "h5md_group": f"/particles/{group}",
        }
        self._buf = {n: np.empty((self.block, *s.frame_shape), dtype=np.dtype(s.dtype))
                     for n, s in self.specs.items()}
        self._step = np.empty(self.block, dtype=np.int64)
        self._time = np.empty(self.block, dtype=np.float64)
        self._fill = 0
        self.n_written = 0
        self._last_step: int | None = None
        self.closed = False
        self._digests = Digests(enabled=checksum)

    def _chunk_frames(self, spec: ElementSpec, big_bytes: int) -> int:
        """Frames per chunk of ``spec``: the block's, or for an element of smaller frames
        (the box) whole blocks of at least ``SMALL_CHUNK_BYTES``, as
        :class:`~h5mdx.format.writer.H5MDWriter` chunks it (a box of 36 bytes a frame in
        chunks of the positions' frames took a file for each frame or two)."""
        if self.layout.contiguous or spec.frame_bytes >= big_bytes:
            return self.block
        # n_frames 0 (not known ahead): no bound, as the block has none
        return self.layout.element_frames(spec.frame_bytes, self.block,
                                          int(self.n_frames) if self.n_frames else None,
                                          small=True)

    @property
    def checksums(self) -> dict[str, str]:
        """Array name -> hex digest of everything written (``checksum=True`` only)."""
        return self._digests.hexdigests()

    def append(self, step: int, time: float | None, **frames: Any) -> None:
        """Add one frame (see :meth:`h5mdx.format.writer.H5MDWriter.append`).

        Raises
        ------
        ValueError
            As H5MDWriter's: for elements missing or unexpected, a step that does not
            increase, or no time.
        """
        self._check_frame(step, time, frames)
        i = self._fill
        self._step[i], self._time[i] = step, time
        for name, spec in self.specs.items():
            self._buf[name][i] = frames[spec.name]
        self._fill += 1
        if self._fill == self.block:
            self._flush()

    def _check_frame(self, step: int, time: Any, frames: Mapping[str, Any]) -> None:
        """Refuse a frame as :class:`~h5mdx.format.writer.H5MDWriter` does (a step that
        went back was written, and the store's ``time`` with it)."""
        check_element_names(frames, self.specs, str(self.store))
        check_frame_shapes(frames, self.specs, str(self.store))
        if time is None:
            raise ValueError(f"{self.store}: time is None; a Zarr store holds a time for "
                             "each frame")
        check_steps_increase([step], self.store, after=self._last_step)
        self._last_step = int(step)

    def extend(self, step: Any, time: Any, **blocks: Any) -> None:
        """Add a block of frames (leading axis = frames); none of them where one is
        refused (a step, an element's shape), as :class:`~h5mdx.format.writer.H5MDWriter`
        does."""
        step = np.asarray(step).reshape(-1)
        check_element_names(blocks, self.specs, str(self.store))
        check_frame_shapes(blocks, self.specs, str(self.store), block=True)
        check_steps_increase(step, self.store, after=self._last_step)
        times: Any = [None] * step.size if time is None \
            else np.asarray(time, np.float64).reshape(-1)
        for i in range(step.size):
            self.append(step[i], times[i], **{k: v[i] for k, v in blocks.items()})

    def _dataset(self, n: int, first: bool) -> xr.Dataset:
        data: dict[str, xr.Variable] = {}
        for name, spec in self.specs.items():
            attrs: dict[str, Any] = {}
            if name == "box_edges":
                attrs = {"boundary": self.boundary, "dimension": 3}
            if spec.unit is not None:
                attrs["units"] = spec.unit
            data[name] = xr.Variable(_dims(spec), self._buf[name][:n].copy(), attrs)
        tattrs = {"long_name": "simulation time"}
        if self.time_unit is not None:
            tattrs["units"] = self.time_unit
        coords: dict[str, Any] = {
            STEP_COORD: xr.Variable((TIME_DIM,), self._step[:n].copy(),
                                    {"long_name": "MD integration step"}),
            TIME_DIM: xr.Variable((TIME_DIM,), self._time[:n].copy(), tattrs),
        }
        if first:
            n_atoms = None
            for name, (arr, unit, given) in self.static.items():
                arr = np.asarray(arr)
                # as the h5md engine serves them: labels, a fill value apart
                attrs = {k: (v.tolist() if isinstance(v, np.ndarray) else v)
                         for k, v in (given or {}).items() if k != "_FillValue"}
                data[name] = xr.Variable((ATOM_DIM,), arr,
                                         {**attrs, **({"units": unit} if unit else {})})
                n_atoms = arr.shape[0]
            for spec in self.specs.values():
                if spec.name != "box_edges" and spec.frame_shape:
                    n_atoms = spec.frame_shape[0]
            if n_atoms is not None:
                coords[ATOM_DIM] = xr.Variable((ATOM_DIM,), np.arange(n_atoms, dtype=np.int64),
                                               {"long_name": "0-based atom index"})
            for name, (arr, given) in self.atom_coords.items():
                coords[name] = xr.Variable((ATOM_DIM,), np.asarray(arr), dict(given))
            coords[SPATIAL_DIM] = xr.Variable((SPATIAL_DIM,), np.array(SPATIAL_LABELS))
            if "box_edges" in self.specs and len(self.specs["box_edges"].frame_shape) == 2:
                coords[BOX_VECTOR_DIM] = xr.Variable((BOX_VECTOR_DIM,),
                                                     np.array(BOX_VECTOR_LABELS))
        # every write: xarray replaces the store's attributes with the appended Dataset's
        return xr.Dataset(data, coords, self.attrs)

    def _flush(self) -> None:
        n = self._fill
        if n == 0:
            return
        first = self.n_written == 0
        ds = self._dataset(n, first)
        with _quiet_zarr():
            if first:
                # every array the compression asked for (Zarr's default, zstd, for those
                # not named: a store of compression none kept it on species, mass, time)
                enc: dict[str, dict[str, Any]] = {
                    str(name): {"compressors": self.compressors} for name in ds.variables}
                for name, chunks in self.chunks.items():
                    enc[name]["chunks"] = chunks
                for c in (TIME_DIM, STEP_COORD):
                    # appends rewrite the last (small) chunk: one small read and write
                    enc[c]["chunks"] = _time_chunk(self.n_frames)
                ds.to_zarr(self.store, mode="w-", encoding=enc)
            else:
                ds.to_zarr(self.store, append_dim=TIME_DIM)
        for name in self.specs:
            self._digests.update(name, self._buf[name][:n])
        self._digests.update(STEP_COORD, self._step[:n])
        self._digests.update(TIME_DIM, self._time[:n])
        if first:
            for name, (arr, _unit, _attrs) in self.static.items():
                self._digests.update(name, np.asarray(arr))
        self.n_written += n
        self._fill = 0

    def close(self) -> None:
        """Write the buffered frames."""
        if not self.closed:
            self._flush()
            self.closed = True

    def __enter__(self) -> ZarrWriter:
        return self

    def __exit__(self, exc_type: Any, *exc: Any) -> None:
        if exc_type is None:
            self.close()
        self.closed = True


def zarr_checksums(store: str | os.PathLike[str], names: Iterable[str],
                   block_bytes: int = 64 * 2**20) -> dict[str, str]:
    """BLAKE2 digest of each array of a Zarr store, read in blocks along the first axis.

    The digest of :func:`h5mdx.format.checksums.array_digest`, so it equals the
    :func:`~h5mdx.format.checksums.dataset_checksums` of the same values in HDF5.
    """
    zarr = import_optional("zarr", "reading Zarr stores")
    root = zarr.open_group(os.fspath(store), mode="r")
    return {name: array_digest(root[name], block_bytes=block_bytes) for name in names}


def _json_attrs(ds: xr.Dataset) -> None:
    """Leave out of ``ds`` (a copy), with a warning each, the attributes Zarr's JSON
    metadata cannot hold (a complex number, from an HDF5 attribute of a complex type):
    one such attribute failed the whole copy with xarray's bare 'TypeError: Invalid
    attribute in Dataset.attrs.'."""
    import json

    def kept(owner: str, attrs: Mapping[Any, Any]) -> dict[Any, Any]:
        out = {}
        for name, value in attrs.items():
            plain = value.tolist() if isinstance(value, np.ndarray) else \
                value.item() if isinstance(value, np.generic) else value
            try:
                json.dumps(plain, allow_nan=True)
            except (TypeError, ValueError):
                warnings.warn(f"{ds.attrs.get('source', 'the dataset')} [{owner}]: attribute "
                              f"{name!r} ({value!r}) is of a type Zarr's metadata cannot "
                              "hold; left out of the Zarr store", UserWarning, stacklevel=4)
                continue
            out[name] = value
        return out

    group = str(ds.attrs.get("h5md_group", "/"))
    ds.attrs = kept(group, ds.attrs)
    for name, var in ds.variables.items():
        var.attrs = kept(f"{group}, variable {name}", var.attrs)


def _drop_own_topology(out: xr.Dataset, sources: list[str]) -> None:
    """Leave out of ``out`` (a copy) the ``topology`` attributes that name the H5MD file it
    is copied from (a file holding its own topology: VMD's structure module, GROMACS'):
    the store holds the atoms' names, residues and masses as coordinates, where its
    selections are made. Kept, they made the store read its selections from that file by
    its path: refused where the file was moved or deleted ("No such topology file"),
    another file's atoms where it was replaced."""
    copied = {os.path.realpath(s) for s in sources}
    owners = [out.attrs] + ([out.variables[ATOM_DIM].attrs] if ATOM_DIM in out.variables
                            else [])
    for attrs in owners:
        topology = attrs.get("topology")
        if isinstance(topology, str) and os.path.realpath(topology) in copied:
            del attrs["topology"]


def dataset_to_zarr(
    ds: xr.Dataset,
    store: str | os.PathLike[str],
    *,
    layout: Layout | None = None,
    group: str | None = None,
    mode: str = "w-",
    progress: bool = False,
    description: str = "to Zarr",
) -> None:
    """Write a Dataset of the h5mdx data model to Zarr with whole-frame chunks.

    1-D variables on ``time`` (``time``, ``step``, one-value observables) are written
    from memory in chunks of ``TIME_CHUNK_ENTRIES`` frames (65,536), not the positions'.

    Parameters
    ----------
    ds : xarray.Dataset
        Typically ``xr.open_dataset(h5md, engine="h5md", chunks={})``.
    store : str or path-like
        The Zarr directory.
    layout : Layout, optional
        Chunks along ``time`` (every other dimension whole) and compression.
    group : str, optional
        Zarr group to write into.
    mode : str, default "w-"
        Passed to :meth:`xarray.Dataset.to_zarr`.
    progress : bool, default False
        A progress bar (``description``) that advances as dask's tasks write the blocks,
        where the default scheduler runs them in this process (threads).
    description : str, default "to Zarr"
        The bar's label.
    """
    layout = layout or Layout()
    compressors = zarr_compressors(layout.compression)
    # integers CF decoding made floats (an id of a store opened by xr.open_zarr) written
    # as integers again: as floats, the copy's id no longer found its atoms in a topology
    ds = _cf_encoded(ds)
    enc: dict[str, dict[str, Any]] = {}
    # per time dimension: output chunk of the largest variable ("base") and the dask
    # block, a multiple of it that also holds whole chunks of the small variables
    base: dict[str, tuple[int, int]] = {}
    for var in ds.variables.values():
        if var.ndim and str(var.dims[0]).startswith(TIME_DIM):
            fb = int(np.prod(var.shape[1:], dtype=np.int64)) * var.dtype.itemsize
            if fb >= base.get(str(var.dims[0]), (0, 0))[1]:
                frames = var.shape[0] if layout.contiguous else layout.frames(fb, var.shape[0])
                if layout.contiguous:
                    _check_one_chunk(frames * fb, os.fspath(store))
                base[str(var.dims[0])] = (max(1, frames), fb)
    block = {d: f for d, (f, _fb) in base.items()}
    for name, var in ds.variables.items():
        venc: dict[str, Any] = {}
        if var.ndim and str(var.dims[0]) in base:
            d = str(var.dims[0])
            b, big_fb = base[d]
            fb = int(np.prod(var.shape[1:], dtype=np.int64)) * var.dtype.itemsize
            k = 1
            if ATOM_DIM not in var.dims and not layout.contiguous and var.ndim > 1:
                want = layout.frames(fb, var.shape[0], small=True)
                k = max(1, min(math.ceil(want / b), (64 * 2**20) // max(1, b * big_fb)))
            venc["chunks"] = (b * k, *var.shape[1:])
            block[d] = max(block[d], b * k)
        elif var.ndim:
            venc["chunks"] = var.shape
        # every array, coordinates too (Zarr's default, zstd, where none was named)
        venc["compressors"] = compressors
        fill = var.encoding.get("_FillValue")
        if fill is not None and var.dtype.kind in "iu":
            # H5MD's mark of absent particles (an id's -1): kept as CF's _FillValue, which
            # xarray reads back as NaN (its own encoding set aside below, it was lost)
            venc["_FillValue"] = fill
        enc[str(name)] = venc
    one_d = [str(name) for name, var in ds.variables.items()
             if var.ndim == 1 and str(var.dims[0]) in block]
    for name in one_d:  # few bytes a frame: in chunks of their own (TIME_CHUNK_ENTRIES)
        enc[name]["chunks"] = _time_chunk(ds.variables[name].shape[0])
    chunks = {d: min(n, ds.sizes[d]) for d, n in block.items()}
    out = ds.copy()
    for v in out.variables.values():
        v.encoding = {}
    _json_attrs(out)
    _drop_own_topology(out, _sources(ds))
    out = out.chunk({d: n for d, n in chunks.items()})
    # written from memory (8 bytes a frame): dask's blocks of the positions would
    # each write part of one of their chunks
    out = out.assign({n: out[n].compute() for n in one_d if n in out.data_vars})
    out = out.assign_coords({n: out[n].variable.compute() for n in one_d
                             if n in out.coords and n not in out.indexes})
    with _quiet_zarr():
        if not progress:
            out.to_zarr(os.fspath(store), mode=mode, encoding=enc, group=group)  # type: ignore[call-overload]
            return
        writes = out.to_zarr(os.fspath(store), mode=mode, encoding=enc, group=group,
                             compute=False)  # type: ignore[call-overload]
        _compute_with_bar(writes, description)


def to_zarr(
    ds: xr.Dataset,
    store: str | os.PathLike[str],
    *,
    frames_per_chunk: int | None = None,
    chunk_mib: float | None = None,
    contiguous: bool = False,
    compression: str | None = None,
    overwrite: bool = False,
    progress: bool = False,
) -> str:
    """Write a Dataset of the h5mdx data model to a Zarr store in chunks of whole frames.

    ``ds.to_zarr`` of a Dataset opened without ``chunks=`` lets Zarr choose chunks that
    split the frames along ``atom`` and ``spatial`` ((25, 1671, 2) for adk): every
    task of an analysis then reads parts of many chunks. This writes each element in
    chunks of whole frames, as ``h5mdx convert OUT.zarr`` does, from a lazy or dask-backed
    Dataset, a block at a time, into a temporary store renamed into place.

    Parameters
    ----------
    ds : xarray.Dataset
        The data (e.g. ``xr.open_dataset(f, engine="h5md").isel(atom=...)``).
    store : str or path-like
        The Zarr directory (written atomically).
    frames_per_chunk, chunk_mib, contiguous, compression
        The layout (see :class:`h5mdx.format.writer.Layout`).
    overwrite : bool, default False
        Replace an existing store.
    progress : bool, default False
        A progress bar as the blocks are written.

    Returns
    -------
    str
        The store written.
    """
    layout = Layout(frames_per_chunk=frames_per_chunk, chunk_mib=chunk_mib,
                    contiguous=contiguous, compression=compression)
    _check_kind_named(store, zarr=True)
    ds = _with_selection_id(ds)
    with atomic_output(store, overwrite=overwrite, inputs=_sources(ds), directory=True) as tmp:
        dataset_to_zarr(ds, tmp, layout=layout, progress=progress,
                        description=f"to {os.path.basename(os.fspath(store))}")
    return os.fspath(store)


def _with_selection_id(ds: xr.Dataset) -> xr.Dataset:
    """``ds`` with H5MD's ``id`` of its atoms where it holds a selection of them (an
    ``atom`` coordinate of indices other than 0, 1, ...: ``isel(atom=...)``, a
    ``select=``) and no ``id``, as :func:`to_h5md` writes it: without it, ``h5mdx rmsd
    STORE --topology`` the whole system's topology refused the store ("has 3341 atoms;
    the store has 214")."""
    if ATOM_DIM not in ds.coords or "id" in ds.variables or ds[ATOM_DIM].ndim != 1:
        return ds
    atoms = np.asarray(ds[ATOM_DIM].values)
    if atoms.dtype.kind not in "iu" or np.array_equal(atoms, np.arange(atoms.size)):
        return ds
    values, _unit, attrs = id_element(atoms)
    return ds.assign(id=xr.Variable((ATOM_DIM,), values, attrs))


#: The suffixes of an H5MD (HDF5) file's name
_H5MD_SUFFIXES = (".h5md", ".h5", ".hdf5", ".hdf")


def _check_kind_named(path: str | os.PathLike[str], *, zarr: bool) -> None:
    """Refuse an output named as the other kind (``ds.md.to_h5md("out.zarr")`` wrote an
    HDF5 file that ``xr.open_zarr`` refuses and h5mdx's tools take for a store by its
    name; ``to_zarr`` of ``out.h5md`` a store the h5md engine refuses)."""
    from h5mdx.layout.convert import is_zarr_path

    name = os.fspath(path)
    suffix = os.path.splitext(name.rstrip("/"))[1].lower()
    if zarr and suffix in _H5MD_SUFFIXES:
        raise ValueError(f"the output {name!r} is named as an H5MD file: to_zarr writes a "
                         f"Zarr store (.zarr); ds.md.to_h5md({name!r}) writes H5MD")
    if not zarr and is_zarr_path(name):
        raise ValueError(f"the output {name!r} is named as a Zarr store: to_h5md writes "
                         f"H5MD (.h5md, .h5, .hdf5); ds.md.to_zarr({name!r}) writes Zarr")


def _compute_with_bar(writes: Any, description: str) -> None:
    """Compute dask's ``writes`` under dask's own progress bar, after a line naming it (a
    4 GB copy to Zarr ran 12-29 s without a sign of life)."""
    import sys

    from dask.diagnostics import ProgressBar

    print(description, file=sys.stdout, flush=True)
    with ProgressBar():
        writes.compute()


# ----------------------------------------------------------------------------- to_h5md


def to_h5md(
    ds: xr.Dataset,
    path: str | os.PathLike[str],
    *,
    frames_per_chunk: int | None = None,
    chunk_mib: float | None = None,
    contiguous: bool = False,
    compression: str | None = None,
    group: str | None = None,
    overwrite: bool = False,
    author: str | None = None,
    author_email: str | None = None,
) -> str:
    """Write a Dataset of the h5mdx data model to an H5MD 1.1 file.

    Variables whose first dimension is ``time`` become time-dependent elements
    (``box_edges`` becomes ``box/edges`` with its ``boundary``; ``box_offset``, the lower
    corner of LAMMPS' bounds or HALMD's box, ``box/offset`` as HALMD writes it, with a
    warning: H5MD 1.1 defines no offset), those on a time axis of
    their own (``time_<name>``, as the engine opens them) elements with their own
    ``step`` and ``time``, the others
    time-independent datasets; ``time`` and ``step`` coordinates give the
    sampling; ``units`` attributes become H5MD ``unit`` attributes. ``mass``
    and ``charge`` topology coordinates are written as elements when the
    Dataset has no such variables; the coordinates of GROMACS' topology module (a
    GROMACS file's, or one ``h5mdx convert`` wrote) as that module again, where the
    atoms kept read back as they are (whole molecules from the first on). Data is read
    in blocks of whole output chunks, so lazy Datasets larger than memory can be
    written.

    Parameters
    ----------
    ds : xarray.Dataset
        The data (e.g. ``xr.open_dataset(f, engine="h5md").isel(time=slice(0, None, 10))``).
    path : str or path-like
        The output file (written atomically).
    frames_per_chunk, chunk_mib, contiguous, compression
        The layout (see :class:`h5mdx.format.writer.Layout`).
    group : str, optional
        Particles group name; default from ``ds.attrs["h5md_group"]`` or "trajectory".
    overwrite : bool, default False
        Replace an existing file.
    author : str, optional
        ``/h5md/author`` name (default: the Dataset's ``author_name``, as the ``h5md``
        engine opens it, else the user's name).
    author_email : str, optional
        ``/h5md/author`` email (default: the Dataset's ``author_email``, if any).

    Returns
    -------
    str
        The path written.

    Raises
    ------
    ValueError
        If the Dataset has no variable on ``time``, or a variable has a time axis other
        than ``time`` that is not its first (one on ``time_<name>`` first is written as an
        element with its own ``step`` and ``time``).
    """
    layout = Layout(frames_per_chunk=frames_per_chunk, chunk_mib=chunk_mib,
                    contiguous=contiguous, compression=compression)
    _check_kind_named(path, zarr=False)
    ds = _cf_encoded(ds)
    if author is None and ds.attrs.get("author_name") not in (None, "unknown"):
        author = str(ds.attrs["author_name"])  # the file's author, as opened
    if author_email is None and ds.attrs.get("author_email"):
        author_email = str(ds.attrs["author_email"])
    if group is None:
        group = str(ds.attrs.get("h5md_group", "/particles/trajectory")).rstrip("/")
        group = group.rsplit("/", 1)[-1] or "trajectory"
    specs, static, boundary, own, observables = _elements(ds)
    timed = [spec.name for spec in specs]
    n_frames = ds.sizes[TIME_DIM]
    time = ds[TIME_DIM]
    time_unit = time.attrs.get("units")
    with_time = time_unit != "step"  # frames numbered by their steps: the file had no time
    if not with_time:
        time_unit = None
    steps = (ds[STEP_COORD].values if STEP_COORD in ds.coords
             else np.arange(n_frames, dtype=np.int64))
    _warn_without_units(path, specs, time_unit if with_time else "")
    _warn_box_members(path, [s.name for s in specs] + list(static))
    _warn_observables_left(path, ds)
    check_steps_increase(steps, os.fspath(path))  # before any output exists
    module, bonds, structure = _topology(ds, static, path)  # structure: the species too
    with atomic_output(path, overwrite=overwrite, inputs=_sources(ds), hdf5=True) as tmp:
        with H5MDWriter(tmp, specs, n_frames=n_frames, layout=layout, group=group,
                        boundary=boundary, static=static, time_unit=time_unit,
                        author=author, author_email=author_email, with_time=with_time,
                        dimension=_dimension(ds), topology=module, bonds=bonds,
                        structure=structure) as w:
            block = w.block * max(1, math.ceil(16 / max(1, w.block)))
            no_box = 0  # frames whose box_edges are all zero: MDAnalysis' mark of no box
            for a in range(0, n_frames, block):
                raise_if_interrupted()
                sub = ds[timed].isel({TIME_DIM: slice(a, a + block)}).transpose(TIME_DIM, ...)
                sub = sub.compute()
                no_box += _zero_boxes(sub)
                w.extend(steps[a:a + block], time.values[a:a + block],
                         **{n: sub[n].values for n in timed})
            _write_own_sampling(w, ds, own)
            for spec in observables:  # on the trajectory's steps and times
                w.add_element(spec, ds[spec.name].transpose(TIME_DIM, ...).variable, steps,
                              time.values if with_time else None, time_unit=time_unit,
                              observable=True)
    if no_box:
        from h5mdx.layout.convert import _warn_no_box

        _warn_no_box(_sources(ds), no_box, n_frames,
                     f" (box_edges all zero); written to {os.fspath(path)} as zeros")
    return os.fspath(path)


def _zero_boxes(sub: xr.Dataset) -> int:
    """How many frames of ``sub`` (time first) have a ``box_edges`` of zeros only."""
    if "box_edges" not in sub.data_vars or sub["box_edges"].ndim < 2:
        return 0
    edges = np.asarray(sub["box_edges"].values)
    return int((edges.reshape(edges.shape[0], -1) == 0).all(axis=1).sum())


def _cf_encoded(ds: xr.Dataset) -> xr.Dataset:
    """``ds`` with its integer variables that CF decoding made floats (NaN where the
    ``_FillValue`` was: an ``id`` of a Zarr store, or of netCDF, opened by xarray) back
    in their integers, the fill value in place of NaN: H5MD's ids are integers, and their
    fill value marks absent particles."""
    changed = {}
    for name, var in ds.variables.items():
        fill, dtype = var.encoding.get("_FillValue"), var.encoding.get("dtype")
        if fill is None or dtype is None or var.dtype.kind != "f" \
                or np.dtype(dtype).kind not in "iu":
            continue
        back = var.fillna(fill).astype(dtype)
        back.encoding = dict(var.encoding)
        changed[name] = back
    return ds.assign(changed) if changed else ds


def _topology(ds: xr.Dataset, static: dict[str, Any], path: Any = "") -> tuple[Any, Any, Any]:
    """GROMACS' topology module of the Dataset's atoms and their bonds (written to
    ``/connectivity/bonds``), else VMD's structure module holding the bonds, as ``h5mdx
    convert`` writes them: ``(module, bonds, None)`` or ``(None, None, structure)``.

    The bonds, and the atomic numbers of the module, are no variables of the Dataset: they
    come from the topology attached at open (the file's own module, or ``topology=``),
    for the atoms the Dataset holds (:func:`_topology_atoms`)."""
    from h5mdx.layout.convert import _bonds_among

    atoms = _topology_atoms(ds)
    bonds = None if atoms is None else _bonds_among(atoms)
    module = _module(ds, atoms)
    if module is not None:
        return module, bonds, None
    return None, None, _structure(ds, static, path, bonds)


def _topology_atoms(ds: xr.Dataset) -> Any:
    """The MDAnalysis atoms of the topology attached at open that the Dataset holds: its
    ``atom`` coordinate, their indices in it (after ``isel``, a ``select=``); None without
    a topology, or where the coordinate does not index it."""
    from h5mdx.engine.topology import attached_topology, load_universe
    from h5mdx.errors import H5MDError

    topology = attached_topology(ds)
    if topology is None or ATOM_DIM not in ds.coords:
        return None
    try:
        universe = load_universe(topology, str(ds.attrs.get("h5md_group") or "") or None)
    except (H5MDError, OSError, ValueError):  # a topology gone or changed since the open
        return None
    atoms = np.asarray(ds[ATOM_DIM].values)
    n = len(universe.atoms)
    if atoms.dtype.kind not in "iu" or not atoms.size or atoms.min() < 0 \
            or atoms.max() >= n or np.unique(atoms).size != atoms.size:
        return None
    return universe.atoms[atoms]


def _module(ds: xr.Dataset, atoms: Any = None) -> Any:
    """GROMACS' topology module of the Dataset's atoms, from the per-atom coordinates a
    module gave them (``name``, ``resname``, ``resid``, ``segid``, ``moltype``,
    ``molnum``, with ``mass`` and ``charge``; the atomic numbers from ``species`` where it
    holds them, else from the elements of the topology's ``atoms``), where it reads back
    as they are (:func:`h5mdx.engine.topology.module_of`); None otherwise."""
    from h5mdx.engine.topology import module_of
    from h5mdx.layout.convert import _atomic_numbers

    if ATOM_DIM not in ds.dims:
        return None
    coords = {k: ds[k].values for k in ("name", "resname", "resid", "segid", "mass",
                                        "charge", "moltype", "molnum")
              if k in ds.variables and ds[k].dims == (ATOM_DIM,)}
    species = ds.coords.get("species")  # atomic numbers (not an element's type codes)
    if species is not None and species.attrs.get("long_name") == "atomic number":
        coords["species"] = species.values
    elif atoms is not None and (numbers := _atomic_numbers(atoms)) is not None:
        coords["species"] = numbers
    return module_of(coords, str(ds.attrs.get("system_name", "")))


def _structure(ds: xr.Dataset, static: dict[str, Any], path: Any = "",
               bonds: Any = None) -> Any:
    """VMD's structure module of the Dataset's atoms, from the per-atom coordinates the
    module gave them (a file of VMD's plugin's, or one ``h5mdx convert`` wrote) and its
    ``mass`` and ``charge``, by their ``species``, with ``bonds`` (0-based indices among
    the atoms) (:func:`h5mdx.format.vmd_structure.from_atoms`; ``static`` gets the
    species where the Dataset has none); None without names."""
    from h5mdx.format.vmd_structure import PER_ATOM, PER_RESIDUE, PER_SPECIES, from_atoms

    if ATOM_DIM not in ds.dims:
        return None
    # coordinates, and the elements the engine serves as variables (``mass``, ``charge``)
    per_atom = {k: ds[k].values for k in (*PER_SPECIES, *PER_ATOM, *PER_RESIDUE.values())
                if k in ds.variables and ds[k].dims == (ATOM_DIM,)}
    species = static.get("species")
    def note(where: str, problem: str, assumed: str) -> None:  # what the module cannot hold
        # note < _residues < from_atoms < _structure < _topology < to_h5md < its caller
        # (as the other warnings of to_h5md)
        warnings.warn(f"{os.fspath(path)} [{where}]: {problem}; {assumed}", UserWarning,
                      stacklevel=7)

    found = from_atoms(per_atom, bonds, None if species is None else np.asarray(species[0]),
                       note=note)
    if found is None:
        if species is not None and "name" in per_atom:
            _warn_names_not_per_species(path, np.asarray(species[0]), per_atom["name"])
        return None
    codes, structure = found
    if species is None:
        static["species"] = (codes, None, {"labels": structure.datasets["name"].tolist()})
    return structure


def _warn_names_not_per_species(path: Any, species: np.ndarray, names: Any) -> None:
    """Say that the atoms' names (and residues, segments) are not written: VMD's
    structure module holds one name per species, and atoms of one species of the Dataset
    have several (the waters' HW1 and HW2 of one atom type, a selection of a TPR file's
    atoms that GROMACS' module cannot hold)."""
    names = np.asarray(names).astype(str)
    if species.shape != names.shape:
        return
    for sp in np.unique(species):
        differ = np.unique(names[species == sp])
        if differ.size > 1:
            break
    else:
        return
    warnings.warn(
        f"{os.fspath(path)} [/parameters/vmd_structure]: the atoms' names are not one per "
        f"species (species {sp}: {', '.join(repr(n) for n in differ[:4].tolist())}), and "
        "VMD's structure module holds one name per species; no names, residues or "
        "segments written: select in the written file with topology= the original "
        "topology (u.atoms[ids] of the atoms written)", UserWarning, stacklevel=5)


def _warn_box_members(path: Any, names: list[str]) -> None:
    """Say which variables are written as members of the box that H5MD 1.1 does not
    define (:data:`h5mdx.format.writer.BOX_MEMBERS` other than ``edges``)."""
    extra = [f"{n} as box/{BOX_MEMBERS[n]}" for n in names
             if n in BOX_MEMBERS and n != "box_edges"]
    if extra:
        warnings.warn(
            f"{os.fspath(path)}: {', '.join(extra)}, as HALMD and znh5md write them; H5MD "
            "1.1 defines no such member of the box: the h5md engine reads it back (an error "
            "with strict=True), other readers ignore it. Drop the variable before writing "
            "for a file of H5MD 1.1 alone", UserWarning, stacklevel=3)


#: elements whose values mean nothing without a unit (MDAnalysis refuses a file without)
_NEED_UNITS = ("position", "velocity", "force", "box_edges", "box_offset")


def _warn_without_units(path: Any, specs: list[ElementSpec], time_unit: str | None) -> None:
    """Say which of the elements written have no unit (``attrs["units"]`` lost, e.g. by
    ``assign_coords``): valid H5MD, but MDAnalysis refuses such a file."""
    missing = [s.name for s in specs if s.name in _NEED_UNITS and not s.unit]
    if time_unit is None:
        missing.append("time")
    if missing:
        warnings.warn(
            f"{os.fspath(path)}: {', '.join(missing)} written without a unit (no "
            "attrs['units']; xarray drops them on some operations, e.g. assign_coords): "
            "MDAnalysis refuses such a file; set ds[name].attrs['units'] before writing",
            UserWarning, stacklevel=3)


def _write_own_sampling(w: H5MDWriter, ds: xr.Dataset, own: list[str]) -> None:
    """Write the variables on a time axis of their own (``time_<name>``) as elements with
    their own ``step`` and ``time``."""
    for name in own:
        var = ds[name]
        tdim = str(var.dims[0])
        step_name = f"{STEP_COORD}{tdim[len(TIME_DIM):]}"
        steps = (ds[step_name].values if step_name in ds.coords
                 else np.arange(var.shape[0], dtype=np.int64))
        times = ds[tdim]
        timed = times.attrs.get("units") != "step"
        w.add_element(ElementSpec(name, tuple(var.shape[1:]), var.dtype,
                                  var.attrs.get("units") or None, _h5md_attrs(var),
                                  fillvalue=var.encoding.get("_FillValue")),
                      var.variable, steps, times.values if timed else None,
                      time_unit=times.attrs.get("units") if timed else None)


#: attributes the engine serves that are not the element's own H5MD attributes: the unit
#: (written as ``unit``), the box's, and h5mdx's notes (``particles_group`` is a path here,
#: an object reference in the file)
_SERVED_ONLY = frozenset({"units", "boundary", "dimension", "particle_order",
                          "particles_group"})


def _h5md_attrs(var: xr.DataArray | xr.Variable) -> dict[str, Any]:
    """The attributes of ``var`` written with its element (species ``labels``, a charge's
    ``type``, a user's): strings, numbers and arrays of them."""
    out: dict[str, Any] = {}
    for k, v in var.attrs.items():
        if k in _SERVED_ONLY or str(k).startswith("_"):
            continue
        if isinstance(v, (str, bytes, bool, int, float, np.generic)):
            out[str(k)] = v
            continue
        if not isinstance(v, (list, tuple, np.ndarray)):
            continue  # a dict, None, an object: no HDF5 attribute
        try:
            arr = np.asarray(v)
        except ValueError:  # ragged
            continue
        if arr.ndim == 0:
            out[str(k)] = arr[()]
        elif arr.size and arr.dtype.kind in "biufS":
            out[str(k)] = arr
        elif arr.size and arr.dtype.kind == "U":  # h5py stores str lists, not <U arrays
            out[str(k)] = [str(x) for x in arr.ravel()]
    return out


def _elements(ds: xr.Dataset) -> tuple[list[ElementSpec],
                                        dict[str, tuple[Any, str | None, dict[str, Any]]],
                                        list[str] | None, list[str], list[ElementSpec]]:
    """The time-dependent elements, the time-independent ones, the box's boundary, the
    variables sampled on a time axis of their own (``time_<name>``) and the observables
    (on ``time`` but not on ``atom``)."""
    specs: list[ElementSpec] = []
    observables: list[ElementSpec] = []
    static: dict[str, tuple[Any, str | None, dict[str, Any]]] = {}
    boundary = None
    own: list[str] = []
    for name, var in ds.data_vars.items():
        name = str(name)
        _refuse_objects(name, var)
        if name == "box_edges":  # on time, on its own time axis, or fixed
            boundary = [str(b) for b in np.ravel(var.attrs.get("boundary", ["periodic"] * 3))]
        other = [d for d in var.dims if str(d).startswith(TIME_DIM) and d != TIME_DIM]
        if other:
            if var.dims[0] != other[0] or TIME_DIM in var.dims or len(other) > 1:
                raise ValueError(
                    f"variable {name!r} has the dimensions {var.dims}; an element sampled on "
                    "its own time axis must have it first, and no other")
            own.append(name)
        elif TIME_DIM in var.dims:
            if var.dims[0] != TIME_DIM:
                var = var.transpose(TIME_DIM, ...)
            spec = ElementSpec(name, tuple(var.shape[1:]), var.dtype, var.attrs.get("units"),
                               _h5md_attrs(var), fillvalue=var.encoding.get("_FillValue"))
            if ATOM_DIM in var.dims or name.startswith("box_"):
                specs.append(spec)
            else:  # a value per frame, not per atom: /observables/<name>
                observables.append(spec)
        else:
            fill = var.encoding.get("_FillValue")
            static[name] = (var.values, var.attrs.get("units"),
                            {**_h5md_attrs(var), **({} if fill is None else {"_FillValue": fill})})
    for coord, unit in (("mass", "u"), ("charge", "e")):
        if coord in ds.coords and coord not in static and ds[coord].dims == (ATOM_DIM,):
            static[coord] = (ds[coord].values, ds[coord].attrs.get("units", unit), {})
    if ATOM_DIM in ds.coords and "id" not in ds.variables:
        atoms = np.asarray(ds[ATOM_DIM].values)
        if atoms.dtype.kind in "iu" and not np.array_equal(atoms, np.arange(atoms.size)):
            # a selection of atoms (isel(atom=[...])): H5MD's id keeps which ones
            static["id"] = id_element(atoms)
    if not specs:
        raise ValueError(_no_trajectory(ds, observables))
    return specs, static, boundary, own, observables


def _refuse_objects(name: str, var: xr.DataArray) -> None:
    """Refuse a variable of Python objects, before anything is written: h5py failed deep
    in the writer with "Object dtype dtype('O') has no native HDF5 equivalent",
    naming neither the variable nor what to do."""
    if var.dtype.kind == "O":
        raise ValueError(
            f"variable {name!r} holds Python objects (dtype object), which HDF5 does not "
            f"store: give its strings as text (ds[{name!r}] = ds[{name!r}].astype(str)) or "
            f"its numbers as numbers, or leave it out (ds.drop_vars({name!r}))")


def _no_trajectory(ds: xr.Dataset, observables: list[ElementSpec]) -> str:
    """Why a Dataset without time-dependent particle variables cannot be written: one frame
    taken without its axis (``ds.isel(time=0)``, ``ds.sel(time=t)``) is said as such, with
    the selection that keeps it (the error said only that no variable was on 'time')."""
    text = "the Dataset has no variable on 'time' and 'atom' to write as a trajectory"
    if observables:
        return (f"{text} (only observables: {[s.name for s in observables]}; to_h5md writes "
                "a particles group with them)")
    if TIME_DIM in ds.coords and ds[TIME_DIM].ndim == 0:
        return (f"{text}: it holds the one frame at time {ds[TIME_DIM].values}, selected "
                "without its axis (ds.isel(time=0), ds.sel(time=t)); keep the axis to write "
                "it as a trajectory of one frame: ds.isel(time=[0]), ds.sel(time=[t])")
    return text


def _dimension(ds: xr.Dataset) -> int | None:
    """The box's dimension: as the file said (``box_edges``' attribute), else the length
    of ``spatial``; None where neither says (the writer's default)."""
    if "box_edges" in ds and ds["box_edges"].attrs.get("dimension") is not None:
        return int(ds["box_edges"].attrs["dimension"])
    return int(ds.sizes[SPATIAL_DIM]) if SPATIAL_DIM in ds.sizes else None


def _warn_observables_left(path: Any, ds: xr.Dataset) -> None:
    """Warn where a source file of ``ds`` holds observables the Dataset does not: the engine
    opens them as a group of their own, and ``to_h5md`` of a file's Dataset left them out
    in silence."""
    from h5mdx.format.h5md import open_h5md

    for source in _sources(ds):
        try:
            with open_h5md(source) as f:
                names = _observable_names(f.get("observables"))
        except (OSError, ValueError, TypeError, KeyError, RuntimeError):
            continue  # not an HDF5 file (a Zarr store, a DCD): nothing to say
        left = [n for n in names if n.rsplit("/", 1)[-1] not in ds.variables]
        if left:
            warnings.warn(
                f"{os.fspath(path)}: the observables of {source} ({', '.join(left)}) are not "
                "in the Dataset and are not written (xr.open_dataset(..., "
                "group='observables') opens them; h5mdx rechunk copies a whole file)",
                UserWarning, stacklevel=3)


def _observable_names(group: Any) -> list[str]:
    """The observables under ``group`` (``/observables``), by their paths in it: a
    time-dependent one is the group of its ``value``, in subgroups too; a
    time-independent one its dataset. Every name of a hard-linked one, as the engine
    serves them (:func:`~h5mdx.format.h5md.groups_below`)."""
    from h5mdx.format.h5md import groups_below

    if not isinstance(group, h5py.Group):
        return []
    datasets = [path for path, obj in groups_below(group) if obj is None]
    elements = {path.rpartition("/")[0] for path in datasets
                if path.rpartition("/")[2] == "value"}
    return sorted(elements | {path for path in datasets  # not an element's step or time
                              if path.rpartition("/")[0] not in elements})


def _sources(ds: xr.Dataset) -> list[str]:
    out = {ds.encoding.get("source"), ds.attrs.get("source")}
    for v in ds.variables.values():
        out.add(v.encoding.get("source"))
    return [s for s in out if isinstance(s, str) and os.path.exists(s)]
