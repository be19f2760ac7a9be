"""Attach an MDAnalysis topology to the ``atom`` dimension, and resolve selections.

MDAnalysis is imported lazily: opening files without ``topology=`` never needs it.
"""

from __future__ import annotations

import os
import warnings
from functools import lru_cache
from typing import Any

import numpy as np

from h5mdx._optional import import_optional
from h5mdx.errors import TopologyError

__all__ = ["load_universe", "select_indices", "topology_coords"]

#: (coordinate name, AtomGroup attribute) pairs attached when the topology has them.
TOPOLOGY_ATTRS = (
    ("name", "names"),
    ("resname", "resnames"),
    ("resid", "resids"),
    ("segid", "segids"),
    ("type", "types"),
    ("mass", "masses"),
    ("charge", "charges"),
)


@lru_cache(maxsize=16)
def _universe(path: str, mtime: float) -> Any:
    mda = import_optional("MDAnalysis", "topologies and atom selections")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            return mda.Universe(path)
        except Exception as err:  # MDAnalysis raises many kinds of errors
            raise TopologyError(f"{path}: MDAnalysis cannot read this topology: {err}") from err


#: The key of the ``atom`` coordinate's ``encoding`` that holds a Universe passed as
#: ``topology=`` (analyses use it, not a new one read from its file).
UNIVERSE_ENCODING = "universe"

#: ``attrs["topology"]`` of a Universe that was not read from a file.
IN_MEMORY = "<MDAnalysis Universe in memory>"


def topology_label(topology: Any, universe: Any) -> str:
    """What ``attrs["topology"]`` says: the absolute path of the topology file (of the
    Universe passed), so that it still names the file after a ``chdir`` or in another
    process; :data:`IN_MEMORY` for a Universe without a file."""
    if isinstance(topology, (str, os.PathLike)):
        path: Any = topology
    else:
        path = getattr(universe, "filename", None)
        if not isinstance(path, (str, os.PathLike)) or not os.fspath(path):
            return IN_MEMORY
    return os.path.abspath(os.path.expanduser(os.fspath(path)))


def attached_topology(position: Any) -> Any:
    """The topology attached to a DataArray or Dataset at open: the Universe passed as
    ``topology=`` (held by its ``atom`` coordinate), else the topology file it names,
    else None."""
    atom = position.coords.get("atom") if hasattr(position, "coords") else None
    if atom is not None:
        universe = atom.encoding.get(UNIVERSE_ENCODING)
        if universe is not None:
            return universe
        if "topology" in atom.attrs:
            return atom.attrs["topology"]
    return position.attrs.get("topology")


def load_universe(topology: str | os.PathLike[str] | Any) -> Any:
    """An MDAnalysis Universe for ``topology`` (a path, or a Universe passed through).

    Parameters
    ----------
    topology : str, path-like or MDAnalysis.Universe
        Any topology file MDAnalysis reads (PSF, PDB, GRO, TPR, ...).

    Returns
    -------
    MDAnalysis.Universe
    """
    if hasattr(topology, "select_atoms") and hasattr(topology, "atoms"):
        return topology
    if topology == IN_MEMORY:
        raise TopologyError(
            "the topology attached at open was a Universe without a file, and it is not "
            "held here (a copy of the Dataset that lost its 'atom' coordinate, or another "
            "process): pass topology=<the Universe> to this call")
    path = os.path.expanduser(os.fspath(topology))
    if not os.path.exists(path):
        raise FileNotFoundError(f"No such topology file: {path!r}")
    return _universe(os.path.abspath(path), os.path.getmtime(path))


def topology_coords(universe: Any, n_atoms: int, filename: str) -> dict[str, np.ndarray]:
    """Per-atom arrays of the topology, checked against the trajectory's atom count.

    Parameters
    ----------
    universe : MDAnalysis.Universe
        The topology.
    n_atoms : int
        Number of atoms in the trajectory.
    filename : str
        The trajectory file (for the error message).

    Returns
    -------
    dict
        Coordinate name to array of length ``n_atoms``.

    Raises
    ------
    TopologyError
        If the atom counts differ.
    """
    n_top = len(universe.atoms)
    if n_top != n_atoms:
        raise TopologyError(
            f"{filename}: the topology {_name(universe)} has {n_top} atoms but the trajectory "
            f"has {n_atoms}; they must describe the same system"
        )
    coords: dict[str, np.ndarray] = {}
    for coord, attr in TOPOLOGY_ATTRS:
        try:
            values = getattr(universe.atoms, attr)
        except (AttributeError, Exception):  # NoDataError subclasses ValueError/AttributeError
            continue
        values = np.asarray(values)
        if values.dtype == object:
            values = values.astype(str)
        coords[coord] = values
    return coords


def _name(universe: Any) -> str:
    return repr(getattr(universe, "filename", None) or "given")


def select_indices(universe: Any, selection: str, filename: str | None = None) -> np.ndarray:
    """0-based atom indices of an MDAnalysis selection.

    Parameters
    ----------
    universe : MDAnalysis.Universe
        The topology.
    selection : str
        An MDAnalysis selection string, e.g. ``"name CA"``.
    filename : str, optional
        The trajectory file (for the error message).

    Returns
    -------
    numpy.ndarray
        Sorted int64 indices.

    Raises
    ------
    TopologyError
        If the selection is invalid or matches no atom.
    """
    where = f"{filename}: " if filename else ""
    try:
        group = universe.select_atoms(selection)
    except Exception as err:
        raise TopologyError(f"{where}invalid selection {selection!r}: {err}") from err
    if len(group) == 0:
        raise TopologyError(f"{where}the selection {selection!r} matches no atom")
    return np.sort(np.asarray(group.indices, dtype=np.int64))
