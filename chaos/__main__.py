"""`python -m chaos run|cleanup`; see chaos/run.py and docs/chaos.md."""

from __future__ import annotations

import os
import random
import sys

import click

from chaos.run import cleanup, run
from coordinated.programs import run_program

SHORT_SECONDS = 75.0  # with setup, audit and checks the short run stays under 3 minutes


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.argument("command", type=click.Choice(["run", "cleanup"]))
@click.option("--seconds", type=float, default=None, help="fault time (default: CHAOS_MINUTES or 75 s)")
@click.option("--seed", type=int, default=None, help="nemesis and client seed (default: CHAOS_SEED or random)")
def chaos(command: str, seconds: float | None, seed: int | None) -> int:
    if command == "cleanup":
        cleanup()
        return 0
    minutes = os.environ.get("CHAOS_MINUTES")
    seconds = seconds or (float(minutes) * 60 if minutes else SHORT_SECONDS)
    seed_env = os.environ.get("CHAOS_SEED")
    seed = seed if seed is not None else int(seed_env) if seed_env else random.randrange(1_000_000)
    return run(seconds, seed)


def main() -> int:
    return run_program(chaos, None, "python -m chaos")


if __name__ == "__main__":
    sys.exit(main())
