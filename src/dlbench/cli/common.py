"""What every command shares: the error type, comma-list parsing, the --store option."""

from __future__ import annotations

import argparse
import math
import re
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from dlbench.results.store import Store

DEFAULT_STORE = "dlbench.sqlite"

EXIT_OK = 0
EXIT_REGRESSION = 1
EXIT_PARITY_FAILED = 1  # DESIGN §4: 1 is "regression or parity failure"
EXIT_USAGE = 2
EXIT_TRIALS_FAILED = 3
EXIT_UNDECIDED = 4  # compare: a rule neither shown to pass nor to fail (more repeats would decide)
EXIT_INTERRUPTED = 130

T = TypeVar("T")


class UsageError(Exception):
    """Bad input; printed as one line, exit 2."""


def comma_list(kind: str, convert: Callable[[str], T] = str) -> Callable[[str], tuple[T, ...]]:  # type: ignore[assignment]
    """An argparse type for `a,b,c`; names the bad item and the expected kind."""

    def parse(text: str) -> tuple[T, ...]:
        items = [x.strip() for x in text.split(",")]
        if not text.strip() or any(not x for x in items):
            raise argparse.ArgumentTypeError(f"{kind} list {text!r} has an empty item")
        out = []
        for x in items:
            try:
                out.append(convert(x))
            except ValueError:
                raise argparse.ArgumentTypeError(f"{kind} {x!r} is not valid") from None
        return tuple(out)

    return parse


def int_list(kind: str) -> Callable[[str], tuple[int, ...]]:
    return comma_list(kind, int)


SIZE_UNITS = {"B": 1, "kB": 10**3, "MB": 10**6, "GB": 10**9, "TB": 10**12,
              "KiB": 2**10, "MiB": 2**20, "GiB": 2**30, "TiB": 2**40}
_SIZE = re.compile(r"\s*(\d+(?:\.\d*)?|\.\d+)\s*([A-Za-z]*)\s*", re.ASCII)


def parse_size(text: str) -> int:
    """`300MB`, `8GiB`, `1.5GB` or plain bytes -> bytes. Units are explicit (`8G` is refused:
    GB or GiB?)."""
    match = _SIZE.fullmatch(text)
    unit = match.group(2) or "B" if match else ""
    if match is None or unit not in SIZE_UNITS:
        raise ValueError(f"size {text!r} is not a number of bytes or a number with one of the units"
                         f" {', '.join(SIZE_UNITS)} (e.g. 8GiB)")
    value = float(match.group(1)) * SIZE_UNITS[unit]
    if not 1 <= value < 2**63 or not math.isfinite(value):
        raise ValueError(f"size {text!r} is not between 1 byte and 8 EiB")
    return int(value)


def size_argument(text: str) -> int:
    try:
        return parse_size(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def add_store_argument(p: argparse.ArgumentParser) -> None:
    p.add_argument("--store", default=DEFAULT_STORE, metavar="PATH",
                   help=f"SQLite results store (default: ./{DEFAULT_STORE})")


def open_store(path: str, must_exist: bool = False) -> Store:
    if must_exist and not Path(path).exists():
        raise UsageError(f"store {path} does not exist; run `dlbench run --store {path}` first")
    return Store(path)
