"""The documentation builds offline with warnings as errors (``sphinx-build -W``).

The build executes the three notebooks (myst-nb, ``nb_execution_raise_on_error``), so
a notebook cell that raises fails it, and their pages must show their figures.
Every reference to an h5mdx function, class, module or command-line option in the
pages and in the docstrings must resolve (``nitpicky = True``), so a page that
documents an API that does not exist fails here.
"""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # in the full run (scripts/test.sh, CI), not in plain `pytest`

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"


def _require_sphinx() -> None:
    missing = [m for m in ("sphinx", "myst_nb", "jupytext", "numpydoc", "pydata_sphinx_theme",
                           "ipykernel", "matplotlib")
               if importlib.util.find_spec(m) is None]
    if missing and not os.environ.get("H5MDX_REQUIRE_DOCS"):
        pytest.skip(f"documentation tools not installed ({', '.join(missing)}); "
                    "pip install -e '.[docs]' (set H5MDX_REQUIRE_DOCS=1 to make this fail)")


@pytest.fixture(scope="module")
def html(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The site, built once with ``sphinx-build -W --keep-going``."""
    _require_sphinx()
    tmp = tmp_path_factory.mktemp("docs")
    out = tmp / "html"
    proc = subprocess.run(
        [sys.executable, "-m", "sphinx", "-W", "--keep-going", "-q", "-b", "html",
         "-d", str(tmp / "doctrees"), str(DOCS), str(out)],
        capture_output=True, text=True, timeout=600, cwd=ROOT,
    )
    assert proc.returncode == 0, f"sphinx-build failed:\n{proc.stdout}\n{proc.stderr}"
    return out


@pytest.mark.slow
def test_docs_build_without_warnings(html: Path) -> None:
    assert (html / "index.html").is_file()
    for page in ("installation", "notebooks", "cli", "benchmarks", "performance",
                 "guide/data-model",
                 "guide/rmsd", "guide/layouts", "guide/parallel", "guide/timing",
                 "guide/mpi", "guide/slurm", "api/engine", "api/timing"):
        assert (html / f"{page}.html").is_file(), page
    if (DOCS / "reliability.md").is_file():
        assert (html / "reliability.html").is_file()
    # the API reference documents the engine, the CLI reference the real subcommands
    engine = (html / "api" / "engine.html").read_text(encoding="utf-8")
    assert "H5MDBackendEntrypoint" in engine
    assert "open_dataset" in engine
    cli = (html / "cli.html").read_text(encoding="utf-8")
    for command in ("h5mdx info", "h5mdx example"):
        assert command in cli


@pytest.mark.slow
@pytest.mark.parametrize("name", ["01-quickstart", "02-parallel-and-stragglers", "03-hpc"])
def test_notebook_pages_show_their_figures(html: Path, name: str) -> None:
    """Each notebook page is reachable from the notebooks page and shows executed figures."""
    assert f'href="notebooks/{name}.html"' in (html / "notebooks.html").read_text("utf-8")
    page = (html / "notebooks" / f"{name}.html").read_text(encoding="utf-8")
    images = re.findall(r'<img [^>]*src="\.\./(_images/[^"]+\.png)"', page)
    assert images, f"{name}: no figure on the rendered page"
    for image in images:
        assert (html / image).stat().st_size > 5000, image  # a real plot, not an empty canvas
    assert 'class="output traceback' not in page
    expected = {"01-quickstart": 4, "02-parallel-and-stragglers": 5, "03-hpc": 1}[name]
    assert len(images) >= expected, (name, len(images))


@pytest.mark.slow
def test_benchmark_results_are_included(html: Path) -> None:
    """Every result table present under benchmarks/results shows up on the page."""
    page = (html / "benchmarks.html").read_text(encoding="utf-8")
    conf: dict = {"__file__": str(DOCS / "conf.py")}
    sys.path.insert(0, str(DOCS))
    try:
        exec(compile((DOCS / "conf.py").read_text(), "conf.py", "exec"), conf)  # noqa: S102
    finally:
        sys.path.remove(str(DOCS))
    for name, _title, _how in conf["h5mdx_results"]:
        path = ROOT / "benchmarks" / "results" / name
        if path.is_file():
            assert f"benchmarks/results/{name}" in page
            first_row = next(ln for ln in path.read_text().splitlines() if ln.startswith("|"))
            header = first_row.strip("|").split("|")[0].strip()
            assert header in page, (name, header)
        else:
            assert re.search(rf"No results yet:.*{re.escape(name)}", page, re.S), name


def _documented_command_lines() -> list[tuple[str, str]]:
    """``(command line, page)`` for every ``h5mdx ...`` line of the Markdown pages."""
    lines = []
    for page in sorted(DOCS.rglob("*.md")):
        if "_build" in page.parts:
            continue
        text = page.read_text(encoding="utf-8").replace("\\\n", " ")
        # only inside fenced code blocks
        for block in re.findall(r"^```[^\n]*\n(.*?)^```", text, re.MULTILINE | re.DOTALL):
            for match in re.finditer(
                r"^\s*(?:\$ |\.venv/bin/|mpirun -n \S+ )?(h5mdx [^\n#]*)", block, re.MULTILINE
            ):
                lines.append((match.group(1).strip(), page.relative_to(DOCS).as_posix()))
    return lines


def test_documented_cli_commands_and_flags_exist() -> None:
    """``h5mdx <command> --flag`` in the docs is a real subcommand with that flag."""
    from h5mdx.cli import build_parser

    parser = build_parser()
    subparsers = next(a for a in parser._actions if isinstance(a.choices, dict)).choices
    problems = []
    lines = _documented_command_lines()
    assert lines, "no h5mdx command lines found in the docs"
    for line, page in lines:
        words = line.split()
        command = words[1] if len(words) > 1 else ""
        if command.startswith("-"):
            continue
        if command not in subparsers:
            problems.append(f"{page}: unknown subcommand {command!r} in {line!r}")
            continue
        known = {o for a in subparsers[command]._actions for o in a.option_strings}
        for flag in re.findall(r"(?<![\w-])(--[a-z][a-z-]*)", line):
            if flag not in known:
                problems.append(f"{page}: h5mdx {command} has no option {flag} ({line!r})")
    assert not problems, "\n".join(problems)


def test_cli_reference_shows_help_as_help_prints_it() -> None:
    """An option's help with ``%%`` (slurm-script's ``--log``, ``%j``) reads as ``--help``
    prints it in the CLI reference, not with the doubled ``%%`` argparse's source needs."""
    pytest.importorskip("sphinx")
    from h5mdx.cli import build_parser

    sys.path.insert(0, str(DOCS / "_ext"))
    try:
        import h5mdx_docs
    finally:
        sys.path.remove(str(DOCS / "_ext"))
    parser = build_parser()
    subparsers = next(a for a in parser._actions if isinstance(a.choices, dict)).choices
    text = "\n".join(h5mdx_docs._option_lines(subparsers["slurm-script"]))
    assert "job output file, %j = job id (default h5mdx-mpi-rmsd-%j.out)" in text
    assert "%%" not in text
    rmsd = "\n".join(h5mdx_docs._option_lines(subparsers["rmsd"]))
    assert "seconds to wait for the workers (default 120)" in rmsd
