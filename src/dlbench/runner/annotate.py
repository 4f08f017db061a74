"""The parent's half of data parallelism: after a sweep (or a resumed one), each successful
multi-device trial's scaling efficiency against its paired one-device trials, written to the
store. (The worker's half is runner/parallel.py.)"""

from __future__ import annotations

from dlbench.analysis import scaling
from dlbench.results.store import Store
from dlbench.spec import trial_from_dict


def annotate_run(store: Store, run_id: int) -> int:
    """Parent, after a sweep (or a resumed one): scaling_efficiency of every successful
    multi-device trial of the run against its paired one-device trials. Returns how many
    trials got a value."""
    rows = store.trials(run_id)
    specs = {row.id: trial_from_dict(row.spec) for row in rows}
    singles: dict[str, dict[int, float]] = {}
    for row in rows:
        thr = row.metrics.get("samples_per_s")
        if row.status == "ok" and specs[row.id].devices == 1 and thr:
            singles.setdefault(specs[row.id].config_key(), {})[specs[row.id].repeat] = thr
    done = 0
    for row in rows:
        spec = specs[row.id]
        thr = row.metrics.get("samples_per_s")
        if row.status != "ok" or spec.devices == 1 or not thr:
            continue
        base, how = scaling.baseline(spec.repeat, singles.get(spec.single_device().config_key(), {}))
        value = None if base is None else scaling.efficiency(thr, spec.devices, base)
        store.add_metrics(row.id, {"scaling_efficiency": value, "scaling_baseline_samples_per_s": base},
                          {"scaling_efficiency": how})
        done += value is not None
    return done
