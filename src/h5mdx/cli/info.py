"""``h5mdx info FILE``: what is in an H5MD file (or a Zarr store), and whether its layout
is slow."""

from __future__ import annotations

import argparse
import json
import os
from typing import Any

import numpy as np

from h5mdx.format.gromacs_topology import ModuleTopology
from h5mdx.format.h5md import (
    BoxInfo,
    ElementInfo,
    FileInfo,
    FreeFormInfo,
    Problem,
    compression_name,
    free_form,
    objects_below,
    open_h5md,
    scan,
)
from h5mdx.format.schema import INPUT_INDEX_LONG_NAME
from h5mdx.format.text import human_bytes
from h5mdx.format.vmd_structure import PER_ATOM, PER_RESIDUE, PER_SPECIES, VMDStructure


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        "info",
        help="show groups, elements, chunks, units, conformance and layout problems of an "
        "H5MD file",
        description="Show the contents and storage layout of an H5MD file, and where it "
        "departs from H5MD (what h5mdx assumes to read it, or leaves out).",
    )
    p.add_argument("file", help="an H5MD file, or a Zarr store (a directory) written by h5mdx")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=run)
    return p


def _time(t: Any) -> str:
    """A time as the text prints it: the fewest digits, 6 to 12, that give it back (as a
    float32 where it is one: 0.1, not 0.10000000149), 12 at most (the float noise of
    ``offset + i * interval`` cut), where ``:g``'s 6 printed 1234567.5 ps as 1.23457e+06
    (the JSON's value rounded, two runs' ends alike)."""
    t = float(t)
    single = abs(t) < 3e38 and float(np.float32(t)) == t
    for digits in range(6, 12):
        text = f"{t:.{digits}g}"
        if float(text) == t or (single and float(np.float32(float(text))) == t):
            return text
    return f"{t:.12g}"


def element_dict(el: ElementInfo) -> dict[str, Any]:
    """A JSON-able description of one element."""
    d: dict[str, Any] = {
        "name": el.name,
        "path": el.path,
        "shape": list(el.shape),
        "dtype": str(el.dtype),
        "chunks": list(el.chunks) if el.chunks else None,
        "compression": compression_name(el.compression),
        "compression_opts": el.compression_opts,
        "filters": list(el.filters),
        "unit": el.unit,
        "time_dependent": el.time_dependent,
        "nbytes": el.nbytes,
        "storage_size": el.storage_size,
    }
    if el.sampling is not None:
        s = el.sampling
        d["sampling"] = {
            "kind": s.kind,
            "n_frames": int(s.step.size),
            "step_first": int(s.step[0]) if s.step.size else None,
            "step_last": int(s.step[-1]) if s.step.size else None,
            "time_first": float(s.time[0]) if s.time is not None and s.time.size else None,
            "time_last": float(s.time[-1]) if s.time is not None and s.time.size else None,
            "time_unit": s.time_unit,
        }
    return d


def _diagnosis(info: FileInfo) -> list[Any]:
    """The layout findings of ``info`` (none where the layout tools cannot be imported)."""
    try:
        from h5mdx.layout import diagnose
    except ImportError:
        return []
    return diagnose(info)


def _findings(info: FileInfo) -> list[dict[str, Any]]:
    from h5mdx.layout import finding_dict

    return [finding_dict(f) for f in _diagnosis(info)]


def info_dict(info: FileInfo) -> dict[str, Any]:
    """A JSON-able description of a whole file (what ``h5mdx info --json`` prints)."""
    other = _other_groups(info)
    return {
        "file": info.filename,
        "file_size": info.file_size,
        "h5md_version": ".".join(map(str, info.version)),
        "author": info.author,
        "creator": info.creator,
        "program": info.program,
        "modules": info.modules,
        "topology": None if info.topology is None else {
            "path": info.topology.path, "system_name": info.topology.system_name,
            "n_atoms": info.topology.n_atoms,
            "blocks": [list(b) for b in info.topology.blocks],
            "properties": list(info.topology.properties)},
        "vmd_structure": None if info.vmd_structure is None else {
            "path": info.vmd_structure.path,
            "datasets": {k: list(v.shape) for k, v in info.vmd_structure.datasets.items()}},
        "particles": {
            name: {
                "path": pg.path,
                "elements": {k: element_dict(e) for k, e in pg.elements.items()},
                "box": None
                if pg.box is None
                else {
                    "dimension": pg.box.dimension,
                    "boundary": list(pg.box.boundary),
                    **{key: element_dict(el) if el else None for key, el in (
                        ("edges", pg.box.edges), ("offset", pg.box.offset),
                        ("pbc", pg.box.pbc))},
                },
            }
            for name, pg in info.particles.items()
        },
        "observables": {k: element_dict(e) for k, e in info.observables.items()},
        "connectivity": {k: element_dict(e) for k, e in info.connectivity.items()},
        "parameters": {k: {"shape": list(v["shape"] or ()), "dtype": v["dtype"]}
                       for k, v in info.parameters.items()},
        "other_groups": {root: {k: {"shape": list(v["shape"] or ()), "dtype": v["dtype"]}
                                for k, v in found.datasets.items()}
                         for root, found in other.items()},
        "other_elements": {root: {k: element_dict(e) for k, e in found.elements.items()}
                           for root, found in other.items() if found.elements},
        "findings": _findings(info),
        "problems": [
            {"path": p.path, "problem": p.message, "assumed": p.assumed, "minor": p.minor,
             "departure": p.departure}
            for p in _problems(info, other)
        ],
    }


#: The widest name column, and the most elements listed under one root, in the text.
_WIDEST = 40
_SHOWN = 100
#: Datasets below ``/connectivity``'s groups beyond which the text does not walk them
#: (H5MD-NOMAD writes a group per molecule: 52,269 datasets took 14 s to scan).
_WALKED = 1000


def _other_groups(info: FileInfo) -> dict[str, FreeFormInfo]:
    """What each root group H5MD does not define holds (RMPCDMD's ``/fields``: datasets and
    H5MD elements), by root (walked now: a scan lists only the groups' names), the file
    opened once for all."""
    if not info.other_groups:
        return {}
    with open_h5md(info.filename) as f:
        return {root: free_form(f, root, info=info) for root in info.other_groups}


def _problems(info: FileInfo, other: dict[str, FreeFormInfo]) -> list[Problem]:
    """The file's problems: its scan's, then those of the root groups H5MD does not define
    (an open of them warns of these)."""
    return [*info.problems, *(p for found in other.values() for p in found.problems)]


def _line(el: ElementInfo, indent: str, name: str | None = None, width: int = 12) -> str:
    shape = "×".join(map(str, el.shape)) or "scalar"
    chunks = "×".join(map(str, el.chunks)) if el.chunks else "contiguous"
    comp = compression_name(el.compression) or "-"
    if el.compression_opts is not None and not isinstance(el.compression, int):
        comp += f":{el.compression_opts}"
    unit = el.unit or "-"
    samp = ""
    if el.sampling is not None:
        s = el.sampling
        samp = f"steps {int(s.step[0])}..{int(s.step[-1])}" if s.step.size else "no frames"
        if s.time is not None and s.time.size:
            samp += (f", t {_time(s.time[0])}..{_time(s.time[-1])} "
                     f"{s.time_unit or ''}").rstrip()
        samp += f" ({s.kind})"
    return (f"{indent}{name or el.name:<{width}} {shape:<16} {str(el.dtype):<8} chunks "
            f"{chunks:<14} {comp:<8} {unit:<22} {samp}").rstrip()


def _box_lines(box: BoxInfo, width: int) -> list[str]:
    """A line for each element of the box, as served: its edges, and the members other
    writers add (HALMD's ``offset``, znh5md's ``pbc``); those computed from LAMMPS'
    bounds (one dataset) said so."""
    out = []
    for name, el, said in (("box_edges", box.edges, "hi - lo"), ("box_offset", box.offset, "lo"),
                           ("box_pbc", box.pbc, "")):
        if el is not None:
            line = _line(el, "    ", name=name, width=width)
            out.append(line + (f"  ({said} of LAMMPS' bounds)" if box.from_bounds and said
                               else ""))
    return out


def topology_line(module: ModuleTopology) -> str:
    """What ``info`` says of GROMACS' topology module: the system, its atoms, molecules
    and the properties served for them."""
    blocks = ", ".join(f"{name} x{count}" for name, count in module.blocks)
    served = ", ".join("resid" if p == "residue_id" else p for p in module.properties)
    name = f"{module.system_name!r}: " if module.system_name else ""
    return (f"{name}{module.n_atoms} atoms in {module.n_molecules} molecules ({blocks}); "
            f"{served or 'no property'} per atom, from {module.path}")


def structure_line(structure: VMDStructure) -> str:
    """What ``info`` says of VMD's structure module: the properties it holds, per
    species, atom and residue, and its bonds."""
    data = structure.datasets
    parts = [f"{', '.join(names)} per {kind}" for kind, names in (
        ("species", [n for n in PER_SPECIES if n in data]),
        ("atom", [n for n in PER_ATOM if n in data]),
        ("residue", [n for n in PER_RESIDUE if n in data])) if names]
    if "bond_from" in data:
        parts.append(f"{data['bond_from'].size} bond(s)")
    return f"VMD's structure module: {'; '.join(parts) or 'no property'}, from {structure.path}"


def _how_to_open(observables: dict[str, Any]) -> str:
    """How to open the observables (not in a particles group's Dataset): the groups to
    pass as ``group=`` (an observable of a subgroup is named 'atoms/energy')."""
    groups = sorted({k.rpartition("/")[0] for k in observables})
    named = [f'group="observables{"/" + g if g else ""}"' for g in groups]
    shown = ", ".join(named[:3]) + (f", ... ({len(named)} groups)" if len(named) > 3 else "")
    return f"  (xr.open_dataset(..., engine=\"h5md\", {shown}), or open_datatree)"


def _joined(*words: Any) -> str:
    """The words that are there, one space apart (a creator without a version)."""
    return " ".join(str(w) for w in words if w not in (None, ""))


def render(info: FileInfo, unwalked: dict[str, tuple[int, int]] | None = None) -> str:
    """The human-readable report of ``h5mdx info``; ``unwalked``: the groups below
    ``/connectivity`` not scanned, with their (groups, datasets) counts."""
    out = [
        f"{info.filename}  ({human_bytes(info.file_size)}, H5MD {info.version[0]}.{info.version[1]}, "
        f"creator {_joined(info.creator.get('name', '?'), info.creator.get('version'))})",
    ]
    if info.program:  # H5MD-NOMAD: the MD program, where the creator is a library
        out.append(f"program: {_joined(info.program.get('name'), info.program.get('version'))}")
    if info.modules:
        out.append("modules: " + ", ".join(_joined(name, mod.get("version"))
                                           for name, mod in info.modules.items()))
    if info.topology is not None:  # GROMACS' topology module
        out.append(f"topology: {topology_line(info.topology)}")
    if info.vmd_structure is not None:
        out.append(f"topology: {structure_line(info.vmd_structure)}")
    # one name column for all (an observable of a subgroup is named 'atoms/energy')
    width = min(_WIDEST, max([12, *(len(k) for k in (*info.observables, *info.connectivity)),
                              *(len(n) for pg in info.particles.values()
                                for n in pg.elements)]))
    for pg in info.particles.values():
        out.append(pg.group)
        for key, el in pg.elements.items():  # as served (lees_edwards_offset)
            out.append(_line(el, "  ", name=key, width=width))
        ids = pg.elements.get("id")
        if ids is not None and ids.attrs.get("long_name") == INPUT_INDEX_LONG_NAME:
            out.append("  selected atoms: id holds their indices in the system they come "
                       "from, whose topology finds them (--topology, topology=)")
        if pg.box is not None:
            out.append(f"  box: dimension {pg.box.dimension}, boundary {list(pg.box.boundary)}")
            out.extend(_box_lines(pg.box, width - 2))
    for title, elements in (("observables", info.observables),
                            ("connectivity", info.connectivity)):
        if elements or (title == "connectivity" and unwalked):
            out.append(title + (_how_to_open(info.observables) if title == "observables"
                                else ""))
            for key, el in list(elements.items())[:_SHOWN]:
                out.append(_line(el, "  ", name=key, width=width))
            if len(elements) > _SHOWN:  # H5MD-NOMAD: a group of connectivity per molecule
                groups = len({k.rpartition("/")[0] for k in elements})
                out.append(f"  ... and {len(elements) - _SHOWN} more in {groups} group(s) "
                           "(h5mdx info --json lists them all)")
    for name, (groups, datasets) in (unwalked or {}).items():
        out.append(f"  {name}/  {groups:,} group(s), {datasets:,} dataset(s) below: not read here")
        out.append(f"      (h5mdx info --json reads and checks them; group=\"connectivity/{name}/"
                   "<sub>\" opens one)")
    if info.parameters:
        out.append("parameters: " + ", ".join(info.parameters))
    other = _other_groups(info)
    for root, found in other.items():  # not H5MD's groups
        elements = found.elements
        out.append(f"{root} (not H5MD's): " + (", ".join(found.datasets) or (
            "no other dataset" if elements else "no readable dataset")))
        wide = min(_WIDEST, max([width, *map(len, elements)]))
        out.extend(_line(el, "  ", name=key, width=wide) for key, el in elements.items())
    problems = _problems(info, other)
    if problems:
        if any(p.departure for p in info.problems):
            refused = "strict=True refuses the file"
        elif any(p.departure for p in problems):  # in groups H5MD does not define alone
            refused = "strict=True refuses an open of the groups they are in"
        else:
            refused = "none a departure from H5MD: strict=True reads the file"
        out.append(f"conformance: {len(problems)} problem(s) ({refused})")
        for p in problems:
            out.append(f"  {p.path}: {p.message}")
            out.append(f"      assumed: {p.assumed}" + ("  (minor: not warned)" if p.minor else
                                                        "" if p.departure else
                                                        "  (no departure: strict=True reads it)"))
    findings = _diagnosis(info)
    if findings:
        from h5mdx.layout import render_findings

        out.append("layout:")
        out.extend(f"  {line}" for line in render_findings(findings))
    return "\n".join(out)


def _zarr_group_dict(path: str, root: Any, group: str | None) -> dict[str, Any]:
    """The variables, frames and missing chunks of one group of a Zarr store (its root
    Zarr group ``root``, None where zarr cannot open it)."""
    from h5mdx.layout.export import missing_chunks, open_zarr_store

    with open_zarr_store(path, group=group) as ds:
        missing = {name: {"stored": stored, "expected": expected, "reads_as": str(fill)}
                   for name, (stored, expected, fill) in missing_chunks(path, ds, group,
                                                                root=root).items()}
        own = _zarr_arrays(root, group)  # not the coordinates a group shares with the root
        variables = {}
        for name, var in ds.variables.items():
            if own is not None and str(name) not in own:
                continue
            enc = var.encoding
            codecs = [type(c).__name__ for c in (*(enc.get("filters") or ()),
                                                  *(enc.get("compressors") or ()))]
            variables[str(name)] = {
                "dims": list(var.dims), "shape": list(var.shape), "dtype": str(var.dtype),
                "chunks": list(enc["chunks"]) if enc.get("chunks") else None,
                "codecs": codecs, "unit": var.attrs.get("units"),
            }
        time = ds.get("time")
        out: dict[str, Any] = {"attrs": dict(ds.attrs), "n_frames": int(ds.sizes.get("time", 0)),
                               "variables": variables, "missing_chunks": missing}
        if time is not None and time.size:
            out["time_first"] = float(time[0])
            out["time_last"] = float(time[-1])
            out["time_unit"] = time.attrs.get("units")
    return out


def _zarr_arrays(root: Any, group: str | None) -> set[str] | None:
    """The names of the arrays stored in ``group`` of a Zarr store's ``root``; None for
    the root itself."""
    if not group or root is None:
        return None
    try:
        return {str(k) for k in root[group].array_keys()}
    except (OSError, ValueError, KeyError, AttributeError):  # not a group
        return None


def _zarr_subgroups(root: Any) -> list[str]:
    """The groups under a Zarr store's ``root`` that hold arrays (the other particles
    groups, the observables, the connectivity, the parameters), by path."""
    found: list[str] = []

    def walk(group: Any, prefix: str) -> None:
        for name, sub in sorted(group.groups()):
            where = f"{prefix}{name}"
            if any(True for _ in sub.arrays()):
                found.append(where)
            walk(sub, f"{where}/")

    if root is None:
        return []
    try:
        walk(root, "")
    except (OSError, ValueError, KeyError):
        return []
    return found


def zarr_dict(path: str) -> dict[str, Any]:
    """A JSON-able description of a Zarr store: its variables, chunks, codecs and units,
    at its root (the first particles group) and in each of its other groups."""
    out: dict[str, Any] = {"store": path}
    out["store_size"] = sum(os.path.getsize(os.path.join(d, f))
                            for d, _, files in os.walk(path) for f in files)
    from h5mdx._optional import import_optional

    zarr = import_optional("zarr", "reading Zarr stores")
    try:  # opened once, for every group
        root = zarr.open_group(path, mode="r")
    except (OSError, ValueError, KeyError):
        root = None
    out.update(_zarr_group_dict(path, root, None))
    out["groups"] = {g: _zarr_group_dict(path, root, g) for g in _zarr_subgroups(root)}
    return out


def _render_zarr_group(d: dict[str, Any], indent: str) -> list[str]:
    out = []
    for name, v in d["variables"].items():
        shape = "×".join(map(str, v["shape"])) or "scalar"
        chunks = "×".join(map(str, v["chunks"])) if v["chunks"] else "-"
        codecs = ",".join(v["codecs"]) or "-"
        out.append(f"{indent}{name:<12} {shape:<16} {v['dtype']:<8} chunks {chunks:<14} "
                   f"{codecs:<12} {v['unit'] or '-'}".rstrip())
    if "time_first" in d:
        out.append(f"{indent[:-2]}frames: {d['n_frames']}, t {_time(d['time_first'])}.."
                   f"{_time(d['time_last'])} {d.get('time_unit') or ''}".rstrip())
    for name, m in d.get("missing_chunks", {}).items():
        out.append(f"warning: {name} stores {m['stored']} of its {m['expected']} chunks (a "
                   f"copy or a write that did not finish?); the frames of the others read "
                   f"as {m['reads_as']}")
    return out


def render_zarr(d: dict[str, Any]) -> str:
    """The human-readable report of ``h5mdx info STORE.zarr``."""
    creator = d["attrs"].get("creator_name")
    out = [f"{d['store']}  ({human_bytes(d['store_size'])}, Zarr store"
           + (f", creator {_joined(creator, d['attrs'].get('creator_version'))}"
              if creator else "") + ")"]
    groups = d.get("groups") or {}
    if groups and d["attrs"].get("h5md_group"):
        out.append(f"{str(d['attrs']['h5md_group']).strip('/')} (at the root)")
    out.extend(_render_zarr_group(d, "  "))
    for name, g in groups.items():
        out.append(name)
        out.extend(_render_zarr_group(g, "    "))
    return "\n".join(out)


def run(args: argparse.Namespace) -> int:
    from h5mdx.layout.convert import is_zarr_store

    if is_zarr_store(args.file):
        d = zarr_dict(args.file)
        print(json.dumps(d, indent=2, default=str) if args.json else render_zarr(d))
        return 0
    with open_h5md(args.file) as f:  # opened once: counted, then scanned
        unwalked = {} if args.json else objects_below(f, "connectivity")
        if sum(datasets for _groups, datasets in unwalked.values()) <= _WALKED:
            unwalked = {}
        info = scan(f, deep_connectivity=not unwalked)
    if args.json:
        print(json.dumps(info_dict(info), indent=2, default=str))
    else:
        print(render(info, unwalked))
    return 0
