"""H5MD's ``/observables``: time series and fixed values of the whole system,
grouped as the file groups them."""

from __future__ import annotations

import h5py

from h5mdx.errors import H5MDFormatError
from h5mdx.format.h5md._elements import (
    _SAMPLING_NAMES,
    _element,
    _holds_element_groups,
    _shared_sampling,
)
from h5mdx.format.h5md._model import ElementInfo
from h5mdx.format.h5md._storage import _addr, _Ctx, _get, _has


def _observables(
    c: _Ctx,
    grp: h5py.Group,
    prefix: str,
    out: dict[str, ElementInfo],
    groups: list[str],
    seen: set[tuple[int, ...]],
    root: str = "/observables",
    deep: bool = True,
    within: str | None = None,
    subtree: bool = False,
) -> None:
    """The elements under ``root`` (``/observables`` or ``/connectivity``) by their path
    below it, and the groups that hold them (``deep=False``: the groups below ``grp`` by
    name, without walking them; ``within``, a group's path below ``root``: only the
    children on the way to it, and its own elements, are read; with ``subtree``, those
    of every group below it too); ``seen``: the addresses of the groups on the way to
    ``grp`` (a link back to one is a cycle)."""
    # the groups on the way here, not every group walked: a group of two names (hard
    # links) was "a cycle" at its second name, and left out
    seen = {*seen, _addr(grp)}
    where = None  # grp.name: asked at the first child, not at each (7 us)
    if within is not None and prefix == f"{within}/":  # the group sought: its elements
        within, deep = None, subtree
    for child in grp:
        key = f"{prefix}{child}"
        if within is not None and key != within and not within.startswith(f"{key}/"):
            continue  # not on the way to the group sought: not even opened
        path = f"{root}/{key}"
        where = where or grp.name
        try:
            obj = _get(c, grp, child, where)
            if child in _SAMPLING_NAMES and _shared_sampling(c, grp, obj, path):
                continue
            subgroup = isinstance(obj, h5py.Group) and not _has(obj, "value")
            if subgroup and (_has(obj, "step") or _has(obj, "time")
                             ) and not _holds_element_groups(obj):
                raise H5MDFormatError(
                    c.filename, path, "element has 'step'/'time' but no 'value' dataset"
                )
            if subgroup:
                if len(groups) >= MAX_GROUPS:  # groups hard-linked in a chain: 2**n paths
                    raise H5MDFormatError(
                        c.filename, path, f"more than {MAX_GROUPS} groups below {root} "
                        "(groups linked under several names, over and over)")
                if _addr(obj) in seen:
                    raise H5MDFormatError(
                        c.filename, path, "links back to a group that contains it (a cycle)"
                    )
                groups.append(key)
                if deep:
                    _observables(c, obj, f"{key}/", out, groups, seen, root, True, within,
                                 subtree)
            else:
                out[key] = _element(c, child, obj, path)
        except H5MDFormatError as err:
            c.left_out(err, path)


#: Most groups :func:`_observables` walks below ``/observables`` or ``/connectivity``.
MAX_GROUPS = 2_000


#: The root groups H5MD defines (``trajectory``: its drafts' particles, before 1.0).
_H5MD_ROOTS = ("h5md", "particles", "observables", "connectivity", "parameters",
               "trajectory")
