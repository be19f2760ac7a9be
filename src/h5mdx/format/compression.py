"""Compression specs: the one parser, and the HDF5 filters they stand for (h5py only).

A spec is the text of ``--compression`` and of :class:`~h5mdx.format.writer.Layout`:
``none``, ``gzip[:LEVEL]``, ``lzf``, ``blosc[:CODEC[:LEVEL]]`` or ``zstd[:LEVEL]``.
:func:`parse_compression` reads it into a :class:`Compression`;
:func:`compression_kwargs` turns that into the filter arguments of h5py's
``create_dataset`` and :func:`h5mdx.layout.export.zarr_compressors` into Zarr codecs.

>>> parse_compression("gzip")
Compression(codec='gzip', level=4, blosc_codec=None, shuffle=True)
>>> parse_compression("blosc:zstd")
Compression(codec='blosc', level=5, blosc_codec='zstd', shuffle=True)
>>> compression_kwargs("gzip:1")
{'compression': 'gzip', 'compression_opts': 1, 'shuffle': True}

``gzip`` and ``zstd`` are written after HDF5's byte shuffle, as ``blosc`` shuffles inside:
float coordinates compress little without it (the adenylate kinase trajectory: gzip
level 1 kept 93% of the bytes without, 81% with), and inflate several times slower (h5py
read them in 2.19 s without, 0.67 s with; ``benchmarks/results/layouts-shuffle.md``).
Every HDF5 reader applies the shuffle filter (it is built in).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from h5mdx.errors import MissingDependencyError

__all__ = [
    "BLOSC_CODECS",
    "CODECS",
    "COMPRESSION_SYNTAX",
    "Compression",
    "compression_kwargs",
    "parse_compression",
]

#: The filters a spec may name.
CODECS = ("none", "gzip", "lzf", "blosc", "zstd")

#: The compressors inside blosc (``blosc:CODEC``).
BLOSC_CODECS = ("lz4", "lz4hc", "zstd", "zlib", "blosclz")

#: The spec syntax, for help texts and error messages.
COMPRESSION_SYNTAX = "none, gzip[:LEVEL], lzf, blosc[:CODEC[:LEVEL]] or zstd[:LEVEL]"

#: Default level of each filter that has one.
_DEFAULT_LEVEL = {"gzip": 4, "zstd": 3, "blosc": 5}


@dataclass(frozen=True)
class Compression:
    """A parsed compression spec.

    Attributes
    ----------
    codec : str
        One of :data:`CODECS`.
    level : int or None
        The compression level (None for ``none`` and ``lzf``).
    blosc_codec : str or None
        The compressor inside blosc (one of :data:`BLOSC_CODECS`), for ``blosc``.
    shuffle : bool
        Byte shuffle before compressing: HDF5's shuffle filter for ``gzip`` and ``zstd``,
        blosc's own for ``blosc``.
    """

    codec: str
    level: int | None = None
    blosc_codec: str | None = None
    shuffle: bool = False

    @property
    def enabled(self) -> bool:
        """Whether the data are compressed at all."""
        return self.codec != "none"


def _level(text: str, spec: Any) -> int:
    try:
        return int(text)
    except ValueError:
        raise ValueError(f"compression level must be an integer, as in 'gzip:1'; got {spec!r}"
                         ) from None


def parse_compression(spec: str | None) -> Compression:
    """Read a compression spec.

    Parameters
    ----------
    spec : str or None
        ``None``/``"none"``/``""``; ``"gzip"`` or ``"gzip:LEVEL"`` (0-9, default 4);
        ``"lzf"``; ``"blosc"``/``"blosc:CODEC"``/``"blosc:CODEC:LEVEL"`` (codec
        lz4, lz4hc, zstd, zlib, blosclz; default lz4 level 5, byte shuffle; levels 0-9)
        and ``"zstd"``/``"zstd:LEVEL"`` (1-22, default 3). Case and surrounding spaces do
        not matter.

    Returns
    -------
    Compression

    Raises
    ------
    ValueError
        For an unknown filter, a bad level or too many parts.
    """
    if spec is None:
        return Compression("none")
    parts = str(spec).strip().lower().split(":")
    name, args = parts[0], parts[1:]
    if name in ("none", ""):
        if args:
            raise ValueError(f"none takes no level; got {spec!r}")
        return Compression("none")
    if name == "gzip":
        level = _level(args[0], spec) if args else _DEFAULT_LEVEL["gzip"]
        if not 0 <= level <= 9 or len(args) > 1:
            raise ValueError(f"gzip level must be 0-9, as in 'gzip:1'; got {spec!r}")
        return Compression("gzip", level, shuffle=True)
    if name == "lzf":
        if args:
            raise ValueError(f"lzf takes no level; got {spec!r}")
        return Compression("lzf")
    if name == "zstd":
        if len(args) > 1:
            raise ValueError(f"zstd takes one level, as in 'zstd:5'; got {spec!r}")
        level = _level(args[0], spec) if args else _DEFAULT_LEVEL["zstd"]
        if not 1 <= level <= 22:
            raise ValueError(f"zstd level must be 1-22, as in 'zstd:5'; got {spec!r}")
        return Compression("zstd", level, shuffle=True)
    if name == "blosc":
        if len(args) > 2:
            raise ValueError(f"blosc takes a codec and a level, as in 'blosc:lz4:5'; "
                             f"got {spec!r}")
        cname = args[0] if args else "lz4"
        if cname not in BLOSC_CODECS:
            raise ValueError(f"unknown blosc codec {cname!r} in {spec!r}; valid options are: "
                             f"{', '.join(BLOSC_CODECS)}")
        level = _level(args[1], spec) if len(args) > 1 else _DEFAULT_LEVEL["blosc"]
        if not 0 <= level <= 9:
            raise ValueError(f"blosc level must be 0-9, as in 'blosc:lz4:5'; got {spec!r}")
        return Compression("blosc", level, cname, shuffle=True)
    raise ValueError(f"unknown compression {spec!r}; use {COMPRESSION_SYNTAX}")


def compression_kwargs(spec: str | Compression | None) -> dict[str, Any]:
    """Keyword arguments of :meth:`h5py.Group.create_dataset` for a compression spec.

    Parameters
    ----------
    spec : str, Compression or None
        See :func:`parse_compression`; ``blosc`` and ``zstd`` go through
        :mod:`hdf5plugin`.

    Returns
    -------
    dict
        Possibly empty.

    Raises
    ------
    ValueError
        For an unknown filter or a bad level.
    MissingDependencyError
        For ``blosc``/``zstd`` without :mod:`hdf5plugin`.
    """
    comp = spec if isinstance(spec, Compression) else parse_compression(spec)
    if comp.codec == "none":
        return {}
    shuffle = {"shuffle": True} if comp.shuffle else {}  # HDF5's filter, before the codec
    if comp.codec == "gzip":
        return {"compression": "gzip", "compression_opts": comp.level, **shuffle}
    if comp.codec == "lzf":
        return {"compression": "lzf"}
    try:
        import hdf5plugin
    except ImportError as err:
        raise MissingDependencyError(
            f"compression {spec!r} needs the hdf5plugin package: pip install hdf5plugin "
            "(or use gzip:1 / lzf, which h5py always has)"
        ) from err
    assert comp.level is not None  # parse_compression sets a level for every codec
    if comp.codec == "zstd":
        return {**hdf5plugin.Zstd(clevel=comp.level), **shuffle}
    assert comp.blosc_codec is not None
    return dict(hdf5plugin.Blosc(cname=comp.blosc_codec, clevel=comp.level,  # type: ignore[arg-type]
                                 shuffle=hdf5plugin.Blosc.SHUFFLE))
