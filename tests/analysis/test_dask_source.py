"""h5mdx.analysis._dask_source: the lazily indexed array and slices behind a dask array
of ``open_dataset(chunks=...)``, exact on every slice it accepts, None on anything else."""

from __future__ import annotations

import warnings

import dask
import numpy as np
import pytest
import xarray as xr
from MDAnalysis.analysis import rms
from MDAnalysisTests.datafiles import PSF

import h5mdx
from h5mdx.analysis._dask_source import dask_source
from h5mdx.testing import assert_rmsd_close

SLICES = [slice(None), slice(25, None), slice(0, 40), slice(5, 10), slice(3, 90, 7),
          slice(19, 21), slice(97, None), slice(None, None, 3)]


def _open(path, chunks):
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "The specified chunks separate", UserWarning)
        return xr.open_dataset(path, engine="h5md", chunks=chunks)


def _values(source, dims):
    lazy, key = source
    return xr.Variable(dims, lazy)[key].values


@pytest.mark.parametrize("chunks", [{"time": 10}, {"time": 7}, {}])
@pytest.mark.parametrize("time", SLICES)
def test_slices_give_the_same_values(adk_h5md_blocked, chunks, time):
    with _open(adk_h5md_blocked, chunks) as ds:
        position = ds.position.isel(time=time)
        source = dask_source(position.data)
        assert source is not None
        np.testing.assert_array_equal(_values(source, position.dims),
                                      position.data.compute(scheduler="sync"))
        step = ds.step.isel(time=time)
        np.testing.assert_array_equal(_values(dask_source(step.data), step.dims),
                                      step.values)


def test_slices_on_several_axes(adk_h5md_blocked):
    with _open(adk_h5md_blocked, {"time": 10}) as ds:
        position = ds.position.isel(time=slice(4, 80, 3), atom=slice(10, 300, 2))
        source = dask_source(position.data)
        # stops are the last index + 1
        assert source[1] == (slice(4, 80, 3), slice(10, 299, 2), slice(0, 3, 1))
        np.testing.assert_array_equal(_values(source, position.dims), position.values)


@pytest.mark.parametrize("change", [
    lambda p: p.isel(time=slice(None, None, -1)),  # reversed
    lambda p: p.isel(time=[1, 5, 9]),  # fancy indexing
    lambda p: p.isel(time=5),  # an integer drops the axis
    lambda p: p * 1.0,  # arithmetic
    lambda p: p.isel(time=slice(3, 40)) + 0,  # a slice, then arithmetic
    lambda p: p.chunk({"time": 20}),  # rechunked
])
def test_anything_else_gives_none(adk_h5md_blocked, change):
    with _open(adk_h5md_blocked, {"time": 10}) as ds:
        assert dask_source(change(ds.position).data) is None


def test_a_dask_array_made_otherwise_gives_none():
    import dask.array as da

    assert dask_source(da.zeros((10, 4, 3), chunks=5)) is None
    assert dask_source(da.from_array(np.zeros((10, 4, 3)), chunks=5)[2:]) is None


def test_zarr_store(tmp_path, adk_h5md_blocked):
    with _open(adk_h5md_blocked, None) as ds:
        ds[["position"]].drop_vars("spatial").chunk({"time": 10}).to_zarr(tmp_path / "a.zarr", consolidated=False)
    with xr.open_zarr(tmp_path / "a.zarr", consolidated=False) as z:
        position = z.position.isel(time=slice(13, 77, 2))
        np.testing.assert_array_equal(_values(dask_source(position.data), position.dims),
                                      position.values)


@pytest.mark.parametrize("time, ref_frame", [(slice(25, None), 25), (slice(10, 60), 10)])
def test_rmsd_of_sliced_positions_reads_them_lazily(adk_h5md_blocked, adk_universe, time,
                                                     ref_frame):
    """``isel(time=slice)`` after ``chunks=``: the tasks read the frames themselves (no
    getter or getitem task, for the positions or their ``step``), and the RMSD equals
    MDAnalysis' over the same frames."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        expected = rms.RMSD(adk_universe, select="name CA", ref_frame=ref_frame).run(
            start=time.start, stop=time.stop).results.rmsd[:, 2]
    with dask.config.set(scheduler="processes", num_workers=2), \
            _open(adk_h5md_blocked, {"time": 10}) as ds:
        ds.attrs["topology"] = PSF
        position = ds.position.isel(time=time)
        lazy = h5mdx.rmsd(position, select="name CA", topology=PSF)
        assert set(lazy.__dask_graph__().layers) == {lazy.data.name}
        got = lazy.compute()
        assert_rmsd_close(got, expected, atol=1e-4)
        np.testing.assert_array_equal(got.step.values, position.step.values)
        np.testing.assert_array_equal(got.time.values, position.time.values)
