"""``h5mdx._machine`` says what the CPU is: model, cores x threads, vector unit, caches."""

from __future__ import annotations

import os

import pytest

from h5mdx import _machine

INTEL = """processor	: 0
vendor_id	: GenuineIntel
model name	: Intel(R) Xeon(R) Platinum 8480+
flags		: fpu sse4_2 avx avx2 fma avx512f avx512bw

processor	: 1
model name	: Intel(R) Xeon(R) Platinum 8480+
flags		: fpu sse4_2 avx avx2 fma avx512f avx512bw
"""

ARM = """processor	: 0
BogoMIPS	: 2000.00
Features	: fp asimd evtstrm aes sve sve2
CPU implementer	: 0x41
"""


def _sysfs(root, cores_of_cpus, l2="2048K", l3="107520K", l3_shared="0-7"):
    """A /sys/devices/system/cpu tree: CPU n on core ``cores_of_cpus[n]``, package 0."""
    for n, core in enumerate(cores_of_cpus):
        topo = root / f"cpu{n}" / "topology"
        topo.mkdir(parents=True)
        (topo / "core_id").write_text(f"{core}\n")
        (topo / "physical_package_id").write_text("0\n")
    cache = root / "cpu0" / "cache"
    for i, (level, kind, size, shared) in enumerate(
            (("1", "Data", "48K", "0,4"), ("1", "Instruction", "32K", "0,4"),
             ("2", "Unified", l2, "0,4"), ("3", "Unified", l3, l3_shared))):
        d = cache / f"index{i}"
        d.mkdir(parents=True)
        for name, value in (("level", level), ("type", kind), ("size", size),
                            ("shared_cpu_list", shared)):
            (d / name).write_text(value + "\n")
    return root


def test_hardware_threads_are_told_apart_from_cores(tmp_path, monkeypatch):
    proc = tmp_path / "cpuinfo"
    proc.write_text(INTEL)
    sysfs = _sysfs(tmp_path / "cpu", [0, 1, 2, 3, 0, 1, 2, 3])  # 4 cores x 2 threads
    monkeypatch.setattr(_machine, "_usable_cpus", lambda: set(range(8)))
    facts = _machine.cpu_facts(proc, sysfs)
    assert facts == {"model": "Intel(R) Xeon(R) Platinum 8480+", "cpus": 8, "cores": 4,
                     "threads_per_core": 2, "simd": "AVX-512", "fma": True, "l1d_kib": 48,
                     "l2_kib": 2048, "l3_mib": 105.0, "l3_cpus": 8}
    assert _machine.cpu_description(facts) == (
        "Intel(R) Xeon(R) Platinum 8480+, 8 CPUs = 4 cores x 2 threads, AVX-512, FMA, "
        "L2 2048 KiB a core, L3 105 MiB per 8 CPUs")


def test_only_the_cpus_this_process_may_use_count(tmp_path, monkeypatch):
    """A container limited to CPUs 0-1 of 4 cores x 2 threads: 2 cores, 1 thread each."""
    proc = tmp_path / "cpuinfo"
    proc.write_text(INTEL)
    sysfs = _sysfs(tmp_path / "cpu", [0, 1, 2, 3, 0, 1, 2, 3])
    monkeypatch.setattr(_machine, "_usable_cpus", lambda: {0, 1})
    facts = _machine.cpu_facts(proc, sysfs)
    assert (facts["cpus"], facts["cores"], facts["threads_per_core"]) == (2, 2, 1)
    # both threads of core 0 and one of core 1: no one count of threads per core
    monkeypatch.setattr(_machine, "_usable_cpus", lambda: {0, 1, 4})
    facts = _machine.cpu_facts(proc, sysfs)
    assert (facts["cpus"], facts["cores"], facts["threads_per_core"]) == (3, 2, None)
    assert ", 3 CPUs on 2 cores," in _machine.cpu_description(facts)


def test_arm_features_and_missing_files(tmp_path, monkeypatch):
    proc = tmp_path / "cpuinfo"
    proc.write_text(ARM)
    monkeypatch.setattr(_machine, "_usable_cpus", lambda: {0, 1, 2, 3})
    facts = _machine.cpu_facts(proc, tmp_path / "no-sysfs")
    assert facts["simd"] == "SVE2" and facts["fma"] is True and facts["cpus"] == 4
    assert facts["cores"] is None and facts["l3_mib"] is None
    assert ", 4 CPUs, SVE2, FMA" in _machine.cpu_description(facts)
    # nothing readable at all: what platform knows, and a description all the same
    bare = _machine.cpu_facts(tmp_path / "none", tmp_path / "none")
    assert bare["simd"] is None and bare["fma"] is None and bare["cpus"] == 4
    assert _machine.cpu_description(bare).endswith("4 CPUs")


def test_sizes_and_cpu_lists():
    assert _machine._size_kib("32768K") == 32768
    assert _machine._size_kib("1M") == 1024
    assert _machine._size_kib("512") == 0.5
    assert _machine._size_kib("big") is None
    assert _machine._count_cpus("0-3,8-11") == 8
    assert _machine._count_cpus("5") == 1
    assert _machine._count_cpus("x-y") is None


@pytest.mark.skipif(not os.path.exists("/proc/cpuinfo"), reason="Linux only")
def test_this_machine():
    facts = _machine.cpu_facts()
    assert facts["cpus"] == len(os.sched_getaffinity(0))
    assert facts["cores"] is not None and 1 <= facts["cores"] <= facts["cpus"]
    if facts["threads_per_core"] is not None:  # None: a cpuset takes some cores' threads
        assert facts["cores"] * facts["threads_per_core"] == facts["cpus"]
    assert facts["model"] and facts["model"] in _machine.cpu_description()


def test_usable_cpus_are_the_affinity_else_the_cpu_count(monkeypatch):
    monkeypatch.setattr(_machine, "_usable_cpus", lambda: {0, 1, 4})
    assert _machine.usable_cpus() == 3
    monkeypatch.setattr(_machine, "_usable_cpus", lambda: None)  # not Linux
    monkeypatch.setattr(_machine.os, "cpu_count", lambda: None)
    assert _machine.usable_cpus() == 1
