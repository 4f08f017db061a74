"""The worker's own peak RSS is its own: a worker started by a large parent (pytest with a
framework loaded, a Jupyter kernel) must not report the parent's size. Linux carries ru_maxrss
across execve; CI once saw every fake trial `oom` under a 300 MB limit for this reason."""

from __future__ import annotations

import subprocess
import sys

from dlbench.monitors.memory import _vm_hwm_bytes, os_peak_rss_bytes

MiB = 2**20
CHILD = "from dlbench.monitors.memory import os_peak_rss_bytes; print(os_peak_rss_bytes())"


def test_a_child_of_a_large_parent_reports_its_own_peak():
    ballast = bytearray(600 * MiB)
    ballast[::4096] = b"1" * len(ballast[::4096])  # touched: resident in this process
    out = subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True, check=True).stdout
    assert int(out) < 400 * MiB, f"child reported {int(out) / MiB:.0f} MiB; the parent holds over 600 MiB"
    assert os_peak_rss_bytes() >= 600 * MiB  # and this process's own peak does count it
    del ballast


def test_vm_hwm_is_read_and_a_missing_file_is_none(tmp_path):
    assert (_vm_hwm_bytes() or 0) > 10 * MiB
    assert _vm_hwm_bytes(str(tmp_path / "absent")) is None
    (tmp_path / "status").write_text("Name:\tx\nVmHWM:\t  2048 kB\n")
    assert _vm_hwm_bytes(str(tmp_path / "status")) == 2048 * 1024
