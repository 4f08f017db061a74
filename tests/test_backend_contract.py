"""The Backend/Program contract over every registered framework, one worker-like process per
framework (tests/contract_check.py); skipped with a reason where a framework is missing.

Equivalence is asserted, not assumed: numerics read back from the framework objects, the first
batch bit-identical, the loss equal to a float64 NumPy reference, and gradients and the
parameters after K Adam steps equal across frameworks within float32 tolerances."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from dlbench import workloads
from dlbench.backends import REGISTRY, get_backend
from dlbench.workloads.base import numerics_readback
from dlbench.workloads.data import batch_indices, epoch_order

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from contract_check import SPEC, batch_digest  # noqa: E402

# The training contract: inference-only backends (onnxruntime) have tests/test_infer_frameworks.py.
FRAMEWORKS = [n for n in REGISTRY if "train" in get_backend(n).capabilities.provides]
# float32 everywhere: losses agree to ~1e-6 relative; gradients (normwise) to ~1e-5.
LOSS_RTOL = 1e-5
GRAD_RTOL = 1e-4
# Adam normalises each coordinate, so tiny gradient differences move updates more.
UPDATE_RTOL = 1e-3


def normwise_rel_err(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.linalg.norm(a - b) / max(np.linalg.norm(b), 1e-30))


@pytest.fixture(scope="session")
def contract_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("contract")


_cache: dict[str, dict[str, Any]] = {}


def facts(name: str, out_dir: Path) -> dict[str, Any]:
    ok, reason = get_backend(name).available()
    if not ok:
        pytest.skip(reason)
    if name not in _cache:
        proc = subprocess.run([sys.executable, str(HERE / "contract_check.py"), name, str(out_dir)],
                              capture_output=True, text=True, timeout=900)
        assert proc.returncode == 0, proc.stderr[-3000:]
        _cache[name] = json.loads((out_dir / f"{name}.json").read_text())
    return _cache[name]


def modes_of(name: str, out_dir: Path) -> dict[str, Any]:
    return facts(name, out_dir)["modes"]


@pytest.mark.parametrize("name", FRAMEWORKS)
def test_compiled_mode_is_supported_and_checked(name, contract_dir):
    assert "compiled" in modes_of(name, contract_dir) or get_backend(name).modes()["compiled"]


@pytest.mark.parametrize("name", FRAMEWORKS)
def test_numerics_read_back_match_the_spec(name, contract_dir):
    # Each backend reads back the fields its cnn uses (workloads.cnn.NUMERICS_FIELDS).
    expected = numerics_readback(SPEC.numerics, workloads.get(SPEC.name).NUMERICS_FIELDS)
    for mode, f in modes_of(name, contract_dir).items():
        got = f["numerics"]
        assert set(got) == set(expected), mode
        for k, v in expected.items():
            if isinstance(v, float):
                assert got[k] == pytest.approx(v, rel=1e-6), (mode, k)
            else:
                assert got[k] == v, (mode, k)


@pytest.mark.parametrize("name", FRAMEWORKS)
def test_first_batch_is_the_spec_batch(name, contract_dir):
    wl = workloads.get(SPEC.name)
    data = wl.make_dataset(SPEC)
    rows = batch_indices(epoch_order(SPEC.seed, 0, SPEC.dataset_size), SPEC.batch_size)
    expected = batch_digest(data.x[rows[0]], data.y[rows[0]])
    for mode, f in modes_of(name, contract_dir).items():
        assert f["first_batch_digest"] == expected, mode


@pytest.mark.parametrize("name", FRAMEWORKS)
def test_loss_matches_the_float64_reference(name, contract_dir):
    for mode, f in modes_of(name, contract_dir).items():
        assert f["loss"] == pytest.approx(f["reference_loss"], rel=LOSS_RTOL), mode


@pytest.mark.parametrize("name", FRAMEWORKS)
def test_training_steps_are_finite_and_compile_once(name, contract_dir):
    for mode, f in modes_of(name, contract_dir).items():
        assert all(np.isfinite(f["losses"])), mode
        assert all(b < a for a, b in zip(f["losses"], f["losses"][1:])), (mode, f["losses"])
        first, later = f["compilations"][0], f["compilations"][-1]
        assert later == first, f"{mode}: recompiled after the first chunk ({first} -> {later})"
        if mode == "eager":
            assert first == 0
        else:
            assert first >= 1, mode
        assert f["reset_max_abs_diff"] == 0.0, f"{mode}: init() does not reset the state"
        assert f["logits_shape"] == [8, SPEC.num_classes]


@pytest.mark.parametrize("name", FRAMEWORKS)
def test_loss_series_holds_what_was_measured_where_it_was_measured(name, contract_dir):
    """Issue 38: Keras's fit reports one mean per chunk, and every Keras trial stored that mean
    for each step of its chunk (mlp: 2.22134 eight times), drawn as a flat "not learning" curve.
    The stored series holds per-step losses at their steps, or one chunk mean at the chunk's
    last step, never a mean repeated over steps; its wall-clock twin has the same points."""
    for mode, f in modes_of(name, contract_dir).items():
        series = f["loss_series"]
        xs = [x for x, _ in series["by_step"]]
        ys = [y for _, y in series["by_step"]]
        if series["chunk_means"]:
            assert xs == [1.0, 3.0], (mode, xs)  # the last step of each 2-step chunk
            assert [t for t, _ in series["by_time"]] == [1.0, 2.0], mode  # each chunk's end
        else:
            assert xs == [0.0, 1.0, 2.0, 3.0], (mode, xs)
            assert [t for t, _ in series["by_time"]] == [0.5, 1.0, 1.5, 2.0], mode
        assert ys == [y for _, y in series["by_time"]] and len(set(ys)) == len(ys), (mode, ys)


@pytest.mark.parametrize("name", FRAMEWORKS)
def test_gradient_shapes_are_canonical(name, contract_dir):
    shapes = workloads.get(SPEC.name).param_shapes(SPEC)
    for mode, f in modes_of(name, contract_dir).items():
        assert f["grad_shapes"] == {k: list(v) for k, v in shapes.items()}, mode


def _arrays(out_dir: Path) -> dict[str, dict[str, np.ndarray]]:
    found = {}
    for p in sorted(out_dir.glob("*.npz")):
        with np.load(p) as z:
            found[p.stem] = {k: z[k] for k in z.files}
    return found


def test_gradients_and_trained_parameters_agree_across_frameworks(contract_dir):
    for name in FRAMEWORKS:
        if get_backend(name).available()[0]:
            facts(name, contract_dir)
    arrays = _arrays(contract_dir)
    if len(arrays) < 2:
        pytest.skip("fewer than two framework/mode pairs installed")
    init = workloads.get(SPEC.name).init_params(SPEC)
    base_name, base = next(iter(arrays.items()))
    for other_name, other in arrays.items():
        for key, value in other.items():
            if key.startswith("grad/"):
                err = normwise_rel_err(value, base[key])
                tol = GRAD_RTOL
            else:  # compare the K-step update, not the parameters (dominated by the init)
                p0 = init[key.split("/", 1)[1]]
                err = normwise_rel_err(value - p0, base[key] - p0)
                tol = UPDATE_RTOL
            assert err < tol, f"{other_name} vs {base_name}: {key} differs by {err:.2e}"
