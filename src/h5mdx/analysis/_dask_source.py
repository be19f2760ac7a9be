"""The lazily indexed array behind a dask array of ``open_dataset(..., chunks=...)``.

``xr.open_dataset(chunks=...)`` wraps the backend's lazily indexed array in
``dask.array.from_array``: a graph of two layers, ``original-<name>`` holding the array
and ``<name>`` with one ``getter`` task per block. Slicing it (``isel``/``sel`` with
slices, ``position[1000:]``) adds one ``getitem`` layer. :func:`dask_source` reads such a
graph back into the array and the slices that give the dask array's values, so that
:func:`h5mdx.rmsd` can read the same frames lazily (a few MiB at a time, no getter task
holding a whole block) and the result's coordinates need no task at all.

Only these graphs qualify; anything else (an arithmetic operation, fancy indexing, a
reversed slice, another layer) gives None, and the caller keeps the dask array. The layer
names, ``Task``/``Alias`` objects and ``getter`` are dask's internals (no public API names
the array a dask array was made from): a change there gives None, never a wrong answer.
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["dask_source"]

_GETTERS = ("getter", "getter_nofancy", "getter_inline")


def _parts(task: Any) -> tuple[Any, tuple] | None:
    """``(function, arguments)`` of a dask task (a ``Task`` or a legacy tuple), else None."""
    func, args = getattr(task, "func", None), getattr(task, "args", None)
    if func is None and isinstance(task, tuple) and task and callable(task[0]):
        func, args = task[0], task[1:]
    if func is None or args is None:
        return None
    return func, tuple(args)


def _key(node: Any) -> Any:
    """The key a ``TaskRef``/``Alias`` argument points to (a legacy key: itself)."""
    return getattr(node, "key", node)


def _slices(index: Any, ndim: int) -> tuple[slice, ...] | None:
    """A task's index argument as ``ndim`` slices (trailing axes whole), or None where it
    holds anything else (integers, arrays, ``None``, ``Ellipsis``)."""
    index = getattr(index, "value", index)  # a DataNode holds it as its value
    index = index if isinstance(index, tuple) else (index,)
    if len(index) > ndim or not all(isinstance(s, slice) for s in index):
        return None
    return (*index, *(slice(None),) * (ndim - len(index)))


def _getter_ranges(task: Any, original: str, shape: tuple[int, ...]) -> list[range] | None:
    """The ranges of the held array one ``getter`` task reads, per axis."""
    parts = _parts(task)
    if parts is None or getattr(parts[0], "__name__", "") not in _GETTERS \
            or len(parts[1]) < 2 or _key(parts[1][0]) != original:
        return None
    index = _slices(parts[1][1], len(shape))
    if index is None:
        return None
    ranges = [range(*s.indices(n)) for s, n in zip(index, shape, strict=True)]
    return ranges if all(r.step == 1 for r in ranges) else None


def _block_ranges(task: Any, getters: Any, getter_name: str, original: str,
                  shape: tuple[int, ...]) -> list[range] | None:
    """The ranges of the held array one block of the ``getitem`` layer holds, per axis."""
    target = getattr(task, "target", None)
    index: tuple[slice, ...] | None
    if target is not None:  # an Alias: the getter's block, whole
        source, index = _key(target), (slice(None),) * len(shape)
    else:
        parts = _parts(task)
        # operator.getitem, or dask.array.chunk.getitem (the same, copying a view that
        # would keep a much larger block alive)
        if parts is None or getattr(parts[0], "__name__", "") != "getitem" \
                or len(parts[1]) != 2:
            return None
        source, index = _key(parts[1][0]), _slices(parts[1][1], len(shape))
    if not isinstance(source, tuple) or source[:1] != (getter_name,) or index is None:
        return None
    try:
        outer = _getter_ranges(getters[source], original, shape)
    except KeyError:
        return None
    if outer is None:
        return None
    ranges = []
    for s, r in zip(index, outer, strict=True):
        inner = range(*s.indices(len(r)))
        if inner.step < 1:
            return None
        ranges.append(r[inner.start:inner.stop:inner.step] if inner else range(0))
    return ranges


def _chain(ranges: list[range]) -> slice | None:
    """One slice that runs through ``ranges`` in order (one after another, one step), or
    None where they do not make one."""
    ranges = [r for r in ranges if len(r)]
    if not ranges:
        return None
    steps = {r.step for r in ranges if len(r) > 1}
    if len(steps) > 1:
        return None
    step = steps.pop() if steps else None
    for a, b in zip(ranges[:-1], ranges[1:], strict=True):
        gap = b.start - a[-1]
        if step is None:
            step = gap
        if gap != step or step < 1:
            return None
    step = step or 1
    start = ranges[0].start
    return slice(start, ranges[-1][-1] + 1, step)


def dask_source(data: Any) -> tuple[Any, tuple[slice, ...]] | None:
    """The lazily indexed array a dask array was opened from, and the slices of it it holds.

    Parameters
    ----------
    data : dask.array.Array
        A variable's dask array from ``xr.open_dataset(..., chunks=...)`` (or
        ``xr.open_zarr``), as opened or after slicing with unit-or-larger steps.

    Returns
    -------
    tuple or None
        ``(array, key)``: ``array[key]`` (one slice per axis) holds ``data``'s values,
        block for block. None for any other dask array.
    """
    layers = getattr(getattr(data, "dask", None), "layers", None)
    if layers is None:
        return None
    originals = [n for n in layers if isinstance(n, str) and n.startswith("original-")]
    if len(originals) != 1:
        return None
    original = originals[0]
    getter_name = original[len("original-"):]
    held = list(layers[original].values())
    array = getattr(held[0], "array", None) if len(held) == 1 else None
    shape = tuple(int(n) for n in getattr(array, "shape", ()))
    if array is None or getter_name not in layers or len(shape) != data.ndim:
        return None
    if set(layers) == {original, getter_name}:
        if data.name != getter_name or shape != tuple(data.shape):
            return None
        return array, (slice(None),) * len(shape)
    if set(layers) != {original, getter_name, data.name} \
            or not str(data.name).startswith("getitem-"):
        return None
    getters, blocks = layers[getter_name], layers[data.name]
    per_axis: list[list[range | None]] = [[None] * n for n in data.numblocks]
    for idx in np.ndindex(*data.numblocks):
        try:
            task = blocks[(data.name, *idx)]
        except KeyError:
            return None
        ranges = _block_ranges(task, getters, getter_name, original, shape)
        if ranges is None:
            return None
        for axis, (i, r) in enumerate(zip(idx, ranges, strict=True)):
            if len(r) != data.chunks[axis][i]:
                return None
            if per_axis[axis][i] is None:
                per_axis[axis][i] = r
            elif per_axis[axis][i] != r:  # blocks of one row must agree
                return None
    key = []
    for axis, held in enumerate(per_axis):
        chained = _chain([r for r in held if r is not None])
        if chained is None or len(range(*chained.indices(shape[axis]))) != data.shape[axis]:
            return None
        key.append(chained)
    return array, tuple(key)
