"""Time to accuracy and the input pipeline, through the fake backend in real worker processes,
plus the spec, plan, analysis and report around them (no framework is imported)."""

from __future__ import annotations

import numpy as np
import pytest

from dlbench.analysis.converge import input_stalls, seed_pairs
from dlbench.cli.main import main
from dlbench.report import model
from dlbench.report.converge import converge_table, curve_text, pair_notes
from dlbench.results.records import TrialResult
from dlbench.results.store import Store
from dlbench.runner import spawn
from dlbench.runner.plan import Sweep, make_plan, workload_spec
from dlbench import workloads
from dlbench.spec import ConvergeOptions, NoOptions, Policy, SpecError, TrialSpec, WorkloadSpec, to_dict
from dlbench.workloads.data import crop_flip, epoch_augment

pytestmark = pytest.mark.usefixtures("fake_env")

# Held-out split of 16: the fake is right on the first min(1, steps / LEARN_STEPS) of it.
WORKLOAD = WorkloadSpec(batch_size=8, dataset_size=128, eval_size=16)


def converge_trial(**options: object) -> TrialSpec:
    given: dict[str, object] = {"target_accuracy": 0.9, "eval_every": 4, "max_steps": 100, **options}
    t = TrialSpec(workload=WORKLOAD, framework="fake", policy=Policy(mode="eager"), scenario="converge",
                  chunk_steps=4, trial_id=1, timeout_s=60.0, options=ConvergeOptions(**given))  # type: ignore[arg-type]
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
    (lambda: TrialSpec(workload=WorkloadSpec(), framework="fake", scenario="converge",
                       options=ConvergeOptions(target_accuracy=1.5)),
     "got 1.5"),
    (lambda: TrialSpec(workload=WorkloadSpec(), framework="fake", options=ConvergeOptions(target_accuracy=0.9)),
     "applies to the converge scenario only"),
    (lambda: TrialSpec(workload=WorkloadSpec(), framework="fake", options=ConvergeOptions(eval_every=0)), "eval every"),
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
        assert s.options == (ConvergeOptions(target_accuracy=0.8, eval_every=16) if s.scenario == "converge"
                             else NoOptions())


def _spec(framework: str, seed: int = 0, data: str = "pipeline") -> dict:
    t = TrialSpec(workload=WorkloadSpec(seed=seed), framework=framework, policy=Policy(data=data),
                  scenario="converge",
                  options=ConvergeOptions(target_accuracy=0.9, eval_every=32))
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
                         options=ConvergeOptions(target_accuracy=0.9, eval_every=32))
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
                         scenario="converge",
                         options=ConvergeOptions(target_accuracy=0.85, eval_every=32))
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


# --- the perplexity target (lm): a stop rule whose metric is lower-is-better ----------------

LM = WorkloadSpec(name="lm", model_size="tiny", batch_size=8, dataset_size=64, eval_size=16,
                  numerics=workloads.get("lm").NUMERICS)


def _fake_lm_perplexity(step: int, learn_steps: int) -> float:
    """The held-out perplexity of the fake's lm after `step` steps (fake_backend.learned_lm_logits),
    computed here with lm's own extra_scores."""
    from dlbench.workloads import lm

    data = lm.make_eval_dataset(LM)
    chain = lm.chain(LM)
    dense = np.zeros((64, 64))
    np.put_along_axis(dense, chain.successors, chain.probs, axis=1)
    a = min(1.0, step / learn_steps)
    with np.errstate(divide="ignore"):
        logits = np.log((1 - a) / 64 + a * dense[data.x]).astype(np.float32)
    return lm.extra_scores(LM, logits, data)["eval_perplexity"]


def test_target_directions():
    from dlbench.workloads.base import Target

    perplexity, accuracy = Target("eval_perplexity", 3.0, lower=True), Target("accuracy", 0.9)
    assert perplexity.reached(2.9) and perplexity.reached(3.0) and not perplexity.reached(3.1)
    assert accuracy.reached(0.95) and accuracy.reached(0.9) and not accuracy.reached(0.85)
    assert not perplexity.reached(float("nan")) and not accuracy.reached(float("nan"))
    assert perplexity.describe() == "eval_perplexity <= 3" and accuracy.describe() == "accuracy >= 0.9"


def test_lm_stops_when_its_perplexity_falls_to_the_target(tmp_path, monkeypatch):
    monkeypatch.setenv("FAKE_BEHAVIOUR", "learn")
    monkeypatch.setenv("FAKE_LEARN_STEPS", "20")
    expected = {s: _fake_lm_perplexity(s, 20) for s in (4, 8, 12)}
    target = (expected[8] + expected[12]) / 2
    assert expected[4] > target and expected[8] > target > expected[12]  # falls through it between 8 and 12
    trial = TrialSpec(workload=LM, framework="fake", policy=Policy(mode="eager"), scenario="converge",
                      options=ConvergeOptions(target_perplexity=target, eval_every=4, max_steps=40), chunk_steps=4,
                      trial_id=1, timeout_s=60.0)
    trial.validate()
    r = spawn.run_trial(trial, tmp_path)
    assert r.status == "ok", r.error
    m = r.metrics
    assert m["reached_target"] == 1.0 and m["steps_to_target"] == 12.0 and m["steps"] == 12.0
    assert m["eval_perplexity"] == pytest.approx(expected[12], rel=1e-5)
    assert m["perplexity_ratio"] == pytest.approx(expected[12] / np.exp(workloads.get("lm").entropy_rate_nats(LM)),
                                                  rel=1e-5)
    got = dict(r.series["eval_perplexity"])
    assert got == pytest.approx({float(s): v for s, v in expected.items()}, rel=1e-5)
    assert [s for s, _ in r.series["eval_perplexity_by_time"]] == sorted(t for t, _ in r.series["accuracy_by_time"])
    assert [s for s, _ in r.series["accuracy"]] == [4.0, 8.0, 12.0]  # the quality is still recorded


def test_lm_perplexity_target_below_reach_stops_at_the_budget_naming_the_metric(tmp_path, monkeypatch):
    monkeypatch.setenv("FAKE_BEHAVIOUR", "learn")
    monkeypatch.setenv("FAKE_LEARN_STEPS", "8")
    trial = TrialSpec(workload=LM, framework="fake", policy=Policy(mode="eager"), scenario="converge",
                      options=ConvergeOptions(target_perplexity=1.01, eval_every=4, max_steps=12), chunk_steps=4,
                      trial_id=1, timeout_s=60.0)
    r = spawn.run_trial(trial, tmp_path)
    assert r.status == "ok", r.error
    assert r.metrics["reached_target"] == 0.0 and r.metrics["steps_to_target"] is None
    assert "not reached within max steps 12 (last eval_perplexity" in r.notes["steps_to_target"]
    assert "target <= 1.01)" in r.notes["steps_to_target"]


def test_an_lm_converge_run_is_charted_by_its_perplexity_not_its_accuracy(tmp_path, monkeypatch):
    """lm's default target is a perplexity: its curves chart that (log axis, the target dashed),
    and the accuracy chart, whose target it has not, leaves it out."""
    pytest.importorskip("plotly")
    from dlbench.report import converge

    monkeypatch.setenv("FAKE_BEHAVIOUR", "learn")
    monkeypatch.setenv("FAKE_LEARN_STEPS", "20")
    target = (_fake_lm_perplexity(8, 20) + _fake_lm_perplexity(12, 20)) / 2
    store = str(tmp_path / "lm.sqlite")
    assert main(["run", "-w", "lm", "-f", "fake", "--mode", "eager", "--preset", "tiny", "--dataset-size", "64",
                 "--batch-size", "8", "--repeats", "1", "--scenario", "converge", "--target-perplexity", str(target),
                 "--eval-every", "4", "--max-steps", "40", "--chunk-steps", "4", "--store", store]) == 0
    report = model.load(Store(store), [1])
    assert converge.convergence(report) is None
    chart = converge.convergence_perplexity(report)
    assert chart is not None and chart.id == "convergence-perplexity"
    [(_, trial)] = list(report.trials())
    by_step, by_time = (trace for trace in chart.figure["data"])
    assert list(by_step["y"]) == [v for _, v in trial.series["eval_perplexity"]]
    assert list(by_time["y"]) == [v for _, v in trial.series["eval_perplexity_by_time"]]
    assert list(by_step["y"])[-1] <= target < list(by_step["y"])[0]
    layout = chart.figure["layout"]
    assert layout["yaxis"]["type"] == "log" and layout["shapes"]
    assert all(shape["y0"] == pytest.approx(target) for shape in layout["shapes"])  # the target, in each subplot
    html = tmp_path / "lm.html"
    assert main(["report", "all", "--store", store, "--html", str(html)]) == 0
    page = html.read_text()
    assert "id='chart-convergence-perplexity'" in page and "id='chart-convergence'" not in page


def test_plan_gives_lm_its_default_perplexity_target_per_seed():
    from dlbench.workloads import lm

    plan = make_plan(Sweep(workloads=("lm",), frameworks=("fake",), modes=("eager",), repeats=1,
                           scenarios=("converge", "train"), seeds=(0, 1), preset="tiny"))
    got = {(t.spec.scenario, t.spec.workload.seed): t.spec for t in plan.trials}
    for seed in (0, 1):
        spec = got[("converge", seed)]
        best = np.exp(lm.entropy_rate_nats(spec.workload))
        target = spec.options_of(ConvergeOptions)
        assert target.target_perplexity == pytest.approx(1.1 * best, rel=1e-3) and target.target_accuracy is None
        assert workloads.target(spec).rule == lm.TARGET_RULE  # the default's rule, found again from the value
        assert got[("train", seed)].options == NoOptions()
    assert got[("converge", 0)].options != got[("converge", 1)].options  # each seed's chain
    # an accuracy target given stops lm on next-token accuracy instead
    plan = make_plan(Sweep(workloads=("lm",), frameworks=("fake",), modes=("eager",), repeats=1,
                           scenarios=("converge",), preset="tiny",
                           scenario_options=(ConvergeOptions(target_accuracy=0.5),)))
    [trial] = [t.spec for t in plan.trials]
    assert trial.options == ConvergeOptions(target_accuracy=0.5)
    assert workloads.target(trial).metric == "next_token_accuracy" and not workloads.target(trial).lower


@pytest.mark.parametrize("fields,msg", [
    ({"target_perplexity": 1.0}, "target perplexity must be a finite number > 1 (a perplexity is at least 1)"),
    ({"target_perplexity": 0.5}, "got 0.5"),
    ({"target_perplexity": float("nan")}, "got nan"),
    ({"target_perplexity": float("inf")}, "got inf"),
    ({"target_perplexity": True}, "got True"),
    ({"target_perplexity": 3.0, "target_accuracy": 0.9}, "are two targets: allowed is one of them"),
    ({"target_perplexity": 3.0, "scenario": "train"}, "target perplexity 3.0 applies to the converge scenario only"),
])
def test_bad_perplexity_targets_are_one_line(fields, msg):
    options = ConvergeOptions(**{k: v for k, v in fields.items() if k != "scenario"})  # type: ignore[arg-type]
    with pytest.raises(SpecError) as e:
        TrialSpec(workload=LM, framework="fake", scenario=fields.get("scenario", "converge"),  # type: ignore[arg-type]
                  options=options).validate()
    assert msg in str(e.value) and "\n" not in str(e.value)


def test_a_perplexity_target_for_a_workload_without_perplexity_is_refused():
    from dlbench.backends import support

    trial = TrialSpec(workload=WORKLOAD, framework="fake", scenario="converge",
                      options=ConvergeOptions(target_perplexity=3.0))
    with pytest.raises(SpecError) as e:
        support.validate(trial)
    assert str(e.value) == ("target perplexity 3.0 does not fit cnn: it reports no perplexity (workloads that do:"
                            " lm); allowed for cnn is --target-accuracy")


@pytest.mark.parametrize("argv,msg", [
    (["--target-perplexity", "0.9"], "target perplexity must be a finite number > 1"),
    (["--target-perplexity", "3", "--target-accuracy", "0.5"], "are two targets"),
    (["--target-perplexity", "x"], "--target-perplexity: 'x' is not a number in ASCII digits"),
])
def test_cli_bad_perplexity_target_is_one_line_exit_2(tmp_path, capsys, argv, msg):
    assert main(["run", "-w", "lm", "-f", "fake", "--mode", "eager", "--preset", "tiny", "--scenario", "converge",
                 "--repeats", "1", "--store", str(tmp_path / "s.sqlite"), *argv]) == 2
    err = capsys.readouterr().err
    assert msg in err and err.count("\n") == 1, err


def test_cli_lm_stops_at_its_default_perplexity_target_and_the_table_says_so(tmp_path, capsys, monkeypatch):
    from dlbench.workloads import lm

    monkeypatch.setenv("FAKE_BEHAVIOUR", "learn")
    monkeypatch.setenv("FAKE_LEARN_STEPS", "8")
    store = str(tmp_path / "r.sqlite")
    assert main(["run", "-w", "lm", "-f", "fake", "--mode", "eager", "--preset", "cpu-target", "--scenario", "converge",
                 "--eval-every", "4", "--max-steps", "24", "--seed", "0,1", "--repeats", "1", "--store", store]) == 0
    out = capsys.readouterr().out
    report = model.load(Store(store), [1])
    table = converge_table(report)
    assert table is not None and len(table.rows) == 2
    targets = [float(f"{lm.perplexity_target(workload_spec('lm', 'cpu-target', seed)):.4g}") for seed in (0, 1)]
    assert table.title.startswith(f"time to held-out perplexity <= {min(targets):.4g}, {max(targets):.4g} (converge")
    headers = [c.header for c in table.columns]
    assert "target" in headers and "held-out perplexity by step" in headers  # seeds differ in their target
    assert [c.text for c in table.column("target")] == [f"<= {t:.4g}" for t in targets]
    assert [c.text for c in table.column("reached")] == ["1/1", "1/1"]
    assert any(n.startswith("lm's default target (none given): 1.1 x exp(entropy rate") for n in table.notes)
    for trial in (t for _, t in report.trials()):
        assert trial.metrics["eval_perplexity"] <= trial.spec["target_perplexity"]
    assert "perplexity" in out
