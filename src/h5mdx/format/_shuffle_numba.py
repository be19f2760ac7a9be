"""HDF5's byte shuffle undone by compiled loops that release the GIL (numba).

Imported only where numba is installed, at the first shuffled dataset read directly
(:func:`h5mdx.format.direct._unshuffle`). For 4- and 8-byte elements (float32/float64
positions) the loop is compiled for that size, which LLVM turns into vector byte
shuffles: a 4 MB chunk of float32 in 0.1 ms, against 1.1-1.9 ms for numcodecs' compiled
loop (which holds the GIL, so that threads decoding chunks at once took turns).
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numba import njit

__all__ = ["unshuffle"]


def _element_loop(size: int) -> Any:
    """The unshuffle of ``size``-byte elements, compiled with ``size`` a constant: LLVM
    unrolls the inner loop and vectorises the outer one (numba's cache keys a closure by
    the values it holds, so each size is cached apart)."""

    @njit(cache=True, nogil=True)
    def loop(src: np.ndarray, out: np.ndarray) -> None:  # pragma: no cover - compiled
        n = src.size // size
        for i in range(n):
            for b in range(size):
                out[size * i + b] = src[b * n + i]

    return loop


_unshuffle4 = _element_loop(4)
_unshuffle8 = _element_loop(8)


@njit(cache=True, nogil=True)
def _unshuffle_n(src: np.ndarray, out: np.ndarray, size: int) -> None:  # pragma: no cover
    n = src.size // size
    for b in range(size):
        for i in range(n):
            out[i * size + b] = src[b * n + i]


def unshuffle(data: Any, out: np.ndarray, size: int) -> np.ndarray:
    """The bytes of ``data`` (shuffled ``size``-byte elements) unshuffled into ``out``, a
    uint8 array of as many bytes, which is returned. Bytes past the last whole element
    stay where they are, as HDF5 leaves them."""
    src = np.frombuffer(data, dtype=np.uint8)
    if size == 4:
        _unshuffle4(src, out)
    elif size == 8:
        _unshuffle8(src, out)
    else:
        _unshuffle_n(src, out, size)
    whole = src.size // size * size
    out[whole:] = src[whole:]
    return out
