"""The scenario modules, run in the worker process (the child side of the process boundary):
one module per runner scenario or its helpers (train, inference, time to accuracy, rl, sample, and the
profiled window, the served loads, the LoadGen driver); `registry.RUNS` maps each runner
scenario (dlbench/scenarios.py) to its entry. The parent (plan, spawn, executors, verdicts)
imports none of them: what it reads of a worker is in runner/protocol.py."""
