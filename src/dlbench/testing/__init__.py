"""The contract checks of a workload, importable from the installed package (the project's
tests/ directory is not installed), so that a plugin's own CI runs what dlbench's runs:

    python -m dlbench.testing.contract WORKLOAD [-f FRAMEWORKS] [--mode MODES]
    DLBENCH_CONTRACT_WORKLOADS=WORKLOAD pytest --pyargs dlbench.testing

`contract` checks the neutral module (workloads/contract.py), each framework's Program in a
process of its own (`program`), then parity with `dlbench check`. docs/plugins.md explains each.
"""
