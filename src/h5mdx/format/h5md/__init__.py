"""The H5MD format layer: walk an HDF5 file into plain descriptions.

This package knows h5py and numpy only (no xarray, no dask). :func:`scan`
reads the metadata of an H5MD 1.x file -- groups, elements, shapes, chunk
layouts, units and the small ``step``/``time`` arrays -- and never the
``value`` data of an element. The scan is tolerant: where a file departs from
H5MD but still carries usable data, :func:`scan` records a :class:`Problem` (the
H5MD path, what is wrong and what was assumed) on ``FileInfo.problems`` and
goes on; an element that cannot be read at all is left out with a problem saying
so, as is a part that reaches into other files without ``allow_external`` (never
followed). Only a file that is not H5MD (or HDF5) at all raises
:class:`~h5mdx.errors.H5MDFormatError`.
The backend turns problems into warnings, or into errors with ``strict=True``.


Its modules, each building on those above it (an import contract in pyproject.toml):

- ``_model``: what a scan returns (:class:`FileInfo` and the descriptions in it);
- ``_storage``: what is asked of one HDF5 object (attributes, filters, stored data);
- ``_opening``: :func:`open_h5md`, :func:`is_h5md`;
- ``_sampling``: an element's ``step`` and ``time``;
- ``_decimals``: times as the decimals a writer gave (a float32 0.1 as 0.1);
- ``_elements``: one element as an :class:`ElementInfo`;
- ``_box``: the box of a particles group;
- ``_particles``, ``_observables``, ``_meta``: a particles group, the observables,
  the ``/h5md`` group;
- ``_walk``: :func:`scan`, :func:`objects_below`, :func:`scan_free_form`,
  :func:`free_form`.
"""

from __future__ import annotations

from h5mdx.format.h5md._elements import reference_paths
from h5mdx.format.h5md._model import (
    BoxInfo,
    ElementInfo,
    FileInfo,
    FreeFormInfo,
    ParticlesGroupInfo,
    Problem,
    Sampling,
)
from h5mdx.format.h5md._opening import is_h5md, open_h5md
from h5mdx.format.h5md._storage import (
    ATTRIBUTE_ERRORS,
    attribute_problem,
    compression_name,
    ensure_filters,
    refresh_alone,
    scalar_text,
)

# used by the engine and layout tools (not part of the documented API)
from h5mdx.format.h5md._storage import object_address as object_address
from h5mdx.format.h5md._storage import scaled_unit as scaled_unit
from h5mdx.format.h5md._storage import unit_attribute as unit_attribute
from h5mdx.format.h5md._walk import (
    free_form,
    groups_below,
    objects_below,
    root_links,
    scan,
    scan_free_form,
)

__all__ = [
    "ATTRIBUTE_ERRORS",
    "BoxInfo",
    "ElementInfo",
    "FileInfo",
    "FreeFormInfo",
    "ParticlesGroupInfo",
    "scan_free_form",
    "Problem",
    "Sampling",
    "attribute_problem",
    "compression_name",
    "ensure_filters",
    "free_form",
    "groups_below",
    "is_h5md",
    "objects_below",
    "open_h5md",
    "reference_paths",
    "refresh_alone",
    "root_links",
    "scalar_text",
    "scan",
]
