"""The machine a run happened on: recorded with every run, compared (not required equal) by
`compare`. Never imports a framework: the frameworks' installed versions are handed in by the
caller (backends.installed: package metadata)."""

from __future__ import annotations

import os
import platform
import subprocess
import sys
from pathlib import Path
from typing import Any

import psutil

import dlbench
from dlbench.machine import cpu_isa, cpu_model
from dlbench.monitors.nvml import Nvml
from dlbench.packages import installed_versions



def git_commit() -> str | None:
    """The commit of the dlbench checkout in use, when it is one (editable installs)."""
    here = Path(dlbench.__file__).resolve().parent
    try:
        out = subprocess.run(["git", "-C", str(here), "rev-parse", "HEAD"], capture_output=True,
                             text=True, timeout=5, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    if out.returncode != 0:
        return None
    dirty = subprocess.run(["git", "-C", str(here), "status", "--porcelain", "--untracked-files=no"],
                           capture_output=True, text=True, timeout=5, check=False).stdout.strip()
    return out.stdout.strip() + ("+dirty" if dirty else "")


def gpu_info() -> dict[str, Any]:
    nvml, reason = Nvml.open()
    if nvml is None:
        return {"gpus": [], "reason": reason}
    return {"gpus": nvml.devices(), "driver": nvml.driver_version()}


def capture(frameworks: dict[str, Any]) -> dict[str, Any]:
    """The environment, with `frameworks` (name -> installed?, detail, distributions) as the
    caller found them (backends.installed)."""
    vm = psutil.virtual_memory()
    return {
        "python": sys.version.split()[0],
        "python_implementation": platform.python_implementation(),
        "os": platform.platform(),
        "kernel": platform.release(),
        "hostname": platform.node(),
        "cpu_model": cpu_model(),
        "cpu_isa": cpu_isa(),
        "cpu_logical": psutil.cpu_count(logical=True),
        "cpu_physical": psutil.cpu_count(logical=False),
        "cpu_affinity": len(os.sched_getaffinity(0)),
        "ram_bytes": vm.total,
        "gpu": gpu_info(),
        "packages": installed_versions(("numpy", "psutil", "scipy", "nvidia-ml-py")),
        "frameworks": frameworks,
        "dlbench": dlbench.__version__,
        "git_commit": git_commit(),
    }
