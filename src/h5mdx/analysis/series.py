"""The RMSD time series on disk: CSV or netCDF files and PNG plots.

Written by ``h5mdx rmsd``, ``h5mdx mpi-rmsd``, dask-mpi runs and the worked example.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["plot_series", "write_outputs", "write_series"]


def write_series(path: str | os.PathLike[str], result: Any) -> Path:
    """Write an RMSD DataArray on ``time`` as CSV (frame, time, step, rmsd) or netCDF.

    Parameters
    ----------
    path : path-like
        Output file: ``.nc`` writes netCDF, ``.csv`` or ``.txt`` (or no suffix) CSV.
    result : xarray.DataArray
        The computed series (e.g. from :func:`h5mdx.rmsd`).

    Returns
    -------
    pathlib.Path
        The file written.
    """
    path = Path(path)
    if path.suffix.lower() not in ("", ".nc", ".csv", ".txt", ".dat"):
        raise ValueError(f"{path}: h5mdx writes the series as .csv (or .txt) or .nc (netCDF), "
                         f"not {path.suffix}")
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.suffix == ".nc":
        result.to_netcdf(path)
        return path
    frames = result["frame"].values if "frame" in result.coords else None
    cols = {"frame": np.arange(result.sizes["time"]) if frames is None else np.asarray(frames)}
    for name in ("time", "step"):
        if name in result.coords:
            cols[name] = np.asarray(result.coords[name].values)
    cols["rmsd"] = np.asarray(result.values, dtype=np.float64)
    fmt = ["%d" if np.issubdtype(v.dtype, np.integer) else "%.10g" for v in cols.values()]
    np.savetxt(path, np.column_stack([v.astype(np.float64) for v in cols.values()]),
               delimiter=",", header=",".join(cols), comments="", fmt=fmt)
    return path


def write_outputs(result: Any, out: str | None, plot: str | None) -> None:
    """Write the series (``.csv`` or ``.nc``, see :func:`write_series`) and a PNG plot.

    Parameters
    ----------
    result : xarray.DataArray
        The computed series.
    out : str or None
        The series file, or None for none.
    plot : str or None
        The PNG file (:func:`plot_series`), or None for none.
    """
    if out:
        write_series(out, result)
    if plot:
        plot_series(result, plot)


def plot_series(result: Any, plot: str) -> None:
    """Draw the series against time (or frame) into a PNG file.

    Parameters
    ----------
    result : xarray.DataArray
        The computed series.
    plot : str
        The PNG file.
    """
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib.figure import Figure

    fig = Figure(figsize=(7, 3.5), dpi=100)
    ax = fig.add_subplot()
    x = result["time"].values if "time" in result.coords else np.arange(result.size)
    ax.plot(x, result.values, lw=1, marker="o" if result.size < 2 else None)
    ax.set_xlabel(f"time ({result['time'].attrs.get('units', '')})"
                  if "time" in result.coords else "frame")
    ax.set_ylabel(f"RMSD ({result.attrs.get('units', '')})")
    sel = result.attrs.get("selection")
    ax.set_title(f"RMSD{f' of {sel}' if sel else ''}")
    fig.tight_layout()
    fig.savefig(plot)
