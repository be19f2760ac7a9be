"""Round trips over random shapes, chunk layouts and dtypes (hypothesis)."""

from __future__ import annotations

import numpy as np
import xarray as xr
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from h5mdx.testing import write_h5md


@st.composite
def layouts(draw):
    n_frames = draw(st.integers(1, 40))
    n_atoms = draw(st.integers(1, 30))
    dim = draw(st.integers(1, 3))
    dtype = draw(st.sampled_from([np.float32, np.float64, np.int32, np.int64, np.int16]))
    contiguous = draw(st.booleans())
    chunks = None
    if not contiguous:
        chunks = (draw(st.integers(1, n_frames)), draw(st.integers(1, n_atoms)),
                  draw(st.integers(1, dim)))
    fixed = draw(st.booleans())
    compression = draw(st.sampled_from([None, "gzip", "lzf"])) if chunks else None
    chunk_mib = draw(st.sampled_from([1e-4, 1e-3, 32.0]))
    seed = draw(st.integers(0, 2**16))
    return n_frames, n_atoms, dim, dtype, chunks, fixed, compression, chunk_mib, seed


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(layout=layouts())
def test_roundtrip(tmp_path_factory, layout):
    n_frames, n_atoms, dim, dtype, chunks, fixed, compression, chunk_mib, seed = layout
    rng = np.random.default_rng(seed)
    value = (rng.normal(size=(n_frames, n_atoms, dim)) * 100).astype(dtype)
    if fixed:
        sampling = dict(step=3, step_offset=7, time=0.5, time_offset=1.0)
        steps = 7 + 3 * np.arange(n_frames)
        times = 1.0 + 0.5 * np.arange(n_frames)
    else:
        steps = np.cumsum(rng.integers(1, 5, size=n_frames))
        times = steps * 0.002
        sampling = dict(step=steps, time=times)
    path = tmp_path_factory.mktemp("hyp") / "r.h5md"
    write_h5md(path, particles={"g": {"position": dict(value=value, chunks=chunks,
                                                       compression=compression, **sampling)}},
               box={"g": {"dimension": dim}})
    with xr.open_dataset(path, engine="h5md", chunks={}, chunk_mib=chunk_mib) as ds:
        pos = ds.position
        assert pos.dtype == value.dtype
        assert pos.dims == ("time", "atom", "spatial")
        np.testing.assert_array_equal(pos.values, value)
        np.testing.assert_array_equal(ds.step.values, steps)
        np.testing.assert_allclose(ds.time.values, times)
        # blocks hold whole atom/spatial extents and whole HDF5 chunks along time
        assert pos.chunks[1] == (n_atoms,) and pos.chunks[2] == (dim,)
        if chunks:
            assert all(b % chunks[0] == 0 for b in pos.chunks[0][:-1])
        # an arbitrary outer selection equals numpy's
        t = rng.integers(0, n_frames, size=3)
        a = np.unique(rng.integers(0, n_atoms, size=min(4, n_atoms)))
        np.testing.assert_array_equal(pos.isel(time=t, atom=a).values, value[t][:, a])
