"""MFU against the peak table, the measured CPU matmul ceiling, and their place in a trial."""

from __future__ import annotations

import json

import pytest

from dlbench.analysis import efficiency
from dlbench.cli.main import main
from dlbench.runner import ceiling


def test_mfu_uses_the_exact_device_and_precision():
    value, why = efficiency.mfu(67e12 / 2, ["NVIDIA H100 80GB HBM3"], "fp32")
    assert value == pytest.approx(0.5) and why == ""
    value, why = efficiency.mfu(1e12, ["NVIDIA H100 80GB HBM3", "NVIDIA H100 80GB HBM3"], "bf16")
    assert value == pytest.approx(1e12 / (2 * 989.4e12))
    value, why = efficiency.mfu(1e12, ["Some Future GPU"], "fp32")
    assert value is None and "no dense peak on record for 'Some Future GPU'" in why
    value, why = efficiency.mfu(1e12, [], "fp32")
    assert value is None and "matmul_ceiling_share" in why
    for device, table in efficiency.PEAKS.items():
        for precision, peak in table.items():
            assert peak.source.startswith("https://"), (device, precision)


def test_ceiling_is_measured_once_and_cached():
    first, why = ceiling.ceiling(1)
    assert first is not None, why
    assert first["threads"] == 1 and first["flops_per_s"] > 1e8 and first["library"]
    again, _ = ceiling.ceiling(1, measure_if_missing=False)
    assert again == first


def _fake_measurements(monkeypatch, rates, loads):
    """ceiling's child measurement and load average replaced: each call takes the next rate and
    the load average reads the next load (a machine that gets busy or quiet)."""
    rates, loads = iter(rates), list(loads)
    made = []

    def measure(threads):
        load = loads[0]
        data = {"flops_per_s": next(rates), "threads": threads, "size": 2048, "dtype": "float32",
                "library": "fake-blas", "numpy": "x", "cpu_model": ceiling._cpu_model(), "measured_at": 0.0,
                "load_1min": load, "busy": ceiling.busy(load, 2)}
        made.append(data)
        return data, ""

    monkeypatch.setattr(ceiling, "_measure_in_child", measure)
    monkeypatch.setattr(ceiling, "load_1min", lambda: loads[0])
    monkeypatch.setattr(ceiling, "busy", lambda load, cpus=None: load > ceiling.QUIET_LOAD_PER_CPU * 2)
    return made, loads


def test_a_ceiling_measured_on_a_busy_machine_is_measured_again_when_quieter(monkeypatch, tmp_path):
    monkeypatch.setenv("DLBENCH_CACHE_DIR", str(tmp_path / "cache"))
    made, loads = _fake_measurements(monkeypatch, [40e9, 330e9, 300e9], [12.0])
    first, _ = ceiling.ceiling(3)
    assert first["flops_per_s"] == 40e9 and first["busy"]
    assert "busy machine" in ceiling.describe(first)
    # less busy but still busy: the cached one stands, nothing measured
    loads[0] = 4.0
    assert ceiling.ceiling(3)[0]["flops_per_s"] == 40e9 and len(made) == 1
    assert not ceiling.needs_measuring(3)
    loads[0] = 0.3  # quiet now: measured again, the higher kept, and final from then on
    assert ceiling.needs_measuring(3)
    quiet, _ = ceiling.ceiling(3)
    assert quiet["flops_per_s"] == 330e9 and not quiet["busy"] and len(made) == 2
    assert "busy" not in ceiling.describe(quiet)
    assert ceiling.ceiling(3)[0]["flops_per_s"] == 330e9 and len(made) == 2


def test_a_lower_quiet_measurement_never_lowers_the_ceiling(monkeypatch, tmp_path):
    monkeypatch.setenv("DLBENCH_CACHE_DIR", str(tmp_path / "cache"))
    made, loads = _fake_measurements(monkeypatch, [200e9, 150e9], [5.0])
    assert ceiling.ceiling(3)[0]["flops_per_s"] == 200e9
    loads[0] = 0.2
    kept, _ = ceiling.ceiling(3)
    assert len(made) == 2 and kept["flops_per_s"] == 200e9
    # the quieter load is recorded, so the ceiling is final now
    assert kept["load_1min"] == 0.2 and not kept["busy"] and not ceiling.needs_measuring(3)


@pytest.mark.usefixtures("fake_env")
def test_trial_reports_its_share_of_the_ceiling(tmp_path, capsys):
    store = str(tmp_path / "r.sqlite")
    args = ["run", "-f", "fake", "--mode", "eager", "--preset", "tiny", "--repeats", "1", "--threads", "1"]
    assert main([*args, "--store", store]) == 0
    assert "of matmul ceiling" in capsys.readouterr().out
    out = tmp_path / "e.json"
    assert main(["export", "latest", "--store", store, "-o", str(out)]) == 0
    [t] = json.loads(out.read_text())["runs"][0]["trials"]
    m = {k: v["value"] for k, v in t["metrics"].items()}
    assert m["matmul_ceiling_share"] == pytest.approx(m["achieved_flops_per_s"] / m["matmul_ceiling_flops_per_s"])
    assert m["mfu"] is None and "no accelerator" in t["notes"]["mfu"]
