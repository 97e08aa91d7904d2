"""Puts tests/distributed/tf_worker.py in place of each worker `opt-train train --np N` starts (launcher tests only).

Active only in a process that has both OPT_TRAIN_LAUNCHED (set by the launcher for its
workers) and TF_WORKER_OUTDIR (set by the test): the launcher process itself runs the
real CLI; each worker records its command line and TF_CONFIG, then acts on TF_WORKER_PLAN.
"""

import json
import os
import sys

if os.environ.get("OPT_TRAIN_LAUNCHED") and os.environ.get("TF_WORKER_OUTDIR"):
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    import tf_worker

    with open("/proc/self/cmdline", "rb") as handle:
        sys.argv = [part.decode() for part in handle.read().split(b"\0") if part]
    # Python is still starting: an exception or SystemExit here would be a fatal start-up error.
    code = 0
    try:
        tf_worker.main(os.environ["TF_WORKER_OUTDIR"], json.loads(os.environ.get("TF_WORKER_PLAN", "{}")))
    except SystemExit as stop:
        code = stop.code if isinstance(stop.code, int) else 1
    except BaseException:  # noqa: BLE001 - the worker's own failure, shown like any other
        import traceback

        traceback.print_exc()
        code = 1
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
