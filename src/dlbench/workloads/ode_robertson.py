"""robertson: Robertson chemical kinetics (stiff), an initial value problem of the solver scenario,
defined in workloads/odes.py."""

import dlbench.workloads.odes as odes

NAME = "robertson"
globals().update(odes.workload_members(NAME))
