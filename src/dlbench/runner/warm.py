"""`python -m dlbench.runner.warm FRAMEWORK`: import one framework, untimed, and exit, so the page
cache is warm alike for every trial of a sweep (runner/executor.py: warm_import)."""

from __future__ import annotations

import sys

from dlbench.backends import get_backend


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m dlbench.runner.warm FRAMEWORK", file=sys.stderr)
        return 2
    get_backend(argv[0]).import_framework()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
