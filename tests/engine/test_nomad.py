"""H5MD-NOMAD's observables without ``step`` (nomad-coe/nomad ``h5md_howto.md``, "Ensemble
Average Observables", "Time Correlation Observables"): a radial distribution function is a
``value`` beside its ``bins``, a mean squared displacement a ``value`` beside its ``times``
(and ``errors``), a diffusion constant a scalar ``value``. They were served as time series
of numbered frames, their axes dropped, and the scalar left out."""

from __future__ import annotations

import warnings

import h5py
import numpy as np
import pytest
import xarray as xr

from h5mdx.errors import H5MDConformanceWarning, H5MDFormatError

BINS = np.linspace(0.24, 0.27, 7)  # nm
RDF = np.linspace(0.0, 2.8, 7)
TIMES = np.arange(10) * 2.0  # ps
MSD = np.arange(10) * 0.068  # nm^2
ERRORS = np.linspace(0.0, 0.009, 10)


def _nomad(path, *, bins=BINS):
    """The observables of the how-to's example, written with h5py as it writes them."""
    with h5py.File(path, "w") as f:
        h = f.create_group("h5md")
        h.attrs["version"] = [1, 0]
        h.create_group("author").attrs["name"] = "author name"
        creator = h.create_group("creator")
        creator.attrs["name"], creator.attrs["version"] = "h5py", h5py.__version__
        o = f.create_group("observables")
        rdf = o.create_group("radial_distribution_functions/MOLX-MOLX")
        rdf.attrs["type"] = "ensemble_average"
        rdf["type"], rdf["n_bins"] = "molecular", len(bins)
        rdf["bins"] = bins
        rdf["bins"].attrs["unit"], rdf["bins"].attrs["unit_factor"] = "nanometer", 1.0
        rdf["value"], rdf["frame_start"], rdf["frame_end"] = RDF, 0, 3
        msd = o.create_group("mean_squared_displacements/MOLX")
        msd.attrs["type"] = "correlation_function"
        msd["type"], msd["direction"], msd["error_type"] = "molecular", "xyz", "standard_deviation"
        msd["n_times"], msd["times"] = len(TIMES), TIMES
        msd["times"].attrs["unit"], msd["times"].attrs["unit_factor"] = "picosecond", 1.0
        msd["value"], msd["errors"] = MSD, ERRORS
        msd["value"].attrs["unit"], msd["value"].attrs["unit_factor"] = "nanometer ** 2", 1.0
        dc = o.create_group("diffusion_constants/MOLX")
        dc.attrs["type"] = "ensemble_average"
        dc["value"], dc["errors"] = 1.5, 0.98
        dc["value"].attrs["unit"] = "nanometer ** 2 / picosecond"
        dc["error_type"] = "Pearson_correlation_coefficient"
    return str(path)


def _open(path, group, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # NOMAD's documented layout: no warning
        return xr.open_dataset(path, engine="h5md", group=f"observables/{group}", **kwargs)


def test_a_radial_distribution_function_is_served_on_its_bins(tmp_path):
    path = _nomad(tmp_path / "nomad.h5")
    with _open(path, "radial_distribution_functions") as ds:
        rdf = ds["MOLX-MOLX"]
        assert rdf.dims == ("MOLX-MOLX_bins",) and "time" not in ds.dims
        np.testing.assert_array_equal(rdf.values, RDF)
        np.testing.assert_array_equal(rdf["MOLX-MOLX_bins"].values, BINS)
        assert rdf["MOLX-MOLX_bins"].attrs["units"] == "nanometer"
        assert {k: rdf.attrs[k] for k in ("observable_type", "type", "n_bins", "frame_start",
                                          "frame_end")} == {
            "observable_type": "ensemble_average", "type": "molecular", "n_bins": 7,
            "frame_start": 0, "frame_end": 3}
    with _open(path, "radial_distribution_functions", convert_units=True) as ds:
        np.testing.assert_allclose(ds["MOLX-MOLX_bins"].values, BINS * 10)
        assert ds["MOLX-MOLX_bins"].attrs["units"] == "Angstrom"


def test_a_mean_squared_displacement_is_served_on_its_times_with_its_errors(tmp_path):
    path = _nomad(tmp_path / "nomad.h5")
    with _open(path, "mean_squared_displacements", convert_units=True) as ds:
        assert ds.MOLX.dims == ds.MOLX_errors.dims == ("MOLX_times",)
        np.testing.assert_array_equal(ds.MOLX_times.values, TIMES)
        assert ds.MOLX_times.attrs["units"] == "ps"
        np.testing.assert_allclose(ds.MOLX.values, MSD * 100)  # nm^2 to A^2
        np.testing.assert_allclose(ds.MOLX_errors.values, ERRORS * 100)  # the value's unit
        assert ds.MOLX.attrs["observable_type"] == "correlation_function"
        assert ds.MOLX.attrs["direction"] == "xyz"


def test_a_diffusion_constant_is_a_scalar(tmp_path):
    path = _nomad(tmp_path / "nomad.h5")
    with _open(path, "diffusion_constants") as ds:
        assert ds.MOLX.dims == () and float(ds.MOLX) == 1.5
        assert ds.MOLX.attrs["errors"] == 0.98
        assert ds.MOLX.attrs["units"] == "nanometer ** 2 / picosecond"
    with pytest.raises(H5MDFormatError, match=r"diffusion_constants/MOLX\]: a 'value' "
                       r"without 'step' \(H5MD-NOMAD"):
        xr.open_dataset(path, engine="h5md", group="observables/diffusion_constants",
                        strict=True)


def test_an_axis_of_another_length_keeps_the_numbered_frames(tmp_path):
    """Not a function of its bins: a time series of numbered frames, as before, the
    datasets left beside it named."""
    path = _nomad(tmp_path / "nomad.h5", bins=BINS[:5])
    with pytest.warns(H5MDConformanceWarning, match=r"no step: frames numbered 0..n-1; "
                      r"beside 'value', 'bins', 'frame_end', 'frame_start', 'n_bins', 'type' "
                      "left out"):
        ds = xr.open_dataset(path, engine="h5md",
                             group="observables/radial_distribution_functions")
    with ds:
        assert ds["MOLX-MOLX"].dims == ("time",)


def test_scalar_strings_read_as_h5py_reads_them(tmp_path, monkeypatch):
    """H5MD-NOMAD's connectivity holds thirty thousand scalar strings (``formula``,
    ``label``, ``type``): they are read with HDF5's own calls rather than through h5py's
    Dataset, and give what ``asstr()`` gives, in either encoding and fixed-length
    too; an undecodable one is left out with the same note, an array of strings read as
    before."""
    path = _nomad(tmp_path / "nomad.h5")
    with h5py.File(path, "r+") as f:
        g = f.create_group("connectivity/particles_group/water")
        g["utf8"] = "H\u2082O"  # a str: a variable-length UTF-8 scalar
        g.create_dataset("ascii", data=b"OH2", dtype=h5py.string_dtype("ascii"))
        g["fixed"] = np.bytes_(b"SOL")
        g.create_dataset("bad", data=b"\xff\xfe", dtype=h5py.string_dtype())
        g["names"] = np.array(["O", "H1", "H2"], dtype=h5py.string_dtype())
        expected = {k: np.asarray(g[k].asstr()[()], dtype=str)
                    for k in ("utf8", "ascii", "fixed", "names")}
    through_h5py = []
    asstr = h5py.Dataset.asstr
    monkeypatch.setattr(h5py.Dataset, "asstr",
                        lambda self, *a, **k: through_h5py.append(self.name) or asstr(self))
    with pytest.warns(H5MDConformanceWarning, match=r"water/bad\]: cannot read the strings"):
        ds = xr.open_dataset(path, engine="h5md", group="connectivity/particles_group/water")
    with ds:
        assert "bad" not in ds
        for name, values in expected.items():
            assert ds[name].dtype == values.dtype and ds[name].values.tolist() == values.tolist()
    assert sorted(p.rsplit("/", 1)[1] for p in through_h5py) == ["bad", "names"]
