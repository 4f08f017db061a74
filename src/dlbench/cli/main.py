"""`dlbench` entry point: one thin module per command; logic callable from tests via main(argv)."""

from __future__ import annotations

import argparse
import io
import os
import re
import sqlite3
import sys
from typing import Any, NoReturn

from dlbench import __version__
from dlbench.cli import check, compare, env, export, history, listing, report, run, tune, why
from dlbench.cli.common import (
    EXIT_BROKEN_PIPE,
    EXIT_INTERRUPTED,
    EXIT_USAGE,
    UsageError,
)
from dlbench.results.store import StoreError
from dlbench.spec import SpecError
from dlbench.text import shown

COMMANDS = {"run": run, "check": check, "compare": compare, "report": report, "list": listing, "env": env,
            "export": export, "history": history, "tune": tune, "why": why}


class _Parser(argparse.ArgumentParser):
    """argparse prints usage plus a message; we print one line naming the bad value."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # A value that starts with a minus and a digit is a value, never an option: argparse's
        # own rule takes only plain negative numbers, so `--budget -5min`, `--rtol-loosest -1e-3`
        # or `--threshold -5%` got "expected one argument" instead of their type's one line
        # naming the value and what is allowed. No option of dlbench looks like a number.
        self._negative_number_matcher = re.compile(r"^-\.?\d")

    def error(self, message: str) -> NoReturn:
        raise UsageError(f"{self.prog}: {message}")


def one_line(text: str) -> str:
    """An error message stays one line whatever the bad value holds (newlines, control
    characters, surrogates from undecodable arguments): those are shown escaped."""
    return "".join(c if c.isprintable() else c.encode("unicode_escape", "backslashreplace").decode()
                   for c in text)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="dlbench", description="Fair side-by-side deep learning framework benchmarks")
    parser.add_argument("--version", action="version", version=f"dlbench {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    for name, module in COMMANDS.items():
        module.add_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        parser = build_parser()  # inside: its help reads settings a user can get wrong (DLBENCH_BUSY_SHARE)
        for arg in argv:  # no real command line holds one; every path API refuses it
            if "\x00" in arg:
                raise UsageError(f"argument {shown(arg)} holds a NUL character")
        args = parser.parse_args(argv)
        args.argv = argv
        if args.command is None:
            raise UsageError(f"no command given; one of: {', '.join(COMMANDS)} (dlbench --help)")
        code: int = COMMANDS[args.command].main(args)
        return code
    except (UsageError, SpecError, StoreError) as e:
        print(f"dlbench: error: {one_line(str(e))}", file=sys.stderr)
        return EXIT_USAGE
    except sqlite3.DatabaseError as e:  # damage past the checks at open, a full disk: no traceback
        print(f"dlbench: error: the store failed: {one_line(str(e))}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print("dlbench: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except BrokenPipeError:  # the reader of stdout went away: stop quietly, as `cat` does
        _silence_stdout()
        return EXIT_BROKEN_PIPE


def _silence_stdout() -> None:
    """Point stdout at /dev/null, so that the interpreter's flush at exit does not fail again."""
    try:
        fd = sys.stdout.fileno()
    except (AttributeError, OSError, ValueError):  # replaced by a caller (a test's StringIO)
        return
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, fd)
    os.close(devnull)


def entry() -> None:
    # Bytes that are not UTF-8 in an argument (a file name) are lone surrogates in Python; one
    # printed where the locale's stdout is strict would raise UnicodeEncodeError. Shown escaped.
    if isinstance(sys.stdout, io.TextIOWrapper):
        sys.stdout.reconfigure(errors="backslashreplace")
    sys.exit(main())


if __name__ == "__main__":
    entry()
