"""Layer 3, analyses on the engine's Datasets: :mod:`~h5mdx.analysis.qcp` (the QCP
kernel, numpy or numba) and :mod:`~h5mdx.analysis.rmsd` (:func:`h5mdx.rmsd` as a dask
graph of chunk-aligned tasks), which puts together :mod:`~h5mdx.analysis.reference` (the
atoms selected and the reference), :mod:`~h5mdx.analysis.plan` (frames cut into tasks)
and :mod:`~h5mdx.analysis.blocks` (what one task computes).
"""
