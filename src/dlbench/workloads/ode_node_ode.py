"""node-ode: neural ODE (node's field, canonical weights), an initial value problem of the solver scenario,
defined in workloads/odes.py."""

import dlbench.workloads.odes as odes

NAME = "node-ode"
globals().update(odes.workload_members(NAME))
