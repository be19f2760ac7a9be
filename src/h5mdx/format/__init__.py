"""Layer 1, the H5MD file format: h5py and numpy only (no xarray, no dask).

:mod:`~h5mdx.format.schema` (names and paths), :mod:`~h5mdx.format.units`,
:mod:`~h5mdx.format.h5md` (open and scan a file),
:mod:`~h5mdx.format.gromacs_topology` (GROMACS' topology module),
:mod:`~h5mdx.format.vmd_structure` (VMD's structure module), :mod:`~h5mdx.format.writer`
(write H5MD), :mod:`~h5mdx.format.compression` (the one parser of compression
specs), :mod:`~h5mdx.format.checksums` (the one BLAKE2 digest of written and
stored data) and :mod:`~h5mdx.format.direct` (lock-free reads of contiguous and
chunked datasets).
"""
