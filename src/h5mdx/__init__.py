"""h5mdx: H5MD molecular-dynamics trajectories as lazy, chunk-aligned xarray/dask data.

Open a trajectory with ``xr.open_dataset(path, engine="h5md")``; compute the RMSD
with :func:`h5mdx.rmsd` or ``ds.md.rmsd(...)``; see the documentation for layout
tools, parallel timing, MPI and SLURM. A first session::

    import xarray as xr, h5mdx
    ds = xr.open_dataset("run.h5md", engine="h5md",
                         topology="system.psf",  # any file MDAnalysis reads: names, masses
                         chunks={})              # dask blocks of whole HDF5 chunks (~128 MiB)
    ca = ds.md.rmsd(select="name CA")      # lazy; .values computes it (the file's unit)
    bb = ds.md.rmsd(universe, select="backbone", weights="mass")  # to a Universe's frame

The engine's keywords (``topology``, ``select``, ``convert_units``, ``chunk_mib``,
``swmr``, ``strict``, ...) are documented by
``h5mdx.engine.backend.H5MDBackendEntrypoint.open_dataset``; ``h5mdx --help`` lists
the command-line tools (``info``, ``convert``, ``rechunk``, ``rmsd``, ``example``).

The package is organised in layers (see ``docs/architecture.md``): :mod:`h5mdx.format`
(h5py + numpy), :mod:`h5mdx.engine` (the xarray backend), :mod:`h5mdx.analysis`,
:mod:`h5mdx.layout`, :mod:`h5mdx.timing`, :mod:`h5mdx.parallel`, :mod:`h5mdx.mpi`,
:mod:`h5mdx.bench` and :mod:`h5mdx.cli`. Importing ``h5mdx`` registers the ``ds.md``
accessor and nothing more: :func:`rmsd`, :func:`rmsd_qcp` and :func:`to_h5md` are loaded
on first use, so the ``h5md`` engine never imports dask.distributed, the analysis or MPI.
"""

from __future__ import annotations

from typing import Any

from h5mdx import _legacy
from h5mdx import accessor as _accessor  # noqa: F401 - registers ds.md
from h5mdx._version import __version__

__all__ = ["__version__", "rmsd", "rmsd_qcp", "to_h5md"]

_LAZY = {
    "rmsd": "h5mdx.analysis.rmsd",
    "rmsd_qcp": "h5mdx.analysis.qcp",
    "to_h5md": "h5mdx.layout.export",
}

_legacy.install()


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'h5mdx' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(module), name)


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
