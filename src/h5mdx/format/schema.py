"""H5MD 1.1 names and paths, written down once.

The hierarchy h5mdx reads (H5MD 1.1, https://www.nongnu.org/h5md/h5md.html)::

    /
    ├── h5md                       attrs: version = [1, 1]
    │   ├── author                 attrs: name, email
    │   └── creator                attrs: name, version
    ├── particles
    │   └── <group>                e.g. "trajectory", "all", "atoms"
    │       ├── box                attrs: dimension, boundary
    │       │   └── edges          time-dependent element or fixed dataset
    │       ├── position           time-dependent element: value, step, time
    │       ├── velocity, force, image, species, id, mass, charge, ...
    ├── observables
    │   ├── <observable>           time-dependent element or fixed dataset
    │   └── <subgroup>/<observable>
    └── parameters                 free-form groups, datasets and attributes

A *time-dependent element* is a group with a ``value`` dataset whose first
axis is time, and ``step`` (and optionally ``time``) either as datasets of
the same length (explicit sampling) or as scalar datasets holding the interval
with an ``offset`` attribute (fixed-interval sampling). A *time-independent
element* is a plain dataset.
"""

from __future__ import annotations

from enum import Enum

__all__ = [
    "H5MD_SIGNATURE",
    "KNOWN_PARTICLE_ELEMENTS",
    "PER_PARTICLE_SCALARS",
    "SUPPORTED_VERSIONS",
    "Path",
    "ZARR_MARKERS",
    "is_time_dim",
]

#: The first 8 bytes of every HDF5 file.
H5MD_SIGNATURE = b"\x89HDF\r\n\x1a\n"

#: Files at the top of a Zarr group (v3; v2's group and attributes): a directory given as
#: an H5MD file that holds one is a Zarr store.
ZARR_MARKERS = ("zarr.json", ".zgroup", ".zattrs")

#: H5MD versions this reader understands (major, minor).
SUPPORTED_VERSIONS = ((1, 0), (1, 1))


class Path(str, Enum):
    """Names and path templates of the H5MD hierarchy."""

    H5MD = "/h5md"
    AUTHOR = "/h5md/author"
    CREATOR = "/h5md/creator"
    MODULES = "/h5md/modules"
    PARTICLES = "/particles"
    OBSERVABLES = "/observables"
    PARAMETERS = "/parameters"
    PARTICLES_GROUP = "/particles/{group}"
    ELEMENT = "/particles/{group}/{element}"
    BOX = "/particles/{group}/box"
    BOX_EDGES = "/particles/{group}/box/edges"
    VALUE = "value"
    STEP = "step"
    TIME = "time"
    OFFSET = "offset"
    UNIT = "unit"
    VERSION = "version"
    DIMENSION = "dimension"
    BOUNDARY = "boundary"

    def __str__(self) -> str:
        return str(self.value)

    def format(self, *args: object, **kwargs: object) -> str:
        return str(self.value).format(*args, **kwargs)


#: Standard particle elements of H5MD 1.1 (any other element is read as well).
KNOWN_PARTICLE_ELEMENTS = (
    "position",
    "velocity",
    "force",
    "image",
    "species",
    "id",
    "mass",
    "charge",
)

#: H5MD's particle elements of one number per particle (per frame where time-dependent).
PER_PARTICLE_SCALARS = ("id", "species", "mass", "charge")

#: The ``long_name`` of the time-independent ``id`` that h5mdx writes for a selection of
#: atoms (``h5mdx convert --select``, ``ds.isel(atom=...).md.to_h5md``): each atom's
#: 0-based index in the input, so that a reader can find the atoms in the whole system's
#: topology. Other programs' ids are particle tags (often 1-based), not such indices.
INPUT_INDEX_LONG_NAME = "0-based index of the atom in the input"

#: Dimension names of the data model.
TIME_DIM = "time"
ATOM_DIM = "atom"
SPATIAL_DIM = "spatial"
BOX_VECTOR_DIM = "box_vector"
STEP_COORD = "step"
SPATIAL_LABELS = ("x", "y", "z")
BOX_VECTOR_LABELS = ("a", "b", "c")


def is_time_dim(dim: object) -> bool:
    """Whether ``dim`` is a time axis: ``time``, or an element's own ``time_<name>`` (an
    element sampled at other steps than the positions).

    >>> is_time_dim("time_velocity"), is_time_dim("atom")
    (True, False)
    """
    return dim == TIME_DIM or str(dim).startswith(f"{TIME_DIM}_")
