"""One framework's KV-cache decoder on the tiny lm, in a process of its own (the test process
imports no framework for it): greedy generation twice, then the float64 reference recomputes
the whole sequence without a cache.

    python tests/generation_check.py FRAMEWORK MODE OUT.json [NAME=VALUE]
"""

from __future__ import annotations

import json
import os
import sys

import numpy as np


def main(framework: str, mode: str, out: str, option: str = "") -> None:
    """`option`: one of the framework's own options, NAME=VALUE (jax: decode=while_loop)."""
    if framework.startswith("keras-"):
        os.environ["KERAS_BACKEND"] = framework.removeprefix("keras-")
    from dlbench.backends import get_backend
    from dlbench.backends.generate import greedy_run
    from dlbench.runner.plan import workload_spec
    from dlbench.spec import GenerateOptions, Policy, TrialSpec
    from dlbench.workloads import lm

    spec = workload_spec("lm", "tiny")
    options = dict([option.split("=", 1)]) if option else {}
    program = get_backend(framework).build(TrialSpec(workload=spec, framework=framework, scenario="generate",
                                                     options=GenerateOptions(new_tokens=8),
                                                     policy=Policy(mode=mode, options=options)))
    params = lm.init_params(spec)
    decoder = program.decoder(program.init(params), 3, 16)
    prompt = lm.fixed_batch(spec, 3).x[:, :5]
    ids, logits = greedy_run(decoder, prompt, 8)
    again, _ = greedy_run(decoder, prompt, 8)
    whole = lm.reference_logits(spec, params, np.concatenate([prompt, ids[:, :-1]], axis=1))
    facts = {"max_abs_error": float(np.abs(logits - whole[:, 4:].transpose(1, 0, 2)).max()),
             "same_ids_twice": bool(np.array_equal(ids, again)), "cache_bytes": decoder.cache_bytes(),
             "how": decoder.how, "compilations": decoder.compilations()}
    with open(out, "w") as f:
        json.dump(facts, f)


if __name__ == "__main__":
    main(*sys.argv[1:5])
