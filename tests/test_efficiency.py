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
