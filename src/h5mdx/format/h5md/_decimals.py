"""Times as the decimals a writer gave: a float32 ``time`` widened to the shortest decimal
that rounds to it (0.1, not 0.10000000149011612), and fixed-interval times
``offset + k * interval`` rounded once (0.3, not 0.30000000000000004).

Served as float64, those values missed ``ds.sel(time=0.1)`` (a KeyError), and
``ds.sel(time=slice(0.1, 0.2))`` left out the frame at 0.2 (0.20000000298 > 0.2) where a
float32 coordinate (xarray's other engines) holds it. Each value still rounds to the
number stored: no digit the file holds is changed.
"""

from __future__ import annotations

from decimal import Decimal, InvalidOperation

import numpy as np

from h5mdx.format.units import as_decimal, shortest_decimals

__all__ = ["fixed_decimals", "widened"]

#: Significant decimal digits that tell every float32 (and float16) apart
_MAX_DIGITS = 9
#: Powers of ten (and integers below 2**53) that float64 holds exactly
_MAX_SCALE = 15
_EXACT = 2.0**53


def widened(raw: np.ndarray) -> np.ndarray:
    """``raw`` as float64; a float16 or float32 value as the shortest decimal that rounds
    back to it (what ``repr`` of it prints), found digit by digit for the whole array.

    >>> widened(np.array([0.1, 0.2, 20.454828], np.float32)).tolist()
    [0.1, 0.2, 20.454828]
    """
    x = raw.astype(np.float64)
    if raw.dtype not in (np.float16, np.float32) or not x.size:
        return x
    out = x.copy()
    todo = np.isfinite(x) & (x != 0)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore", under="ignore"):
        exponent = np.floor(np.log10(np.abs(np.where(todo, x, 1.0)))).astype(np.int64)
    # one significant digit first: 10**exponent is the leading digit's place
    at, n, k = shortest_decimals(x, raw.dtype, todo, -exponent, _MAX_DIGITS)
    np.put(out, at, as_decimal(n, k))
    return out


def _scaled_integer(value: float, scale: int) -> int | None:
    """``value * 10**scale`` where it is a whole number (of its shortest decimal), else
    None."""
    try:
        shifted = Decimal(repr(value)).scaleb(scale)
    except (InvalidOperation, ValueError):
        return None
    return int(shifted) if shifted == shifted.to_integral_value() else None


def fixed_decimals(offset: float, interval: float, n: int) -> np.ndarray | None:
    """``offset + k * interval`` for ``k`` in ``0 .. n-1``, each the decimal its
    ``offset`` and ``interval`` (as their shortest decimals) give, rounded once; None
    where they have more than 15 decimals or the sums exceed what float64 holds exactly
    (the caller computes them as floats).

    >>> fixed_decimals(0.0, 0.1, 4).tolist()
    [0.0, 0.1, 0.2, 0.3]
    """
    for scale in range(_MAX_SCALE + 1):
        first, every = _scaled_integer(offset, scale), _scaled_integer(interval, scale)
        if first is None or every is None:
            continue
        if abs(first) + abs(every) * max(n - 1, 0) >= _EXACT:
            return None
        return (first + every * np.arange(n, dtype=np.float64)) / 10.0**scale
    return None
