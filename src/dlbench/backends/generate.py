"""What a backend gives the generate scenario (runner/scenarios/generate.py): a greedy decoder
with a KV cache, written the way each framework's own experts write one. Imports no framework.

The runner drives it token by token so that it can time each one:

    logits = d.prefill(prompt)          # fresh cache, the prompt's last-position logits
    ids = d.tokens(logits)              # greedy ids fetched to the host: the first token
    for _ in range(G - 1):
        logits = d.decode(logits)       # argmax fed back, one cached step
        ids = d.tokens(logits)          # ... fetched: one more token streamed out

Fetching each token's ids is the sync that ends it, as a streaming server hands each token to
its client; logits stay on the device unless `to_numpy` asks for them (parity only).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

import numpy as np


class Decoder(Protocol):
    """One batch of B sequences and room for `max_len` positions in the cache."""

    # How this decoder is written, one line for the report ("static cache, torch.compile'd
    # decode step", "jitted prefill and decode, cache donated", ...).
    how: str

    def prefill(self, prompt: np.ndarray) -> Any:
        """Empty the cache, run the prompt (B, P) int32 through it: the logits (B, V) of the
        prompt's last position, on the device."""
        ...

    def decode(self, logits: Any) -> Any:
        """Append the greedy token of `logits` (argmax, on the device) at the next position:
        the new position's logits (B, V), on the device."""
        ...

    def tokens(self, logits: Any) -> np.ndarray:
        """The greedy ids (B,) of `logits`, fetched to the host (the token's sync)."""
        ...

    def to_numpy(self, logits: Any) -> np.ndarray:
        """The logits themselves (B, V) as float32 NumPy (parity, outside the timing)."""
        ...

    def cache_bytes(self) -> int:
        """Bytes the KV cache holds (keys and values of every block, all max_len positions)."""
        ...

    def compilations(self) -> int:
        """Compilations (traces, graphs) of prefill and the decode step so far; 0 in eager."""
        ...


def cache_bytes(depth: int, batch: int, heads: int, max_len: int, head_dim: int, itemsize: int) -> int:
    """Keys and values of every block: 2 x depth x B x heads x max_len x dh x itemsize."""
    return 2 * depth * batch * heads * max_len * head_dim * itemsize


class HostLogits:
    """What the decoders of the exporting runtimes share (ONNX Runtime, LiteRT: their logits come
    back as host NumPy arrays, the host being their device on a CPU): greedy ids by NumPy's
    argmax, the logits as they are, and the cache's size at its longest (max_len positions of
    float32, as the static caches of the other frameworks count it). `size` is the model's
    (depth, heads, head_dim: workloads/lm.py's Size)."""

    size: Any
    batch: int
    max_len: int

    def tokens(self, logits: np.ndarray) -> np.ndarray:
        return np.asarray(logits.argmax(axis=-1))

    def to_numpy(self, logits: np.ndarray) -> np.ndarray:
        return np.asarray(logits, np.float32)

    def cache_bytes(self) -> int:
        s = self.size
        return cache_bytes(s.depth, self.batch, s.heads, self.max_len, s.head_dim, 4)


def greedy_run(decoder: Decoder, prompt: np.ndarray, new_tokens: int) -> tuple[np.ndarray, np.ndarray]:
    """(ids (B, G), logits (G, B, V) float32) of a whole greedy generation, untimed."""
    logits = decoder.prefill(prompt)
    steps, ids = [decoder.to_numpy(logits)], [decoder.tokens(logits)]
    for _ in range(new_tokens - 1):
        logits = decoder.decode(logits)
        steps.append(decoder.to_numpy(logits))
        ids.append(decoder.tokens(logits))
    return np.stack(ids, axis=1), np.stack(steps)


# A workload builder's factory of decoders: (state, batch, max_len) -> Decoder.
DecoderFactory = Callable[[Any, int, int], Decoder]


# What an exporting runtime takes from a framework's language model (ONNX Runtime exports
# torch's, LiteRT converts TensorFlow's): (state) -> the decoder as pure functions of the token
# ids and the KV cache, in the form that framework's exporter takes (torch: an nn.Module of the
# decode-with-past step; TensorFlow: an object whose tf.functions take and return the cache).
ExportFactory = Callable[[Any], Any]


class Generating:
    """What a framework's program class inherits to answer Generator.decoder: a language-model
    builder sets `decoder_factory` (as a diffusion builder sets its sampler); None elsewhere,
    where no scenario asks (support checks the workload's scenarios first). `export_factory`:
    set by a builder whose decoder an exporting runtime serves (ExportFactory)."""

    decoder_factory: DecoderFactory | None = None
    export_factory: ExportFactory | None = None

    def decoder(self, state: Any, batch: int, max_len: int) -> Decoder:
        if self.decoder_factory is None:
            raise TypeError(f"{type(self).__name__} was built without a KV-cache decoder")
        return self.decoder_factory(state, batch, max_len)
