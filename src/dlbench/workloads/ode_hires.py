"""hires: HIRES plant physiology (stiff), an initial value problem of the solver scenario (`--scenario solve`),
defined in workloads/odes.py."""

import dlbench.workloads.odes as odes

NAME = "hires"
globals().update(odes.workload_members(NAME))
