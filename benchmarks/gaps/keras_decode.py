"""Gap reproducer: greedy decoding with a KV cache at batch 1, Keras on torch against torch
itself (dlbench `lm --scenario generate`, cpu preset: keras-torch's time per output token 26 ms
against torch's 2.7 on a quiet 2-core Xeon; dlbench's torch decoder is torch.compile'd, Keras's
torch backend runs eagerly).

One decode step of dlbench's lm at the cpu preset (V 2048, D 256, 8 heads, 10 blocks, SwiGLU
768, rotary positions), the keys and values of a 128-token prompt already in a cache of 256
positions, the next token's logits and argmax: written once with torch ops (torch-eager) and
once with keras.ops on the torch backend (keras-torch), the same arithmetic op for op. With
keras-hub installed, keras-hub's own Llama (LlamaBackbone of the same sizes, random weights)
generating through LlamaCausalLM.generate on the torch backend is timed too (keras-hub-torch):
the library's own generation, for comparison with the hand-written Keras step.

Prints one JSON line: `ratio` = torch eager's time per token over keras-torch's (Keras's speed
relative to torch's; below 1: slower); dlbench's ratio (0.10) is against a compiled decoder.

    python benchmarks/gaps/keras_decode.py        # about 1 min
"""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import harness  # noqa: E402  (beside this script)

FULL = {"vocab": 2048, "dim": 256, "heads": 8, "depth": 10, "mlp": 768, "prompt": 128, "cache": 256}
QUICK = {"vocab": 64, "dim": 32, "heads": 2, "depth": 2, "mlp": 96, "prompt": 8, "cache": 32}
EPS, BASE = 1e-5, 10000.0


def size(args: argparse.Namespace) -> dict[str, int]:
    return harness.sized(args, FULL, QUICK)


def steps(args: argparse.Namespace) -> int:
    return harness.step_count(args, 32, 4)


def configs(args: argparse.Namespace) -> list[harness.Config]:
    C = harness.Config
    return [C("torch-eager", "torch"), C("keras-torch", "keras", env={"KERAS_BACKEND": "torch"}),
            C("keras-hub-torch", "keras", env={"KERAS_BACKEND": "torch"}, options={"hub": "1"})]


def parameters(s: Mapping[str, int]) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    d, f = s["dim"], s["mlp"]
    out = {"embed": rng.normal(0, 0.02, (s["vocab"], d)), "head": rng.normal(0, 0.02, (d, s["vocab"])),
           "norm": np.ones(d)}
    for i in range(s["depth"]):
        out.update({f"{i}.{n}": rng.normal(0, 0.02, (d, d)) for n in "qkvo"})
        out.update({f"{i}.gate": rng.normal(0, 0.02, (d, f)), f"{i}.up": rng.normal(0, 0.02, (d, f)),
                    f"{i}.down": rng.normal(0, 0.02, (f, d)), f"{i}.n1": np.ones(d), f"{i}.n2": np.ones(d)})
    return {k: v.astype(np.float32) for k, v in out.items()}


def cache(s: Mapping[str, int]) -> np.ndarray:
    """Keys and values (2, depth, 1, cache, heads, dh), the prompt's positions filled."""
    rng = np.random.default_rng(1)
    kv = np.zeros((2, s["depth"], 1, s["cache"], s["heads"], s["dim"] // s["heads"]), np.float32)
    kv[:, :, :, : s["prompt"]] = rng.normal(0, 1, kv[:, :, :, : s["prompt"]].shape)
    return kv


def step(ops: Any, cat: Any, p: Mapping[str, Any], kv: Any, token: Any, pos: int, s: Mapping[str, int]) -> Any:
    """One decode step in either library (`ops`: torch or keras.ops; `cat`: its concatenate):
    the next token's id; the cache written in place at `pos` by the caller's `kv` semantics."""
    heads, dh = s["heads"], s["dim"] // s["heads"]
    inverse = BASE ** (-np.arange(0, dh, 2) / dh)
    angles = np.concatenate([pos * inverse] * 2).astype(np.float32)
    cos, sin = np.cos(angles), np.sin(angles)
    visible = np.where(np.arange(s["cache"]) <= pos, 0.0, -math.inf).astype(np.float32)

    def rms(x: Any, w: Any) -> Any:
        return x * ops.rsqrt(ops.mean(x * x, -1, keepdims=True) + EPS) * w

    def rope(x: Any) -> Any:  # (1, heads, dh)
        return x * cos + cat([-x[..., dh // 2:], x[..., : dh // 2]], -1) * sin

    h = p["embed"][token][None]  # (1, D)
    for i in range(s["depth"]):
        z = rms(h, p[f"{i}.n1"])
        q, k, v = (ops.reshape(ops.matmul(z, p[f"{i}.{n}"]), (1, heads, dh)) for n in "qkv")
        kv.write(i, pos, rope(k), v)
        keys, values = kv.read(i)  # (cache, heads, dh)
        logits = ops.sum(rope(q)[:, None] * keys[None], -1) / math.sqrt(dh) + visible[None, :, None]
        weights = ops.softmax(logits, axis=1)  # over the cache's positions
        o = ops.reshape(ops.sum(weights[..., None] * values[None], 1), (1, -1))
        h = h + ops.matmul(o, p[f"{i}.o"])
        z = rms(h, p[f"{i}.n2"])
        gate = ops.matmul(z, p[f"{i}.gate"])
        h = h + ops.matmul(gate * ops.sigmoid(gate) * ops.matmul(z, p[f"{i}.up"]), p[f"{i}.down"])
    return ops.argmax(ops.matmul(rms(h, p["norm"]), p["head"]), -1)[0]


def run_torch(args: argparse.Namespace, options: Mapping[str, str]) -> harness.Result:
    torch = harness.import_torch()
    s = size(args)
    p = {k: torch.from_numpy(v) for k, v in parameters(s).items()}
    buf = torch.from_numpy(cache(s))

    class Cache:
        def write(self, i: int, pos: int, k: Any, v: Any) -> None:
            buf[0, i, 0, pos], buf[1, i, 0, pos] = k[0], v[0]

        def read(self, i: int) -> tuple[Any, Any]:
            return buf[0, i, 0], buf[1, i, 0]

    return _decode(lambda t, pos: step(torch, torch.cat, p, Cache(), t, pos, s), s, args)


def run_keras(args: argparse.Namespace, options: Mapping[str, str]) -> harness.Result:
    if options.get("hub"):
        return _keras_hub(args)
    harness.import_torch()
    import keras
    from keras import ops

    s = size(args)
    p = {k: ops.convert_to_tensor(v) for k, v in parameters(s).items()}
    buf = [ops.convert_to_tensor(cache(s))]

    class Cache:
        def write(self, i: int, pos: int, k: Any, v: Any) -> None:
            update = ops.stack([k[0], v[0]])[:, None, None, None]  # (2, 1, 1, 1, heads, dh)
            buf[0] = ops.slice_update(buf[0], (0, i, 0, pos, 0, 0), update)

        def read(self, i: int) -> tuple[Any, Any]:
            return buf[0][0, i, 0], buf[0][1, i, 0]

    result = _decode(lambda t, pos: step(ops, ops.concatenate, p, Cache(), t, pos, s), s, args)
    result["keras_backend"] = keras.backend.backend()
    return result


def _decode(one: Any, s: Mapping[str, int], args: argparse.Namespace) -> harness.Result:
    """Time per output token over `steps` tokens from the prompt's end (the first one untimed)."""
    state = {"token": 1, "pos": s["prompt"]}

    def call() -> Any:
        state["token"] = int(one(state["token"], state["pos"]))
        state["pos"] += 1
        return state["token"]

    return harness.timed(call, lambda t: t, min(steps(args), s["cache"] - s["prompt"] - 1))


def _keras_hub(args: argparse.Namespace) -> harness.Result:
    """keras-hub's LlamaCausalLM of the same sizes generating greedily on the torch backend:
    (prompt + steps tokens in one generate call - prompt + 1 token) / steps per token."""
    harness.import_torch()
    import time

    try:
        import keras_hub
    except ImportError as e:  # not installed, or a dependency of it missing
        return {"error": f"keras_hub does not import: {e}"}
    s = size(args)
    backbone = keras_hub.models.LlamaBackbone(
        vocabulary_size=s["vocab"], num_layers=s["depth"], num_query_heads=s["heads"], hidden_dim=s["dim"],
        intermediate_dim=s["mlp"], num_key_value_heads=s["heads"], layer_norm_epsilon=EPS)
    lm = keras_hub.models.LlamaCausalLM(backbone=backbone, preprocessor=None, sampler="greedy")
    n = min(steps(args), s["cache"] - s["prompt"] - 1)
    prompt = np.ones((1, s["prompt"]), np.int32)

    def generate(new: int) -> float:
        ids = np.concatenate([prompt, np.zeros((1, new), np.int32)], 1)
        mask = np.concatenate([np.ones_like(prompt), np.zeros((1, new), np.int32)], 1).astype(bool)
        t0 = time.perf_counter()
        lm.generate({"token_ids": ids, "padding_mask": mask}, max_length=s["prompt"] + new, stop_token_ids=None)
        return time.perf_counter() - t0

    generate(2)  # builds and traces what it compiles
    one, many = generate(1), generate(n + 1)
    return {"median_s": (many - one) / n, "steps": n, "how": "LlamaCausalLM.generate, greedy, one call"}


def summarise(args: argparse.Namespace, r: Mapping[str, harness.Result]) -> harness.Result:
    return {
        "gap": "keras_decode",
        "ratio": harness.ratio(r, "keras-torch", "torch-eager"),
        "keras_hub_over_keras": harness.ratio(r, "keras-hub-torch", "keras-torch"),
        "tpot_ms": {k: round(1e3 * v["median_s"], 3) for k, v in r.items() if "median_s" in v},
        "shapes": size(args),
    }


if __name__ == "__main__":
    sys.exit(harness.main(__file__, __doc__.split("\n\n")[0], configs, {"torch": run_torch, "keras": run_keras},
                          summarise))
