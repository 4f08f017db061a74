"""The few layers Keras does not ship in the form the spec defines, written with keras.ops only,
so each runs unchanged on JAX, torch and TensorFlow."""

from __future__ import annotations

import typing
from typing import Any

from keras import backend, layers, ops


@typing.final
class UnbiasedBatchNormalization(layers.BatchNormalization):
    """Keras's BatchNormalization, except that in training the moving variance takes the
    unbiased batch variance (times n/(n-1), n = values per channel), as torch does; the batch
    itself is still normalised with the biased one. Keras's own layer updates the moving
    variance with the biased variance (a factor 1 - 1/n: at the tiny resnet's 8x8 stage, n =
    16 x 64, 0.1 %). Inference, masks and renorm are left to the parent."""

    running_var = "unbiased"

    def call(self, inputs: Any, training: Any = None, mask: Any = None) -> Any:
        if not training or not self.trainable or mask is not None or self.renorm:
            return super().call(inputs, training=training, mask=mask)
        # As Keras's own layer does under a mixed policy: statistics and normalisation in float32
        # (bfloat16 inputs met float32 variables in TF's AddV2 otherwise), the output cast back.
        inputs = ops.cast(inputs, backend.result_type(inputs.dtype, "float32"))
        axes = [i for i in range(len(inputs.shape)) if i != self.axis % len(inputs.shape)]
        mean, variance = ops.moments(inputs, axes=axes)
        count = 1
        for a in axes:  # static in every train step here; dynamic dimensions still work
            count = count * (inputs.shape[a] if inputs.shape[a] is not None else ops.shape(inputs)[a])
        unbiased = variance * ops.cast(count / (count - 1), variance.dtype)
        m = self.momentum
        self.moving_mean.assign(self.moving_mean * m + mean * (1.0 - m))
        self.moving_variance.assign(self.moving_variance * m + unbiased * (1.0 - m))
        outputs = ops.batch_normalization(inputs, mean, variance, axis=self.axis, offset=self.beta,
                                          scale=self.gamma, epsilon=self.epsilon)
        return ops.cast(outputs, self.compute_dtype)


@typing.final
class PositionEmbedding(layers.Layer):
    """Adds a learned (L, D) position embedding (Keras core has none; keras_hub's is the same
    sum)."""

    def __init__(self, seq_len: int, dim: int, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.seq_len, self.dim = seq_len, dim

    def build(self, input_shape: Any) -> None:
        # Overwritten by init(); zeros keep the build free of a random draw.
        self.positions = self.add_weight(shape=(self.seq_len, self.dim), initializer="zeros",
                                         name="positions")

    def call(self, inputs: Any) -> Any:
        return inputs + ops.expand_dims(ops.cast(self.positions, inputs.dtype), 0)

    def get_config(self) -> dict[str, Any]:
        return {**super().get_config(), "seq_len": self.seq_len, "dim": self.dim}


@typing.final
class ClassToken(layers.Layer):
    """Prepends a learned (D,) class token to a (batch, T, D) sequence (ViT's; keras_hub's
    ViTPatchingAndEmbedding holds the same vector)."""

    def __init__(self, dim: int, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.dim = dim

    def build(self, input_shape: Any) -> None:
        # Overwritten by init(); zeros keep the build free of a random draw.
        self.token = self.add_weight(shape=(self.dim,), initializer="zeros", name="token")

    def call(self, inputs: Any) -> Any:
        token = ops.cast(ops.reshape(self.token, (1, 1, self.dim)), inputs.dtype)
        return ops.concatenate([ops.tile(token, (ops.shape(inputs)[0], 1, 1)), inputs], axis=1)

    def compute_output_shape(self, input_shape: Any) -> Any:
        batch, length, dim = input_shape
        return batch, None if length is None else length + 1, dim

    def get_config(self) -> dict[str, Any]:
        return {**super().get_config(), "dim": self.dim}


@typing.final
class RK4Block(layers.Layer):
    """h(1) of dh/dt = f(h), f(h) = dense2(tanh(dense1(h))), from h(0) = inputs: `steps` classic
    Runge-Kutta 4 steps of dt = 1/steps, unrolled (the step count is static), gradients through
    the solver's operations."""

    solver = "rk4"

    def __init__(self, hidden: int, field_hidden: int, steps: int, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.hidden, self.field_hidden, self.steps = hidden, field_hidden, steps
        # Zeros: init() overwrites them (see program.ZEROS).
        zeros = {"kernel_initializer": "zeros", "bias_initializer": "zeros"}
        self.dense1 = layers.Dense(field_hidden, activation="tanh", **zeros, name="dense1")
        self.dense2 = layers.Dense(hidden, **zeros, name="dense2")

    def build(self, input_shape: Any) -> None:
        self.dense1.build(input_shape)
        self.dense2.build((*input_shape[:-1], self.field_hidden))

    def field(self, h: Any) -> Any:
        return self.dense2(self.dense1(h))

    def call(self, h: Any) -> Any:
        dt = 1.0 / self.steps
        for _ in range(self.steps):
            k1 = self.field(h)
            k2 = self.field(h + (dt / 2) * k1)
            k3 = self.field(h + (dt / 2) * k2)
            k4 = self.field(h + dt * k3)
            h = h + (dt / 6) * (k1 + 2.0 * k2 + 2.0 * k3 + k4)
        return h

    def compute_output_shape(self, input_shape: Any) -> Any:
        return input_shape

    def get_config(self) -> dict[str, Any]:
        return {**super().get_config(), "hidden": self.hidden, "field_hidden": self.field_hidden,
                "steps": self.steps, "solver": self.solver}
