"""What every command shares: the error type, comma-list parsing, the --store option, run
selectors, and the one check and error path for the files a command writes."""

from __future__ import annotations

import argparse
import contextlib
import errno
import math
import os
import re
import stat
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

from dlbench import subjects, workloads
from dlbench.results.store import RUN_ID, Store, StoreError, parse_run_selector
from dlbench.text import printable, shown

DEFAULT_STORE = "dlbench.sqlite"

EXIT_OK = 0
EXIT_REGRESSION = 1
EXIT_PARITY_FAILED = 1  # DESIGN §4: 1 is "regression or parity failure"
EXIT_USAGE = 2
EXIT_TRIALS_FAILED = 3
EXIT_UNDECIDED = 4  # compare: a rule neither shown to pass nor to fail (more repeats would decide)
EXIT_NOT_JUDGED = 4  # check: a cell could not be judged (its reason printed), never a green exit
EXIT_INTERRUPTED = 130
EXIT_BROKEN_PIPE = 141  # 128 + SIGPIPE: what a shell reports when stdout's reader went away

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
    """`8,16`: whole numbers in ASCII digits (int() reads other scripts' digits: `８`)."""
    def ascii_int(text: str) -> int:
        if not _INTEGER.fullmatch(text):
            raise ValueError(text)
        return int(text)

    return comma_list(kind, ascii_int)


_INTEGER = re.compile(r"\s*[+-]?\d+\s*", re.ASCII)
_NUMBER = re.compile(r"\s*[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?\s*", re.ASCII)


def ascii_number(kind: type) -> Callable[[str], Any]:
    """An argparse type for an int or float flag: ASCII digits only, one line naming the value
    and what is allowed otherwise."""

    def parse(text: str) -> Any:
        if kind is int and _INTEGER.fullmatch(text):
            return int(text)
        if kind is float and _NUMBER.fullmatch(text):
            return float(text)
        raise argparse.ArgumentTypeError(f"{shown(text)} is not {'an integer' if kind is int else 'a number'}"
                                         " in ASCII digits")

    parse.__name__ = kind.__name__  # argparse names the type in its own messages
    return parse


# The largest order seed: it is stored in an SQLite INTEGER column (runs.order_seed).
MAX_ORDER_SEED = 2**63 - 1


def order_seed(text: str) -> int:
    """--order-seed (run, tune): a whole number in ASCII digits that SQLite can store; one line
    naming the value otherwise (a larger one once overflowed the store after the lock)."""
    value = text.strip()
    if value.isascii() and value.isdigit() and int(value) <= MAX_ORDER_SEED:
        return int(value)
    raise argparse.ArgumentTypeError(f"{shown(text)} is not a whole number from 0 to {MAX_ORDER_SEED}")


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


def add_store_argument(p: argparse.ArgumentParser, unused: str | None = None) -> None:
    """--store on every command (README: "every command takes --store"); `unused` says why a
    command that reads and writes no store takes it anyway and ignores it."""
    help_text = f"SQLite results store (default: ./{DEFAULT_STORE})"
    if unused is not None:
        help_text = f"accepted like on every command, and not used: {unused}"
    p.add_argument("--store", default=DEFAULT_STORE, metavar="PATH", help=help_text)


def open_store(path: str, must_exist: bool = False, readonly: bool = False) -> Store:
    """The store at `path`. `readonly` (report, export, compare): nothing is created, written or
    migrated, and the store may lie in a directory or on a mount this process cannot write."""
    if (must_exist or readonly) and not os.path.exists(path):
        raise UsageError(f"store {path} does not exist; run `dlbench run --store {path}` first")
    return Store(path, readonly=readonly)


def run_selector(text: str) -> str:
    """argparse type of RUN arguments: the one check of run ids (results.store)."""
    try:
        parse_run_selector(text)
    except StoreError as e:
        raise argparse.ArgumentTypeError(str(e)) from None
    return text


def run_or_export(text: str) -> str:
    """argparse type of compare's BASE and NEW: an exported JSON file, or a run selector."""
    if text.endswith(".json") or os.path.isfile(text):
        return text
    try:
        parse_run_selector(text)
    except StoreError:
        raise argparse.ArgumentTypeError(
            f"{shown(text)} is not {RUN_ID}, 'latest', 'all' or an exported JSON file"
            " (dlbench export RUN -o FILE.json)") from None
    return text


def output_path(text: str, directory: bool = False) -> Path:
    """Where a command will write a file (or, with `directory`, a directory it may create),
    checked before any work, so that probes or charts are not computed for nothing. What
    cannot be foreseen (a full disk, /proc) fails at the write, in `writing`, worded alike."""
    path = Path(text)
    reason = _unwritable(text, path, directory)
    if reason is not None:
        raise UsageError(f"cannot write {shown(text)}: {reason}")
    return path


def _unwritable(text: str, path: Path, directory: bool) -> str | None:
    """Why `path` cannot be written, or None. Root passes every permission check but a
    read-only mount's."""
    if not text:
        return "an empty path"
    try:
        is_dir = stat.S_ISDIR(os.stat(path).st_mode)
    except FileNotFoundError:
        parent = path.parent
        if not os.path.isdir(parent):
            return f"directory {shown(str(parent))} does not exist"
        return None if os.access(parent, os.W_OK | os.X_OK) else f"directory {shown(str(parent))} is not writable"
    except OSError as e:  # too long a name, a file where a directory should be, a loop
        return e.strerror or errno.errorcode.get(e.errno or 0, str(e))
    if directory and not is_dir:
        return "it exists and is not a directory"
    if not directory and is_dir:
        return "it is a directory; give a file name"
    return None if os.access(path, os.W_OK) else "permission denied"


@contextlib.contextmanager
def writing(path: Path | str) -> Iterator[None]:
    """The one error path of every write to an output the user named: an OSError (a full disk,
    a name too long, a read-only mount, /proc) is one line naming the file, exit 2."""
    try:
        yield
    except OSError as e:
        where = e.filename if isinstance(e.filename, str) else str(path)
        raise UsageError(f"cannot write {shown(where)}: {e.strerror or e}") from None


def workload_names(requested: tuple[str, ...]) -> tuple[str, ...]:
    """`all`: the built-in workloads and every plugin's that passes its contract (a broken
    plugin is left out with one warning line, so it never stops the others); else each name
    as given, checked (subjects.check: a problem of the solver scenario, or a workload that
    passes workloads.check; SpecError or PluginError, one line, exit 2)."""
    if requested == ("all",):
        for name, origin, reason in workloads.plugin_status():
            if reason is not None:
                warning = f"workload {name!r} left out of 'all': {reason}".replace("\n", " ")
                print(f"dlbench: warning: {printable(warning)}", file=sys.stderr)
        return workloads.usable()
    for name in requested:
        subjects.check(name)
    return requested
