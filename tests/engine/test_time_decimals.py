"""Times selected by the decimals a writer gave: MDAnalysis writes
``time`` as float32, served widened to float64 (0.10000000149011612), so that
``ds.sel(time=0.1)`` raised a KeyError and ``ds.sel(time=slice(0.1, 0.2))`` left out the
frame at 0.2; fixed-interval times ``offset + k * interval`` held float noise
(0.30000000000000004)."""

from __future__ import annotations

import warnings

import h5py
import MDAnalysis as mda
import numpy as np
import pytest
import xarray as xr
from MDAnalysisTests.datafiles import DCD, PSF

from h5mdx.format.h5md._decimals import fixed_decimals, widened


@pytest.fixture(scope="module")
def adk_dt(tmp_path_factory):
    """10 frames of adk written by MDAnalysis' H5MDWriter with dt = 0.1 ps: float32 times
    0.1 .. 1.0 ps."""
    path = str(tmp_path_factory.mktemp("dt") / "adk_dt.h5md")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        u = mda.Universe(PSF, DCD, dt=0.1)
        with mda.Writer(path, n_atoms=u.atoms.n_atoms, timeunit="ps") as w:
            for _ in u.trajectory[:10]:
                w.write(u.atoms)
        del w
    return path


def test_float32_times_are_selected_by_their_decimals(adk_dt):
    with h5py.File(adk_dt) as f:
        stored = f["particles/trajectory/position/time"][()]
    assert stored.dtype == np.float32
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        u = mda.Universe(PSF, adk_dt)
        mda_times = np.array([ts.time for ts in u.trajectory], dtype=np.float32)
    with xr.open_dataset(adk_dt, engine="h5md") as ds:
        np.testing.assert_array_equal(ds.time.values, np.arange(1, 11) / 10)
        # no digit of the file changed: each rounds to the float32 stored (MDAnalysis' too)
        np.testing.assert_array_equal(ds.time.values.astype(np.float32), stored)
        np.testing.assert_array_equal(ds.time.values.astype(np.float32), mda_times)
        assert int(ds.sel(time=0.1).step) == 1
        np.testing.assert_array_equal(ds.sel(time=slice(0.2, 0.3)).step.values, [2, 3])
        frame = ds.position.sel(time=0.3).values
    np.testing.assert_array_equal(frame, u.trajectory[2].positions)


@pytest.mark.parametrize("offset", [0.2, np.float32(0.2)])
def test_fixed_interval_times_hold_no_float_noise(tmp_path, offset):
    path = tmp_path / "fixed.h5md"
    with h5py.File(path, "w") as f:
        f.create_group("h5md").attrs["version"] = np.array([1, 1])
        el = f.create_group("particles/all/position")
        el["value"] = np.arange(30, dtype=np.float32).reshape(5, 2, 3)
        el["step"], el["time"] = 10, np.float32(0.1)
        el["step"].attrs["offset"], el["time"].attrs["offset"] = 0, offset
        el["time"].attrs["unit"] = "ps"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ds = xr.open_dataset(path, engine="h5md")
    with ds:
        assert ds.time.values.tolist() == [0.2, 0.3, 0.4, 0.5, 0.6]
        np.testing.assert_array_equal(ds.sel(time=slice(0.3, 0.5)).step.values, [10, 20, 30])
        np.testing.assert_array_equal(ds.position.sel(time=0.3).values,
                                      np.arange(6, 12, dtype=np.float32).reshape(2, 3))


def test_decimals_round_back_to_what_is_stored():
    rng = np.random.default_rng(5)
    raw = np.concatenate([rng.random(5000) * 1e5, rng.random(5000) * 1e-3, [0.0, -2.5, 1e30],
                          np.arange(1000) * 0.002]).astype(np.float32)
    got = widened(raw)
    np.testing.assert_array_equal(got.astype(np.float32), raw)
    np.testing.assert_array_equal(got, raw.astype(str).astype(np.float64))  # repr's digits
    assert widened(np.array([1.5, 0.1])).tolist() == [1.5, 0.1]  # float64 as it is
    assert fixed_decimals(0.0, 0.002, 4).tolist() == [0.0, 0.002, 0.004, 0.006]
    assert fixed_decimals(0.1 + 0.2, 0.1, 2) is None  # 17 decimals: computed as floats


def test_the_one_search_of_decimals_takes_any_shape():
    """widened (float32 times) and units.scaled (float64 times shifted by a power of ten)
    search a value's shortest decimal with one function, shortest_decimals; a 0-d or 2-D
    array failed in both (IndexError: flat indices taken as rows)."""
    from h5mdx.format.units import scaled

    raw = np.array([[0.1, 0.2], [20.454828, 3.0]], np.float32)
    assert widened(raw).tolist() == [[0.1, 0.2], [20.454828, 3.0]]
    assert widened(np.array(0.1, np.float32)).tolist() == 0.1
    assert scaled(np.array([[0.0041, 0.0049]]), 1e3, decimals=True).tolist() == [[4.1, 4.9]]
    assert scaled(np.array(0.0041), 1e3, decimals=True).tolist() == 4.1


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_times_in_ns_are_the_decimals_in_ps(tmp_path, dtype):
    """Times in ns (LAMMPS' units nano) converted to ps by multiplying: 0.0041 ns was
    4.1000000000000005 ps, which ds.sel(time=4.1) missed."""
    path = tmp_path / "ns.h5md"
    with h5py.File(path, "w") as f:
        f.create_group("h5md").attrs["version"] = np.array([1, 1])
        el = f.create_group("particles/all/position")
        el["value"] = np.arange(18, dtype=np.float32).reshape(3, 2, 3)
        el["step"] = np.array([41, 49, 51])
        el["time"] = np.array([0.0041, 0.0049, 0.0051], dtype=dtype)
        el["time"].attrs["unit"] = "ns"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ds = xr.open_dataset(path, engine="h5md", convert_units=True)
    with ds:
        assert ds.time.attrs["units"] == "ps"
        assert ds.time.values.tolist() == [4.1, 4.9, 5.1]
        assert int(ds.sel(time=4.9).step) == 49
        np.testing.assert_array_equal(ds.sel(time=slice(4.1, 4.9)).step.values, [41, 49])
