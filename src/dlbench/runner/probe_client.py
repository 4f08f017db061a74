"""The parent side of a numerical probe (runner/probe.py): one child process per framework,
started, waited for and, whatever happens to the parent, never left behind.

Used by the float64 parity reference (runner/reference.py) and by `dlbench check`. The child
leads a process group of its own (its compilers and helpers with it) and dies with the thread
that started it (PR_SET_PDEATHSIG): a SIGKILLed parent leaves nothing running; a timeout, a
Ctrl-C or a SIGTERM (turned into KeyboardInterrupt by processes.stop_signals_interrupt) kills
the group before the parent goes on or exits.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from dlbench import processes

PROBE_TIMEOUT_S = 1800.0
STDERR_TAIL_CHARS = 2000


def run_probe(request: Path, out_dir: Path, timeout_s: float = PROBE_TIMEOUT_S,
              env: dict[str, str] | None = None) -> str | None:
    """Run a probe process on REQUEST (JSON), results under `out_dir`, with `env` added to this
    process's environment; None when it exited normally, else what went wrong (per-workload
    results may still exist)."""
    cmd = [sys.executable, "-m", "dlbench.runner.probe", str(request), str(out_dir)]
    log_path = out_dir / "probe.log"
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                env={**os.environ, **(env or {})},
                                start_new_session=True, preexec_fn=processes.die_with_parent())
        try:
            returncode = proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            return f"the probe did not finish within {timeout_s:g} s"
        finally:
            _kill_group(proc)  # its helpers too, even after a normal exit
    if returncode != 0:
        tail = _tail(log_path).splitlines()[-1:] or [""]
        return f"the probe exited with code {returncode}: {tail[0]}"
    return None


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait()


def _tail(path: Path) -> str:
    try:
        return path.read_text(errors="replace")[-STDERR_TAIL_CHARS:].strip()
    except OSError:
        return ""
