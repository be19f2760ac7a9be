"""Zarr codecs and checksums of h5mdx.layout.export, from the one parser and the one digest."""

from __future__ import annotations

import h5py
import numpy as np
import pytest

from h5mdx.format.checksums import dataset_checksums
from h5mdx.layout.export import zarr_checksums, zarr_compressors

zarr = pytest.importorskip("zarr")  # an optional dependency of h5mdx, not one of its modules


def test_zarr_compressors_follow_the_parser():
    assert zarr_compressors(None) is None and zarr_compressors("none") is None
    (gz,) = zarr_compressors("gzip")
    assert type(gz).__name__ == "GzipCodec" and gz.level == 4
    (zs,) = zarr_compressors("zstd:7")
    assert type(zs).__name__ == "ZstdCodec" and zs.level == 7
    (bl,) = zarr_compressors("blosc:zstd:3")
    assert type(bl).__name__ == "BloscCodec" and bl.clevel == 3
    assert str(bl.cname.value if hasattr(bl.cname, "value") else bl.cname) == "zstd"
    with pytest.raises(ValueError, match="not available for Zarr"):
        zarr_compressors("lzf")
    with pytest.raises(ValueError, match="gzip level must be 0-9"):
        zarr_compressors("gzip:12")


def test_zarr_and_hdf5_checksums_agree(tmp_path):
    x = np.random.default_rng(1).random((30, 5, 3)).astype(np.float32)
    with h5py.File(tmp_path / "a.h5", "w") as f:
        f.create_dataset("x", data=x, chunks=(4, 5, 3))
    root = zarr.open_group(str(tmp_path / "a.zarr"), mode="w")
    root.create_array("x", shape=x.shape, chunks=(6, 5, 3), dtype=x.dtype)[:] = x
    assert zarr_checksums(tmp_path / "a.zarr", ["x"], block_bytes=100) == \
        dataset_checksums(tmp_path / "a.h5", ["x"])
