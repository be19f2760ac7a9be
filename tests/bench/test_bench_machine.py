"""Every benchmark's results record what the CPU is, and its report says so."""

from __future__ import annotations

from h5mdx import _machine


def test_results_record_the_cpu_and_reports_name_it(bench_scale):
    m = bench_scale.machine()
    assert m["cpu"] == _machine.cpu_facts()
    text = bench_scale.cores_text(m)
    assert text.startswith(f"{m['cores']} cores (") and m["cpu"]["model"] in text
    # results from before the CPU was recorded read as they did
    assert bench_scale.cores_text({"cores": 16}) == "16 cores"


def test_a_report_of_the_fused_read_names_the_cpu(bench_fused):
    summary = bench_fused.summary({"floor": [1.0], "on": [0.5], "off": [1.0]}, 300)
    results = {**bench_fused.machine(), "frames": 300, "workers": 2, "repeats": 1,
               "partial": False, "layouts": {"c1": {"ca": {"threads": summary}}}}
    assert f"{results['cores']} cores ({_machine.cpu_description()})" in \
        bench_fused.render(results)
