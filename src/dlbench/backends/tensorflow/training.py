"""The TensorFlow training machinery that every TensorFlow program shares, whatever its model and
loop (program.py's supervised TensorFlowProgram, ppo.py's PPO, and what comes next): the Adam
update built from the numerics block (and its numerics read back), a function as the trial's mode
runs it, and the trace counter."""

from __future__ import annotations

import typing
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import tensorflow as tf

from dlbench.spec import Numerics

Tensors = Mapping[str, tf.Tensor]


@typing.final
class Adam:
    """Adam as torch.optim.Adam and optax.adam compute it: bias-corrected moments, eps added
    outside the square root. Not tf.keras.optimizers.Adam: Keras adds eps to sqrt(v) before the
    bias correction (the paper's eps-hat) and defaults it to 1e-7, a different update. Written
    out it is a handful of element-wise ops per variable, which XLA fuses in compiled mode."""

    name = "adam"
    eps_placement = "outside_sqrt"

    def __init__(self, params: dict[str, tf.Variable], numerics: Numerics, dtype: tf.DType) -> None:
        self.learning_rate = numerics.learning_rate
        self.beta1 = numerics.beta1
        self.beta2 = numerics.beta2
        self.eps = numerics.eps
        self.bias_correction = numerics.bias_correction
        self.weight_decay = numerics.weight_decay
        self.dtype = dtype
        self.m = {k: _zeros_like(p, f"m/{k}") for k, p in params.items()}
        self.v = {k: _zeros_like(p, f"v/{k}") for k, p in params.items()}
        self.step = tf.Variable(0, dtype=tf.int64, trainable=False, name="step")

    def numerics(self) -> dict[str, Any]:
        """Its numerics fields, keyed like spec.Numerics, as the update below uses them."""
        return {"optimizer": self.name, "learning_rate": self.learning_rate, "beta1": self.beta1,
                "beta2": self.beta2, "eps": self.eps, "eps_placement": self.eps_placement,
                "bias_correction": self.bias_correction, "weight_decay": self.weight_decay}

    def reset(self) -> None:
        for slot in (*self.m.values(), *self.v.values()):
            slot.assign(tf.zeros_like(slot))
        self.step.assign(0)

    def apply(self, params: dict[str, tf.Variable], grads: Tensors) -> None:
        # Bias corrections in float64, as torch computes them (Python floats): in float32,
        # 1 - 0.999^t carries a 1e-5 relative error from rounding 0.999 alone.
        t = tf.cast(self.step.assign_add(1), tf.float64)
        step_size = tf.constant(self.learning_rate, tf.float64)
        v_scale = tf.constant(1.0, tf.float64)
        if self.bias_correction:
            # torch's arrangement: lr / (1 - b1^t) scales m, sqrt(1 - b2^t) divides sqrt(v).
            step_size = step_size / (1.0 - tf.constant(self.beta1, tf.float64) ** t)
            v_scale = tf.sqrt(1.0 - tf.constant(self.beta2, tf.float64) ** t)
        step_size, v_scale = tf.cast(step_size, self.dtype), tf.cast(v_scale, self.dtype)
        for name, p in params.items():
            g = grads[name]
            if self.weight_decay:
                g = g + self.weight_decay * p  # torch's (L2, not decoupled) weight decay
            m = self.m[name].assign(self.beta1 * self.m[name] + (1.0 - self.beta1) * g)
            v = self.v[name].assign(self.beta2 * self.v[name] + (1.0 - self.beta2) * tf.square(g))
            p.assign_sub(step_size * m / (tf.sqrt(v) / v_scale + self.eps))


def _zeros_like(p: tf.Variable, name: str) -> tf.Variable:
    return tf.Variable(tf.zeros_like(p), trainable=False, name=name)


def in_mode(
    fn: Callable[..., Any], mode: str, input_signature: list[tf.TensorSpec] | None = None
) -> Any:
    """The function as the mode runs it. jit_compile=False in graph mode so that no
    auto-clustering flag can turn it into XLA behind our back."""
    if mode == "eager":
        return fn
    return tf.function(fn, input_signature=input_signature, jit_compile=mode == "compiled")


def tracing_count(functions: Iterable[Any]) -> int:
    """Traces so far of those `functions` that are tf.functions (in_mode returns the plain
    Python function in eager mode, which never traces): each trace of a compiled function is a
    compile, and a change inside a timed window flags the trial."""
    return sum(int(f.experimental_get_tracing_count()) for f in functions
               if isinstance(f, tf.types.experimental.GenericFunction))
