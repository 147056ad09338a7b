"""Run a Python module under a CPU-time sampling profiler, for `python -m bench profile --sampler cpu-time`.

    python bench/harness/cpu_sampler.py OUT PYTHON -m MODULE [ARGS...]

(PYTHON is ignored: the node's command line is passed whole, after the sampler.) SIGPROF fires per slice of the
process's CPU time (ITIMER_PROF: user and system time, at the kernel's tick resolution), so a process waiting
for the disk, for the network or for a CPU another process holds is not sampled. py-spy samples on the wall
clock and counts a thread that is runnable but not running as busy, which on two shared cores makes a frame
that wakes another process (a socket write) look expensive. Signal handlers run between bytecodes, so the CPU
spent in C code (uvloop, a syscall) is charged to the Python frame that was running or resumed next.

SIGUSR1 clears the samples (after a warm-up); SIGUSR2 writes them to OUT in py-spy's raw format
(`frame;frame;... count`, root first), so `python -m bench profile` reads both.
"""

from __future__ import annotations

import runpy
import signal
import sys
from collections import Counter
from pathlib import Path
from types import FrameType

import click

INTERVAL_S = 0.001  # the kernel rounds it up to its tick (4 ms at HZ=250)


def _frame_name(frame: FrameType) -> str:
    code = frame.f_code
    path = code.co_filename.rpartition("site-packages/")[2]
    return f"{code.co_name} ({path}:{code.co_firstlineno})"


@click.command(context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False})
@click.argument("out", type=click.Path(path_type=Path))
@click.argument("python")
@click.argument("command", nargs=-1, type=click.UNPROCESSED, metavar="-m MODULE [ARGS]...")
def main(out: Path, python: str, command: tuple[str, ...]) -> None:
    """Runs `python -m MODULE ARGS` in this process, sampled (PYTHON itself is not used)."""
    if len(command) < 2 or command[0] != "-m":
        raise click.UsageError("expected PYTHON -m MODULE [ARGS]... after OUT")
    module, arguments = command[1], command[2:]
    samples: Counter[str] = Counter()

    def sample(signum: int, frame: FrameType | None) -> None:
        stack = []
        while frame is not None:
            stack.append(_frame_name(frame))
            frame = frame.f_back
        samples[";".join(reversed(stack))] += 1

    def dump(signum: int, frame: FrameType | None) -> None:
        # A copy first, in one C call: SIGPROF's handler runs between bytecodes and would add to `samples`
        # while a Python loop walked it ("dictionary changed size during iteration").
        taken = dict(samples)
        out.write_text("".join(f"{stack} {count}\n" for stack, count in taken.items()))

    signal.signal(signal.SIGUSR1, lambda signum, frame: samples.clear())
    signal.signal(signal.SIGUSR2, dump)
    signal.signal(signal.SIGPROF, sample)
    signal.setitimer(signal.ITIMER_PROF, INTERVAL_S, INTERVAL_S)
    sys.argv = [module, *arguments]
    try:
        runpy.run_module(module, run_name="__main__", alter_sys=True)
    finally:
        # Disarmed before the interpreter exits: SIGPROF's default action would end the process with it.
        signal.setitimer(signal.ITIMER_PROF, 0)


if __name__ == "__main__":
    main()
