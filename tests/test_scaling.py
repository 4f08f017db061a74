"""Data-parallel scaling: two devices in torch (DDP ranks over gloo), jax (a sharded batch over
two host devices) and tensorflow (MirroredStrategy over two logical CPUs) on a tiny cnn, with
parity and the same losses as one device on the same global batch; scaling_efficiency from
paired fake-backend trials; bad values as one-line errors."""

from __future__ import annotations

import numpy as np
import pytest

from dlbench.backends import get_backend
from dlbench.cli.main import main
from dlbench.results.store import Store

# The cheapest mode of each framework here: torch.compile would cost ~15 s per rank.
MODES = {"torch": "eager", "jax": "compiled", "tensorflow": "graph"}
TINY = ["-w", "cnn", "--preset", "tiny", "--dataset-size", "64", "--epochs", "1", "--warmup-epochs", "0",
        "--repeats", "1"]


def _trials(store_path: str) -> list:
    with Store(store_path) as store:
        return store.trials(store.resolve_runs("latest")[0])


@pytest.mark.parametrize("framework", list(MODES))
def test_two_devices_train_with_parity(tmp_path, capsys, framework):
    """~20-30 s each here: one two-device trial (weak scaling, 8 rows per device) in the
    framework's cheapest mode."""
    _two_devices(tmp_path, capsys, [framework], MODES[framework])


@pytest.mark.slow
def test_two_devices_train_with_parity_compiled(tmp_path, capsys):
    """~8 min on a loaded 2-core machine (torch.compile in both DDP ranks, XLA per replica)."""
    _two_devices(tmp_path, capsys, list(MODES), "compiled")


def _two_devices(tmp_path, capsys, frameworks: list[str], mode: str) -> None:
    frameworks = [f for f in frameworks if get_backend(f).available()[0]]
    if not frameworks:
        pytest.skip("no framework with data parallelism is installed")
    store = str(tmp_path / "s.sqlite")
    code = main(["run", "-f", ",".join(frameworks), "--mode", mode, *TINY, "-b", "8",
                 "--devices", "2", "--store", store])
    out = capsys.readouterr().out
    assert code == 0, out[-3000:]
    ran = _trials(store)
    assert sorted(t.spec["framework"] for t in ran) == sorted(frameworks)
    for t in ran:
        assert t.status == "ok", (t.spec["framework"], t.error)
        assert t.data["parity"]["verdict"] == "pass", t.data["parity"]
        assert t.data["policy"]["data_parallel"]["global_batch"] == 16
        assert t.data["notes"]["scaling_kind"].startswith("functional (CPU, 2 devices share")
        assert t.metrics["scaling_efficiency"] is None  # no one-device trial in this sweep
        comm = t.metrics["grad_comm_s_per_step"]
        assert comm > 0 if t.spec["framework"] == "torch" else comm is None


@pytest.mark.slow
@pytest.mark.parametrize("framework", list(MODES))
def test_two_devices_match_one_device_on_the_same_global_batch(tmp_path, capsys, framework):
    """~50-70 s each here: two trials, strong scaling (global batch 16 on 1 and on 2 devices)."""
    if not get_backend(framework).available()[0]:
        pytest.skip(f"{framework} is not installed")
    store = str(tmp_path / "s.sqlite")
    code = main(["run", "-f", framework, "--mode", MODES[framework], *TINY, "-b", "16",
                 "--devices", "1,2", "--scaling", "strong", "--store", store])
    out = capsys.readouterr().out
    assert code == 0, out[-3000:]
    one, two = sorted(_trials(store), key=lambda t: t.spec["devices"])
    assert two.status == "ok", two.error
    assert two.data["parity"]["verdict"] == "pass", two.data["parity"]
    dp = two.data["policy"]["data_parallel"]
    assert dp["devices"] == 2 and dp["per_device_batch"] == 8 and dp["global_batch"] == 16
    assert two.data["notes"]["scaling_kind"].startswith("functional (CPU, 2 devices share")
    assert two.metrics["scaling_efficiency"] == pytest.approx(
        two.metrics["samples_per_s"] / (2 * one.metrics["samples_per_s"]))
    # Same canonical weights, same global batches in the same order: the same losses.
    with Store(store) as s:
        losses = [np.array([v for _, v in s.series(t.id)["loss"]]) for t in (one, two)]
    np.testing.assert_allclose(losses[1], losses[0], rtol=1e-4)
    assert "data-parallel scaling" in out and "functional (CPU, 2 devices share" in out


@pytest.mark.usefixtures("fake_env")
def test_scaling_efficiency_pairs_each_trial_with_its_one_device_repeat(tmp_path, capsys):
    """~17 s: four fake trials, weak scaling (strong pairs are checked with the real frameworks)."""
    store = str(tmp_path / "s.sqlite")
    code = main(["run", "-f", "fake", "--mode", "eager", *TINY[:-2], "--repeats", "2", "-b", "16",
                 "--devices", "1,2", "--store", store])
    assert code == 0, capsys.readouterr().out[-3000:]
    trials = _trials(store)
    singles = {t.spec["repeat"]: t.metrics["samples_per_s"] for t in trials if t.spec["devices"] == 1}
    doubles = [t for t in trials if t.spec["devices"] == 2]
    assert {t.spec["devices"]: t.spec["workload"]["batch_size"] for t in trials} == {1: 16, 2: 32}
    for t in doubles:
        expected = t.metrics["samples_per_s"] / (2 * singles[t.spec["repeat"]])
        assert t.metrics["scaling_efficiency"] == pytest.approx(expected)
        assert t.data["notes"]["scaling_efficiency"] == f"against the one-device trial of repeat {t.spec['repeat']}"
        assert t.metrics["grad_comm_s_per_step"] is None and "not measurable" in t.data["notes"]["grad_comm_s_per_step"]
    # The HTML report shows the efficiency beside its label.
    assert main(["report", "--store", store, "--html", str(tmp_path / "r.html")]) == 0
    page = (tmp_path / "r.html").read_text()
    assert "Data-parallel scaling" in page and "functional (CPU, 2 devices share" in page


@pytest.mark.usefixtures("fake_env")
def test_without_a_one_device_trial_the_efficiency_is_null_with_the_reason(tmp_path, capsys):
    """~6 s: one fake trial."""
    store = str(tmp_path / "s.sqlite")
    assert main(["run", "-f", "fake", "--mode", "eager", *TINY, "--devices", "2", "--store", store]) == 0
    [t] = _trials(store)
    assert t.metrics["scaling_efficiency"] is None
    assert "add 1 to --devices" in t.data["notes"]["scaling_efficiency"]
    assert "1 (baseline)" not in capsys.readouterr().out


@pytest.mark.parametrize("argv, message", [
    (["--devices", "0"], "devices must be an integer >= 1, got 0"),
    (["--devices", "3"], "devices 3 must divide the parity batch of 8 (equal shards per device); allowed are divisors of both 96 and 8"),
    (["--scaling", "diagonal"], "scaling 'diagonal' is not one of: weak, strong"),
])
def test_bad_scaling_values_are_one_line_errors(tmp_path, capsys, argv, message):
    code = main(["run", "-f", "torch", "--preset", "tiny", *argv, "--store", str(tmp_path / "s.sqlite")])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and message in err, err


def test_keras_and_batchnorm_workloads_are_unsupported_on_several_devices(tmp_path, capsys):
    if not get_backend("keras-jax").available()[0]:
        pytest.skip("keras is not installed")
    store = str(tmp_path / "s.sqlite")
    main(["run", "-f", "keras-jax", "-w", "cnn,resnet", "--preset", "tiny", "--devices", "2",
          "--repeats", "1", "--store", store])
    reasons = {t.spec["workload"]["name"]: (t.status, t.error) for t in _trials(store)}
    assert reasons["cnn"][0] == "unsupported" and "Keras backends train on one device" in reasons["cnn"][1]
    assert reasons["resnet"][0] == "unsupported" and "BatchNorm" in reasons["resnet"][1]


def test_every_backend_says_whether_it_trains_on_several_devices_without_importing_it():
    """Parent side, instant: data as the plan sees it."""
    from dlbench.backends import REGISTRY
    from dlbench.backends.support import data_parallel_unsupported
    from dlbench.spec import TrialSpec, WorkloadSpec

    for name in REGISTRY:
        dp = get_backend(name).data_parallel
        one = TrialSpec(workload=WorkloadSpec(), framework=name)
        two = TrialSpec(workload=WorkloadSpec(), framework=name, devices=2)
        assert data_parallel_unsupported(dp, one) is None
        reason = data_parallel_unsupported(dp, two)
        assert (reason is None) == (name in MODES), (name, reason)
    resnet = TrialSpec(workload=WorkloadSpec(name="resnet", model_size="tiny"), framework="torch", devices=2)
    assert "BatchNorm" in str(data_parallel_unsupported(get_backend("torch").data_parallel, resnet))
