"""horovodrun with a shorter wait for ranks it ends: for a rank that is stopped (SIGSTOP), which takes no SIGTERM.

After one rank failed, horovodrun's middleman process of each other rank sends it SIGTERM,
waits `GRACEFUL_TERMINATION_TIME_S` (5 s), SIGKILLs it, then does the same to the rank's shell:
10 s of waiting for a stopped rank. The middleman is a *spawned* process that imports
`safe_shell_exec` afresh, so the constant is set there, by `exec_middleman`, which
`horovodrun_argv(..., grace_seconds=S)` (tests/processes.py) puts in place of horovodrun's own.
"""

from __future__ import annotations

import os

VARIABLE = "OPT_TRAIN_TEST_HOROVODRUN_GRACE"


def exec_middleman(*args):
    from horovod.runner.common.util import safe_shell_exec

    safe_shell_exec.GRACEFUL_TERMINATION_TIME_S = float(os.environ[VARIABLE])
    safe_shell_exec._exec_middleman(*args)  # horovodrun's own, in this fresh process
