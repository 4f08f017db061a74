"""Suite files: `dlbench run suite.toml` describes a sweep in TOML.

The keys are `run`'s long option names (`batch-size`, `memory-limit`, ...) and each value is
what the option takes: a list or a single value for the sweep axes (or a comma list, exactly as
on the command line), a number, a size, true or false. The whole file is validated before
anything runs; each error is one line naming the file, the key, the bad value and what is
allowed. Options given on the command line override the file's.
"""

from __future__ import annotations

import dataclasses
import math
import os
import re
import tomllib
import typing
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from dlbench import workloads
from dlbench.analysis import repeats
from dlbench.backends import registered
from dlbench.cli.common import MAX_ORDER_SEED, UsageError, parse_size
from dlbench.runner.executors import EXECUTORS
from dlbench.spec import (
    AUGMENTATIONS,
    COMPILE_CACHES,
    DATA_PLACEMENTS,
    MODES,
    OPTIONS,
    PRECISIONS,
    ROLLOUTS,
    SCALINGS,
    SCENARIOS,
)

REPR_CHARS = 60
# A suite is a few lines; more is a wrong file (/dev/zero would never end).
MAX_SUITE_BYTES = 1 << 20


@dataclass(frozen=True)
class Key:
    """What one key takes. kind: names | ints (a sweep axis: a list, one value or a comma
    list), name | int (one value), number, seconds, duration (`10min` or seconds), fraction (in
    (0, 1]), perplexity (> 1), size, flag."""

    kind: str
    allowed: Callable[[], tuple[Any, ...]] | None = None
    minimum: int = 0
    maximum: Callable[[], int] | None = None
    # names: the form every item must have (a regular expression) and its description
    form: tuple[str, str] | None = None


def _presets() -> tuple[str, ...]:
    return tuple(dict.fromkeys(p for m in workloads.WORKLOADS.values() for p in m.PRESETS))


def _cores() -> int:
    return len(os.sched_getaffinity(0))


KEYS: dict[str, Key] = {
    # `all` as on the command line (cli/common.workload_names, -f all)
    "workload": Key("names", lambda: (*workloads.names(), "all")),
    "framework": Key("names", lambda: (*registered(), "all")),
    "mode": Key("names", lambda: MODES),
    "batch-size": Key("ints", minimum=1),
    "seed": Key("ints", minimum=0),
    "precision": Key("names", lambda: PRECISIONS),
    "scenario": Key("names", lambda: SCENARIOS),
    "devices": Key("ints", minimum=1),
    "scaling": Key("name", lambda: SCALINGS),
    "repeats": Key("repeats"),  # a count, or the auto rule as a string (analysis/repeats.py)
    "order-seed": Key("int", minimum=0, maximum=lambda: MAX_ORDER_SEED),
    "preset": Key("name", _presets),
    "epochs": Key("int", minimum=1),
    "warmup-epochs": Key("int", minimum=0),
    "dataset-size": Key("int", minimum=1),
    "chunk-steps": Key("int", minimum=1),
    "threads": Key("int", minimum=1, maximum=_cores),
    "compile-cache": Key("name", lambda: COMPILE_CACHES),
    "timeout": Key("seconds"),
    # the longest wait for a quiet machine before each trial: "10min", or a number of seconds (issue 45)
    "quiet-wait": Key("duration"),
    "memory-limit": Key("size"),
    "allow-concurrent": Key("flag"),
    # one extra profiled trial per configuration (issue 21)
    "profile": Key("flag"),
    "executor": Key("name", lambda: EXECUTORS),
    "address": Key("name"),
    # the input pipeline (issue 9)
    "data": Key("names", lambda: DATA_PLACEMENTS),
    "rollout": Key("names", lambda: ROLLOUTS),
    "loader-workers": Key("int", minimum=0),
    "augment": Key("name", lambda: AUGMENTATIONS),
    # framework options: "FRAMEWORK.NAME=VALUE" each, checked by the framework's backend
    "option": Key("names", form=(r"[^=.][^=]*\.[^=.]+=.+", "FRAMEWORK.NAME=VALUE, e.g. onnxruntime.optimization=basic")),
}


def _option_key(hint: Any, f: dataclasses.Field[Any]) -> Key:
    """What a scenario option's key takes: the kind its field declares (spec.option's `value`),
    else one value of the field's type; an integer is >= 1 and a name one of its `choices`
    (the options' own validation says the rest, naming the file: cli/run.plan_from_options)."""
    kinds = [k for k in typing.get_args(hint) if k is not type(None)] or [hint]
    kind = f.metadata.get("value") or {int: "int", float: "number", str: "name"}[kinds[0]]
    choices = f.metadata.get("choices")
    return Key(kind, None if choices is None else lambda: choices, minimum=1)


# Each scenario's options (spec.OPTIONS), keyed as their flags: `load = "server"`, `rtol-loosest`.
KEYS.update({f.metadata["flag"].removeprefix("--"): _option_key(typing.get_type_hints(kind)[f.name], f)
             for kind in OPTIONS.values() for f in dataclasses.fields(kind)})


class _Bad(Exception):
    """A bad value (the item of a list that is bad) and what is allowed."""

    def __init__(self, value: Any, expected: str) -> None:
        super().__init__(f"{_show(value)} is not {expected}")


def load(path: str) -> dict[str, Any]:
    """The file's options as `run`'s argparse destinations (`batch_size`), validated."""
    table = _read(path)
    for key in table:
        if key not in KEYS:
            hint = f" (did you mean {key.replace('_', '-')!r}?)" if key.replace("_", "-") in KEYS else ""
            raise UsageError(f"{path}: key {_show(key)} is not one of: {', '.join(KEYS)}{hint}")
    out = {}
    for key, value in table.items():
        try:
            out[key.replace("-", "_")] = _convert(KEYS[key], value)
        except _Bad as e:
            raise UsageError(f"{path}: key {key!r}: {e}") from None
    return out


def _read(path: str) -> dict[str, Any]:
    try:
        with open(path, "rb") as f:
            data = f.read(MAX_SUITE_BYTES + 1)
    except FileNotFoundError:
        raise UsageError(f"suite file {path} does not exist") from None
    except OSError as e:
        raise UsageError(f"suite file {path} cannot be read: {e.strerror}") from None
    if len(data) > MAX_SUITE_BYTES:
        raise UsageError(f"suite file {path} is larger than {MAX_SUITE_BYTES // 1024} KiB; a suite is a TOML table"
                         " of run's options")
    try:
        text = data.decode("utf-8-sig")  # a byte-order mark, as some editors write, is not TOML
    except UnicodeDecodeError as e:
        raise UsageError(f"{path}: not UTF-8 text (byte {e.start})") from None
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise UsageError(f"{path}: not valid TOML: {_one_line(str(e))}") from None
    except RecursionError:  # tomllib recurses per nested array or inline table
        raise UsageError(f"{path}: not a suite: arrays or tables nested too deep for the TOML reader") from None


def _convert(key: Key, value: Any) -> Any:
    if key.kind in ("names", "ints"):
        items = _items(key, value)
        for item in items:
            _check_one(key, item, listed=True)
        return tuple(items)
    if key.kind == "seconds":
        if _is_int(value) or isinstance(value, float):
            if value > 0:  # false for nan; inf and huge values: TrialSpec.validate says the maximum
                return float(value)
        raise _Bad(value, "a number of seconds > 0")
    if key.kind == "number":
        if (_is_int(value) or isinstance(value, float)) and math.isfinite(value):
            return float(value)
        raise _Bad(value, "a finite number")
    if key.kind == "duration":
        if (_is_int(value) or isinstance(value, float)) and value > 0 or isinstance(value, str) and repeats.duration_s(value):
            return float(value) if not isinstance(value, str) else value
        raise _Bad(value, "a duration such as 90s, 10min or 1h, or a number of seconds > 0")
    if key.kind == "fraction":
        if (_is_int(value) or isinstance(value, float)) and 0 < value <= 1:
            return float(value)
        raise _Bad(value, "a number in (0, 1]")
    if key.kind == "perplexity":
        if (_is_int(value) or isinstance(value, float)) and 1 < value < math.inf:
            return float(value)
        raise _Bad(value, "a finite number > 1 (a perplexity)")
    if key.kind == "size":
        return _size(value)
    if key.kind == "flag":
        if isinstance(value, bool):
            return value
        raise _Bad(value, "true or false")
    if key.kind == "repeats":  # an integer, or the auto rule as a string ("3" is not a count)
        try:
            if not (_is_int(value) or isinstance(value, str) and value.strip().startswith("auto")):
                raise repeats.RepeatsError(str(value))
            repeats.parse(value)
        except repeats.RepeatsError:
            raise _Bad(value, repeats.SYNTAX) from None
        return value
    _check_one(key, value, listed=False)
    return value


def _items(key: Key, value: Any) -> list[Any]:
    """A TOML array, one value, or a comma list as on the command line."""
    if isinstance(value, str):
        items: list[Any] = [x.strip() for x in value.split(",")]
        if key.kind == "ints":
            items = [int(x) if x.lstrip("-").isdigit() and x.isascii() else x for x in items]
    elif isinstance(value, list):
        items = value
    else:
        items = [value]
    if not items:
        raise _Bad(value, _expected(key, listed=True))
    return items


def _check_one(key: Key, value: Any, listed: bool) -> None:
    expected = _expected(key, listed)
    if key.kind in ("ints", "int"):
        if not _is_int(value) or value < key.minimum:
            raise _Bad(value, expected)
        if key.maximum is not None and value > key.maximum():
            raise _Bad(value, expected)
    elif not isinstance(value, str):
        raise _Bad(value, expected)
    elif key.form is not None and not re.fullmatch(key.form[0], value):
        raise _Bad(value, expected)
    if key.allowed is not None and value not in key.allowed():
        raise _Bad(value, expected)


def _expected(key: Key, listed: bool) -> str:
    if key.allowed is not None:
        what = f"one of: {', '.join(map(str, key.allowed()))}"
    elif key.form is not None:
        what = key.form[1]
    elif key.kind in ("names", "name"):
        what = "a string"
    elif key.maximum is not None:
        what = f"an integer from {key.minimum} to {key.maximum()}"
    else:
        what = f"an integer >= {key.minimum}"
    return f"{what} (or a list of them)" if listed else what


def _size(value: Any) -> int:
    expected = "a size such as 300MB or 8GiB, or a number of bytes >= 1"
    if _is_int(value) and 1 <= value < 2**63:
        return int(value)
    if isinstance(value, float) and math.isfinite(value) and 1 <= value < 2**63:
        return int(value)
    if isinstance(value, str):
        try:
            return parse_size(value)
        except ValueError:
            pass
    raise _Bad(value, expected)


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _show(value: Any) -> str:
    """A bad value on one line, cut to a readable length."""
    try:
        text = repr(value)
    except RecursionError:
        return "a value nested too deep to show"
    return text if len(text) <= REPR_CHARS else text[: REPR_CHARS - 3] + "..."


def _one_line(text: str) -> str:
    return " ".join(text.split())
