"""Import optional dependencies at the point of use, naming the fix."""

from __future__ import annotations

import importlib
from types import ModuleType

from h5mdx.errors import MissingDependencyError

_PIP_NAMES = {
    "MDAnalysis": ("MDAnalysis", "md"),
    "distributed": ("distributed", "distributed"),
    "dask_jobqueue": ("dask-jobqueue", "slurm"),
    "mpi4py": ("mpi4py", "mpi"),
    "dask_mpi": ("dask-mpi", "mpi"),
    "numba": ("numba", "fast"),
    "matplotlib": ("matplotlib", "plot"),
    "pandas": ("pandas", "distributed"),
    "zarr": ("zarr", "zarr"),
    "rich": ("rich", "cli"),
    "pyarrow": ("pyarrow", "timing"),
}


def import_optional(name: str, purpose: str = "") -> ModuleType:
    """Import module ``name`` or raise an ImportError that says how to install it.

    Parameters
    ----------
    name : str
        The module to import (e.g. ``"MDAnalysis"``).
    purpose : str, optional
        What the module is needed for, shown in the error message.

    Returns
    -------
    module
        The imported module.
    """
    try:
        return importlib.import_module(name)
    except ImportError as err:
        top = name.split(".")[0]
        pip_name, extra = _PIP_NAMES.get(top, (top, None))
        hint = f"pip install {pip_name}"
        if extra:
            hint += f"  (or, in a clone of h5mdx: pip install -e '.[{extra}]')"
        what = f" for {purpose}" if purpose else ""
        raise MissingDependencyError(
            f"The optional dependency {top!r} is needed{what} but could not be imported "
            f"({err}). Install it with: {hint}"
        ) from err


def has_module(name: str) -> bool:
    """Return whether module ``name`` can be imported."""
    try:
        importlib.import_module(name)
    except ImportError:
        return False
    return True
