"""What the CPU is: model, cores and threads per core, vector units, caches.

A benchmark's ratios depend on these as much as on the core count: the all-atom RMSD
kernel is bound by the cores' fused multiply-adds, which two hardware threads of one core
share, while the read floor is bound by memory, which they do not compete for in the same
way. So "16 cores" is recorded as what it is (e.g. 8 cores x 2 threads), with the widest
vector unit (AVX-512, AVX2) and the cache sizes. On Linux from ``/proc/cpuinfo`` and
``/sys/devices/system/cpu``; elsewhere what :mod:`platform` knows.

Only the standard library.
"""

from __future__ import annotations

import os
import platform
import re
from pathlib import Path
from typing import Any

__all__ = ["cpu_description", "cpu_facts", "usable_cpus"]

#: Widest vector instruction sets first: the first a CPU has is reported
_SIMD = (("avx512f", "AVX-512"), ("avx2", "AVX2"), ("avx", "AVX"), ("sse4_2", "SSE4.2"),
         ("sve2", "SVE2"), ("sve", "SVE"), ("asimd", "NEON"))


def cpu_facts(proc: str | os.PathLike = "/proc/cpuinfo",
              sysfs: str | os.PathLike = "/sys/devices/system/cpu") -> dict[str, Any]:
    """The CPU this process runs on.

    Parameters
    ----------
    proc, sysfs : path, optional
        Where Linux describes the CPUs (other paths: for tests).

    Returns
    -------
    dict
        ``model`` (str), ``cpus`` (CPUs this process may run on), ``cores`` (physical cores
        among them) and ``threads_per_core`` (None where not the same for every core),
        ``simd`` (e.g. ``"AVX2"``), ``fma`` (bool), ``l1d_kib`` and ``l2_kib`` (per core)
        and ``l3_mib`` (per cache, shared by ``l3_cpus`` CPUs). Any that cannot be found
        are None.
    """
    usable = _usable_cpus()
    facts: dict[str, Any] = {"model": platform.processor() or platform.machine() or None,
                             "cpus": len(usable) if usable else (os.cpu_count() or None),
                             "cores": None, "threads_per_core": None, "simd": None,
                             "fma": None, "l1d_kib": None, "l2_kib": None, "l3_mib": None,
                             "l3_cpus": None}
    info = _read(Path(proc))
    if info:
        model = _field(info, ("model name", "Model", "cpu model", "Processor"))
        facts["model"] = model or facts["model"]
        flags = set((_field(info, ("flags", "Features")) or "").split())
        facts["simd"] = next((name for flag, name in _SIMD if flag in flags), None)
        facts["fma"] = ("fma" in flags or "asimd" in flags) if flags else None
    cores = _physical_cores(Path(sysfs), usable)
    if cores and facts["cpus"]:
        facts["cores"] = cores
        # None where the usable CPUs take some cores' threads and not others' (a cpuset)
        if facts["cpus"] % cores == 0:
            facts["threads_per_core"] = facts["cpus"] // cores
    facts.update(_caches(Path(sysfs)))
    return facts


def cpu_description(facts: dict[str, Any] | None = None) -> str:
    """The CPU in a few words, e.g. ``"AMD EPYC, 2 CPUs = 2 cores x 1 thread, AVX2, FMA,
    L2 512 KiB a core, L3 32 MiB per 2 CPUs"``.

    Parameters
    ----------
    facts : dict, optional
        From :func:`cpu_facts` (default: this machine's).
    """
    f = cpu_facts() if facts is None else facts
    parts = [f.get("model") or "unknown CPU"]
    cpus, cores, tpc = f.get("cpus"), f.get("cores"), f.get("threads_per_core")
    if cpus and cores and tpc:
        parts.append(f"{cpus} CPUs = {cores} cores x {tpc} thread{'s' if tpc > 1 else ''}")
    elif cpus and cores:
        parts.append(f"{cpus} CPUs on {cores} cores")
    elif cpus:
        parts.append(f"{cpus} CPUs")
    if f.get("simd"):
        parts.append(f["simd"] + (", FMA" if f.get("fma") else ""))
    if f.get("l2_kib"):
        parts.append(f"L2 {f['l2_kib']:g} KiB a core")
    if f.get("l3_mib"):
        shared = f" per {f['l3_cpus']} CPUs" if f.get("l3_cpus") else ""
        parts.append(f"L3 {f['l3_mib']:g} MiB{shared}")
    return ", ".join(parts)


def usable_cpus() -> int:
    """The CPUs this process may run on (its CPU affinity, else the CPU count), at least 1.

    Examples
    --------
    >>> usable_cpus() >= 1
    True
    """
    usable = _usable_cpus()
    return len(usable) if usable else (os.cpu_count() or 1)


def _usable_cpus() -> set[int] | None:
    try:
        return set(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not Linux
        return None


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""


def _field(text: str, names: tuple[str, ...]) -> str | None:
    """The first value of any of ``names`` in ``/proc/cpuinfo``'s ``name : value`` lines."""
    for name in names:
        m = re.search(rf"^{re.escape(name)}\s*:\s*(.*)$", text, re.MULTILINE)
        if m and m.group(1).strip():
            return m.group(1).strip()
    return None


def _physical_cores(sysfs: Path, usable: set[int] | None) -> int | None:
    """Distinct (package, core) pairs among the usable CPUs."""
    seen = set()
    for cpu_dir in sysfs.glob("cpu[0-9]*"):
        n = int(cpu_dir.name[3:])
        if usable is not None and n not in usable:
            continue
        core = _read(cpu_dir / "topology" / "core_id").strip()
        package = _read(cpu_dir / "topology" / "physical_package_id").strip()
        if core:
            seen.add((package, core))
    return len(seen) or None


def _caches(sysfs: Path) -> dict[str, Any]:
    """cpu0's L1 data and L2 (KiB) and L3 (MiB) sizes and how many CPUs share its L3."""
    out: dict[str, Any] = {}
    for index in sorted((sysfs / "cpu0" / "cache").glob("index[0-9]*")):
        level = _read(index / "level").strip()
        kind = _read(index / "type").strip()
        size = _size_kib(_read(index / "size").strip())
        if size is None or kind not in ("Unified", "Data"):
            continue
        if level == "1" and kind == "Data":
            out["l1d_kib"] = size
        elif level == "2":
            out["l2_kib"] = size
        elif level == "3":
            out["l3_mib"] = size / 1024
            out["l3_cpus"] = _count_cpus(_read(index / "shared_cpu_list").strip())
    return out


def _size_kib(text: str) -> float | None:
    m = re.fullmatch(r"(\d+)\s*([KMG]?)B?", text, re.IGNORECASE)
    if not m:
        return None
    return int(m.group(1)) * {"": 1 / 1024, "K": 1, "M": 1024, "G": 1024**2}[m.group(2).upper()]


def _count_cpus(cpu_list: str) -> int | None:
    """CPUs in a list such as ``0-3,8-11``."""
    total = 0
    for part in filter(None, cpu_list.split(",")):
        first, _, last = part.partition("-")
        try:
            total += int(last or first) - int(first) + 1
        except ValueError:
            return None
    return total or None
