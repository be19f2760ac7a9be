"""h5mdx: H5MD molecular-dynamics trajectories as lazy, chunk-aligned xarray/dask data.

Open a trajectory with ``xr.open_dataset(path, engine="h5md")``; compute the RMSD
with :func:`h5mdx.rmsd` or ``ds.md.rmsd(...)``; see the documentation for layout
tools, parallel timing, MPI and SLURM.
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("h5mdx")
except PackageNotFoundError:  # pragma: no cover - running from a source tree
    __version__ = "0+unknown"

from h5mdx import accessor as _accessor  # noqa: E402,F401 - registers ds.md
from h5mdx.qcp import rmsd_qcp  # noqa: E402
from h5mdx.rmsd import rmsd  # noqa: E402

__all__ = ["__version__", "rmsd", "rmsd_qcp", "to_h5md"]


def __getattr__(name: str) -> object:
    # h5mdx.to_h5md lives in h5mdx.xio (it imports zarr helpers): load it on first use
    if name == "to_h5md":
        from h5mdx.xio import to_h5md

        return to_h5md
    raise AttributeError(f"module 'h5mdx' has no attribute {name!r}")
