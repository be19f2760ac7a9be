"""The notebooks are jupytext percent-format scripts, paired with notebooks that are made on demand.

The sources ``notebooks/*.py`` are what git keeps; ``notebooks/jupytext.toml`` pairs
each with a ``.ipynb``. These tests check the sources without running them: they are
in jupytext's canonical form (so opening and saving one in Jupyter changes nothing),
they convert to valid notebooks without outputs, their code parses, and each one shows
a figure. The notebooks are *executed* by the documentation build
(``tests/test_docs.py``, myst-nb), which fails when a cell raises and checks that
the rendered pages contain the figures; they are not executed a second time here.
"""

from __future__ import annotations

import ast
import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # in the full run (scripts/test.sh, CI), not in plain `pytest`

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOK_DIR = ROOT / "notebooks"
NOTEBOOKS = sorted(p.name for p in NOTEBOOK_DIR.glob("[0-9]*.py"))


def _jupytext():
    if importlib.util.find_spec("jupytext") is None and not os.environ.get("H5MDX_REQUIRE_DOCS"):
        pytest.skip("jupytext not installed; pip install -e '.[docs]' "
                    "(set H5MDX_REQUIRE_DOCS=1 to make this fail)")
    import jupytext

    return jupytext


def test_the_three_notebooks_exist() -> None:
    assert NOTEBOOKS == [
        "01-quickstart.py", "02-parallel-and-stragglers.py", "03-hpc.py",
    ]
    assert not (NOTEBOOK_DIR / "_build.py").exists()


def test_pairing_is_declared() -> None:
    config = (NOTEBOOK_DIR / "jupytext.toml").read_text(encoding="utf-8")
    assert re.search(r'^formats = "ipynb,py:percent"$', config, re.MULTILINE)
    # the docs pages are the same files (symbolic links), not copies that could drift
    for name in NOTEBOOKS:
        link = ROOT / "docs" / "notebooks" / name
        assert link.is_symlink(), link
        assert link.resolve() == (NOTEBOOK_DIR / name).resolve()


@pytest.mark.parametrize("name", NOTEBOOKS)
def test_source_is_in_canonical_form(name: str) -> None:
    """Reading and writing a source with the project's jupytext config changes nothing."""
    jupytext = _jupytext()
    from jupytext.config import load_jupytext_config

    path = NOTEBOOK_DIR / name
    text = path.read_text(encoding="utf-8")
    config = load_jupytext_config(str(path))
    nb = jupytext.reads(text, fmt="py:percent", config=config)
    assert jupytext.writes(nb, fmt="py:percent", config=config) == text
    assert text.startswith("# ---\n# jupyter:\n#   kernelspec:")


@pytest.mark.parametrize("name", NOTEBOOKS)
def test_converts_to_a_notebook_that_shows_a_figure(name: str, tmp_path: Path) -> None:
    """``jupytext --to ipynb`` (what the README tells users) gives a valid notebook."""
    jupytext = _jupytext()
    import nbformat

    out = tmp_path / name.replace(".py", ".ipynb")
    proc = subprocess.run([sys.executable, "-m", "jupytext", "--to", "ipynb",
                           str(NOTEBOOK_DIR / name), "-o", str(out)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    nb = nbformat.read(out, as_version=4)
    nbformat.validate(nb)
    assert nb.metadata.kernelspec.name == "python3"
    assert nb.cells[0].cell_type == "markdown" and nb.cells[0].source.startswith("# ")
    code = [c.source for c in nb.cells if c.cell_type == "code"]
    assert len(code) >= 5
    for cell in nb.cells:
        if cell.cell_type == "code":
            assert cell.outputs == [] and cell.execution_count is None
    for source in code:
        ast.parse(source)  # plain Python: no magics, no syntax errors
    # a figure: pyplot shown, or one of h5mdx's plot functions as a cell's value
    assert any(re.search(r"plt\.show\(\)|^(display\()?plot_\w+\(", s, re.MULTILINE)
               for s in code), name
    assert jupytext.reads(out.read_text(encoding="utf-8"), fmt="ipynb").cells
