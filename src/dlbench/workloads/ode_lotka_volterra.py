"""lotka-volterra: Lotka-Volterra (non-stiff), an initial value problem of the solver scenario,
defined in workloads/odes.py."""

import dlbench.workloads.odes as odes

NAME = "lotka-volterra"
globals().update(odes.workload_members(NAME))
