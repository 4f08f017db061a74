"""What every command shares: the error type, comma-list parsing, the --store option."""

from __future__ import annotations

import argparse
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


def add_store_argument(p: argparse.ArgumentParser) -> None:
    p.add_argument("--store", default=DEFAULT_STORE, metavar="PATH",
                   help=f"SQLite results store (default: ./{DEFAULT_STORE})")


def open_store(path: str, must_exist: bool = False) -> Store:
    if must_exist and not Path(path).exists():
        raise UsageError(f"store {path} does not exist; run `dlbench run --store {path}` first")
    return Store(path)
