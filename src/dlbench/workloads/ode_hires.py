"""hires: HIRES plant physiology (stiff), an initial value problem of the solver scenario,
defined in workloads/odes.py."""

import dlbench.workloads.odes as odes

NAME = "hires"
globals().update(odes.workload_members(NAME))
