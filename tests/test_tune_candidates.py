"""A tune run's candidates keep their identity (issue 48.3): a candidate's options (and mode)
are part of its configuration in `history`, `compare` and the dashboard exports, never pooled
with the default's trials, never named like the default. Synthetic stores (no worker process):
run 1 a plain eager run; runs 2 and 3 tune-like runs holding, per repeat, the default, two option
candidates (one 640x slower) and the compiled mode."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from dlbench.cli.main import main
from dlbench.results.records import TrialResult
from dlbench.results.store import Store
from dlbench.runner.plan import workload_spec
from dlbench.spec import Policy, TrialSpec

DEFAULT_SPEED = 1000.0
CANDIDATES = {  # (mode, options) -> samples/s
    ("eager", ()): DEFAULT_SPEED,
    ("eager", (("flavour", "spicy"),)): DEFAULT_SPEED / 640,
    ("eager", (("kernels", "sloppy"),)): DEFAULT_SPEED * 1.3,
    ("compiled", ()): DEFAULT_SPEED * 2,
}


def _add(store: Store, rid: int, seq: int, mode: str, options: tuple[tuple[str, str], ...], repeat: int,
         speed: float) -> None:
    spec = TrialSpec(workload=workload_spec("mlp", "tiny"), framework="fake",
                     policy=Policy(mode=mode, options=dict(options)), repeat=repeat)
    tid = store.add_trial(rid, seq, spec)
    store.finish_trial(tid, TrialResult(status="ok", metrics={"samples_per_s": speed * (1 + 0.001 * repeat),
                                                              "train_s": 1.0},
                                        parity={"verdict": "fail" if options == (("kernels", "sloppy"),) else "pass"}))


@pytest.fixture
def store(tmp_path: Path) -> Path:
    path = tmp_path / "t.sqlite"
    with Store(path) as s:
        env = {"python": "3.11", "cpu_model": "x", "hostname": "box"}
        plain = s.create_run("dlbench run -w mlp -f fake --mode eager", env, False)
        for repeat in range(4):
            _add(s, plain, repeat, "eager", (), repeat, DEFAULT_SPEED)
        for _ in range(2):
            rid = s.create_run("dlbench tune -w mlp -f fake --mode eager", env, False)
            seq = 0
            for repeat in range(4):
                for (mode, options), speed in CANDIDATES.items():
                    _add(s, rid, seq, mode, options, repeat, speed)
                    seq += 1
    return path


def test_history_follows_each_candidate_apart_and_the_default_with_the_plain_runs(store, capsys):
    assert main(["history", "--store", str(store)]) == 0
    out = capsys.readouterr().out
    titles = re.findall(r"^history: samples_per_s of (.+)$", out, re.M)
    assert titles == ["mlp/fake/eager b32 s0", "mlp/fake/eager b32 s0 fake.flavour=spicy",
                      "mlp/fake/eager b32 s0 fake.kernels=sloppy", "mlp/fake/compiled b32 s0"], out
    default = out.split("history: samples_per_s of mlp/fake/eager b32 s0\n")[1].split("history:")[0]
    # three runs of the default, 4 trials each: never the 16 trials of a run's every candidate
    rows = [line.split() for line in default.splitlines() if re.match(r"\s+\d+\s+\d{4}-", line)]
    assert [(row[0], row[-2]) for row in rows] == [("1", "4"), ("2", "4"), ("3", "4")], default  # (run, n)


def test_compare_pairs_the_default_with_the_default_and_each_candidate_with_itself(store, capsys):
    code = main(["compare", "2", "3", "--metric", "train_s", "--format", "markdown", "--store", str(store)])
    out = capsys.readouterr().out
    assert code in (0, 4), out  # no policy difference to force: every candidate pairs with itself
    labels = re.findall(r"^\| (mlp/fake/\S+ b32 s0(?: fake\.\S+)?) \|", out, re.M)
    assert sorted(set(labels)) == ["mlp/fake/compiled b32 s0", "mlp/fake/eager b32 s0",
                                   "mlp/fake/eager b32 s0 fake.flavour=spicy", "mlp/fake/eager b32 s0 fake.kernels=sloppy"]
    # a plain run against a tune run: the default pairs with the plain trials, the candidates are NEW's alone
    code = main(["compare", "1", "2", "--format", "markdown", "--store", str(store)])
    out = capsys.readouterr().out
    assert code in (0, 4), out
    assert set(re.findall(r"^\| (mlp/fake/\S+ b32 s0(?: fake\.\S+)?) \|", out, re.M)) == {"mlp/fake/eager b32 s0"}
    (only,) = [line for line in out.splitlines() if "only in NEW" in line]
    assert "mlp/fake/eager b32 s0 fake.flavour=spicy" in only and "mlp/fake/compiled b32 s0" in only, only


def test_a_run_over_two_modes_compares_with_itself_mode_by_mode(store, capsys):
    """Pairing without the policy pooled a run's modes; against itself it was a policy difference."""
    assert main(["compare", "3", "3", "--format", "markdown", "--store", str(store)]) in (0, 4)
    out = capsys.readouterr().out
    assert "policy differs" not in out and "| mlp/fake/compiled b32 s0 |" in out


@pytest.mark.parametrize("fmt", ["github-action-benchmark", "bencher"])
def test_dashboard_exports_name_each_candidate_by_its_options(store, tmp_path, fmt, capsys):
    out = tmp_path / "d.json"
    assert main(["export", "2", "--format", fmt, "-o", str(out), "--store", str(store)]) == 0
    doc = json.loads(out.read_text())
    names = [e["name"].removesuffix(" samples_per_s") for e in doc] if isinstance(doc, list) else list(doc)
    assert sorted(names) == ["mlp/fake/compiled b32 s0", "mlp/fake/eager b32 s0",
                             "mlp/fake/eager b32 s0 fake.flavour=spicy", "mlp/fake/eager b32 s0 fake.kernels=sloppy"]
    value = {n: (e["value"] if isinstance(doc, list) else doc[n]["samples-per-s"]["value"])
             for n, e in zip(names, doc if isinstance(doc, list) else doc.values(), strict=True)}
    assert value["mlp/fake/eager b32 s0"] == pytest.approx(DEFAULT_SPEED, rel=0.01)
    assert value["mlp/fake/eager b32 s0 fake.flavour=spicy"] == pytest.approx(DEFAULT_SPEED / 640, rel=0.01)
