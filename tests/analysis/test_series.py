"""The RMSD series and its plot written as a pair (``h5mdx rmsd --out --plot``)."""

from __future__ import annotations

import json

import numpy as np
import pytest
import xarray as xr

pytest.importorskip("matplotlib")


def _series(values):
    return xr.DataArray(np.asarray(values, dtype=np.float64), dims="time",
                        coords={"time": np.arange(len(values)) * 10.0},
                        attrs={"units": "Angstrom", "selection": "name CA"})


def test_a_run_stopped_between_plot_and_series_leaves_no_new_series_by_an_old_plot(
        tmp_path, monkeypatch):
    """The series was renamed into place before the plot was drawn: a run stopped in
    between left a new CSV beside the plot of an earlier run, which nothing told apart.
    The plot now comes first and the series last, and the series' sidecar (or netCDF
    attrs) names the plot's digest."""
    import pandas as pd

    from h5mdx._replace import csv_digest
    from h5mdx.analysis import series

    csv, png, nc = tmp_path / "rmsd.csv", tmp_path / "rmsd.png", tmp_path / "rmsd.nc"
    series.write_outputs(_series([0.0, 1.0, 2.0]), str(csv), str(png))
    meta = json.loads((tmp_path / "rmsd.meta.json").read_text())
    assert meta["attrs"]["plot"] == "rmsd.png"
    assert meta["attrs"]["plot_blake2b"] == csv_digest(png)
    series.write_outputs(_series([0.0, 1.5]), str(nc), str(png))
    with xr.open_dataarray(nc) as back:
        assert back.attrs["plot_blake2b"] == csv_digest(png)
        np.testing.assert_allclose(back.values, [0.0, 1.5])

    def stopped(*args, **kwargs):
        raise KeyboardInterrupt

    first_png = png.read_bytes()
    monkeypatch.setattr("matplotlib.figure.Figure.savefig", stopped)
    with pytest.raises(KeyboardInterrupt):
        series.write_outputs(_series([0.0, 3.0, 4.0, 5.0]), str(csv), str(png))
    # the earlier pair is left as it was: its series, its plot
    np.testing.assert_allclose(pd.read_csv(csv)["rmsd"], [0.0, 1.0, 2.0])
    assert png.read_bytes() == first_png
    monkeypatch.undo()
    # the plot written, the series not (stopped between the two): the series' digest
    # tells that the plot is not its own
    monkeypatch.setattr(series, "_write", lambda *a: stopped())
    with pytest.raises(KeyboardInterrupt):
        series.write_outputs(_series([0.0, 3.0, 4.0, 5.0]), str(csv), str(png))
    np.testing.assert_allclose(pd.read_csv(csv)["rmsd"], [0.0, 1.0, 2.0])
    meta = json.loads((tmp_path / "rmsd.meta.json").read_text())
    assert meta["attrs"]["plot_blake2b"] != csv_digest(png)
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "rmsd.csv", "rmsd.meta.json", "rmsd.nc", "rmsd.png"]
