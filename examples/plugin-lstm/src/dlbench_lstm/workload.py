"""lstm: token ids -> embedding -> one LSTM layer -> its last hidden state -> a linear head.

The framework-neutral definition (NumPy only), everything dlbench needs to hold four
frameworks to one model: shapes, canonical parameters, data, numerics, FLOPs, presets, and the
float64 loss written out. The builders (torch_lstm.py, jax_lstm.py, tensorflow_lstm.py,
keras_lstm.py) convert from the canonical layout below; `dlbench check -w lstm` proves they
compute the same thing.

The canonical LSTM (one layer, zero initial state; for t = 1..L):
    z_t = x_t @ lstm.kernel + h_{t-1} @ lstm.recurrent_kernel + lstm.bias      (N, 4H)
    i, f, g, o = z_t split in four blocks of H, in that order
    c_t = sigmoid(f + forget_bias) * c_{t-1} + sigmoid(i) * tanh(g)
    h_t = sigmoid(o) * tanh(c_t)
with kernels (in, 4H), one bias (4H,), gates in the order input, forget, cell candidate,
output (torch's i,f,g,o, which Keras calls i,f,c,o). Where frameworks differ:
- torch keeps two biases (b_ih and b_hh, added together): the canonical bias goes into one and
  the other is held at zero, never trained (two trained copies would move twice as fast under
  Adam: the gradient check passes, the loss trajectory does not);
- TF1's LSTMCell orders gates i,j,f,o (j the candidate) and ONNX's LSTM i,o,f,c;
- TF1's LSTMCell and BlockLSTM add forget_bias=1.0 to the forget gate in every step, where
  Keras's unit_forget_bias=True puts 1.0 into the bias once, at initialisation; here the
  forget-gate bias starts at 1.0 in the canonical parameters and nothing is added at run time
  (numerics `lstm_forget_bias` 0.0);
- Keras 2 defaulted recurrent_activation to hard_sigmoid (Keras 3: sigmoid); it is pinned.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import final

import numpy as np

from dlbench.spec import Numerics, WorkloadSpec
from dlbench.workloads import reference_ops as ops
from dlbench.workloads.base import COMMON_NUMERICS_FIELDS, SUPERVISED_SCENARIOS, Preset, accuracy
from dlbench.workloads.data import STREAM_TEACHER, Dataset, dataset_makers, identity_render, labelled_samples
from dlbench.workloads.params import ZEROS, Init, dense_inits, dense_shapes, draw_params, fan_in_uniform

NAME = "lstm"
SCENARIOS = SUPERVISED_SCENARIOS
QUALITY = "accuracy"
score = accuracy
# backend family -> the module whose build(trial) makes the Program (dlbench/backends/base.py:
# build_program). The family is the backend package's name under dlbench.backends; all four
# Keras backends (keras-jax, keras-torch, keras-tensorflow) share "keras".
BUILDERS = {
    "torch": "dlbench_lstm.torch_lstm",
    "jax": "dlbench_lstm.jax_lstm",
    "tensorflow": "dlbench_lstm.tensorflow_lstm",
    "keras": "dlbench_lstm.keras_lstm",
}


@final
@dataclass(frozen=True)
class Size:
    vocab: int  # V
    seq_len: int  # L
    embed: int  # E
    hidden: int  # H


MODEL_SIZES = {
    "tiny": Size(vocab=64, seq_len=16, embed=16, hidden=32),
    "small": Size(vocab=1024, seq_len=64, embed=64, hidden=128),
    "large": Size(vocab=8192, seq_len=128, embed=256, hidden=512),
}

PRESETS = {
    "tiny": Preset(model_size="tiny", dataset_size=128, batch_size=16, epochs=1, warmup_epochs=1, eval_size=32),
    "cpu": Preset(model_size="small", dataset_size=4096, batch_size=64, epochs=1, warmup_epochs=1, eval_size=1024),
    "gpu": Preset(model_size="large", dataset_size=65536, batch_size=128, epochs=3, warmup_epochs=1, eval_size=8192),
}

# The LSTM's own numerics, in Numerics.extra (a plugin never adds fields to Numerics).
NUMERICS = Numerics(extra={
    "lstm_gate_activation": "sigmoid",  # input, forget and output gates (Keras: recurrent_activation)
    "lstm_cell_activation": "tanh",  # the candidate and the cell output (Keras: activation)
    "lstm_forget_bias": 0.0,  # added to the forget gate's pre-activation in every step
})
NUMERICS_FIELDS = (*COMMON_NUMERICS_FIELDS, "lstm_gate_activation", "lstm_cell_activation", "lstm_forget_bias")

GATES = ("input", "forget", "cell", "output")
# The teacher sees a recency-weighted sum of a fixed random embedding of the ids: order
# matters (a bag of tokens would not need a recurrent model), recent tokens most.
TEACHER_EMBED = 32
TEACHER_DECAY = 0.9
MARGIN = 0.4


def _size(spec: WorkloadSpec) -> Size:
    size: Size = MODEL_SIZES[spec.model_size]
    return size


def input_spec(spec: WorkloadSpec) -> tuple[tuple[int, ...], str]:
    return (_size(spec).seq_len,), "int32"


def param_shapes(spec: WorkloadSpec) -> dict[str, tuple[int, ...]]:
    s = _size(spec)
    return {
        "embed.tokens": (s.vocab, s.embed),
        "lstm.kernel": (s.embed, 4 * s.hidden),
        "lstm.recurrent_kernel": (s.hidden, 4 * s.hidden),
        "lstm.bias": (4 * s.hidden,),
        **dense_shapes("head", s.hidden, spec.num_classes),
    }


def buffer_shapes(spec: WorkloadSpec) -> dict[str, tuple[int, ...]]:
    return {}


def init_params(spec: WorkloadSpec) -> dict[str, np.ndarray]:
    """Embedding N(0, 1) (torch's nn.Embedding); both LSTM kernels U(+-1/sqrt(H)) (torch's
    nn.LSTM); the LSTM bias 0, but 1 for the forget gate (Jozefowicz et al. 2015; Keras's
    unit_forget_bias); the head as every dense layer, U(+-1/sqrt(fan_in))."""
    s = _size(spec)
    inits = {
        "embed.tokens": Init("normal", 1.0),
        "lstm.kernel": fan_in_uniform(s.hidden),
        "lstm.recurrent_kernel": fan_in_uniform(s.hidden),
        "lstm.bias": ZEROS,
        **dense_inits("head", s.hidden),
    }
    params = draw_params(spec.seed, param_shapes(spec), inits)
    params["lstm.bias"][gate_slice("forget", s.hidden)] = 1.0
    return params


def gate_slice(gate: str, hidden: int) -> slice:
    """The columns of one gate in the canonical (., 4H) kernels and (4H,) bias."""
    k = GATES.index(gate)
    return slice(k * hidden, (k + 1) * hidden)


def _teacher_embedding(spec: WorkloadSpec) -> np.ndarray:
    rng = np.random.default_rng((spec.seed, STREAM_TEACHER, 1))
    e = rng.standard_normal((_size(spec).vocab, TEACHER_EMBED))
    centred: np.ndarray = (e - e.mean(axis=0)) / e.std(axis=0)
    return centred


def teacher_features(spec: WorkloadSpec, ids: np.ndarray) -> np.ndarray:
    """sum_t w_t e[x_t] with w_t = decay^(L-1-t), scaled to unit variance."""
    e, length = _teacher_embedding(spec), ids.shape[1]
    weights = TEACHER_DECAY ** np.arange(length - 1, -1, -1.0)
    total = np.zeros((len(ids), TEACHER_EMBED))
    for t in range(length):
        total += weights[t] * e[ids[:, t]]
    return total / math.sqrt(float(np.sum(weights**2)))


def _samples(spec: WorkloadSpec, n: int, stream: int) -> Dataset:
    s = _size(spec)

    def draw(rng: np.random.Generator, m: int) -> np.ndarray:
        return rng.integers(0, s.vocab, size=(m, s.seq_len), dtype=np.int32)

    def features(ids: np.ndarray) -> np.ndarray:
        return teacher_features(spec, ids)

    return labelled_samples(spec, n, stream, draw, features, identity_render, MARGIN)


make_dataset, make_eval_dataset, fixed_batch = dataset_makers(_samples)


def flops_per_sample(spec: WorkloadSpec, train: bool = True) -> int:
    """2 per multiply-add: per step the input projection (2 E 4H) and the recurrent one
    (2 H 4H), then the head (2 H C); gates, the embedding lookup and the loss count 0. Every
    matmul's input needs a gradient in training (the embedding is a parameter, h is carried),
    so training is 3x the forward."""
    s = _size(spec)
    fwd = s.seq_len * (8 * s.embed * s.hidden + 8 * s.hidden * s.hidden) + 2 * s.hidden * spec.num_classes
    return 3 * fwd if train else fwd


def _sigmoid(x: np.ndarray) -> np.ndarray:
    out: np.ndarray = 1.0 / (1.0 + np.exp(-x))
    return out


def reference_loss(spec: WorkloadSpec, params: dict[str, np.ndarray], x: np.ndarray, y: np.ndarray) -> float:
    """The definition above, in float64, one time step after the other."""
    p, hidden = ops.as_float64(params), _size(spec).hidden
    forget_bias = float(spec.numerics.value("lstm_forget_bias"))
    e = p["embed.tokens"][x]
    h = c = np.zeros((len(x), hidden))
    for t in range(x.shape[1]):
        z = e[:, t] @ p["lstm.kernel"] + h @ p["lstm.recurrent_kernel"] + p["lstm.bias"]
        i, f, g, o = (z[:, gate_slice(gate, hidden)] for gate in GATES)
        c = _sigmoid(f + forget_bias) * c + _sigmoid(i) * np.tanh(g)
        h = _sigmoid(o) * np.tanh(c)
    return ops.cross_entropy(h @ p["head.kernel"] + p["head.bias"], y)
