"""The one compression-spec parser (h5mdx.format.compression) and its HDF5 filters."""

from __future__ import annotations

import pytest

from h5mdx.format.compression import (
    BLOSC_CODECS,
    Compression,
    compression_kwargs,
    parse_compression,
)


@pytest.mark.parametrize(("spec", "expected"), [
    (None, Compression("none")),
    ("none", Compression("none")),
    ("", Compression("none")),
    ("gzip", Compression("gzip", 4, shuffle=True)),
    (" GZIP:1 ", Compression("gzip", 1, shuffle=True)),
    ("lzf", Compression("lzf")),
    ("zstd", Compression("zstd", 3, shuffle=True)),
    ("zstd:7", Compression("zstd", 7, shuffle=True)),
    ("blosc", Compression("blosc", 5, "lz4", shuffle=True)),
    ("blosc:zstd", Compression("blosc", 5, "zstd", shuffle=True)),
    ("blosc:lz4hc:9", Compression("blosc", 9, "lz4hc", shuffle=True)),
])
def test_parse(spec, expected):
    assert parse_compression(spec) == expected
    assert parse_compression(spec).enabled == (expected.codec != "none")


@pytest.mark.parametrize(("spec", "match"), [
    ("brotli", "unknown compression 'brotli'; use none, gzip"),
    ("gzip:12", "gzip level must be 0-9"),
    ("gzip:1:2", "gzip level must be 0-9"),
    ("gzip:fast", "level must be an integer"),
    ("lzf:3", "lzf takes no level"),
    ("none:1", "none takes no level"),
    ("zstd:1:2", "zstd takes one level"),
    ("zstd:99", "zstd level must be 1-22"),  # hdf5plugin's "clevel must be in the range"
    ("zstd:0", "zstd level must be 1-22"),
    ("blosc:lz4:12", "blosc level must be 0-9"),
    ("blosc:snappy", "unknown blosc codec 'snappy'"),
    ("blosc:lz4:5:1", "blosc takes a codec and a level"),
    ("blosc:lz4:x", "level must be an integer"),
])
def test_bad_specs(spec, match):
    with pytest.raises(ValueError, match=match):
        parse_compression(spec)
    with pytest.raises(ValueError, match=match):
        compression_kwargs(spec)


def test_hdf5_filters():
    assert compression_kwargs(None) == {} == compression_kwargs("none")
    assert compression_kwargs("gzip") == {"compression": "gzip", "compression_opts": 4,
                                          "shuffle": True}
    assert compression_kwargs(Compression("gzip", 2)) == {"compression": "gzip",
                                                          "compression_opts": 2}
    assert compression_kwargs("lzf") == {"compression": "lzf"}


@pytest.mark.parametrize("spec", ["gzip:1", "zstd:3"])
def test_gzip_and_zstd_are_written_after_the_byte_shuffle(tmp_path, spec, adk_positions):
    """Float coordinates hardly compress without HDF5's byte shuffle filter (gzip kept
    93% of adenylate kinase's bytes, and h5py read them 3.3x slower): the
    specs put it first in the pipeline, and the file is smaller for it."""
    import h5py
    import numpy as np

    if spec.startswith("zstd"):
        pytest.importorskip("hdf5plugin")
    x = np.asarray(adk_positions, dtype=np.float32)
    sizes = {}
    with h5py.File(tmp_path / "t.h5", "w") as f:
        for name, kwargs in (("spec", compression_kwargs(spec)),
                             ("alone", {k: v for k, v in compression_kwargs(spec).items()
                                        if k != "shuffle"})):
            d = f.create_dataset(name, data=x, chunks=(10, *x.shape[1:]), **kwargs)
            sizes[name] = d.id.get_storage_size()
            np.testing.assert_array_equal(d[:], x)
        plist = f["spec"].id.get_create_plist()
        assert plist.get_filter(0)[3] == b"shuffle"  # before the codec
        assert plist.get_nfilters() == 2
    assert sizes["spec"] < 0.92 * sizes["alone"], sizes


@pytest.mark.parametrize("spec", ["zstd:5", *(f"blosc:{c}:3" for c in BLOSC_CODECS)])
def test_plugin_filters(spec):
    hdf5plugin = pytest.importorskip("hdf5plugin")
    kwargs = compression_kwargs(spec)
    wanted = hdf5plugin.Zstd.filter_id if spec.startswith("zstd") else hdf5plugin.BLOSC_ID
    assert kwargs["compression"] == wanted
