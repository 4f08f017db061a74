"""The transformer encoder as a Keras functional model (docs/workloads.md#transformer):
Embedding + learned positions, pre-LN blocks of keras.layers.MultiHeadAttention and a GELU MLP
and a final LayerNormalization (or BERT's post-LN blocks after a LayerNorm of the embeddings),
mean over the sequence, linear head.

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


class Encoder:
    """Creates the blocks in order and keeps their layers by canonical name: pre-LN
    h + f(LN(h)), or post-LN (BERT) LN(h + f(h)); vit.py uses it too."""

    def __init__(self, spec: WorkloadSpec, s: workload.Size) -> None:
        self.spec, self.size = spec, s
        self.norms: dict[str, layers.LayerNormalization] = {}
        self.attns: dict[str, layers.MultiHeadAttention] = {}
        self.dense: dict[str, layers.Dense] = {}

    def norm(self, name: str, h: Any) -> Any:
        self.norms[name] = _layer_norm(self.spec, name)
        return self.norms[name](h)

    def __call__(self, h: Any) -> Any:
        s = self.size
        for i in range(s.depth):
            b = f"block{i}"
            attn = layers.MultiHeadAttention(
                num_heads=s.heads, key_dim=s.head_dim, value_dim=s.head_dim, dropout=0.0, use_bias=True,
                **program.ZEROS, name=program.layer_name(f"{b}.attn"))
            fc1 = layers.Dense(s.mlp_dim, activation=EXACT_GELU, **program.ZEROS,
                               name=program.layer_name(f"{b}.mlp.fc1"))
            fc2 = layers.Dense(s.dim, **program.ZEROS, name=program.layer_name(f"{b}.mlp.fc2"))
            self.attns[f"{b}.attn"], self.dense[f"{b}.mlp.fc1"], self.dense[f"{b}.mlp.fc2"] = attn, fc1, fc2
            if s.norm == workload.POST:
                h = self.norm(f"{b}.ln1", layers.Add()([h, attn(h, h)]))
                h = self.norm(f"{b}.ln2", layers.Add()([h, fc2(fc1(h))]))
            else:
                z = self.norm(f"{b}.ln1", h)
                h = layers.Add()([h, attn(z, z)])
                h = layers.Add()([h, fc2(fc1(self.norm(f"{b}.ln2", h)))])
        return h

    def params(self) -> dict[str, Any]:
        params: dict[str, Any] = {}
        for name, norm in self.norms.items():
            params.update({f"{name}.scale": norm.gamma, f"{name}.bias": norm.beta})
        for name, attn in self.attns.items():
            for proj, attr in _PROJECTIONS.items():
                sub = getattr(attn, attr)
                params.update({f"{name}.{proj}.kernel": sub.kernel, f"{name}.{proj}.bias": sub.bias})
        for name, layer in self.dense.items():
            params.update(program.dense_params(name, layer))
        return params

    def numerics(self) -> dict[str, Any]:
        return _numerics(self.size, self.norms, self.attns, self.dense)


def net(spec: WorkloadSpec, model_class: type) -> program.Net:
    s = workload.MODEL_SIZES[spec.model_size]
    ids = keras.Input(shape=(s.seq_len,), dtype="int32", name="ids")
    tokens = layers.Embedding(s.vocab, s.dim, embeddings_initializer="zeros", name="embed_tokens")
    positions = PositionEmbedding(s.seq_len, s.dim, name="embed_positions")
    h = positions(tokens(ids))
    encoder = Encoder(spec, s)
    if s.norm == workload.POST:
        h = encoder.norm("embed.ln", h)
    h = encoder(h)
    if s.norm == workload.PRE:
        h = encoder.norm("final_ln", h)
    head = layers.Dense(spec.num_classes, **program.ZEROS, name="head")
    pooled = layers.GlobalAveragePooling1D(data_format="channels_last")(h)
    model = model_class(inputs=ids, outputs=head(pooled), name="transformer")
    params: dict[str, Any] = {"embed.tokens": tokens.embeddings, "embed.positions": positions.positions,
                              **encoder.params(), **program.dense_params("head", head)}
    return program.Net(model, params, buffers={}, initial_buffers={}, numerics=encoder.numerics())


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
