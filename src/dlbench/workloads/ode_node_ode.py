"""node-ode: neural ODE (node's field, canonical weights), an initial value problem of the solver scenario (`--scenario solve`),
defined in workloads/odes.py."""

import dlbench.workloads.odes as odes

NAME = "node-ode"
globals().update(odes.workload_members(NAME))
