"""MirroredStrategy for a trial with devices > 1: one replica per GPU, or on a CPU-only machine
the CPU split into N logical devices (which share the same cores: a functional check, not a
scaling measurement). Made once per worker, before TensorFlow's runtime starts."""

from __future__ import annotations

from typing import Any

import tensorflow as tf

_STRATEGY: list[tf.distribute.Strategy] = []


def setup(devices: int) -> dict[str, Any]:
    gpus = tf.config.list_physical_devices("GPU")
    if len(gpus) >= devices:
        names, platform = [f"/GPU:{i}" for i in range(devices)], "gpu"
    else:
        # Must come before the first op: afterwards the runtime's devices are fixed.
        cpu = tf.config.list_physical_devices("CPU")[0]
        tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * devices)
        names, platform = [f"/CPU:{i}" for i in range(devices)], "cpu"
    strategy = tf.distribute.MirroredStrategy(devices=names)
    _STRATEGY[:] = [strategy]
    return {"mechanism": "tf.distribute.MirroredStrategy", "replica_devices": names, "platform": platform,
            "cross_device_ops": type(strategy.extended._cross_device_ops).__name__}


def strategy() -> tf.distribute.Strategy:
    if not _STRATEGY:
        raise RuntimeError("devices > 1 needs the MirroredStrategy made by the backend's data_parallel.setup")
    return _STRATEGY[0]
