"""One framework's generate programs on the tiny lm, in a process of its own (the test process
imports no framework): for each precision and option given, the program a generate trial builds,
a greedy generation of the parity prompts saved as the worker saves it (protocol.save_generation)
for the test to judge as the parent does; or the Unsupported reason the build gives.

    python tests/generation_runtime_check.py FRAMEWORK OUT_DIR CASE [CASE ...]

CASE: PRECISION@MODE, optionally with one framework option, PRECISION@MODE:NAME=VALUE, e.g.
fp32@compiled, int8@eager, fp32@compiled:generate_io=run.
OUT_DIR/CASE.npz holds the arrays, OUT_DIR/CASE.json what the decoder says of itself.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

PROMPT_LEN, NEW_TOKENS, BATCH = 6, 8, 3


def main(framework: str, out: str, *cases: str) -> None:
    from dlbench.backends import get_backend, support
    from dlbench.backends.base import Unsupported
    from dlbench.backends.generate import greedy_run
    from dlbench.runner import protocol
    from dlbench.runner.plan import workload_spec
    from dlbench.runner.scenarios.generate import prompts
    from dlbench import workloads
    from dlbench.spec import GenerateOptions, Policy, TrialSpec

    backend = get_backend(framework)
    backend.import_framework()
    spec = workload_spec("lm", "tiny")
    for case in cases:
        setting, _, option = case.partition(":")
        precision, _, mode = setting.partition("@")
        options = dict([option.split("=", 1)]) if option else {}
        trial = TrialSpec(workload=spec, framework=framework, scenario="generate", precision=precision,
                          options=GenerateOptions(prompt_len=PROMPT_LEN, new_tokens=NEW_TOKENS, gen_batch=BATCH),
                          policy=Policy(mode=mode, options=options))
        facts: dict[str, object] = {}
        try:
            support.require(trial, backend)  # the worker's one check (issue 44.5)
            program = support.build_generator(trial, backend)
            state = support.init(trial, workloads.get("lm"), program)
        except Unsupported as e:
            facts["unsupported"] = str(e)
        else:
            decoder = program.decoder(state, BATCH, PROMPT_LEN + 1 + NEW_TOKENS)
            prompt = prompts(trial, PROMPT_LEN, BATCH)
            ids, logits = greedy_run(decoder, prompt, NEW_TOKENS)
            again, _ = greedy_run(decoder, prompt, NEW_TOKENS)
            protocol.save_generation(Path(out) / f"{case}.npz", prompt, ids, logits)
            facts.update(how=decoder.how, same_ids_twice=bool((ids == again).all()),
                         cache_bytes=decoder.cache_bytes(), compilations=decoder.compilations(),
                         precision=program.precision(), info=backend.info())
        (Path(out) / f"{case}.json").write_text(json.dumps(facts, default=str))


if __name__ == "__main__":
    main(*sys.argv[1:])
