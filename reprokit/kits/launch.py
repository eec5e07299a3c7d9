"""How the local runner starts a kit process: ``python -m reprokit.kits.launch PARENT CPUS MODULE ARGS...``.

It takes the CPU set CPUS (comma-separated CPU numbers; empty: the CPUs it was started with), arms its death with
the process PARENT, then runs MODULE as ``python -m MODULE ARGS...`` would, in this same interpreter. This is the
set-up a function between fork and exec (subprocess's preexec_fn) would do; there is none, so the host starts
the kit with vfork, not by forking its whole, large self.

Standard library only: it runs before the kit, in the kit's environment.
"""
from __future__ import annotations

import os
import runpy
import sys

from reprokit.kits.framework_free.parent_death import arm


def main(argv: list[str]) -> None:
    parent, cpus, module, *args = argv
    if cpus:
        os.sched_setaffinity(0, {int(cpu) for cpu in cpus.split(",")})
    arm(int(parent))
    sys.argv = [module, *args]              # run_module puts the module's file first, as -m does
    runpy.run_module(module, run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main(sys.argv[1:])
