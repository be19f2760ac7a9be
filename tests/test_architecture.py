"""The layers of h5mdx (docs/architecture.md): import contracts and a light ``import h5mdx``."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src"


def _env() -> dict[str, str]:
    # the sources under test first (the venv may hold an editable install of another tree)
    path = os.pathsep.join(p for p in (str(SRC), os.environ.get("PYTHONPATH", "")) if p)
    return dict(os.environ, PYTHONPATH=path)


def test_import_contracts_are_kept(tmp_path):
    """``lint-imports`` with the contracts of pyproject.toml: every import points down."""
    exe = shutil.which("lint-imports", path=os.path.dirname(sys.executable))
    assert exe is not None, "import-linter is a test dependency (pip install import-linter)"
    proc = subprocess.run([exe, "--no-cache"], cwd=ROOT, env=_env(), capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "0 broken" in proc.stdout


def test_engine_imports_no_distributed_analysis_or_mpi(adk_h5md):
    """``import h5mdx`` and the ``h5md`` engine load neither distributed, nor the analysis,
    nor MPI, nor the timing and layout tools."""
    code = textwrap.dedent(f"""
        import sys
        import h5mdx, xarray as xr
        with xr.open_dataset({adk_h5md!r}, engine="h5md") as ds:
            ds.position[0].values
        bad = sorted(m for m in sys.modules if m.startswith((
            "distributed", "dask_jobqueue", "dask_mpi", "mpi4py", "h5mdx.analysis",
            "h5mdx.mpi", "h5mdx.parallel", "h5mdx.timing", "h5mdx.bench", "h5mdx.cli",
            "h5mdx.layout")))
        assert not bad, bad
        print("ok")
    """)
    proc = subprocess.run([sys.executable, "-c", code], env=_env(), capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "ok"


def test_package_names_load_on_first_use():
    import h5mdx
    from h5mdx.analysis.qcp import rmsd_qcp
    from h5mdx.analysis.rmsd import rmsd
    from h5mdx.layout.export import to_h5md

    assert h5mdx.rmsd is rmsd
    assert h5mdx.rmsd_qcp is rmsd_qcp
    assert h5mdx.to_h5md is to_h5md
    with pytest.raises(AttributeError):
        _ = h5mdx.no_such_name


@pytest.mark.parametrize("old, new", [
    ("h5mdx.h5md", "h5mdx.format.h5md"),
    ("h5mdx.qcp", "h5mdx.analysis.qcp"),
    ("h5mdx.convert", "h5mdx.layout.convert"),
    ("h5mdx.cluster", "h5mdx.parallel.cluster"),
    ("h5mdx.timing.runner", "h5mdx.bench.grid"),
])
def test_old_module_paths_still_work_with_a_future_warning(old, new):
    code = textwrap.dedent(f"""
        import importlib, warnings
        warnings.simplefilter("error", FutureWarning)
        try:
            importlib.import_module({old!r})
        except FutureWarning as w:
            assert {new!r} in str(w), w
        else:
            raise AssertionError("no FutureWarning")
        warnings.simplefilter("ignore", FutureWarning)
        old = importlib.import_module({old!r})
        assert old is importlib.import_module({new!r})
        assert old.__spec__.name == {new!r}
        print("ok")
    """)
    proc = subprocess.run([sys.executable, "-c", code], env=_env(), capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "ok"


def test_old_backend_path_answers_the_engine_without_a_warning():
    """Installations made before the move name ``h5mdx.backend`` in their entry point."""
    code = textwrap.dedent("""
        import warnings
        warnings.simplefilter("error")
        from h5mdx.backend import H5MDBackendEntrypoint
        from h5mdx.engine.backend import H5MDBackendEntrypoint as new
        assert H5MDBackendEntrypoint is new
        warnings.simplefilter("ignore", FutureWarning)
        import h5mdx.rmsd  # the old module path of the function h5mdx.rmsd ...
        assert callable(h5mdx.rmsd)  # ... which stays callable
        print("ok")
    """)
    proc = subprocess.run([sys.executable, "-c", code], env=_env(), capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "ok"


def test_every_test_directory_mirrors_a_package():
    """tests/<name>/ holds the tests of h5mdx/<name> (plus env/ and reliability/)."""
    packages = {p.name for p in (SRC / "h5mdx").iterdir()
                if p.is_dir() and (p / "__init__.py").exists()}
    dirs = {p.name for p in (ROOT / "tests").iterdir()
            if p.is_dir() and not p.name.startswith(("_", "."))}
    assert dirs - packages <= {"env", "reliability"}, dirs - packages
    assert not packages - dirs, packages - dirs


#: Functions allowed past the limit, with the reason (none today).
LONG_FUNCTIONS: set[str] = set()


def test_no_function_over_80_lines():
    """Every function of h5mdx fits in 80 lines, docstring left out (split it into helpers)."""
    import ast

    long = []
    for path in sorted((SRC / "h5mdx").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            first = node.decorator_list[0].lineno if node.decorator_list else node.lineno
            lines = node.end_lineno - first + 1
            doc = node.body[0]
            if isinstance(doc, ast.Expr) and isinstance(doc.value, ast.Constant) \
                    and isinstance(doc.value.value, str):
                lines -= doc.end_lineno - doc.lineno + 1
            name = f"{path.relative_to(SRC / 'h5mdx').as_posix()}::{node.name}"
            if lines > 80 and name not in LONG_FUNCTIONS:
                long.append(f"{name} ({lines} lines)")
    assert not long, long


#: The longest a module may be: one a newcomer reads in a sitting (the scan, 2,971 lines,
#: and the engine's backend, 2,146, were split into packages of modules with one job each).
MAX_MODULE_LINES = 1300


def test_no_module_over_the_limit():
    """Every module of h5mdx fits in :data:`MAX_MODULE_LINES` lines (split it)."""
    long = []
    for path in sorted((SRC / "h5mdx").rglob("*.py")):
        n = len(path.read_text(encoding="utf-8").splitlines())
        if n > MAX_MODULE_LINES:
            long.append(f"{path.relative_to(SRC / 'h5mdx').as_posix()} ({n} lines)")
    assert not long, long


def test_the_module_map_names_every_module():
    """docs/architecture.md's module map lists every module of src/h5mdx, and no module
    that is gone (a newcomer's map of where things are; audit42 found 39 of 76 unnamed)."""
    text = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    block = text.split("## Module map", 1)[1].split("```text", 1)[1].split("```", 1)[0]
    mapped: set[str] = set()
    packages: list[tuple[int, str]] = []  # (indent, "name/") of the packages a line is in
    for line in block.splitlines():
        if not line.strip():
            continue
        indent = len(line) - len(line.lstrip())
        name = line.split()[0]
        while packages and packages[-1][0] >= indent:
            packages.pop()
        if name.endswith("/"):
            packages.append((indent, name))
        else:
            mapped.add("".join(p for _, p in packages) + name)
    pkg = SRC / "h5mdx"
    actual = {p.relative_to(pkg).as_posix() for p in pkg.rglob("*.py")
              if "__pycache__" not in p.parts}
    assert mapped == actual, (sorted(actual - mapped), sorted(mapped - actual))
