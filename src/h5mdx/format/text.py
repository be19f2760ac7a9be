"""Attribute values as Python values: bytes and numpy strings decoded, one place.

Both :mod:`h5mdx.format.h5md` and :mod:`h5mdx.format.gromacs_topology` read
attributes and string tables written by many programs (fixed-length ``S`` strings,
variable-length ``O`` strings, one-element arrays); they decode them here.
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["decode", "unit_text"]


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


def unit_text(value: Any) -> str | None:
    """The text of a ``unit`` attribute as read, decoded (a one-element string array is
    accepted); None where there is none.

    Raises
    ------
    ValueError
        Where it is anything else (a number, several strings).
    """
    value = decode(value)
    if isinstance(value, list) and len(value) == 1:
        value = value[0]
    if value is None or isinstance(value, str):
        return value
    raise ValueError(f"the 'unit' attribute must be a string, not {value!r}")
