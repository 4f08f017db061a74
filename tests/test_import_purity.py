"""The core imports no framework: the parent process must stay light and neutral."""

from __future__ import annotations

import json
import subprocess
import sys

# ray too: the Ray executor imports it only when a sweep runs on Ray.
FRAMEWORK_MODULES = ("torch", "tensorflow", "jax", "jaxlib", "keras", "optax", "flax", "ray")


def test_core_and_cli_import_no_framework():
    code = (
        "import sys, json\n"
        "import dlbench, dlbench.cli.main, dlbench.runner.plan, dlbench.runner.spawn, "
        "dlbench.runner.executor, dlbench.runner.ray_executor, dlbench.results.environment,"
        " dlbench.report.terminal\n"
        "from dlbench.backends import get_backend, REGISTRY\n"
        "from dlbench.results.environment import capture\n"
        "for n in REGISTRY: b = get_backend(n); b.available(); b.modes(); b.distributions()\n"
        "from dlbench.backends import installed; capture(installed())\n"
        "from dlbench.cli.main import main\n"
        "main(['list'])\n"
        f"print(json.dumps([m for m in {FRAMEWORK_MODULES!r} if m in sys.modules]))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert json.loads(out.stdout.strip().splitlines()[-1]) == []


def test_only_a_ray_sweep_loads_the_ray_executor():
    """runner/executors.py imports the Ray executor when a sweep opens it, nowhere else: the
    commands, the rounds and the headroom search, and a local sweep's executor never load it."""
    code = (
        "import sys\n"
        "import dlbench.cli.main, dlbench.cli.suite, dlbench.runner.tune, dlbench.runner.rounds\n"
        "from dlbench.runner import executors\n"
        "with executors.opened('local') as run_trials: pass\n"
        "print('dlbench.runner.ray_executor' in sys.modules, run_trials.__module__)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "dlbench.runner.executor"]


# What only a child runs (the worker, the probe, the warm import, and the modules only they
# import): the parent reads what a child leaves through runner/protocol.py, never these.
CHILD_MODULES = ("dlbench.runner.worker", "dlbench.runner.probe", "dlbench.runner.warm", "dlbench.runner.child",
                 "dlbench.runner.context", "dlbench.runner.fixedbatch", "dlbench.runner.parallel",
                 "dlbench.runner.scenarios")


def test_the_parent_imports_no_module_of_the_child():
    code = (
        "import sys, json\n"
        "import dlbench.cli.main, dlbench.runner.executor, dlbench.runner.verdicts, dlbench.runner.executors\n"
        f"print(json.dumps([m for m in {CHILD_MODULES!r} if m in sys.modules]))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert json.loads(out.stdout) == []


def test_the_report_and_its_scenario_modules_load_without_plotly():
    """plotly is optional (dlbench[report]): each scenario's charts live in its report module
    beside its tables (report/scenarios.py registers them by name), and a chart function imports
    plotly (through report/plot.py) only when it is called; the terminal report never does."""
    code = (
        "import sys, json, importlib\n"
        "import dlbench.cli.main, dlbench.report.tables, dlbench.report.terminal, dlbench.report.tune\n"
        "from dlbench.report.scenarios import REPORTING\n"
        "charts = [getattr(importlib.import_module(m), f)"
        " for r in REPORTING.values() for m, _, f in (n.partition(':') for n in r.charts)]\n"
        "print(json.dumps([len(charts), [m for m in sys.modules if m.startswith(('plotly', 'dlbench.report.plot'))]]))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    count, loaded = json.loads(out.stdout)
    assert count >= 7 and loaded == []
