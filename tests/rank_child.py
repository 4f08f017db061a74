"""A child that starts a child of its own the way torch's DDP worker starts its ranks
(processes.start_child with own_group=False), for tests/test_faults.py:

    python -m rank_child OUT_DIR [kill]
writes OUT_DIR/rank.pid once its rank runs; with `kill`, then kills its rank (Child.kill) and
writes OUT_DIR/killed with the rank's exit code; then sleeps until it is killed. The rank
(`python -m rank_child OUT_DIR rank`) only sleeps.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

from dlbench import processes


def main() -> int:
    out, mode = Path(sys.argv[1]), (sys.argv[2] if len(sys.argv) > 2 else "")
    if mode != "rank":
        rank = processes.start_child("rank_child", [str(out), "rank"], None, own_group=False)
        (out / "rank.pid").write_text(str(rank.pid))
        if mode == "kill":
            rank.kill()
            (out / "killed").write_text(str(rank.returncode))
    time.sleep(600)
    return 0


if __name__ == "__main__":
    sys.exit(main())
