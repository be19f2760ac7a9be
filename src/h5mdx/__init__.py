"""h5mdx: H5MD molecular-dynamics trajectories as lazy, chunk-aligned xarray/dask data.

Open a trajectory with ``xr.open_dataset(path, engine="h5md")``; see the
documentation for RMSD, layout tools and parallel timing.
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("h5mdx")
except PackageNotFoundError:  # pragma: no cover - running from a source tree
    __version__ = "0+unknown"

__all__ = ["__version__"]
