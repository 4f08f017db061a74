"""Time to accuracy and the input pipeline, through the fake backend in real worker processes,
plus the spec, plan, analysis and report around them (no framework is imported)."""

from __future__ import annotations

import numpy as np
import pytest

from dlbench.analysis.convergence import input_stalls, seed_pairs
from dlbench.cli.main import main
from dlbench.report import model
from dlbench.report.time_to_target import converge_table, curve_text, pair_notes
from dlbench.results.records import TrialResult
from dlbench.results.store import Store
from dlbench.runner import spawn
from dlbench.runner.plan import Sweep, make_plan
from dlbench import workloads
from dlbench.spec import ConvergeOptions, Policy, SpecError, TrialSpec, WorkloadSpec, to_dict
from dlbench.workloads.data import crop_flip, epoch_augment

pytestmark = pytest.mark.usefixtures("fake_env")

# Held-out split of 16: the fake is right on the first min(1, steps / LEARN_STEPS) of it.
WORKLOAD = WorkloadSpec(batch_size=8, dataset_size=128, eval_size=16)


def converge_trial(**kw: object) -> TrialSpec:
    fields: dict[str, object] = {"target_accuracy": 0.9, "eval_every": 4, "max_steps": 100, "chunk_steps": 4}
    fields.update(kw)
    t = TrialSpec(workload=WORKLOAD, framework="fake", policy=Policy(mode="eager"), scenario="converge",
                  trial_id=1, timeout_s=60.0, **fields)  # type: ignore[arg-type]
    t.validate()
    return t


def test_converge_reaches_the_target_with_evaluation_off_the_clock(tmp_path, monkeypatch):
    monkeypatch.setenv("FAKE_BEHAVIOUR", "learn")
    monkeypatch.setenv("FAKE_LEARN_STEPS", "20")
    monkeypatch.setenv("FAKE_PREDICT_S", "0.05")  # per predict call: 2 calls per evaluation
    r = spawn.run_trial(converge_trial(), tmp_path)
    assert r.status == "ok", r.error
    m = r.metrics
    assert m["reached_target"] == 1.0 and m["steps_to_target"] == 20.0 and m["steps"] == 20.0
    assert [s for s, _ in r.series["accuracy"]] == [4.0, 8.0, 12.0, 16.0, 20.0]
    assert [a for _, a in r.series["accuracy"]][-1] == m["accuracy"] == 1.0
    # evaluation is timed on its own and kept out of the time to target
    assert m["eval_s"] >= 5 * 2 * 0.05
    assert m["time_to_target_s"] == m["train_s"] < m["eval_s"]
    times = [t for t, _ in r.series["accuracy_by_time"]]
    assert times == sorted(times) and times[-1] == pytest.approx(m["time_to_target_s"])
    # the first step (its compile included) is on the clock
    assert 0 < m["first_step_s"] <= m["time_to_target_s"]
    assert len(r.series["loss"]) == 20
    phases = [e["name"] for e in r.events if e["event"] == "phase" and e["state"] == "end"]
    assert phases == ["import", "build", "data", "converge", "parity"]


def test_converge_stops_at_the_step_budget_with_the_reason(tmp_path, monkeypatch):
    monkeypatch.setenv("FAKE_BEHAVIOUR", "learn")
    monkeypatch.setenv("FAKE_LEARN_STEPS", "20")
    r = spawn.run_trial(converge_trial(target_accuracy=1.0, max_steps=10), tmp_path)
    assert r.status == "ok", r.error
    m = r.metrics
    assert m["reached_target"] == 0.0 and m["steps"] == 10.0
    assert m["steps_to_target"] is None and m["time_to_target_s"] is None
    assert "max steps 10" in r.notes["steps_to_target"]
    assert [s for s, _ in r.series["accuracy"]] == [4.0, 8.0, 10.0]


def test_converge_stops_at_the_time_budget(tmp_path, monkeypatch):
    monkeypatch.setenv("FAKE_STEP_S", "0.02")
    r = spawn.run_trial(converge_trial(max_time_s=0.2), tmp_path)  # the fake alone never learns
    assert r.status == "ok", r.error
    assert r.metrics["reached_target"] == 0.0
    assert 0.2 <= r.metrics["train_s"] < 2.0
    assert "max time 0.2 s" in r.notes["time_to_target_s"]


def test_train_trial_with_augmentation_and_device_data_reports_input_wait(tmp_path, monkeypatch):
    t = TrialSpec(workload=WorkloadSpec(batch_size=8, dataset_size=64, eval_size=16, augment="crop_flip"),
                  framework="fake", policy=Policy(mode="eager", data="device", loader_workers=2),
                  epochs=1, warmup_epochs=1, chunk_steps=4, trial_id=1, timeout_s=60.0)
    t.validate()
    r = spawn.run_trial(t, tmp_path)
    assert r.status == "ok", r.error
    assert 0 <= r.metrics["input_wait_per_step_s"] and 0 <= r.metrics["input_wait_share"] < 1


def test_augmentation_parameters_are_the_specs():
    spec = WorkloadSpec(batch_size=8, dataset_size=64, augment="crop_flip", seed=1)
    a, again, other = epoch_augment(spec, 0), epoch_augment(spec, 0), epoch_augment(spec, 1)
    assert a is not None and again is not None and other is not None
    assert a.offsets.shape == (8, 8, 2) and a.flips.shape == (8, 8)
    assert np.array_equal(a.offsets, again.offsets) and np.array_equal(a.flips, again.flips)
    assert not np.array_equal(a.offsets, other.offsets)
    assert a.offsets.min() >= 0 and a.offsets.max() <= 2 * a.pad
    assert epoch_augment(WorkloadSpec(), 0) is None


def test_crop_flip_definition():
    x = np.arange(2 * 32 * 32 * 3, dtype=np.float32).reshape(2, 32, 32, 3) + 1
    y = crop_flip(x, np.array([[4, 4], [0, 8]], np.int32), np.array([False, True]))
    assert np.array_equal(y[0], x[0])  # offset = pad, no flip: the image itself
    assert np.array_equal(y[1, 4:, 4:], x[1, :28, 4:][:, ::-1])  # shifted down 4, mirrored
    assert not y[1, :4].any() and not y[1, :, :4].any()  # the zero padding


@pytest.mark.parametrize("make,msg", [
    (lambda: Policy(loader_workers=-1), "loader workers must be an integer >= 0, got -1"),
    (lambda: Policy(data="host"), "data 'host' is not one of: pipeline, device"),
    (lambda: WorkloadSpec(name="mlp", model_size="tiny", augment="crop_flip"), "needs NHWC images"),
    (lambda: WorkloadSpec(augment="mixup"), "augment 'mixup' is not one of: none, crop_flip"),
    (lambda: TrialSpec(workload=WorkloadSpec(), framework="fake", scenario="converge"),
     "the converge scenario needs a target: --target-accuracy (a number in (0, 1])"),
    (lambda: TrialSpec(workload=WorkloadSpec(), framework="fake", scenario="converge", target_accuracy=1.5),
     "got 1.5"),
    (lambda: TrialSpec(workload=WorkloadSpec(), framework="fake", target_accuracy=0.9),
     "applies to the converge scenario only"),
    (lambda: TrialSpec(workload=WorkloadSpec(), framework="fake", eval_every=0), "eval every"),
])
def test_rejections_name_the_value(make, msg):
    with pytest.raises(SpecError) as e:
        made = make()
        # a workload's own checks (augmentation needs images) come from the workload registry
        workloads.validate(made) if isinstance(made, WorkloadSpec) else made.validate()
    assert msg in str(e.value)


def test_plan_gives_converge_settings_to_converge_trials_only():
    plan = make_plan(Sweep(workloads=("cnn",), frameworks=("fake",), modes=("eager",), repeats=1,
                           scenarios=("train", "converge"), data=("pipeline", "device"), loader_workers=1,
                           scenario_options=(ConvergeOptions(target_accuracy=0.8, eval_every=16),), preset="tiny",
                           augment="crop_flip"))
    specs = [t.spec for t in plan.trials]
    assert len(specs) == 4
    assert {(s.scenario, s.policy.data) for s in specs} == {(a, b) for a in ("train", "converge")
                                                           for b in ("pipeline", "device")}
    for s in specs:
        assert s.workload.augment == "crop_flip" and s.policy.loader_workers == 1
        assert s.target_accuracy == (0.8 if s.scenario == "converge" else None)
        assert s.eval_every == (16 if s.scenario == "converge" else TrialSpec.eval_every)


def _spec(framework: str, seed: int = 0, data: str = "pipeline") -> dict:
    t = TrialSpec(workload=WorkloadSpec(seed=seed), framework=framework, policy=Policy(data=data),
                  scenario="converge", target_accuracy=0.9, eval_every=32)
    return to_dict(t)


def test_seed_pairs_flag_more_than_k_apart():
    pairs = seed_pairs([(_spec("a"), 96.0), (_spec("b"), 128.0), (_spec("c"), 192.0), (_spec("d"), None),
                        (_spec("a", seed=1), 64.0), (_spec("b", seed=1), 64.0)])
    flagged = {(p.seed, p.framework_a, p.framework_b) for p in pairs if p.flagged}
    # one evaluation apart (32) is within resolution; 64 or 96 apart, or reached vs not, is not
    assert flagged == {(0, "a", "c"), (0, "b", "c"), (0, "a", "d"), (0, "b", "d"), (0, "c", "d")}
    assert len(pairs) == 6 + 1


def test_input_stall_share_pairs_pipeline_and_device():
    [stall] = input_stalls([(_spec("a", data="pipeline"), 750.0), (_spec("a", data="pipeline"), 800.0),
                            (_spec("a", data="device"), 1000.0), (_spec("b", data="pipeline"), 5.0)])
    assert stall.pipeline_samples_per_s == 775.0 and stall.share == pytest.approx(0.225)
    assert stall.per_step_s == pytest.approx(128 / 775 - 128 / 1000)


def test_curve_text_keeps_the_last_point():
    points = [(float(s), s / 1000) for s in range(32, 32 * 21, 32)]
    text = curve_text(points, ".0f")
    assert len(text.split()) == 8 and text.endswith("640:0.64") and text.startswith("32:0.03")


def test_report_compares_seed_pairs_across_frameworks(tmp_path):
    store = Store(tmp_path / "s.sqlite")
    run = store.create_run("test", {}, False)
    for seq, (framework, steps) in enumerate([("a", 96.0), ("b", 192.0)]):
        spec = TrialSpec(workload=WorkloadSpec(), framework=framework, scenario="converge",
                         target_accuracy=0.9, eval_every=32)
        tid = store.add_trial(run, seq, spec)
        result = TrialResult(status="ok", metrics={"reached_target": 1.0, "steps_to_target": steps,
                                                   "time_to_target_s": steps / 10, "eval_s": 1.0, "accuracy": 0.91})
        result.series["accuracy"] = [(32.0 * i, 0.3 * i) for i in range(1, int(steps) // 32 + 1)]
        store.finish_trial(tid, result)
    report = model.load(store, [run])
    table = converge_table(report)
    assert table is not None and len(table.rows) == 2
    assert any("a 96 steps vs b 192 steps (K = 32): more than K apart" in n for n in table.notes)
    assert pair_notes([t for _, t in report.trials()])[0].startswith("seed pairs: 1 compared")


def _seeded_converge_store(tmp_path, rows: list[tuple[str, str, int, float | None]]) -> tuple[Store, int]:
    """A store with converge trials (framework, mode, seed, steps or None: not reached) and one
    unsupported framework per seed, as `-f all` plans ONNX Runtime."""
    store = Store(tmp_path / "s.sqlite")
    run = store.create_run("test", {}, False)
    seq = 0
    for framework, mode, seed, steps in rows + [("ort", "compiled", s, None) for s in (0, 1)]:
        spec = TrialSpec(workload=WorkloadSpec(seed=seed), framework=framework, policy=Policy(mode=mode),
                         scenario="converge", target_accuracy=0.85, eval_every=32)
        tid = store.add_trial(run, seq, spec)
        seq += 1
        if framework == "ort":
            store.finish_trial(tid, TrialResult(status="unsupported", error="ort cannot train"))
            continue
        metrics = {"reached_target": float(steps is not None), "steps_to_target": steps, "accuracy": 0.9,
                   "time_to_target_s": None if steps is None else steps / 10, "eval_s": 1.0,
                   **({"compile_s": 3.5} if framework == "a" else {"compile_estimate_s": 0.25})}
        store.finish_trial(tid, TrialResult(status="ok", metrics=metrics))
    return store, run


def test_converge_table_marks_pairs_names_the_target_and_notes_unsupported_once(tmp_path):
    store, run = _seeded_converge_store(tmp_path, [("a", "compiled", 0, 64.0), ("b", "compiled", 0, 160.0),
                                                   ("a", "compiled", 1, 64.0), ("b", "compiled", 1, 96.0)])
    table = converge_table(model.load(store, [run]))
    assert table is not None and len(table.rows) == 4
    assert "time to accuracy 0.85" in table.title
    headers = [c.header for c in table.columns]
    assert "mode" not in headers and "target" not in headers  # one mode: no column
    steps = [c.text for c in table.column("steps to target")]
    assert steps == ["64 !", "160 !", "64", "96"]  # seed 0 is 96 apart (> K), seed 1 is 32 apart
    # the compile inside the time to target is shown, so it does not read as training speed
    assert [c.text for c in table.column("of which compile s")] == ["3.50", "0.25*", "3.50", "0.25*"]
    assert [n for n in table.notes if "ort" in n] == ["ort: unsupported: ort cannot train"]
    assert any(n.startswith("seed pairs: 2 compared") and "1 differ by more than K" in n for n in table.notes)


def test_converge_table_shows_the_mode_only_when_modes_differ(tmp_path):
    store, run = _seeded_converge_store(tmp_path, [("a", "compiled", 0, 64.0), ("a", "eager", 0, None)])
    table = converge_table(model.load(store, [run]))
    assert table is not None and [c.header for c in table.columns][3] == "mode"
    assert not any(n.startswith("!") for n in table.notes)  # different modes are different pairs


def test_cli_converge_and_pipeline_tables(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("FAKE_BEHAVIOUR", "learn")
    monkeypatch.setenv("FAKE_LEARN_STEPS", "8")
    store = str(tmp_path / "r.sqlite")
    tiny = ["-f", "fake", "--mode", "eager", "--preset", "tiny", "--dataset-size", "64", "--batch-size", "16",
            "--repeats", "1", "--store", store]
    assert main(["run", *tiny, "--scenario", "converge", "--target-accuracy", "0.9", "--eval-every", "4",
                 "--seed", "1"]) == 0
    out = capsys.readouterr().out
    assert "time to accuracy" in out and " 8:1.00" in out and "not counted" in out
    assert main(["run", *tiny, "--data", "pipeline,device", "--augment", "crop_flip"]) == 0
    out = capsys.readouterr().out
    assert "input pipeline" in out and "stall share" in out and "crop_flip" in out
    # the headline's labels tell the two placements apart; what does not vary is not shown
    axes = model.load(Store(store), [2]).label_axes
    assert "data" in axes and "augment" not in axes and "workers" not in axes
    assert main(["run", *tiny, "--scenario", "converge"]) == 2
    assert "needs a target: --target-accuracy" in capsys.readouterr().err
    pytest.importorskip("plotly")
    html = tmp_path / "r.html"
    assert main(["report", "all", "--store", store, "--html", str(html)]) == 0
    page = html.read_text()
    assert "id='chart-convergence'" in page and "id='chart-throughput'" in page
    assert "<h2>time to accuracy 0.9 (converge" in page and "8:1.00</td>" in page
    assert "<th>stall share</th>" in page and "<td>crop_flip</td>" in page
    assert "href='#table-converge'" in page and "href='#table-stall'" in page  # both in the navigation


def test_keras_style_wrapper_is_unwrapped():
    """TimedBatches counts pulls only where the loop pulls batches itself."""
    from dlbench.backends.base import TimedBatches

    timed = TimedBatches(iter([1, 2, 3]))
    assert [next(timed), next(timed)] == [1, 2] and timed.pulls == 2 and timed.wait_s >= 0
    assert next(timed.inner) == 3
