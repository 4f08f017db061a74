"""The command line's own text as golden files: `dlbench --help`, every command's `--help` and
`dlbench list`, at 100 columns, in tests/fixtures/cli-help/. A change to a flag, its default or
its help, or to what `list` shows, fails here with the unified diff (issue 44: the CLI generated
from the options dataclasses shows exactly what the hand-written one did).

A deliberate change updates the files with one command, then the diff goes in the commit:

    PYTHONPATH=src python tests/test_cli_help.py --update

`list` depends on the machine; the parts that do (framework versions, the CPU's bf16 support, the
device kind) are pinned while it renders, and it is compared only where every registered
framework is installed (as in the project's environment), else skipped with the reason.
"""

from __future__ import annotations

import contextlib
import difflib
import io
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from unittest import mock

import pytest

from dlbench.backends import get_backend, registered
from dlbench.cli.main import COMMANDS, main

# The help states dlbench's own busy threshold, not the test session's (conftest: busy_judged).
pytestmark = pytest.mark.usefixtures("busy_judged")

FIXTURES = Path(__file__).parent / "fixtures" / "cli-help"
COLUMNS = "100"
# (fixture name, argv): the top-level help, each command's, then `list`.
HELPS = [("dlbench-help", ["--help"]), *((f"{name}-help", [name, "--help"]) for name in COMMANDS)]
LISTS = [("list", ["list"])]


@contextlib.contextmanager
def _pinned_machine() -> Iterator[None]:
    """What `list` says about this machine, fixed: versions, the CPU's bf16, the device kind."""
    with mock.patch("dlbench.cli.listing.Support.version", lambda self: "VERSION" if self.installed else "not installed"), \
            mock.patch("dlbench.cli.listing.bf16_on_cpu", lambda: "BF16"), \
            mock.patch("dlbench.cli.listing.device_kind", lambda: "cpu"):
        yield


def render(argv: list[str]) -> str:
    """What `dlbench ARGV` prints at COLUMNS columns (help exits through SystemExit 0)."""
    out = io.StringIO()
    with mock.patch.dict(os.environ, {"COLUMNS": COLUMNS}), contextlib.redirect_stdout(out), _pinned_machine():
        try:
            code = main(argv)
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else 0
    assert code == 0, (argv, code)
    return out.getvalue()


def _missing_frameworks() -> list[str]:
    return [name for name in registered() if not get_backend(name).available()[0]]


def _compare(name: str, argv: list[str]) -> None:
    path = FIXTURES / f"{name}.txt"
    got, want = render(argv), path.read_text()
    if got != want:
        diff = "".join(difflib.unified_diff(want.splitlines(keepends=True), got.splitlines(keepends=True),
                                            f"{path} (golden)", f"dlbench {' '.join(argv)} (now)"))
        pytest.fail(f"dlbench {' '.join(argv)} changed; if deliberate, regenerate with"
                    f" `python tests/test_cli_help.py --update`:\n{diff}", pytrace=False)


@pytest.mark.parametrize("name, argv", HELPS, ids=[n for n, _ in HELPS])
def test_help_text_is_what_it_was(name: str, argv: list[str]) -> None:
    _compare(name, argv)


@pytest.mark.parametrize("name, argv", LISTS, ids=[n for n, _ in LISTS])
def test_list_is_what_it_was(name: str, argv: list[str]) -> None:
    missing = _missing_frameworks()
    if missing:
        pytest.skip(f"`list` differs where frameworks are missing ({', '.join(missing)} here); the golden file"
                    " was made with every framework installed")
    _compare(name, argv)


def update() -> None:
    missing = _missing_frameworks()
    if missing:
        sys.exit(f"not updating: {', '.join(missing)} not installed here, and `list` would say so")
    FIXTURES.mkdir(parents=True, exist_ok=True)
    for name, argv in HELPS + LISTS:
        (FIXTURES / f"{name}.txt").write_text(render(argv))
        print(f"wrote {FIXTURES / name}.txt")


if __name__ == "__main__":
    if sys.argv[1:] != ["--update"]:
        sys.exit("usage: python tests/test_cli_help.py --update  (rewrites tests/fixtures/cli-help/)")
    update()
