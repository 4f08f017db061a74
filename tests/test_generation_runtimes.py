"""Generation on the deployment runtimes and int8 decoding (issue 46): ONNX Runtime's exported
decode-with-past graph and LiteRT's converted cache-in, cache-out models pass generation parity
on the tiny lm, judged here as the parent judges a trial (runner/verdicts.py); int8 rows (torch
eager, ONNX Runtime, LiteRT) carry their agreement and logit error under the int8 bound; a
framework without int8 is unsupported with its reason; int8 outside generation is one line and
exit 2. One process per framework (tests/generation_runtime_check.py)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from dlbench.analysis import generate
from dlbench.backends import get_backend
from dlbench.results.records import TrialResult
from dlbench.runner.plan import Sweep, make_plan, workload_spec
from dlbench.runner.verdicts import judge_parity
from dlbench.spec import TrialSpec
from dlbench.workloads import lm

HERE = Path(__file__).resolve().parent
CHECK = HERE / "generation_runtime_check.py"
# framework -> its cases, one process each: PRECISION@MODE, optionally with one framework option
CASES = {
    "onnxruntime": ("fp32@compiled", "fp32@compiled:generate_io=run", "int8@compiled"),
    "litert": ("fp32@compiled", "int8@compiled"),
    "torch": ("int8@eager", "int8@compiled"),
}
_runs: dict[str, Path] = {}


def run_framework(name: str, root: Path) -> Path:
    ok, reason = get_backend(name).available()
    if not ok:
        pytest.skip(reason)
    if name not in _runs:
        out = root / name
        out.mkdir()
        proc = subprocess.run([sys.executable, str(CHECK), name, str(out), *CASES[name]], capture_output=True,
                              text=True, timeout=900)
        assert proc.returncode == 0, proc.stderr[-3000:]
        _runs[name] = out
    return _runs[name]


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("generation-runtimes")


def judged(name: str, out: Path, case: str) -> tuple[TrialResult, dict[str, object]]:
    """The case's generation judged as the parent judges a trial; and its decoder's facts."""
    facts = json.loads((out / f"{case}.json").read_text())
    precision = case.partition("@")[0]
    trial = TrialSpec(workload=workload_spec("lm", "tiny"), framework=name, scenario="generate", precision=precision)
    result = TrialResult(status="ok")
    judge_parity(trial, result, out / f"{case}.npz", _refs(trial))
    return result, facts


def _refs(trial: TrialSpec) -> dict[str, object]:
    """The generate judge reads no fixed-batch reference (the NumPy decoder is the definition);
    judge_parity only needs one under the trial's key."""
    from dlbench.runner import reference

    return {reference.key(trial.workload, 0): object()}


@pytest.mark.parametrize("name", ["onnxruntime", "litert"])
def test_runtime_generation_passes_parity_in_float32(name: str, root: Path) -> None:
    out = run_framework(name, root)
    for case in [c for c in CASES[name] if c.startswith("fp32")]:
        result, facts = judged(name, out, case)
        assert result.parity["verdict"] == "pass", (case, result.parity)
        assert result.parity["tolerance"]["logits_rel_err"] == generate.LOGITS_RTOL
        assert result.metrics["parity_rel_err"] < 1e-5, case
        assert result.metrics["gen_token_agreement"] == 1.0 and result.metrics["gen_forced_agreement"] == 1.0
        assert facts["same_ids_twice"] and facts["cache_bytes"] > 0, facts


def test_onnxruntime_generation_is_one_exported_graph_with_or_without_io_binding(root: Path) -> None:
    out = run_framework("onnxruntime", root)
    cases = ("fp32@compiled", "fp32@compiled:generate_io=run")
    bound, plain = (json.loads((out / f"{c}.json").read_text()) for c in cases)
    assert "IO binding" in bound["how"] and "session.run" in plain["how"], (bound["how"], plain["how"])
    assert bound["compilations"] == 0  # dynamic axes: a new prompt length never re-exports
    exports = [e for e in bound["info"]["onnx_exports"] if e.get("graph") == "past-present"]
    assert exports and all(e["torch_logits_rel_err"] < 1e-5 for e in exports), exports
    ids = [np.load(out / f"{c}.npz")["gen/ids"] for c in cases]
    assert np.array_equal(*ids)


def test_litert_converts_one_prefill_per_prompt_length_and_one_step(root: Path) -> None:
    facts = json.loads((run_framework("litert", root) / "fp32@compiled.json").read_text())
    assert facts["compilations"] == 2, facts  # the decode step, then the prompt length's prefill


@pytest.mark.parametrize("name", ["onnxruntime", "litert", "torch"])
def test_int8_rows_carry_agreement_and_logit_error_under_the_int8_bound(name: str, root: Path) -> None:
    case = next(c for c in CASES[name] if c.startswith("int8"))
    result, facts = judged(name, run_framework(name, root), case)
    m = result.metrics
    assert result.parity["verdict"] == "pass", result.parity
    assert result.parity["tolerance"]["logits_rel_err"] == generate.INT8_LOGITS_RTOL
    # quantised: off the float32 bound, within the int8 one
    assert generate.LOGITS_RTOL < m["parity_rel_err"] <= generate.INT8_LOGITS_RTOL, m
    assert 0.0 <= m["gen_token_agreement"] <= 1.0 and 0.5 <= m["gen_forced_agreement"] <= 1.0, m
    assert 0.0 <= m["gen_ambiguous_share"] <= 1.0
    assert "int8" in str(facts["how"]), facts


def test_torch_int8_in_compiled_mode_is_unsupported_with_the_reason(root: Path) -> None:
    facts = json.loads((run_framework("torch", root) / "int8@compiled.json").read_text())
    assert "eager mode only" in str(facts["unsupported"]) and "torchao" in str(facts["unsupported"])


def test_the_int8_bound_passes_int8_sized_error_and_float32_does_not() -> None:
    """The judge picks the bound by precision: the reference's own logits with 2 % of noise
    pass as int8 and fail as float32."""
    spec = workload_spec("lm", "tiny")
    params = lm.init_params(spec)
    prompt = lm.fixed_batch(spec, 2).x[:, :5]
    free_ids, free_logits = lm.reference_generate(spec, params, prompt, 6)
    rng = np.random.default_rng(0)
    noisy = free_logits + 0.02 * np.abs(free_logits).mean() * rng.standard_normal(free_logits.shape)
    args = (free_ids, noisy, free_logits, free_ids, free_logits)
    assert generate.judge_generation(*args, generate.logits_bound("int8")).ok
    verdict = generate.judge_generation(*args, generate.logits_bound("fp32"))
    assert not verdict.ok and "over the bound" in verdict.reason
    agree = generate.agreement(*args, generate.INT8_LOGITS_RTOL)
    assert agree["gen_token_agreement"] == 1.0 and 0 <= agree["gen_forced_agreement"] <= 1.0


@pytest.mark.parametrize("framework,reason", [
    ("jax", "JAX has no int8 quantisation of its own"),
    ("tensorflow", "--framework litert --precision int8"),
    ("keras-jax", "Model.quantize('int8')"),
])
def test_a_framework_without_int8_is_unsupported_with_its_reason(framework: str, reason: str) -> None:
    if not get_backend(framework).available()[0]:
        pytest.skip(f"{framework} is not installed")
    plan = make_plan(Sweep(workloads=("lm",), frameworks=(framework,), modes=("compiled",), repeats=1,
                           preset="tiny", scenarios=("generate",), precisions=("fp32", "int8")))
    by = {t.spec.precision: t for t in plan.trials}
    assert by["fp32"].status == "pending"
    assert by["int8"].status == "unsupported" and reason in str(by["int8"].reason), by["int8"].reason


@pytest.mark.parametrize("scenario", ["train", "infer"])
def test_int8_outside_generation_is_one_line_and_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                       scenario: str) -> None:
    from dlbench.cli.main import main

    code = main(["run", "-w", "lm", "-f", "torch", "--scenario", scenario, "--precision", "int8", "--preset", "tiny",
                 "--repeats", "1", "--allow-concurrent", "--store", str(tmp_path / "s.sqlite")])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1, err
    assert "--scenario generate only" in err and "fp32, tf32, bf16, fp16" in err, err


def test_dlbench_list_shows_which_frameworks_decode_in_int8(capsys: pytest.CaptureFixture[str]) -> None:
    from dlbench.cli.main import main

    assert main(["list", "--json"]) == 0
    rows = {r["framework"]: r for r in json.loads(capsys.readouterr().out)["frameworks"]}
    for name in ("torch", "onnxruntime", "litert"):
        assert rows[name]["precisions"]["cpu"]["int8"] is None, (name, rows[name]["precisions"]["cpu"])
    for name in ("jax", "tensorflow"):
        assert rows[name]["precisions"]["cpu"]["int8"], name
    assert rows["torch"]["precisions"]["cpu"]["fp32"] is None
