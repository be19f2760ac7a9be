"""Layer 3, analyses on the engine's Datasets: :mod:`~h5mdx.analysis.qcp` (the QCP
kernel, numpy or numba) and :mod:`~h5mdx.analysis.rmsd` (:func:`h5mdx.rmsd` as a dask
graph of chunk-aligned tasks).
"""
