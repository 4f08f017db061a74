"""The JAX training machinery that every JAX program shares, whatever its model and loop
(program.py's supervised JaxProgram, ppo.py's PPO, and what comes next): the optax optimizer
built from the numerics block, its numerics read back from an optimizer state, and the compile
counter."""

from __future__ import annotations

import collections
import itertools
from collections.abc import Callable, Iterable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax

from dlbench.spec import Numerics


def make_optimizer(numerics: Numerics) -> optax.GradientTransformation:
    """Adam with every value passed explicitly. optax.adam is the torch formula (bias-corrected
    moments, eps outside the square root: eps_root=0); inject_hyperparams keeps the values in
    the optimizer state so numerics() reads them back from what actually runs."""
    return optax.inject_hyperparams(optax.adam, static_args="nesterov")(
        learning_rate=numerics.learning_rate,
        b1=numerics.beta1,
        b2=numerics.beta2,
        eps=numerics.eps,
        eps_root=0.0,
        nesterov=False,
    )


def optimizer_numerics(tx: optax.GradientTransformation, dtype: np.dtype[Any]) -> dict[str, Any]:
    """The optimizer's numerics fields (keyed like spec.Numerics) read back from an optimizer
    state for a one-element probe of `dtype` (it holds the same hyper-parameters as the real
    state at a fraction of the cost), with the probe's dtype as `dtype`."""
    probe = {"probe": jnp.zeros((1,), dtype)}
    opt_state = tx.init(probe)
    hyper = {k: shortest_float(v) for k, v in opt_state.hyperparams.items()}
    adam_state = opt_state.inner_state[0]
    is_adam = isinstance(adam_state, optax.ScaleByAdamState)
    return {
        "optimizer": "adam" if is_adam else type(adam_state).__name__,
        "learning_rate": hyper["learning_rate"],
        "beta1": hyper["b1"],
        "beta2": hyper["b2"],
        "eps": hyper["eps"],
        "eps_placement": "outside_sqrt" if hyper["eps_root"] == 0.0 else "inside_sqrt",
        # optax.scale_by_adam always divides by 1 - beta**t; it has no switch to turn it off.
        "bias_correction": is_adam,
        "weight_decay": hyper.get("weight_decay", 0.0),
        "dtype": str(probe["probe"].dtype),
    }


def shortest_float(value: jax.Array) -> float:
    """The shortest decimal that is this value exactly in its own dtype (1e-3, not
    0.0010000000475 for a float32): compares equal to the spec's value."""
    array = np.asarray(value)
    return float(np.format_float_positional(array.dtype.type(array), unique=True, trim="-"))


# --- compile counting --------------------------------------------------------------------------

# XLA compiles per function name, counted by one process-wide listener; each program gives its
# functions unique names (counted_name) so that two programs in one process never count each
# other's compiles.
_COMPILES: collections.Counter[str] = collections.Counter()
_IDS = itertools.count()
_listening = False


def _on_event_duration(event: str, duration_secs: float, **kwargs: str | int) -> None:
    if event == "/jax/core/compile/backend_compile_duration":
        _COMPILES[str(kwargs.get("fun_name", ""))] += 1


def listen_for_compiles() -> None:
    """Start counting XLA compiles in this process (once; every program's build calls it)."""
    global _listening
    if not _listening:
        jax.monitoring.register_event_duration_secs_listener(_on_event_duration)
        _listening = True


def counted_name(fn: Callable[..., Any], name: str) -> str:
    """Rename `fn` to `name` plus a number unique in this process, before it is jitted; returns
    the key its compiles are counted under (compiles)."""
    fn.__name__ = f"{name}_{next(_IDS)}"
    return f"jit({fn.__name__})"


def compiles(keys: Iterable[str]) -> int:
    """XLA compiles so far of the functions counted under `keys` (counted_name)."""
    return sum(_COMPILES[key] for key in keys)
