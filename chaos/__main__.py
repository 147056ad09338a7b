"""`python -m chaos run|cleanup`; see chaos/run.py and docs/chaos.md."""

from __future__ import annotations

import argparse
import os
import random
import sys

from chaos.run import cleanup, run

SHORT_SECONDS = 75.0  # with setup, audit and checks the short run stays under 3 minutes


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m chaos")
    parser.add_argument("command", choices=("run", "cleanup"))
    parser.add_argument("--seconds", type=float, default=None, help="fault time (default: CHAOS_MINUTES or 75 s)")
    parser.add_argument(
        "--seed", type=int, default=None, help="nemesis and client seed (default: CHAOS_SEED or random)"
    )
    args = parser.parse_args()
    if args.command == "cleanup":
        cleanup()
        return 0
    minutes = os.environ.get("CHAOS_MINUTES")
    seconds = args.seconds or (float(minutes) * 60 if minutes else SHORT_SECONDS)
    seed_env = os.environ.get("CHAOS_SEED")
    seed = args.seed if args.seed is not None else int(seed_env) if seed_env else random.randrange(1_000_000)
    return run(seconds, seed)


if __name__ == "__main__":
    sys.exit(main())
