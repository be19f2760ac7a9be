"""``import h5mdx`` and the engine need neither MPI, SLURM nor distributed."""

from __future__ import annotations

import subprocess
import sys
import textwrap


def test_import_without_optional_dependencies(adk_h5md):
    code = textwrap.dedent(f"""
        import sys
        for name in ("mpi4py", "dask_jobqueue", "distributed", "dask_mpi", "numba",
                     "matplotlib"):
            sys.modules[name] = None
        import h5mdx
        import xarray as xr
        with xr.open_dataset({adk_h5md!r}, engine="h5md", chunks={{}}) as ds:
            assert float(ds.position[0, 0, 0]) != 0.0
        assert "mpi4py" not in [m for m in sys.modules if sys.modules[m] is not None]
        print("ok")
    """)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip().endswith("ok")


def test_mpi4py_never_imported_by_h5mdx():
    code = "import h5mdx, h5mdx.engine.backend, h5mdx.cli, sys; print('mpi4py' in sys.modules)"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120)
    assert proc.stdout.strip() == "False", proc.stderr
