"""The module paths of h5mdx before the layers became packages, kept for one release.

``import h5mdx.rmsd`` or ``from h5mdx.backend import H5MDArray`` still work: a
meta-path finder answers the old name with the module at its new path (the same
module object, so monkeypatching and ``isinstance`` keep working) and emits a
:class:`FutureWarning`. No file remains at the old paths, so that git follows the
moves as renames.

``h5mdx.backend`` is answered without a warning: xarray loads the ``h5md`` engine
through the entry point recorded in an installation's metadata, which names
``h5mdx.backend:H5MDBackendEntrypoint`` in installations made before the move; a
warning there would fire on every ``xr.open_dataset`` (and is an error under this
project's pytest settings).
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
import warnings
from types import ModuleType
from typing import Any

__all__ = ["MOVED", "install"]

#: Old module path -> new module path.
MOVED: dict[str, str] = {
    "h5mdx.schema": "h5mdx.format.schema",
    "h5mdx.units": "h5mdx.format.units",
    "h5mdx.h5md": "h5mdx.format.h5md",
    "h5mdx.writer": "h5mdx.format.writer",
    "h5mdx.direct": "h5mdx.format.direct",
    "h5mdx.backend": "h5mdx.engine.backend",
    "h5mdx.chunking": "h5mdx.engine.chunking",
    "h5mdx.topology": "h5mdx.engine.topology",
    "h5mdx.live": "h5mdx.engine.live",
    "h5mdx.qcp": "h5mdx.analysis.qcp",
    "h5mdx.rmsd": "h5mdx.analysis.rmsd",
    "h5mdx.convert": "h5mdx.layout.convert",
    "h5mdx.rechunk": "h5mdx.layout.rechunk",
    "h5mdx.xio": "h5mdx.layout.export",
    "h5mdx.cluster": "h5mdx.parallel.cluster",
    "h5mdx.slurm_script": "h5mdx.parallel.batch",
    "h5mdx.workers": "h5mdx.parallel.workers",
    "h5mdx.decompose": "h5mdx.mpi.decompose",
    "h5mdx.timing.runner": "h5mdx.bench.grid",
}

#: Old paths answered without a FutureWarning (see the module docstring).
_SILENT = frozenset({"h5mdx.backend"})


class _CallableModule(ModuleType):
    """``h5mdx.rmsd`` is both the old module path and the package's function.

    Importing the old module path binds the module as the attribute ``h5mdx.rmsd``
    (the import system sets it after loading, nothing can intercept that), so the
    module answers calls with the function, as ``h5mdx.rmsd(ds)`` did before.
    """

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.rmsd(*args, **kwargs)


class _Alias(importlib.abc.Loader):
    def __init__(self, new: str) -> None:
        self.new = new
        self.spec: importlib.machinery.ModuleSpec | None = None

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        if spec.name not in _SILENT:
            warnings.warn(
                f"{spec.name} has moved to {self.new}; import it from there "
                "(the old path goes in the next release)",
                FutureWarning,
                stacklevel=2,
            )
        module = importlib.import_module(self.new)
        if spec.name == "h5mdx.rmsd":
            module.__class__ = _CallableModule
        self.spec = module.__spec__
        return module

    def exec_module(self, module: ModuleType) -> None:
        # The module was executed when it was imported under its new name; the import
        # system has just overwritten its __spec__ with the alias's: put its own back.
        module.__spec__ = self.spec


class _Finder(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname: str, path: Any = None,
                  target: Any = None) -> importlib.machinery.ModuleSpec | None:
        new = MOVED.get(fullname)
        if new is None:
            return None
        return importlib.machinery.ModuleSpec(fullname, _Alias(new))


def install() -> None:
    """Put the finder of the old module paths on :data:`sys.meta_path` (once)."""
    if not any(isinstance(f, _Finder) for f in sys.meta_path):
        sys.meta_path.append(_Finder())
