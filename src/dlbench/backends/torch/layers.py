"""Read-back helpers shared by the torch models: numerics found in the module tree itself."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, TypeVar

from torch import nn

from dlbench.backends.base import Unsupported

T = TypeVar("T")


def pick(choices: Mapping[str, T], value: str, what: str) -> T:
    """choices[value], or Unsupported naming the value and what is allowed."""
    if value not in choices:
        raise Unsupported(f"{what} {value!r} is not implemented: allowed {', '.join(choices)}")
    return choices[value]


def one_value(values: Iterable[Any]) -> Any:
    """The value every layer agrees on; a repr of all of them where they differ (a mismatch
    against the spec then names what was found)."""
    found = list(values)
    if not found:
        raise ValueError("no layer to read a value from")
    return found[0] if all(v == found[0] for v in found) else repr(found)


def conv_padding(module: nn.Module) -> str:
    """spec.Numerics.padding of the nn.Conv2d layers in `module`: "VALID" where none pads,
    "SYMMETRIC" where each pads k//2 zeros on every side (torch's integer padding is explicit and
    symmetric, unlike TF's "SAME" for stride 2); else what they do."""
    convs = [m for m in module.modules() if isinstance(m, nn.Conv2d)]
    if all(c.padding == (0, 0) for c in convs):
        return "VALID"
    if all(c.padding == tuple(k // 2 for k in c.kernel_size) and c.padding_mode == "zeros" for c in convs):
        return "SYMMETRIC"
    return repr([(c.padding_mode, c.padding) for c in convs])
