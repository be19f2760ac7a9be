"""Attribute values as Python values: bytes and numpy strings decoded, one place; and
sizes in bytes as people read them (:func:`human_bytes`).

Both :mod:`h5mdx.format.h5md` and :mod:`h5mdx.format.gromacs_topology` read
attributes and string tables written by many programs (fixed-length ``S`` strings,
variable-length ``O`` strings, one-element arrays); they decode them here.
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["c_string", "decode", "human_bytes", "is_utf8", "one_string", "text_of",
           "unit_text"]


def decode(value: Any) -> Any:
    """``value`` as plain Python: bytes decoded (UTF-8, bad bytes replaced), string
    arrays as lists of ``str``, other arrays as (nested) lists, numpy scalars as Python
    scalars; anything else unchanged."""
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    if isinstance(value, np.ndarray):
        if value.dtype.kind in "SO":
            return [decode(v) for v in value.tolist()]
        if value.ndim == 0:
            return value.item()
        return value.tolist()
    if isinstance(value, np.generic):
        return value.item()
    return value


def is_utf8(raw: bytes) -> bool:
    """Whether ``raw`` is UTF-8 text."""
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def text_of(raw: bytes) -> str:
    """``raw`` decoded: UTF-8, or Latin-1 where the bytes are no UTF-8 (each byte one
    character: older writers' ``b"\xc5"`` is ``"Å"``, where UTF-8 ``replace`` gave
    ``"\ufffd"``)."""
    return raw.decode("utf-8" if is_utf8(raw) else "latin-1")


def one_string(value: Any) -> Any:
    """The element of a one-element bytes array (an attribute some writers store as
    ``[b"nm"]``); ``value`` itself otherwise."""
    if isinstance(value, np.ndarray) and value.dtype.kind == "S" and value.size == 1:
        return value.reshape(-1)[0]
    return value


def c_string(value: Any) -> str:
    """An entry of a string table as C readers (VMD's plugin, GROMACS) read it: text up
    to its first NUL, as HDF5 converts a fixed-length string to a C string (a writer
    that copies names into an unzeroed buffer leaves bytes after the NUL, which are no
    part of the name); UTF-8, or Latin-1 where the bytes are no UTF-8 (a name such as
    ``b"C\xe91"``, an older writer's, is ``"Cé1"``, not ``"C\ufffd1"``)."""
    if isinstance(value, (bytes, np.bytes_)):
        return text_of(bytes(value).split(b"\x00", 1)[0])
    return str(decode(value)).split("\x00", 1)[0]


def unit_text(value: Any) -> str | None:
    """The text of a ``unit`` attribute as read, decoded (a one-element string array is
    accepted; bytes that are not UTF-8 read as Latin-1); None where there is none.

    Raises
    ------
    ValueError
        Where it is anything else (a number, several strings).
    """
    value = one_string(value)
    # Latin-1's Å (0xC5) and µ (0xB5), as older writers store them, are converted
    value = decode(text_of(value) if isinstance(value, bytes) else value)
    if isinstance(value, list) and len(value) == 1:
        value = value[0]
    if value is None or isinstance(value, str):
        return value
    raise ValueError(f"the 'unit' attribute must be a string, not {value!r}")


def human_bytes(n: float, *, kib_digits: int = 1) -> str:
    """``n`` bytes in binary units, ``"3.5 MiB"``: bytes whole, KiB to ``kib_digits``
    decimals, larger units to one. A size that rounds to 1024 of a unit is written in the
    next (1 MiB - 1 byte is ``"1.0 MiB"``, not ``"1024.0 KiB"``)."""
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        digits = {"B": 0, "KiB": kib_digits}.get(unit, 1)
        if abs(round(n, digits)) < 1024 or unit == "TiB":
            return f"{n:.{digits}f} {unit}"
        n /= 1024
    return f"{n} B"  # pragma: no cover
