"""The RMSD time series on disk: CSV or netCDF files and PNG plots.

Written by ``h5mdx rmsd``, ``h5mdx mpi-rmsd``, dask-mpi runs and the worked example.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import numpy as np

from h5mdx._replace import csv_digest, replacing, sidecar_of, write_with_sidecar

__all__ = ["check_outputs", "plot_series", "series_metadata", "sidecar_path", "write_outputs",
           "write_series"]

#: Suffixes of the series file (``.nc``: netCDF; the others, or none: CSV).
SERIES_SUFFIXES = ("", ".nc", ".csv", ".txt", ".dat")
#: Suffixes of the plot that matplotlib writes without extra packages.
PLOT_SUFFIXES = ("", ".png", ".pdf", ".svg", ".svgz", ".eps", ".ps", ".jpg", ".jpeg", ".tif",
                 ".tiff", ".webp")


def _series_path(path: str | os.PathLike[str]) -> Path:
    """``path`` as a Path, where its suffix is one the series is written as."""
    path = Path(path)
    if path.suffix.lower() not in SERIES_SUFFIXES:
        raise ValueError(f"{path}: h5mdx writes the series as .csv (or .txt) or .nc (netCDF), "
                         f"not {path.suffix}")
    return path


def check_writable(path: Path, what: str) -> None:
    """Refuse ``path`` (``what`` names it in the error) where it is a directory, or its
    nearest existing directory cannot be written to, or is a kernel file system.

    Raises
    ------
    ValueError
        Where ``path`` is a directory.
    PermissionError
        Where it cannot be written.
    """
    if path.is_dir():
        raise ValueError(f"{what} {str(path)!r} is a directory; give a file name")
    parent = path.parent
    while not parent.exists() and parent != parent.parent:
        parent = parent.parent
    if not parent.is_dir() or not os.access(parent, os.W_OK | os.X_OK):
        raise PermissionError(f"{what} {str(path)!r} cannot be written: {str(parent)!r} is "
                              "not a directory this user may write to")
    if os.path.realpath(parent).startswith(("/proc/", "/sys/")) or \
            os.path.realpath(parent) in ("/proc", "/sys"):  # root may "write" there: no file
        raise PermissionError(f"{what} {str(path)!r} cannot be written: {str(parent)!r} is "
                              "a kernel file system, which holds no files")


def check_outputs(out: str | os.PathLike[str] | None = None,
                  plot: str | os.PathLike[str] | None = None,
                  directory: str | os.PathLike[str] | None = None) -> None:
    """Refuse, before any work, outputs that could not be written afterwards: a series
    suffix :func:`write_series` does not write, a plot suffix matplotlib does not, a
    directory in the way, or a directory this user may not write to.

    Parameters
    ----------
    out : path-like, optional
        The series file.
    plot : path-like, optional
        The plot file.
    directory : path-like, optional
        A directory to be created or filled (timing records).

    Raises
    ------
    ValueError
        For a suffix that cannot be written, or a directory given as a file.
    PermissionError
        Where the output's directory cannot be written to.
    MissingDependencyError
        For a plot without matplotlib.
    """
    if out is not None:
        path = _series_path(out)
        check_writable(path, "the series file")
    if plot is not None:
        path = Path(plot)
        if path.suffix.lower() not in PLOT_SUFFIXES:
            raise ValueError(f"{path}: the plot is written as .png, .pdf, .svg or another "
                             f"image matplotlib writes ({', '.join(PLOT_SUFFIXES[1:])}), not "
                             f"{path.suffix}")
        check_writable(path, "the plot")
        from h5mdx._optional import import_optional

        import_optional("matplotlib", "the plot")  # before the work, not after it
    if directory is not None:
        path = Path(directory)
        if path.exists() and not path.is_dir():
            raise ValueError(f"{str(path)!r} is a file; the timing records need a directory")
        check_writable(path / "timing.csv", "the timing records")
    _check_distinct(out, plot, directory)


def _check_distinct(out: str | os.PathLike[str] | None, plot: str | os.PathLike[str] | None,
                    directory: str | os.PathLike[str] | None) -> None:
    """Refuse outputs that name the same file, or a file where the timing directory goes:
    ``--out T/timing.csv --timing T`` wrote the series over the timing records (and its
    sidecar over their ``timing.meta.json``), ``--out X --timing X`` made X the timing
    directory and then failed to write the series there, after the whole run."""
    files: list[tuple[str, Path]] = []
    if out is not None:
        files.append(("the series file (--out)", Path(out)))
        if Path(out).suffix.lower() != ".nc":
            files.append(("the series' sidecar", sidecar_path(out)))
    if plot is not None:
        files.append(("the plot (--plot)", Path(plot)))
    if directory is not None:
        files += [("the timing records", Path(directory) / "timing.csv"),
                  ("the timing records' sidecar", Path(directory) / "timing.meta.json")]
    seen: dict[str, tuple[str, Path]] = {}
    for what, path in files:
        key = os.path.realpath(path)
        if key in seen and seen[key][0] != what:
            raise ValueError(f"{seen[key][0]} and {what} are the same file, {str(path)!r}: "
                             "one would overwrite the other; give them different names")
        seen.setdefault(key, (what, path))
    if directory is not None:
        timing = Path(os.path.realpath(directory))
        for what, path in files[:-2]:
            real = Path(os.path.realpath(path))
            if real == timing or real in timing.parents:
                raise ValueError(f"{what} {str(path)!r} is where the timing records' "
                                 f"directory (--timing {str(directory)!r}) goes; give "
                                 "another name to one of them")


def write_series(path: str | os.PathLike[str], result: Any) -> Path:
    """Write an RMSD DataArray on ``time`` as CSV (frame, time, step, rmsd) or netCDF.

    A CSV holds the numbers alone (``pandas.read_csv(path)`` reads its four columns); its
    units (the RMSD's length, the time's) and the series' attrs (the reference frame, its
    step and time, the selection) go to the sidecar ``<stem>.meta.json`` beside it
    (:func:`series_metadata`), as ``timing.csv``'s go to ``timing.meta.json``. A netCDF
    file holds them itself (``units`` of ``rmsd`` and ``time``, the attrs).

    The CSV's ``frame`` is the result's ``frame`` coordinate where it has one (the frame
    index in the file), else the row's index in the series: for a series of selected
    frames (``ds.isel(time=...)``) the ``step`` and ``time`` columns say which they are.

    Parameters
    ----------
    path : path-like
        Output file: ``.nc`` writes netCDF, ``.csv`` or ``.txt`` (or no suffix) CSV.
    result : xarray.DataArray
        The series (e.g. from :func:`h5mdx.rmsd`); a lazy one is computed before the
        file is written.

    Returns
    -------
    pathlib.Path
        The file written: written beside it, then renamed over it (and its sidecar), so
        that a failed write or computation leaves a file already there as it was.
    """
    return _write_series(path, result, {})


def _write_series(path: str | os.PathLike[str], result: Any, extra: dict[str, Any]) -> Path:
    """:func:`write_series`, with ``extra`` attrs (the plot written with it) in the netCDF
    file or the CSV's sidecar."""
    path = _series_path(path)
    # computed before any file is touched, and written beside the file, then renamed
    # over it: a lazy series whose task failed (a damaged chunk) left the previous .nc
    # replaced by one of NaN RMSD values that read back without an error
    result = result.compute()
    if extra:
        result = result.copy()
        result.attrs.update(extra)
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.suffix.lower() == ".nc":
        with replacing(path) as tmp:
            _write(tmp, result)
    else:  # the CSV's units and attrs, as timing.csv's timing.meta.json, with its digest
        write_with_sidecar(path, lambda tmp: _write(tmp, result), series_metadata(result),
                           indent=1, sort_keys=True)
    return path


def sidecar_path(path: str | os.PathLike[str]) -> Path:
    """The sidecar of a CSV series, ``<stem>.meta.json`` beside it (``rmsd.csv``:
    ``rmsd.meta.json``), as ``timing.csv``'s ``timing.meta.json`` (beside the file a
    symbolic link ``path`` leads to, where the CSV is written)."""
    return sidecar_of(path)


def series_metadata(result: Any) -> dict[str, Any]:
    """What a CSV series cannot say in its columns: each column's unit (``units``; None
    where the file names none) and the series' attrs (``attrs``: the reference frame, its
    step and time, the selection, the weights, ...), for its sidecar ``<stem>.meta.json``."""
    def plain(value: Any) -> Any:
        return value.item() if isinstance(value, np.generic) else \
            value.tolist() if isinstance(value, np.ndarray) else value

    units: dict[str, Any] = {"frame": None}
    for name in ("time", "step"):
        if name in result.coords:
            units[name] = result[name].attrs.get("units") or None
    units["rmsd"] = result.attrs.get("units") or None
    attrs = {str(k): plain(v) for k, v in result.attrs.items()}
    return {"units": units, "attrs": json.loads(json.dumps(attrs, default=str))}


def _write(path: Path, result: Any) -> None:
    """Write the computed series ``result`` to ``path`` (see :func:`write_series`)."""
    if path.suffix.lower() == ".nc":
        result.to_netcdf(path)
        return
    frames = result["frame"].values if "frame" in result.coords else None
    cols = {"frame": np.arange(result.sizes["time"]) if frames is None else np.asarray(frames)}
    for name in ("time", "step"):
        if name in result.coords:
            cols[name] = np.asarray(result.coords[name].values)
    cols["rmsd"] = np.asarray(result.values, dtype=np.float64)
    fmt = ["%d" if np.issubdtype(v.dtype, np.integer) else "%.10g" for v in cols.values()]
    np.savetxt(path, np.column_stack([v.astype(np.float64) for v in cols.values()]),
               delimiter=",", header=",".join(cols), comments="", fmt=fmt)


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

    Notes
    -----
    The plot is written first and the series last, each replaced whole: a run stopped
    between the two leaves the earlier series beside the new plot, never a new series
    beside an earlier plot. The series records which plot it was drawn into: the plot's
    file name and the BLAKE2 digest of its bytes, as the attrs ``plot`` and
    ``plot_blake2b`` (in the CSV's sidecar ``<stem>.meta.json``, or the netCDF file's
    attrs); a plot whose digest differs belongs to another run.
    """
    result = result.compute()  # once, not once per output
    extra: dict[str, Any] = {}
    if plot:
        plot_series(result, plot)
        extra = {"plot": Path(plot).name, "plot_blake2b": csv_digest(plot)}
    if out:
        _write_series(out, result, extra)


def plot_series(result: Any, plot: str) -> None:
    """Draw the series against time (or frame) into a PNG file.

    Parameters
    ----------
    result : xarray.DataArray
        The computed series.
    plot : str
        The PNG file.
    """
    from matplotlib.figure import Figure  # no pyplot: a notebook's backend stays its own

    fig = Figure(figsize=(7, 3.5), dpi=100)
    ax = fig.add_subplot()
    x = result["time"].values if "time" in result.coords else np.arange(result.size)
    ax.plot(x, result.values, lw=1, marker="o" if result.size < 2 else None)
    ax.set_xlabel(_label("time", result["time"].attrs) if "time" in result.coords
                  else "frame")
    ax.set_ylabel(_label("RMSD", result.attrs))
    sel = result.attrs.get("selection")
    ax.set_title(f"RMSD{f' of {sel}' if sel else ''}")
    fig.tight_layout()
    with replacing(plot) as tmp:  # a savefig stopped half-way leaves the earlier plot
        fig.savefig(tmp, format=Path(plot).suffix[1:].lower() or "png")


def _label(name: str, attrs: dict) -> str:
    """An axis label: ``name (unit)``, or ``name`` alone where no unit is known (not
    ``RMSD ()``)."""
    unit = attrs.get("units")
    return f"{name} ({unit})" if unit else name
