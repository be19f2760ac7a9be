"""The examples in the docstrings run and give what they show."""

from __future__ import annotations

import doctest
import importlib

import pytest

#: Every module whose docstrings hold examples (``>>>``).
MODULES = [
    "h5mdx.format.units",
    "h5mdx.format.writer",
    "h5mdx.format.compression",
    "h5mdx.format.checksums",
    "h5mdx.format.direct",
    "h5mdx.format.reader_cache",
    "h5mdx.format.h5md._storage",
    "h5mdx.format.h5md._walk",
    "h5mdx.engine.chunking",
    "h5mdx.analysis.qcp",
    "h5mdx.layout._atomic",
    "h5mdx.mpi.decompose",
    "h5mdx.bench.grid",
    "h5mdx.floor",
    "h5mdx.examples.trajectory",
    "h5mdx.timing.report",
    "h5mdx._subprocess",
    "h5mdx._replace",
    "h5mdx.parallel.schedulers",
    "h5mdx.doctor",
    "h5mdx.cli.rmsd",
]


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name):
    module = importlib.import_module(name)
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE,
                             report=True, verbose=False)
    assert result.attempted > 0, f"{name} has no examples: take it off the list"
    assert result.failed == 0, f"{result.failed} of {result.attempted} examples of {name} fail"
