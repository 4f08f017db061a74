"""The gap ledger (analysis/gaps.py, docs/gaps.md) and the findings that point a measured pair to
its row: the match rule, the finding's text, the report of a synthetic store (no worker), and
the ledger's rows against the document's."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from dlbench.analysis import findings, gaps
from dlbench.analysis.gaps import LEDGER, Side
from dlbench.cli.main import main
from dlbench.results.records import TrialResult
from dlbench.results.store import Store
from dlbench.runner.plan import workload_spec
from dlbench.spec import Policy, TrialSpec

DOC = Path(__file__).resolve().parents[1] / gaps.LEDGER_DOC


def _row(anchor: str) -> gaps.Gap:
    return next(g for g in LEDGER if g.anchor == anchor)


def test_match_needs_workload_size_scenario_frameworks_and_the_range():
    lm = _row("lm-train-jax")
    args = ("lm", "small", "train", ("jax", "compiled"), ("torch", "compiled"))
    assert gaps.match(LEDGER, *args, 0.35) == lm
    assert gaps.match(LEDGER, *args, 0.9) is None  # no gap of 1.5x
    assert gaps.match(LEDGER, *args, 0.01) is None  # below the row's range: something else
    assert gaps.match(LEDGER, "lm", "tiny", "train", ("jax", "compiled"), ("torch", "compiled"), 0.35) is None
    assert gaps.match(LEDGER, "lm", "small", "generate", ("jax", "compiled"), ("torch", "compiled"), 0.35) is None
    assert gaps.match(LEDGER, "lm", "small", "train", ("torch", "compiled"), ("jax", "compiled"), 0.35) is None
    assert gaps.match(LEDGER, "lm", "small", "train", ("keras-jax", "compiled"), ("tensorflow", "compiled"), 0.5) == lm


def test_a_side_with_a_mode_holds_for_that_mode_only():
    row = _row("published-torch-compiled")
    assert row.slow.holds("torch", "compiled") and not row.slow.holds("torch", "eager")
    assert gaps.match(LEDGER, "vit", "b16", "train", ("torch", "compiled"), ("torch", "eager"), 0.94) == row
    assert gaps.match(LEDGER, "vit", "b16", "train", ("torch", "eager"), ("torch", "compiled"), 0.94) is None
    assert Side(("jax",)).holds("jax", "eager")


def test_gap_finding_names_the_row_once_against_the_fastest():
    def side(name: str, speed: float, spread: float = 0.02) -> findings.Measured:  # its median's interval
        return findings.Measured(name, name, "compiled", speed, speed * (1 - spread), speed * (1 + spread))

    measured = [side("jax", 4.5), side("torch", 12.8), side("tensorflow", 8.5)]
    [made] = findings.gap_findings("lm", "small", "train", measured, LEDGER)
    assert made.rule == "ledgered gap" and made.subject == "jax"
    assert "0.35x the speed of torch" in made.text and "docs/gaps.md#lm-train-jax" in made.text
    assert _row("lm-train-jax").status in made.text
    # TensorFlow at 0.66x torch is no ledgered gap (no row has TensorFlow slower on lm)
    assert findings.gap_findings("lm", "small", "train", measured[1:], LEDGER) == []
    zero = findings.Measured("x", "x", "eager", 0.0)  # a speed of 0 compares with nothing
    assert findings.gap_findings("lm", "small", "train", [*measured[:2], zero], LEDGER)
    # a side of one process (no interval) is not tested, and a ratio whose interval reaches past the
    # row's range (0.15-0.67) is not shown to be the gap
    assert findings.gap_findings("lm", "small", "train", [findings.Measured("jax", "jax", "compiled", 4.5),
                                                          measured[1]], LEDGER) == []
    assert findings.gap_findings("lm", "small", "train", [side("jax", 8.0, 0.1), measured[1]], LEDGER) == []


def _store(path: Path, speeds: dict[tuple[str, str], float], workload: str = "lm", preset: str = "cpu",
           scenario: str = "train") -> None:
    """Three repeats of each (framework, mode): samples/s for training; for generation `speed` is
    the time per output token in seconds."""
    store = Store(path)
    run = store.create_run("dlbench run", {}, False)
    seq = 0
    # generation: the time per output token, and the headline the gap rule compares (tokens/s)
    def measured(speed: float) -> dict[str, float | None]:
        return {"samples_per_s": speed} if scenario == "train" else {"tpot_p50_s": speed, "output_tokens_per_s": 1 / speed}
    for repeat in range(3):
        for (framework, mode), speed in speeds.items():
            spec = TrialSpec(workload=workload_spec(workload, preset), framework=framework,
                             policy=Policy(mode=mode), repeat=repeat, scenario=scenario)
            result = TrialResult(status="ok", metrics=measured(speed * (1 + 0.01 * repeat)))
            store.finish_trial(store.add_trial(run, seq, spec), result)
            seq += 1
    store.close()


def test_report_points_a_ledgered_pair_to_its_row(tmp_path, capsys):
    path = tmp_path / "s.sqlite"
    _store(path, {("jax", "compiled"): 4.5, ("torch", "compiled"): 12.8})
    assert main(["report", "--store", str(path)]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "ledgered gap" in out and "docs/gaps.md#lm-train-jax" in out


def test_report_points_a_slow_decoder_by_its_time_per_token(tmp_path, capsys):
    path = tmp_path / "s.sqlite"
    _store(path, {("keras-torch", "eager"): 0.026, ("torch", "compiled"): 0.0027}, scenario="generate")
    assert main(["report", "--store", str(path)]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "docs/gaps.md#lm-generate-keras-torch" in out and "0.10x the speed of torch" in out


def test_report_of_a_pair_outside_every_row_has_no_gap_finding(tmp_path, capsys):
    path = tmp_path / "s.sqlite"
    _store(path, {("jax", "compiled"): 11.0, ("torch", "compiled"): 12.8})
    assert main(["report", "--store", str(path)]) == 0
    assert "ledgered gap" not in capsys.readouterr().out


def _doc_rows() -> dict[str, str]:
    """Anchor -> the ledger table's row in docs/gaps.md (its first cell links the anchor)."""
    rows = {}
    for line in DOC.read_text().splitlines():
        m = re.match(r"\|\s*\[[^\]]+\]\(#([\w-]+)\)", line)
        if m:
            rows[m.group(1)] = line
    return rows


def test_every_ledger_row_is_in_the_document_with_its_status():
    rows = _doc_rows()
    for gap in LEDGER:
        assert gap.anchor in rows, f"{gap.anchor}: no row in {gaps.LEDGER_DOC}"
        assert gap.status in rows[gap.anchor], f"{gap.anchor}: the document's status differs from {gap.status!r}"
        assert f'<a id="{gap.anchor}"></a>' in DOC.read_text(), f"{gap.anchor}: no section in {gaps.LEDGER_DOC}"
        assert 0 < gap.low < gap.high <= 1.0


@pytest.mark.parametrize("status", sorted({g.status for g in LEDGER}))
def test_statuses_are_the_documented_ones(status):
    assert status in gaps.STATUSES


# --- the variants the ledger's rows name (backends/jax/settings.py) -------------------------------


def test_jax_xla_flags_keep_the_environments_and_add_what_the_trial_asks(monkeypatch):
    from dlbench.backends.jax import settings

    monkeypatch.setenv("XLA_FLAGS", "--xla_dump_to=/tmp/x")
    on = Policy(options={"multi_output_fusion": "on"})
    assert settings.xla_flags(Policy()) is None  # nothing added: the environment's stays as it is
    assert settings.xla_flags(on) == f"--xla_dump_to=/tmp/x {settings.MULTI_OUTPUT_FUSION_FLAG}"
    both = settings.xla_flags(on, host_devices=2)
    assert both is not None and both.split() == ["--xla_dump_to=/tmp/x", f"{settings.HOST_DEVICES_FLAG}=2",
                                                 settings.MULTI_OUTPUT_FUSION_FLAG]
    monkeypatch.delenv("XLA_FLAGS")
    assert settings.xla_flags(on) == settings.MULTI_OUTPUT_FUSION_FLAG


def test_the_data_parallel_flags_keep_the_fusion_option(monkeypatch):
    from dlbench.backends import get_backend
    from dlbench.backends.jax import settings

    monkeypatch.delenv("XLA_FLAGS", raising=False)
    trial = TrialSpec(workload=workload_spec("mlp", "tiny"), framework="jax", devices=2,
                      policy=Policy(options={"multi_output_fusion": "on"}))
    backend = get_backend("jax")
    merged = {**backend.environment(trial.policy, "/tmp/c"), **backend.data_parallel.environment(trial)}
    assert settings.MULTI_OUTPUT_FUSION_FLAG in merged["XLA_FLAGS"] and "count=2" in merged["XLA_FLAGS"]


def test_blocked_causal_attention_is_the_formula():
    jnp = pytest.importorskip("jax.numpy")
    import numpy as np

    from dlbench.backends.jax import lm

    rng = np.random.default_rng(0)
    q, k, v = (jnp.asarray(rng.normal(size=(2, 19, 3, 8)).astype(np.float32)) for _ in range(3))
    want = lm.causal_formula(q, k, v, 0.35)
    for blocks in (1, 4, 7):  # 19 positions: blocks of 19, 5 and 3, the last one shorter
        np.testing.assert_allclose(lm.blocked_causal(q, k, v, 0.35, blocks), want, rtol=2e-5, atol=2e-6)
    np.testing.assert_allclose(lm.fused_causal(q, k, v, 0.35), want, rtol=2e-5, atol=2e-6)


def test_why_prints_the_findings_alone_and_says_so_when_there_are_none(tmp_path, capsys):
    """`dlbench why`: the findings table alone, a ledgered pair pointing to its row; a run with
    nothing to say says so in one line, exit 0."""
    path = tmp_path / "s.sqlite"
    _store(path, {("jax", "compiled"): 4.5, ("torch", "compiled"): 12.8})
    assert main(["why", "--store", str(path)]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "ledgered gap" in out and "docs/gaps.md#lm-train-jax" in out and "samples/s" not in out.split("Findings")[0]
    quiet = tmp_path / "q.sqlite"
    _store(quiet, {("jax", "compiled"): 11.0, ("torch", "compiled"): 12.8})
    assert main(["why", "--store", str(quiet)]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("no findings for run(s) 1")
