"""The BERT-style pre-LN encoder as a Keras functional model (docs/workloads.md#transformer):
Embedding + learned positions, pre-LN blocks of keras.layers.MultiHeadAttention and a GELU MLP,
final LayerNormalization, mean over the sequence, linear head.

MultiHeadAttention keeps its projections as (D, heads, head_dim) kernels and (heads, head_dim)
biases, and its output projection as (heads, head_dim, D): the canonical (D, D) kernels
reshaped, since head j uses columns j*dh:(j+1)*dh. It scales queries by 1/sqrt(key_dim) and,
without dropout or returned scores, calls ops.dot_product_attention: each backend's fused
attention, numerically the plain formula. LayerNormalization gets eps explicitly (Keras's
default is 1e-3), GELU is the exact (erf) form, passed explicitly.
"""

from __future__ import annotations

import functools
from typing import Any

import keras
from keras import layers

from dlbench.backends.keras import program
from dlbench.backends.keras.layers import PositionEmbedding
from dlbench.spec import TrialSpec, WorkloadSpec
from dlbench.workloads import transformer as workload

EXACT_GELU = functools.partial(keras.activations.gelu, approximate=False)
_PROJECTIONS = {"query": "query_dense", "key": "key_dense", "value": "value_dense", "out": "output_dense"}


def build(trial: TrialSpec) -> program.KerasProgram:
    return program.build(trial, net)


def _layer_norm(spec: WorkloadSpec, name: str) -> layers.LayerNormalization:
    return layers.LayerNormalization(axis=-1, epsilon=spec.numerics.ln_eps, center=True, scale=True,
                                     rms_scaling=False,
                                     name=program.layer_name(name))


def net(spec: WorkloadSpec, model_class: type) -> program.Net:
    s = workload.MODEL_SIZES[spec.model_size]
    ids = keras.Input(shape=(s.seq_len,), dtype="int32", name="ids")
    tokens = layers.Embedding(s.vocab, s.dim, embeddings_initializer="zeros", name="embed_tokens")
    positions = PositionEmbedding(s.seq_len, s.dim, name="embed_positions")
    h = positions(tokens(ids))
    norms: dict[str, layers.LayerNormalization] = {}
    attns: dict[str, layers.MultiHeadAttention] = {}
    dense: dict[str, layers.Dense] = {}
    for i in range(s.depth):
        b = f"block{i}"
        norms[f"{b}.ln1"], norms[f"{b}.ln2"] = _layer_norm(spec, f"{b}.ln1"), _layer_norm(spec, f"{b}.ln2")
        attns[f"{b}.attn"] = layers.MultiHeadAttention(
            num_heads=s.heads, key_dim=s.head_dim, value_dim=s.head_dim, dropout=0.0, use_bias=True,
            **program.ZEROS, name=program.layer_name(f"{b}.attn"))
        dense[f"{b}.mlp.fc1"] = layers.Dense(s.mlp_dim, activation=EXACT_GELU, **program.ZEROS,
                                             name=program.layer_name(f"{b}.mlp.fc1"))
        dense[f"{b}.mlp.fc2"] = layers.Dense(s.dim, **program.ZEROS,
                                             name=program.layer_name(f"{b}.mlp.fc2"))
        z = norms[f"{b}.ln1"](h)
        h = layers.Add()([h, attns[f"{b}.attn"](z, z)])
        z = dense[f"{b}.mlp.fc2"](dense[f"{b}.mlp.fc1"](norms[f"{b}.ln2"](h)))
        h = layers.Add()([h, z])
    norms["final_ln"] = _layer_norm(spec, "final_ln")
    dense["head"] = layers.Dense(spec.num_classes, **program.ZEROS, name="head")
    pooled = layers.GlobalAveragePooling1D(data_format="channels_last")(norms["final_ln"](h))
    model = model_class(inputs=ids, outputs=dense["head"](pooled), name="transformer")
    params: dict[str, Any] = {"embed.tokens": tokens.embeddings, "embed.positions": positions.positions}
    for name, norm in norms.items():
        params.update({f"{name}.scale": norm.gamma, f"{name}.bias": norm.beta})
    for name, attn in attns.items():
        for proj, attr in _PROJECTIONS.items():
            sub = getattr(attn, attr)
            params.update({f"{name}.{proj}.kernel": sub.kernel, f"{name}.{proj}.bias": sub.bias})
    for name, layer in dense.items():
        params.update(program.dense_params(name, layer))
    return program.Net(model, params, buffers={}, initial_buffers={}, numerics=_numerics(s, norms, attns, dense))


def _numerics(s: workload.Size, norms: dict[str, layers.LayerNormalization],
              attns: dict[str, layers.MultiHeadAttention], dense: dict[str, layers.Dense]) -> dict[str, Any]:
    eps = {norm.epsilon for norm in norms.values()}
    gelus = {_gelu_form(layer.activation) for name, layer in dense.items() if name.endswith("fc1")}
    # Keras scales the queries by 1/sqrt(key_dim): the head dimension when key_dim = D / heads.
    scales = {"rsqrt_head_dim" if (a.num_heads, a.key_dim) == (s.heads, s.head_dim) else f"rsqrt({a.key_dim})"
              for a in attns.values()}
    return {
        "ln_eps": eps.pop() if len(eps) == 1 else sorted(eps),
        "gelu": gelus.pop() if len(gelus) == 1 else sorted(gelus),
        "attention_scale": scales.pop() if len(scales) == 1 else sorted(scales),
    }


def _gelu_form(activation: Any) -> str:
    if isinstance(activation, functools.partial) and activation.func is keras.activations.gelu:
        return "tanh" if activation.keywords.get("approximate", False) else "erf"
    return repr(activation)
