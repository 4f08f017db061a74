"""The command line and result line every reference loop shares: the contract that
benchmarks/overhead.py drives. The training loops themselves stay in each framework's script."""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable


def parse_args(description: str, modes: tuple[str, ...],
               extra: Callable[[argparse.ArgumentParser], None] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--mode", choices=modes, default="compiled")
    p.add_argument("--batch-size", type=int, default=128)
    p.add_argument("--dataset-size", type=int, default=8192)
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--warmup-epochs", type=int, default=1)
    p.add_argument("--threads", type=int, default=None, help="pin to N cores (default: all)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--plain", action="store_true",
                   help="the plainest idiom a tutorial writes instead of dlbench's choices: the framework's own"
                        " data loading and shuffling (its own order, not the spec's), default optimizer flags and"
                        " layouts (issue 50, point 4)")
    if extra:
        extra(p)
    args = p.parse_args()
    if args.epochs < 1 or args.warmup_epochs < 0 or args.dataset_size < args.batch_size:
        p.error("need --epochs >= 1, --warmup-epochs >= 0 and --dataset-size >= --batch-size")
    return args


def report(framework: str, mode: str, samples: int, train_s: float, final_loss: float, plain: bool = False,
           **choices: object) -> None:
    """One JSON line on stdout, the only line overhead.py reads; `choices` are a loop's own
    settings (JAX's donation), recorded beside its number."""
    print(json.dumps({
        "framework": framework,
        "mode": mode,
        "plain": plain,
        "samples_per_s": samples / train_s,
        "train_s": train_s,
        "final_loss": final_loss,
        **choices,
    }))  # fmt: skip
