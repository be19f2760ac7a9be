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

__all__ = ["__version__", "rmsd", "rmsd_qcp"]
